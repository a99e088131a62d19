// A payload: the encoded changes of one chunk (a contiguous element range of one tensor), with
// its identity and an xxh3-64 checksum. The byte layout is in docs/format.md ("Payload").
//
// Contract of the decoder: DecodePayload verifies the checksum, then every structural field,
// before returning anything; the decoded chunk is then guaranteed to address only elements in
// [start, start + count) of a tensor of the declared dtype.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "base/status.h"
#include "codec/diff.h"
#include "codec/location_coding.h"
#include "format/dtype.h"

namespace dcr {

static_assert(std::endian::native == std::endian::little,
              "dcr's formats are little-endian and its element views assume a little-endian host");

inline constexpr uint32_t kPayloadMagic = 0x50524344;  // "DCRP" little-endian
inline constexpr uint16_t kPayloadFormatVersion = 1;
inline constexpr size_t kPayloadHeaderBytes = 96;
inline constexpr size_t kPayloadTrailerBytes = 8;  // xxh3-64 of everything before it

enum class CodecMode : uint8_t {
  kPlain = 0,  // needs no old bits to decode (only to apply an XOR)
};

// Who sent a payload and where it sits in its transfer; retries resend identical bytes.
struct PayloadIdentity {
  uint64_t transfer_id = 0;
  uint32_t producer_id = 0;
  uint32_t sequence = 0;
  bool operator==(const PayloadIdentity&) const = default;
};

struct ChunkSpec {
  PayloadIdentity identity;
  uint32_t tensor_index = 0;  // index into the transfer's catalog
  DType dtype = DType::kU8;
  uint64_t start = 0;  // first element of the chunk within the tensor
  uint64_t count = 0;  // elements in the chunk, < 2^32
  ValueKind kind = ValueKind::kXor;
};

struct EncodeOptions {
  int block_log2 = kDefaultLocationBlockLog2;
  int zstd_level = 3;
};

// Reusable buffers so that encoding many chunks allocates only while they grow.
struct EncodeScratch {
  ChangeSet changes;
  std::vector<uint8_t> loc_raw, val_raw;
};

// Diffs base vs next (the chunk's bytes in both) and appends a payload to `out` when anything
// changed. Returns the number of changed elements (0: nothing appended).
uint64_t EncodeChunk(const ChunkSpec& spec, std::span<const uint8_t> base, std::span<const uint8_t> next,
                     const EncodeOptions& options, EncodeScratch* scratch, std::vector<uint8_t>* out);

// Encodes an already computed change set (used by tests to build payloads directly).
void EncodeChanges(const ChunkSpec& spec, const ChangeSet& changes, const EncodeOptions& options,
                   EncodeScratch* scratch, std::vector<uint8_t>* out);

struct DecodedChunk {
  ChunkSpec spec;
  CodecMode mode = CodecMode::kPlain;
  ChangeSet changes;  // positions relative to spec.start
};

// Reads the identity without verifying anything else (for routing and deduplication).
Result<PayloadIdentity> PeekPayloadIdentity(std::span<const uint8_t> payload);

// Verifies and decodes one payload. All failures are kCorrupt or kUnsupported.
Status DecodePayload(std::span<const uint8_t> payload, DecodedChunk* out);

// Applies a decoded chunk to the elements of the tensor it addresses: `tensor` is the whole
// tensor's bytes (its size is checked against the chunk's range and width).
Status ApplyChunk(const DecodedChunk& chunk, std::span<uint8_t> tensor);

// Calls fn(element_index, old_bits, new_bits) for every change, reading old bits from `tensor`
// (the base) without modifying it. Bits are zero-extended to 64.
template <typename Fn>
void ForEachChange(const DecodedChunk& chunk, std::span<const uint8_t> tensor, Fn&& fn) {
  const uint32_t w = chunk.changes.width;
  const uint8_t* vals = chunk.changes.values.data();
  for (size_t k = 0; k < chunk.changes.size(); ++k) {
    uint64_t idx = chunk.spec.start + chunk.changes.positions[k];
    uint64_t old_bits = 0, v = 0;
    std::memcpy(&old_bits, tensor.data() + idx * w, w);
    std::memcpy(&v, vals + k * w, w);
    uint64_t new_bits = chunk.spec.kind == ValueKind::kXor ? (old_bits ^ v) : v;
    fn(idx, old_bits, new_bits);
  }
}

}  // namespace dcr
