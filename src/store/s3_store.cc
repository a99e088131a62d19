#include "store/s3_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/durable_file.h"
#include "store/s3_client.h"
#include "store/s3_request.h"
#include "store/s3_transfer.h"

namespace dcr {
namespace {

using s3::Refusal;
using s3::Success;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class S3Store final : public ObjectStore {
 public:
  S3Store(std::string url, std::string bucket, std::string prefix, s3::Endpoint endpoint,
          sigv4::Credentials credentials, std::string region, const StoreOptions& options)
      : url_(std::move(url)),
        prefix_(std::move(prefix)),
        client_(std::move(bucket), std::move(endpoint), std::move(credentials), std::move(region), options) {}

  const std::string& url() const override { return url_; }
  Status Put(const std::string& key, std::span<const uint8_t> bytes) override;
  Status PutFile(const std::string& key, const std::string& path) override;
  Result<std::vector<uint8_t>> Get(const std::string& key) override;
  Result<std::vector<uint8_t>> GetRange(const std::string& key, uint64_t offset, uint64_t length) override;
  Status GetFile(const std::string& key, const std::string& path) override;
  Result<std::optional<ObjectInfo>> Head(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::string& key) override;
  StoreCounters counters() const override { return client_.counters(); }

 private:
  // The S3 object name of a key, and its s3:// URL for messages.
  std::string Object(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "/" + key; }
  std::string Where(const std::string& key) const { return "s3://" + client_.bucket() + "/" + Object(key); }

  Status PutSingle(const std::string& key, std::span<const uint8_t> bytes);
  Status Fetch(const std::string& key, const s3::SizeSink& on_size, const s3::ByteSink& write) {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    return s3::FetchObject(client_, Object(key), Where(key), on_size, write);
  }

  const std::string url_, prefix_;
  s3::Client client_;
};

Status S3Store::Put(const std::string& key, std::span<const uint8_t> bytes) {
  DCR_RETURN_IF_ERROR(CheckObjectKey(key));
  if (bytes.size() <= client_.options().multipart_threshold) return PutSingle(key, bytes);
  return s3::MultipartUpload(client_, Object(key), Where(key), bytes.size(),
                             [&](uint64_t offset, uint64_t length, std::vector<uint8_t>&) {
                               return Result<std::span<const uint8_t>>(bytes.subspan(offset, length));
                             });
}

Status S3Store::PutSingle(const std::string& key, std::span<const uint8_t> bytes) {
  const std::string what = "PUT " + Where(key);
  auto r = client_.Call(client_.Make("PUT", Object(key), {}, {}, sigv4::Sha256Hex(bytes)), bytes, what,
                        [&](const HttpResponse& r) { return Success(r) ? Status::Ok() : Refusal(r, what); });
  if (!r.ok()) return r.status();
  client_.CountPut(bytes.size());
  return Status::Ok();
}

Status S3Store::PutFile(const std::string& key, const std::string& path) {
  DCR_RETURN_IF_ERROR(CheckObjectKey(key));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("stat " + path);
  const auto size = static_cast<uint64_t>(st.st_size);
  s3::PartReader read = [&](uint64_t offset, uint64_t length,
                            std::vector<uint8_t>& scratch) -> Result<std::span<const uint8_t>> {
    scratch.resize(length);
    uint64_t done = 0;
    while (done < length) {
      ssize_t n = ::pread(fd, scratch.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read " + path);
      if (n == 0) return IoError("read " + path + ": the file shrank while being uploaded");
      done += static_cast<uint64_t>(n);
    }
    return std::span<const uint8_t>(scratch);
  };
  if (size > client_.options().multipart_threshold)
    return s3::MultipartUpload(client_, Object(key), Where(key), size, read);
  std::vector<uint8_t> scratch;
  DCR_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, read(0, size, scratch));
  return PutSingle(key, bytes);
}

Result<std::vector<uint8_t>> S3Store::Get(const std::string& key) {
  std::vector<uint8_t> out;
  DCR_RETURN_IF_ERROR(Fetch(
      key,
      [&](uint64_t size) {
        out.assign(size, 0);
        return Status::Ok();
      },
      [&](uint64_t offset, std::span<const uint8_t> bytes) {
        if (!bytes.empty()) std::memcpy(out.data() + offset, bytes.data(), bytes.size());
        return Status::Ok();
      }));
  return out;
}

Status S3Store::GetFile(const std::string& key, const std::string& path) {
  DCR_ASSIGN_OR_RETURN(DurableFileWriter file, DurableFileWriter::Create(path));
  DCR_RETURN_IF_ERROR(Fetch(
      key,
      [&](uint64_t size) {
        DCR_RETURN_IF_ERROR(file.Truncate(0));  // a restarted download leaves nothing stale
        return file.Truncate(size);
      },
      [&](uint64_t offset, std::span<const uint8_t> bytes) { return file.WriteAt(offset, bytes); }));
  return file.Commit();
}

Result<std::vector<uint8_t>> S3Store::GetRange(const std::string& key, uint64_t offset, uint64_t length) {
  DCR_RETURN_IF_ERROR(CheckObjectKey(key));
  const std::string what = "GET " + Where(key);
  auto outside = [&](const std::string& size) {
    return InvalidArgument(what + ": range of " + std::to_string(length) + " bytes at " + std::to_string(offset) +
                           " does not lie within the object (" + size + " bytes)");
  };
  if (offset + length < offset) return outside("?");
  if (length == 0) {
    DCR_ASSIGN_OR_RETURN(std::optional<ObjectInfo> info, Head(key));
    if (!info) return NotFound(what + ": no such key");
    if (offset > info->size) return outside(std::to_string(info->size));
    return std::vector<uint8_t>();
  }
  const uint64_t last = offset + length - 1;
  auto r = client_.Call(
      client_.Make("GET", Object(key), {}, {{"Range", "bytes=" + std::to_string(offset) + "-" + std::to_string(last)}}),
      {}, what, [&](const HttpResponse& r) -> Status {
        const std::string* cr = r.Header("content-range");
        if (r.status == 416) return outside(cr && cr->starts_with("bytes */") ? cr->substr(8) : "?");
        if (!Success(r)) return Refusal(r, what);
        const std::string* cl = r.Header("content-length");
        if (cl && *cl != std::to_string(r.body.size())) return IoError(what + ": short body");
        const s3::RangeAnswer answer = s3::RangeOf(r, offset, last);
        if (answer.ok) return Status::Ok();
        if (answer.total && *answer.total <= last) return outside(std::to_string(*answer.total));
        return IoError(what + ": short or misplaced body for bytes " + std::to_string(offset) + "-" +
                       std::to_string(last));
      });
  if (!r.ok()) return r.status();
  const s3::RangeAnswer answer = s3::RangeOf(*r, offset, last);
  client_.CountGot(length);
  return std::vector<uint8_t>(answer.bytes.begin(), answer.bytes.end());
}

Result<std::optional<ObjectInfo>> S3Store::Head(const std::string& key) {
  DCR_RETURN_IF_ERROR(CheckObjectKey(key));
  const std::string what = "HEAD " + Where(key);
  std::optional<ObjectInfo> info;
  auto r = client_.Call(client_.Make("HEAD", Object(key)), {}, what, [&](const HttpResponse& r) -> Status {
    if (r.status == 404) return Status::Ok();
    if (!Success(r)) return Refusal(r, what);
    const std::string* length = r.Header("content-length");
    uint64_t size = 0;
    if (!length || length->empty() || length->find_first_not_of("0123456789") != std::string::npos) {
      return IoError(what + ": no Content-Length");
    }
    size = std::stoull(*length);
    info = ObjectInfo{key, size};
    return Status::Ok();
  });
  if (!r.ok()) return r.status();
  return info;
}

Result<std::vector<ObjectInfo>> S3Store::List(const std::string& prefix) {
  const std::string full = Object(prefix), strip = prefix_.empty() ? "" : prefix_ + "/";
  const std::string what = "GET (ListObjectsV2) s3://" + client_.bucket() + "/" + full;
  std::vector<ObjectInfo> out;
  std::string token;
  for (;;) {
    std::vector<sigv4::QueryParam> query = {{"list-type", "2"}, {"prefix", full}};
    if (!token.empty()) query.emplace_back("continuation-token", token);
    s3::ListPage page;
    auto r = client_.Call(client_.Make("GET", "", query), {}, what, [&](const HttpResponse& r) -> Status {
      if (!Success(r)) return Refusal(r, what);
      Result<s3::ListPage> p = s3::ParseListPage(r.BodyText());
      if (!p.ok()) return IoError(what + ": " + p.status().message());
      page = std::move(p).value();
      return Status::Ok();
    });
    if (!r.ok()) return r.status();
    for (ObjectInfo& info : page.objects) {
      if (!info.key.starts_with(strip))
        return Corrupt(what + ": listed key \"" + info.key + "\" is outside the prefix");
      info.key.erase(0, strip.size());
      out.push_back(std::move(info));
    }
    if (!page.truncated) break;
    if (page.next_continuation_token == token) return Corrupt(what + ": the continuation token did not advance");
    token = page.next_continuation_token;
  }
  std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status S3Store::Delete(const std::string& key) {
  DCR_RETURN_IF_ERROR(CheckObjectKey(key));
  const std::string what = "DELETE " + Where(key);
  auto r = client_.Call(client_.Make("DELETE", Object(key)), {}, what, [&](const HttpResponse& r) -> Status {
    if (Success(r)) return Status::Ok();
    Status s = Refusal(r, what);
    return s.code() == StatusCode::kNotFound ? Status::Ok() : s;
  });
  return r.ok() ? Status::Ok() : r.status();
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenS3Store(const std::string& url, const StoreOptions& options) {
  std::string bucket, prefix;
  DCR_RETURN_IF_ERROR(s3::ParseS3Url(url, &bucket, &prefix));
  if (options.part_bytes == 0 || options.parallelism < 1 || options.max_attempts < 1 || options.base_backoff_ms < 0) {
    return InvalidArgument(url + ": part_bytes, parallelism and max_attempts must be positive");
  }
  sigv4::Credentials credentials{Env("AWS_ACCESS_KEY_ID"), Env("AWS_SECRET_ACCESS_KEY"), Env("AWS_SESSION_TOKEN")};
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return InvalidArgument(url + ": no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  }
  std::string region = options.region;
  if (region.empty()) region = Env("AWS_REGION");
  if (region.empty()) region = Env("AWS_DEFAULT_REGION");
  if (region.empty()) region = "us-east-1";
  DCR_ASSIGN_OR_RETURN(s3::Endpoint endpoint, s3::ParseEndpoint(options.endpoint, region, options.virtual_host_style));
  return std::unique_ptr<ObjectStore>(
      new S3Store(url, bucket, prefix, std::move(endpoint), std::move(credentials), std::move(region), options));
}

}  // namespace dcr
