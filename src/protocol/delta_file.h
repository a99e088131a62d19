// The delta file: payloads back to back, then a zstd-compressed JSON footer describing the
// transfer (catalog, base and target digests, payload table) and a fixed 32-byte tail. Written
// in one streaming pass, footer last, so payloads never wait for the whole diff.
// Layout: docs/format.md §1.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/durable_file.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "protocol/state_digest.h"

namespace dcr {

inline constexpr char kDeltaMagic[8] = {'D', 'C', 'R', 'D', 'E', 'L', 'T', 'A'};
inline constexpr char kDeltaTailMagic[8] = {'D', 'C', 'R', 'E', 'N', 'D', '0', '1'};
// Format 2 keeps only 8-bit base tags, as one hex string, of format 1's two 16-bit tags per
// tensor: ~6 of the ~8 compressed footer bytes per tensor, which sparse deltas of small models
// cannot afford. Format 3 has format 2's container and may hold payloads in banded context mode
// (codec mode 2), which builds reading only formats 1-2 cannot decode. Format 4 is the same
// container whose payloads may use banded context mode in parts (codec mode 3), which builds
// reading only formats 1-3 cannot decode. Format 5 is the same container whose payloads may
// store their values in Huffman streams (value codec 3), which builds reading only formats 1-4
// cannot decode. Format 6 (written) is the same container whose payloads may hold split Rice
// codes (banded context mode 4, plain location method 3), which builds reading only formats 1-5
// cannot decode; formats 1-5 are still read.
inline constexpr uint32_t kDeltaFormatVersion = 7;
inline constexpr uint32_t kMinDeltaFormatVersion = 1;
// u64 stored footer length, u64 decompressed footer length, u64 xxh3-64 of the stored footer, magic
inline constexpr size_t kDeltaTailBytes = 32;
inline constexpr uint64_t kMaxDeltaFooterBytes = 1ull << 30;
// The zstd level of a footer of `json_bytes` bytes of JSON: the densest (19) up to
// kSmallFooterJsonBytes (a few hundred tensors; at most ~20 ms), a fast one (9) above, where
// level 19 would take seconds after the last payload. Readers take any level.
inline constexpr uint64_t kSmallFooterJsonBytes = 64 * 1024;
int FooterZstdLevel(uint64_t json_bytes);

// Per-tensor digests are recorded only as tags, the low bits of each tensor's digest: the 128-bit
// checkpoint digests verify, the tags only name the tensor that failed (a wrong tensor escapes
// naming with probability 2^-bits, never verification). Format 1: 16-bit base and target tags.
// Format 2: 8-bit base tags only (a target that fails is named by the delta, not the tensor).
// Full per-tensor digests would cost 32 incompressible bytes per tensor on every delta.
struct DeltaTensor {
  CatalogEntry entry;
  uint32_t base_tag = 0, target_tag = 0;  // target_tag: format 1 only
};

// The low `bits` bits of a tensor digest.
inline uint32_t DigestTag(const Digest128& d, uint32_t bits = 16) {
  return static_cast<uint32_t>(d.lo & ((uint64_t{1} << bits) - 1));
}

struct PayloadEntry {
  uint64_t offset = 0, length = 0;  // byte range in the file
  uint32_t sequence = 0;            // the payload's identity sequence
  uint64_t changed = 0;             // changed elements it carries
};

struct DeltaHeader {
  uint32_t format_version = kDeltaFormatVersion;
  uint32_t base_tag_bits() const { return format_version == 1 ? 16 : 8; }
  bool has_target_tags() const { return format_version == 1; }
  uint64_t transfer_id = 0;
  std::vector<DeltaTensor> tensors;  // sorted by name: the catalog
  Digest128 base_digest, target_digest;
  std::vector<PayloadEntry> payloads;  // in file order; sequences strictly ascending

  Catalog catalog() const;
  uint64_t changed_elements() const;
  uint64_t total_elements() const;
};

// The default transfer id of an offline delta: xxh3-64 of the base checkpoint digest. Payload
// headers carry the id and are final before the target digest is known, so it cannot depend
// on the target; live transfers get theirs from the coordinator instead.
uint64_t DefaultTransferId(const Digest128& base);

// Streams a delta file: Begin, Append payloads in table order, Finish. The file appears at
// `path` (atomically, fsynced) only when Finish succeeds; on failure or destruction without
// Finish the temporary file is removed.
class DeltaWriter {
 public:
  static Result<DeltaWriter> Create(const std::string& path);

  // Appends one payload; fills entry.offset/length.
  Status Append(std::span<const uint8_t> payload, PayloadEntry entry);
  // Writes the footer from `header` (its payload table is replaced by the appended entries).
  Status Finish(DeltaHeader header);
  uint64_t bytes_written() const { return file_.appended(); }

 private:
  explicit DeltaWriter(DurableFileWriter file) : file_(std::move(file)) {}

  DurableFileWriter file_;
  std::vector<PayloadEntry> entries_;
};

// A mapped, validated delta file: the footer's checksum, JSON and payload table (ranges in
// bounds, in order, disjoint, within their tensors) are verified by Open. Payload bytes are
// verified when decoded.
class DeltaReader {
 public:
  static Result<DeltaReader> Open(const std::string& path);
  const DeltaHeader& header() const { return header_; }
  std::span<const uint8_t> PayloadBytes(size_t i) const;
  uint64_t file_size() const { return file_.size(); }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  DeltaHeader header_;
};

// Decodes payload i of `reader` and checks it against its table entry and the catalog: identity,
// change count, and every segment's tensor index, dtype and range. Context-mode payloads need
// `base` (the target's current bits). `threads` as for DecodePayload.
Status DecodeTablePayload(const DeltaReader& reader, size_t i, DecodedPayload* out, const BaseLookup& base = {},
                          int threads = 1);
// DecodeTablePayload, then ApplyPayload to tensor_of, through DecodeApplyPayload: the table
// checks run on the parsed layout before any section is read, and on any failure nothing is
// written. For context mode, tensor_of(t) must be the bytes `base` reads for tensor t.
Status DecodeApplyTablePayload(const DeltaReader& reader, size_t i, DecodedPayload* out, const BaseLookup& base,
                               const TensorBytes& tensor_of, int threads = 1);

// Checks that the segments of consecutive payloads continue the strict (tensor, start) order:
// `prev` is the last segment of payload i-1, `next` the first of payload i.
Status CheckSegmentOrder(const SegmentSpec& prev, const SegmentSpec& next, size_t payload);

}  // namespace dcr
