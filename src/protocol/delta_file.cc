#include "protocol/delta_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "codec/bit_stream.h"

namespace dcr {
namespace {

using Json = nlohmann::json;

const char* KindName(ValueKind k) { return k == ValueKind::kXor ? "xor" : "overwrite"; }

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Json HeaderToJson(const DeltaHeader& h) {
  Json tensors = Json::array();
  for (const auto& t : h.tensors)
    tensors.push_back({{"name", t.entry.name},
                       {"dtype", std::string(DTypeName(t.entry.dtype))},
                       {"shape", t.entry.shape},
                       {"value_kind", KindName(t.kind)},
                       {"base_digest", t.base_digest.ToHex()},
                       {"target_digest", t.target_digest.ToHex()}});
  Json payloads = Json::array();
  for (const auto& p : h.payloads)
    payloads.push_back(Json::array({p.offset, p.length, p.tensor, p.start, p.count, p.changed}));
  return {{"format", "dcr-delta"},
          {"version", h.format_version},
          {"transfer_id", Hex64(h.transfer_id)},
          {"base_digest", h.base_digest.ToHex()},
          {"target_digest", h.target_digest.ToHex()},
          {"tensors", tensors},
          {"payloads", payloads}};
}

// Typed field access that reports the JSON path on failure instead of throwing.
struct Fields {
  const Json& j;
  std::string where;
  Status Get(const char* key, const Json** out) const {
    if (!j.is_object() || !j.contains(key)) return Corrupt(where + ": missing \"" + key + "\"");
    *out = &j[key];
    return Status::Ok();
  }
  Status Str(const char* key, std::string* out) const {
    const Json* v;
    DCR_RETURN_IF_ERROR(Get(key, &v));
    if (!v->is_string()) return Corrupt(where + ": \"" + key + "\" is not a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Digest(const char* key, Digest128* out) const {
    std::string s;
    DCR_RETURN_IF_ERROR(Str(key, &s));
    if (!Digest128::FromHex(s, out)) return Corrupt(where + ": \"" + key + "\" is not a 32-digit hex digest");
    return Status::Ok();
  }
};

Status ParseHeader(const Json& j, DeltaHeader* h) {
  Fields f{j, "delta footer"};
  std::string format, transfer;
  DCR_RETURN_IF_ERROR(f.Str("format", &format));
  if (format != "dcr-delta") return Corrupt("delta footer: format is \"" + format + "\", not \"dcr-delta\"");
  const Json* v;
  DCR_RETURN_IF_ERROR(f.Get("version", &v));
  if (!v->is_number_unsigned()) return Corrupt("delta footer: version is not a number");
  if (v->get<uint64_t>() != kDeltaFormatVersion)
    return Unsupported("delta format version " + std::to_string(v->get<uint64_t>()) + " (this build reads " +
                       std::to_string(kDeltaFormatVersion) + ")");
  DCR_RETURN_IF_ERROR(f.Str("transfer_id", &transfer));
  if (transfer.size() != 16 || transfer.find_first_not_of("0123456789abcdef") != std::string::npos)
    return Corrupt("delta footer: transfer_id is not 16 hex digits");
  h->transfer_id = std::stoull(transfer, nullptr, 16);
  DCR_RETURN_IF_ERROR(f.Digest("base_digest", &h->base_digest));
  DCR_RETURN_IF_ERROR(f.Digest("target_digest", &h->target_digest));

  const Json* tensors;
  DCR_RETURN_IF_ERROR(f.Get("tensors", &tensors));
  if (!tensors->is_array()) return Corrupt("delta footer: tensors is not an array");
  for (size_t i = 0; i < tensors->size(); ++i) {
    Fields tf{(*tensors)[i], "delta footer: tensors[" + std::to_string(i) + "]"};
    DeltaTensor t;
    std::string dtype, kind;
    DCR_RETURN_IF_ERROR(tf.Str("name", &t.entry.name));
    DCR_RETURN_IF_ERROR(tf.Str("dtype", &dtype));
    auto dt = ParseDType(dtype);
    if (!dt) return Corrupt(tf.where + ": unknown dtype \"" + dtype + "\"");
    t.entry.dtype = *dt;
    const Json* shape;
    DCR_RETURN_IF_ERROR(tf.Get("shape", &shape));
    if (!shape->is_array()) return Corrupt(tf.where + ": shape is not an array");
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) return Corrupt(tf.where + ": shape holds a non-integer");
      t.entry.shape.push_back(d.get<uint64_t>());
    }
    if (!ShapeElements(t.entry.shape)) return Corrupt(tf.where + ": shape overflows");
    DCR_RETURN_IF_ERROR(tf.Str("value_kind", &kind));
    if (kind != "xor" && kind != "overwrite") return Corrupt(tf.where + ": value_kind \"" + kind + "\"");
    t.kind = kind == "xor" ? ValueKind::kXor : ValueKind::kOverwrite;
    DCR_RETURN_IF_ERROR(tf.Digest("base_digest", &t.base_digest));
    DCR_RETURN_IF_ERROR(tf.Digest("target_digest", &t.target_digest));
    if (!h->tensors.empty() && !(h->tensors.back().entry.name < t.entry.name))
      return Corrupt(tf.where + ": tensors are not sorted by name");
    h->tensors.push_back(std::move(t));
  }

  const Json* payloads;
  DCR_RETURN_IF_ERROR(f.Get("payloads", &payloads));
  if (!payloads->is_array()) return Corrupt("delta footer: payloads is not an array");
  for (size_t i = 0; i < payloads->size(); ++i) {
    const Json& row = (*payloads)[i];
    if (!row.is_array() || row.size() != 6)
      return Corrupt("delta footer: payloads[" + std::to_string(i) + "] is not a 6-element array");
    uint64_t vals[6];
    for (size_t k = 0; k < 6; ++k) {
      if (!row[k].is_number_unsigned())
        return Corrupt("delta footer: payloads[" + std::to_string(i) + "] holds a non-integer");
      vals[k] = row[k].get<uint64_t>();
    }
    if (vals[2] > UINT32_MAX) return Corrupt("delta footer: payloads[" + std::to_string(i) + "] tensor index");
    h->payloads.push_back({vals[0], vals[1], static_cast<uint32_t>(vals[2]), vals[3], vals[4], vals[5]});
  }
  return Status::Ok();
}

// Structural checks of the table against the catalog and the file's payload region.
Status ValidateTable(const DeltaHeader& h, uint64_t payload_region_end) {
  uint64_t expect_offset = sizeof(kDeltaMagic);
  for (size_t i = 0; i < h.payloads.size(); ++i) {
    const PayloadEntry& p = h.payloads[i];
    std::string where = "delta payload " + std::to_string(i);
    if (p.offset != expect_offset) return Corrupt(where + ": offset " + std::to_string(p.offset) + ", expected " + std::to_string(expect_offset));
    if (p.length > payload_region_end - p.offset) return Corrupt(where + ": extends past the payload region");
    expect_offset = p.offset + p.length;
    if (p.tensor >= h.tensors.size()) return Corrupt(where + ": tensor index " + std::to_string(p.tensor) + " out of range");
    const DeltaTensor& t = h.tensors[p.tensor];
    uint64_t n = *ShapeElements(t.entry.shape);
    if (p.count == 0 || p.start > n || p.count > n - p.start)
      return Corrupt(where + ": range [" + std::to_string(p.start) + ", +" + std::to_string(p.count) +
                     ") outside tensor '" + t.entry.name + "' of " + std::to_string(n) + " elements");
    if (p.changed == 0 || p.changed > p.count) return Corrupt(where + ": change count " + std::to_string(p.changed));
    if (i > 0) {
      const PayloadEntry& q = h.payloads[i - 1];
      if (q.tensor > p.tensor || (q.tensor == p.tensor && q.start + q.count > p.start))
        return Corrupt(where + ": chunks out of order or overlapping in tensor '" + t.entry.name + "'");
    }
  }
  if (expect_offset != payload_region_end)
    return Corrupt("delta file: " + std::to_string(payload_region_end - expect_offset) +
                   " bytes between the last payload and the footer");
  std::vector<Digest128> base, target;
  for (const auto& t : h.tensors) base.push_back(t.base_digest), target.push_back(t.target_digest);
  Catalog cat = h.catalog();
  if (CombineDigests(cat, base) != h.base_digest) return Corrupt("delta footer: base digest disagrees with its tensors");
  if (CombineDigests(cat, target) != h.target_digest) return Corrupt("delta footer: target digest disagrees with its tensors");
  return Status::Ok();
}

}  // namespace

Catalog DeltaHeader::catalog() const {
  Catalog c;
  for (const auto& t : tensors) c.push_back(t.entry);
  return c;
}
uint64_t DeltaHeader::changed_elements() const {
  uint64_t n = 0;
  for (const auto& p : payloads) n += p.changed;
  return n;
}
uint64_t DeltaHeader::total_elements() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += *ShapeElements(t.entry.shape);
  return n;
}

uint64_t DefaultTransferId(const Digest128& base) {
  uint64_t words[2] = {base.lo, base.hi};
  return XXH3_64bits(words, sizeof(words));
}

Result<DeltaWriter> DeltaWriter::Create(const std::string& path) {
  DeltaWriter w;
  w.path_ = path;
  std::filesystem::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  w.tmp_path_ = dir + "/." + p.filename().string() + ".tmp." + std::to_string(::getpid());
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return ErrnoError("create " + w.tmp_path_);
  DCR_RETURN_IF_ERROR(w.Write(kDeltaMagic, sizeof(kDeltaMagic)));
  return w;
}

DeltaWriter::DeltaWriter(DeltaWriter&& o) noexcept
    : path_(std::move(o.path_)), tmp_path_(std::move(o.tmp_path_)), fd_(std::exchange(o.fd_, -1)),
      offset_(o.offset_), entries_(std::move(o.entries_)) {}

DeltaWriter::~DeltaWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

Status DeltaWriter::Write(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + tmp_path_);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset_ += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status DeltaWriter::Append(std::span<const uint8_t> payload, PayloadEntry entry) {
  entry.offset = offset_;
  entry.length = payload.size();
  DCR_RETURN_IF_ERROR(Write(payload.data(), payload.size()));
  entries_.push_back(entry);
  return Status::Ok();
}

Status DeltaWriter::Finish(DeltaHeader header) {
  header.payloads = std::move(entries_);
  std::string footer = HeaderToJson(header).dump();
  std::vector<uint8_t> tail;
  PutLe(tail, footer.size(), 8);
  PutLe(tail, XXH3_64bits(footer.data(), footer.size()), 8);
  tail.insert(tail.end(), kDeltaTailMagic, kDeltaTailMagic + sizeof(kDeltaTailMagic));
  DCR_RETURN_IF_ERROR(Write(footer.data(), footer.size()));
  DCR_RETURN_IF_ERROR(Write(tail.data(), tail.size()));
  if (::fsync(fd_) != 0) return ErrnoError("fsync " + tmp_path_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp_path_ + " -> " + path_);
    ::unlink(tmp_path_.c_str());
    return s;
  }
  std::filesystem::path p(path_);
  return SyncDirectory(p.has_parent_path() ? p.parent_path().string() : ".");
}

Result<DeltaReader> DeltaReader::Open(const std::string& path) {
  DeltaReader r;
  DCR_ASSIGN_OR_RETURN(r.file_, MappedFile::Open(path));
  auto fail = [&](const Status& s) { return s.WithContext(path); };
  auto b = r.file_.bytes();
  if (b.size() < sizeof(kDeltaMagic) + kDeltaTailBytes) return fail(Corrupt("too short to be a dcr delta file (truncated?)"));
  if (std::memcmp(b.data(), kDeltaMagic, sizeof(kDeltaMagic)) != 0) return fail(Corrupt("not a dcr delta file (bad magic)"));
  const uint8_t* tail = b.data() + b.size() - kDeltaTailBytes;
  if (std::memcmp(tail + 16, kDeltaTailMagic, sizeof(kDeltaTailMagic)) != 0)
    return fail(Corrupt("end marker missing (truncated or not a dcr delta file)"));
  uint64_t footer_len = LoadLe(tail, 8);
  if (footer_len > kMaxDeltaFooterBytes || footer_len > b.size() - sizeof(kDeltaMagic) - kDeltaTailBytes)
    return fail(Corrupt("footer length " + std::to_string(footer_len) + " does not fit the file"));
  const uint64_t footer_at = b.size() - kDeltaTailBytes - footer_len;
  const uint8_t* footer = b.data() + footer_at;
  if (XXH3_64bits(footer, footer_len) != LoadLe(tail + 8, 8)) return fail(Corrupt("footer checksum mismatch"));
  Json j = Json::parse(footer, footer + footer_len, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(Corrupt("footer is not a JSON object"));
  Status s = ParseHeader(j, &r.header_);
  if (s.ok()) s = ValidateTable(r.header_, footer_at);
  if (!s.ok()) return fail(s);
  return r;
}

std::span<const uint8_t> DeltaReader::PayloadBytes(size_t i) const {
  const PayloadEntry& p = header_.payloads[i];
  return file_.bytes().subspan(p.offset, p.length);
}

Status DecodeTablePayload(const DeltaReader& reader, size_t i, DecodedChunk* out) {
  const PayloadEntry& e = reader.header().payloads[i];
  const DeltaTensor& t = reader.header().tensors[e.tensor];
  std::string where = reader.path() + ": payload " + std::to_string(i) + " (tensor '" + t.entry.name +
                      "', elements [" + std::to_string(e.start) + ", " + std::to_string(e.start + e.count) + "))";
  Status s = DecodePayload(reader.PayloadBytes(i), out);
  if (!s.ok()) return s.WithContext(where);
  const ChunkSpec& c = out->spec;
  if (c.tensor_index != e.tensor || c.start != e.start || c.count != e.count || out->changes.size() != e.changed ||
      c.dtype != t.entry.dtype || c.kind != t.kind || c.identity.transfer_id != reader.header().transfer_id)
    return Corrupt(where + ": payload header disagrees with the delta's payload table");
  return Status::Ok();
}

}  // namespace dcr
