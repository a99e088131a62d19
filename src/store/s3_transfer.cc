#include "store/s3_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "base/thread_pool.h"

namespace dcr::s3 {
namespace {

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  return out;
}

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

Status Complete(Client& client, const std::string& object, const std::string& where, const std::string& upload_id,
                const std::vector<std::string>& etags, uint64_t size) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml +=
        "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + XmlEscape(etags[i]) + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  const std::string what = "POST (CompleteMultipartUpload) " + where;
  int sent = 0;
  auto done = client.Call(
      client.Make("POST", object, {{"uploadId", upload_id}}, {{"Content-Type", "application/xml"}},
                  sigv4::Sha256Hex(xml)),
      Bytes(xml), what, [&](const HttpResponse& r) -> Status {
        ++sent;
        const std::string text = r.BodyText(), code = ErrorCode(r);
        // S3 may answer 200 and report the error in the body.
        if (Success(r) && text.find("<CompleteMultipartUploadResult") != std::string::npos) return Status::Ok();
        if (Success(r) && (code.empty() || code == "InternalError" || code == "SlowDown")) {
          return IoError(what + ": " + (code.empty() ? "no CompleteMultipartUploadResult" : ErrorSummary(text)));
        }
        if (code == "NoSuchUpload" && sent > 1) {
          auto head = client.Call(client.Make("HEAD", object), {}, "HEAD " + where,
                                  [](const HttpResponse& h) { return Success(h) ? Status::Ok() : Corrupt("absent"); });
          const std::string* length = head.ok() ? head->Header("content-length") : nullptr;
          if (length && *length == std::to_string(size)) return Status::Ok();
        }
        return Refusal(r, what);
      });
  return done.ok() ? Status::Ok() : done.status();
}

}  // namespace

Status MultipartUpload(Client& client, const std::string& object, const std::string& where, uint64_t size,
                       const PartReader& read) {
  const StoreOptions& options = client.options();
  const uint64_t part = std::max<uint64_t>(options.part_bytes, (size + 9999) / 10000);  // S3: at most 10000 parts
  const uint64_t parts = (size + part - 1) / part;

  std::string upload_id;
  const std::string create_what = "POST (CreateMultipartUpload) " + where;
  auto created =
      client.Call(client.Make("POST", object, {{"uploads", ""}}, {{"Content-Type", "application/octet-stream"}}), {},
                  create_what, [&](const HttpResponse& r) {
                    if (!Success(r)) return Refusal(r, create_what);
                    upload_id = XmlText(r.BodyText(), "UploadId").value_or("");
                    return upload_id.empty() ? IoError(create_what + ": no UploadId in the answer") : Status::Ok();
                  });
  if (!created.ok()) return created.status();

  std::vector<std::string> etags(parts);
  Status s = ParallelFor(parts, std::max(1, options.parallelism), [&](size_t i) -> Status {
    const uint64_t offset = i * part, length = std::min(part, size - offset);
    std::vector<uint8_t> scratch;
    DCR_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, read(offset, length, scratch));
    const std::string what = "PUT (UploadPart " + std::to_string(i + 1) + "/" + std::to_string(parts) + ") " + where;
    auto r = client.Call(client.Make("PUT", object, {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}},
                                     {}, sigv4::Sha256Hex(bytes)),
                         bytes, what, [&](const HttpResponse& r) {
                           if (!Success(r)) return Refusal(r, what);
                           const std::string* etag = r.Header("etag");
                           if (!etag || etag->empty()) return IoError(what + ": no ETag in the answer");
                           etags[i] = *etag;
                           return Status::Ok();
                         });
    if (!r.ok()) return r.status();
    client.CountPut(length);
    return Status::Ok();
  });
  if (s.ok()) s = Complete(client, object, where, upload_id, etags, size);
  if (s.ok()) return s;

  const std::string abort_what = "DELETE (AbortMultipartUpload) " + where;
  auto aborted = client.Call(
      client.Make("DELETE", object, {{"uploadId", upload_id}}), {}, abort_what,
      [&](const HttpResponse& r) { return Success(r) || r.status == 404 ? Status::Ok() : Refusal(r, abort_what); });
  if (!aborted.ok())
    return Status(s.code(), s.message() + " (and the abort failed: " + aborted.status().message() + ")");
  return s;
}

namespace {

Status FetchOnce(Client& client, const std::string& object, const std::string& where, const SizeSink& on_size,
                 const ByteSink& write, std::atomic<bool>* changed) {
  const std::string what = "GET " + where;
  const uint64_t chunk = client.options().part_bytes;
  // A plain GET: the whole object when it is at most one chunk, else only its size and ETag.
  auto first = client.Call(
      client.Make("GET", object), {}, what,
      [&](const HttpResponse& r) {
        if (!Success(r)) return Refusal(r, what);
        const std::string* length = r.Header("content-length");
        if (r.body_omitted) return Status::Ok();
        return !length || *length == std::to_string(r.body.size()) ? Status::Ok() : IoError(what + ": short body");
      },
      /*max_body_bytes=*/chunk);
  if (!first.ok()) return first.status();
  if (!first->body_omitted) {
    client.CountGot(first->body.size());
    DCR_RETURN_IF_ERROR(on_size(first->body.size()));
    return write(0, first->body);
  }
  const uint64_t total = std::strtoull(first->Header("content-length")->c_str(), nullptr, 10);
  DCR_RETURN_IF_ERROR(on_size(total));

  std::vector<sigv4::Header> precondition;
  if (const std::string* etag = first->Header("etag")) precondition.emplace_back("If-Match", *etag);
  const uint64_t ranges = (total + chunk - 1) / chunk;
  return ParallelFor(ranges, std::max(1, client.options().parallelism), [&](size_t i) -> Status {
    const uint64_t offset = i * chunk, last = std::min(offset + chunk, total) - 1;
    const std::string range = "bytes=" + std::to_string(offset) + "-" + std::to_string(last);
    std::vector<sigv4::Header> headers = precondition;
    headers.emplace_back("Range", range);
    auto r = client.Call(client.Make("GET", object, {}, headers), {}, what + " (" + range + ")",
                         [&](const HttpResponse& r) -> Status {
                           if (r.status == 412) {  // If-Match failed: a new object under the key
                             *changed = true;
                             return Corrupt(what + ": the object changed during the download");
                           }
                           if (!Success(r)) return Refusal(r, what);
                           const RangeAnswer answer = RangeOf(r, offset, last);
                           if (answer.total && *answer.total != total) {
                             *changed = true;
                             return Corrupt(what + ": the object changed during the download");
                           }
                           return answer.ok ? Status::Ok() : IoError(what + ": short or misplaced body for " + range);
                         });
    if (!r.ok()) return r.status();
    const RangeAnswer answer = RangeOf(*r, offset, last);
    client.CountGot(answer.bytes.size());
    return write(offset, answer.bytes);
  });
}

}  // namespace

Status FetchObject(Client& client, const std::string& object, const std::string& where, const SizeSink& on_size,
                   const ByteSink& write) {
  for (int attempt = 1;; ++attempt) {
    std::atomic<bool> changed{false};
    Status s = FetchOnce(client, object, where, on_size, write, &changed);
    if (!changed) return s;
    if (attempt >= client.options().max_attempts) {
      return IoError("GET " + where + ": the object changed during each of " + std::to_string(attempt) + " downloads");
    }
    client.CountRetry();
  }
}

}  // namespace dcr::s3
