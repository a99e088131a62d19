#include "protocol/delta_file.h"

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "codec/bit_stream.h"
#include "codec/section_coding.h"

namespace dcr {

int FooterZstdLevel(uint64_t json_bytes) {
  // Level 19 compresses at ~3-5 MB/s: ~1 ms for the footer of a model of a few dozen tensors,
  // but ~5 s for one of 100,000 (9.5 MB of JSON), all of it after the last payload. Level 9 runs
  // at ~80-100 MB/s (0.12 s there) and stores ~1.2x the bytes (166 against 137 KB: nothing
  // beside such a model's payloads).
  return json_bytes <= kSmallFooterJsonBytes ? 19 : 9;
}

namespace {

using Json = nlohmann::json;

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Json HeaderToJson(const DeltaHeader& h) {
  Json tensors = Json::array();
  std::string base_tags;  // format 2: two hex digits per tensor
  for (const auto& t : h.tensors) {
    Json e{{"name", t.entry.name}, {"dtype", std::string(DTypeName(t.entry.dtype))}, {"shape", t.entry.shape}};
    if (h.format_version == 1) e["base_tag"] = t.base_tag, e["target_tag"] = t.target_tag;
    tensors.push_back(std::move(e));
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", t.base_tag & 0xff);
    base_tags += hex;
  }
  Json payloads = Json::array();
  for (const auto& p : h.payloads)
    payloads.push_back(Json::array({p.offset, p.length, p.sequence, p.changed}));
  Json j{{"format", "dcr-delta"},
         {"version", h.format_version},
         {"transfer_id", Hex64(h.transfer_id)},
         {"base_digest", h.base_digest.ToHex()},
         {"target_digest", h.target_digest.ToHex()},
         {"tensors", tensors},
         {"payloads", payloads}};
  if (h.format_version >= 2) j["base_tags"] = base_tags;
  return j;
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
  Status Tag(const char* key, uint32_t* out) const {
    const Json* v;
    DCR_RETURN_IF_ERROR(Get(key, &v));
    if (!v->is_number_unsigned() || v->get<uint64_t>() > 0xffff) return Corrupt(where + ": \"" + key + "\" is not a u16");
    *out = static_cast<uint32_t>(v->get<uint64_t>());
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
  if (v->get<uint64_t>() < kMinDeltaFormatVersion || v->get<uint64_t>() > kDeltaFormatVersion)
    return Unsupported("delta format version " + std::to_string(v->get<uint64_t>()) + " (this build reads " +
                       std::to_string(kMinDeltaFormatVersion) + " to " + std::to_string(kDeltaFormatVersion) + ")");
  h->format_version = static_cast<uint32_t>(v->get<uint64_t>());
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
    std::string dtype;
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
    if (h->format_version == 1) {
      DCR_RETURN_IF_ERROR(tf.Tag("base_tag", &t.base_tag));
      DCR_RETURN_IF_ERROR(tf.Tag("target_tag", &t.target_tag));
    } else if ((*tensors)[i].contains("base_tag") || (*tensors)[i].contains("target_tag")) {
      return Corrupt(tf.where + ": per-tensor tags in a format " + std::to_string(h->format_version) + " footer");
    }
    if (!h->tensors.empty() && !(h->tensors.back().entry.name < t.entry.name))
      return Corrupt(tf.where + ": tensors are not sorted by name");
    h->tensors.push_back(std::move(t));
  }

  if (h->format_version >= 2) {
    std::string tags;
    DCR_RETURN_IF_ERROR(f.Str("base_tags", &tags));
    if (tags.size() != 2 * h->tensors.size() || tags.find_first_not_of("0123456789abcdef") != std::string::npos)
      return Corrupt("delta footer: base_tags is not 2 lowercase hex digits per tensor");
    for (size_t i = 0; i < h->tensors.size(); ++i) h->tensors[i].base_tag = static_cast<uint32_t>(std::stoul(tags.substr(2 * i, 2), nullptr, 16));
  }

  const Json* payloads;
  DCR_RETURN_IF_ERROR(f.Get("payloads", &payloads));
  if (!payloads->is_array()) return Corrupt("delta footer: payloads is not an array");
  for (size_t i = 0; i < payloads->size(); ++i) {
    const Json& row = (*payloads)[i];
    if (!row.is_array() || row.size() != 4)
      return Corrupt("delta footer: payloads[" + std::to_string(i) + "] is not a 4-element array");
    uint64_t vals[4];
    for (size_t k = 0; k < 4; ++k) {
      if (!row[k].is_number_unsigned())
        return Corrupt("delta footer: payloads[" + std::to_string(i) + "] holds a non-integer");
      vals[k] = row[k].get<uint64_t>();
    }
    if (vals[2] > UINT32_MAX) return Corrupt("delta footer: payloads[" + std::to_string(i) + "] sequence");
    h->payloads.push_back({vals[0], vals[1], static_cast<uint32_t>(vals[2]), vals[3]});
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
    if (p.changed == 0) return Corrupt(where + ": change count 0");
    if (i > 0 && p.sequence <= h.payloads[i - 1].sequence) return Corrupt(where + ": sequence numbers not ascending");
  }
  if (expect_offset != payload_region_end)
    return Corrupt("delta file: " + std::to_string(payload_region_end - expect_offset) +
                   " bytes between the last payload and the footer");
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
  DCR_ASSIGN_OR_RETURN(DurableFileWriter file, DurableFileWriter::Create(path));
  DeltaWriter w(std::move(file));
  DCR_RETURN_IF_ERROR(w.file_.Append(kDeltaMagic, sizeof(kDeltaMagic)));
  return w;
}

Status DeltaWriter::Append(std::span<const uint8_t> payload, PayloadEntry entry) {
  entry.offset = file_.appended();
  entry.length = payload.size();
  DCR_RETURN_IF_ERROR(file_.Append(payload));
  entries_.push_back(entry);
  return Status::Ok();
}

Status DeltaWriter::Finish(DeltaHeader header) {
  header.payloads = std::move(entries_);
  std::string json = HeaderToJson(header).dump();
  std::vector<uint8_t> footer;
  footer.resize(ZSTD_compressBound(json.size()));
  size_t n = ZSTD_compress(footer.data(), footer.size(), json.data(), json.size(), FooterZstdLevel(json.size()));
  if (ZSTD_isError(n)) return Internal(std::string("zstd footer: ") + ZSTD_getErrorName(n));
  footer.resize(n);
  std::vector<uint8_t> tail;
  PutLe(tail, footer.size(), 8);
  PutLe(tail, json.size(), 8);
  PutLe(tail, XXH3_64bits(footer.data(), footer.size()), 8);
  tail.insert(tail.end(), kDeltaTailMagic, kDeltaTailMagic + sizeof(kDeltaTailMagic));
  DCR_RETURN_IF_ERROR(file_.Append(footer));
  DCR_RETURN_IF_ERROR(file_.Append(tail));
  return file_.Commit();
}

Result<DeltaReader> DeltaReader::Open(const std::string& path) {
  DeltaReader r;
  DCR_ASSIGN_OR_RETURN(r.file_, MappedFile::Open(path));
  auto fail = [&](const Status& s) { return s.WithContext(path); };
  auto b = r.file_.bytes();
  if (b.size() < sizeof(kDeltaMagic) + kDeltaTailBytes) return fail(Corrupt("too short to be a dcr delta file (truncated?)"));
  if (std::memcmp(b.data(), kDeltaMagic, sizeof(kDeltaMagic)) != 0) return fail(Corrupt("not a dcr delta file (bad magic)"));
  const uint8_t* tail = b.data() + b.size() - kDeltaTailBytes;
  if (std::memcmp(tail + 24, kDeltaTailMagic, sizeof(kDeltaTailMagic)) != 0)
    return fail(Corrupt("end marker missing (truncated or not a dcr delta file)"));
  const uint64_t footer_len = LoadLe(tail, 8), json_len = LoadLe(tail + 8, 8);
  if (footer_len > b.size() - sizeof(kDeltaMagic) - kDeltaTailBytes)
    return fail(Corrupt("footer length " + std::to_string(footer_len) + " does not fit the file"));
  if (json_len > kMaxDeltaFooterBytes) return fail(Corrupt("footer of " + std::to_string(json_len) + " bytes exceeds the limit"));
  const uint64_t footer_at = b.size() - kDeltaTailBytes - footer_len;
  auto footer = b.subspan(footer_at, footer_len);
  if (XXH3_64bits(footer.data(), footer.size()) != LoadLe(tail + 16, 8)) return fail(Corrupt("footer checksum mismatch"));
  std::vector<uint8_t> json;
  Status ds = DecompressSection(SectionCodec::kZstd, footer, json_len, &json);
  if (!ds.ok()) return fail(ds.WithContext("footer"));
  Json j = Json::parse(json.begin(), json.end(), nullptr, false);
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

namespace {

// Payload i's parsed layout against its table entry and the catalog (DecodeTablePayload's
// checks); errors without the payload's name, which the callers add.
Status CheckTableLayout(const DeltaHeader& h, size_t i, const PayloadLayout& layout) {
  const PayloadEntry& e = h.payloads[i];
  uint64_t changed = 0;
  for (uint64_t n : layout.changed) changed += n;
  if (layout.identity.transfer_id != h.transfer_id || layout.identity.sequence != e.sequence || changed != e.changed)
    return Corrupt("payload identity or change count disagrees with the delta's payload table");
  for (const SegmentSpec& sp : layout.segments) {
    if (sp.tensor_index >= h.tensors.size()) return Corrupt("tensor index " + std::to_string(sp.tensor_index) + " out of range");
    const CatalogEntry& t = h.tensors[sp.tensor_index].entry;
    auto range = [&] { return "elements [" + std::to_string(sp.start) + ", " + std::to_string(sp.start + sp.count) + ")"; };
    if (sp.dtype != t.dtype)
      return Corrupt("tensor '" + t.name + "' " + range() + " coded as " + std::string(DTypeName(sp.dtype)) +
                     ", catalog says " + std::string(DTypeName(t.dtype)));
    const uint64_t n = *ShapeElements(t.shape);
    if (sp.start > n || sp.count > n - sp.start)
      return Corrupt(range() + " lie outside tensor '" + t.name + "' of " + std::to_string(n) + " elements");
  }
  return Status::Ok();
}

// Error context, built only for an error: a payload decodes in tens of microseconds.
std::string PayloadWhere(const DeltaReader& reader, size_t i) {
  const PayloadEntry& e = reader.header().payloads[i];
  return reader.path() + ": payload " + std::to_string(i) + " (bytes " + std::to_string(e.offset) + ".." +
         std::to_string(e.offset + e.length) + ")";
}

}  // namespace

Status DecodeTablePayload(const DeltaReader& reader, size_t i, DecodedPayload* out, const BaseLookup& base,
                          int threads) {
  Status s = DecodePayload(reader.PayloadBytes(i), out, base, threads);
  if (!s.ok()) return s.WithContext(PayloadWhere(reader, i));
  PayloadLayout layout;  // the decoded payload's identity and table, for the checks
  layout.identity = out->identity;
  for (const DecodedSegment& seg : out->segments) {
    layout.segments.push_back(seg.spec);
    layout.changed.push_back(seg.changes.size());
  }
  s = CheckTableLayout(reader.header(), i, layout);
  return s.ok() ? s : s.WithContext(PayloadWhere(reader, i));
}

Status DecodeApplyTablePayload(const DeltaReader& reader, size_t i, DecodedPayload* out, const BaseLookup& base,
                               const TensorBytes& tensor_of, int threads) {
  const Status s =
      DecodeApplyPayload(reader.PayloadBytes(i), out, base, tensor_of, threads,
                         [&](const PayloadLayout& layout) { return CheckTableLayout(reader.header(), i, layout); });
  return s.ok() ? s : s.WithContext(PayloadWhere(reader, i));
}

Status CheckSegmentOrder(const SegmentSpec& prev, const SegmentSpec& next, size_t payload) {
  if (next.tensor_index < prev.tensor_index || (next.tensor_index == prev.tensor_index && next.start < prev.start + prev.count))
    return Corrupt("payload " + std::to_string(payload) + " overlaps or precedes the segments of the payload before it");
  return Status::Ok();
}

}  // namespace dcr
