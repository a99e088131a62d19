#include "codec/chunk_codec.h"

#include <xxhash.h>

#include "codec/bit_stream.h"
#include "codec/section_coding.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

// Header field offsets (docs/format.md, "Payload").
enum : size_t {
  kOffMagic = 0, kOffVersion = 4, kOffMode = 6, kOffKind = 7, kOffDType = 8, kOffBlockLog2 = 9,
  kOffLocCodec = 10, kOffValCodec = 11, kOffTensor = 12, kOffTransfer = 16, kOffProducer = 24,
  kOffSequence = 28, kOffStart = 32, kOffCount = 40, kOffChanged = 48, kOffLocRaw = 56,
  kOffLocStored = 64, kOffValRaw = 72, kOffValStored = 80, kOffReserved = 88,
};
static_assert(kOffReserved + 8 == kPayloadHeaderBytes);

// Upper bound of a valid location code's size: every block's count, method and k, plus the
// largest of its codes (the Rice code of n gaps is at most n*(k+1) + len/2^k bits <= 33*n + len;
// a bitmap len/8; ranges 2*10*n).
uint64_t MaxLocationBytes(uint64_t count, uint64_t changed, int block_log2) {
  uint64_t blocks = (count >> block_log2) + 1;
  return blocks * 12 + count / 8 + 33 * changed / 8 + 20 * changed + 64;
}

}  // namespace

void EncodeChanges(const ChunkSpec& spec, const ChangeSet& changes, const EncodeOptions& options,
                   EncodeScratch* scratch, std::vector<uint8_t>* out) {
  const uint32_t w = DTypeWidth(spec.dtype);
  DCR_CHECK(changes.width == w && spec.count <= UINT32_MAX);
  scratch->loc_raw.clear();
  scratch->val_raw.clear();
  EncodeLocations(changes.positions, spec.count, options.block_log2, &scratch->loc_raw);
  ToBytePlanes(changes.values, w, &scratch->val_raw);

  const size_t header_at = out->size();
  out->resize(header_at + kPayloadHeaderBytes, 0);
  SectionCodec loc_codec = CompressSection(scratch->loc_raw, options.zstd_level, out);
  const size_t loc_stored = out->size() - header_at - kPayloadHeaderBytes;
  SectionCodec val_codec = CompressSection(scratch->val_raw, options.zstd_level, out);
  const size_t val_stored = out->size() - header_at - kPayloadHeaderBytes - loc_stored;

  uint8_t* h = out->data() + header_at;
  StoreLe(h + kOffMagic, kPayloadMagic, 4);
  StoreLe(h + kOffVersion, kPayloadFormatVersion, 2);
  h[kOffMode] = static_cast<uint8_t>(CodecMode::kPlain);
  h[kOffKind] = static_cast<uint8_t>(spec.kind);
  h[kOffDType] = DTypeCode(spec.dtype);
  h[kOffBlockLog2] = static_cast<uint8_t>(options.block_log2);
  h[kOffLocCodec] = static_cast<uint8_t>(loc_codec);
  h[kOffValCodec] = static_cast<uint8_t>(val_codec);
  StoreLe(h + kOffTensor, spec.tensor_index, 4);
  StoreLe(h + kOffTransfer, spec.identity.transfer_id, 8);
  StoreLe(h + kOffProducer, spec.identity.producer_id, 4);
  StoreLe(h + kOffSequence, spec.identity.sequence, 4);
  StoreLe(h + kOffStart, spec.start, 8);
  StoreLe(h + kOffCount, spec.count, 8);
  StoreLe(h + kOffChanged, changes.size(), 8);
  StoreLe(h + kOffLocRaw, scratch->loc_raw.size(), 8);
  StoreLe(h + kOffLocStored, loc_stored, 8);
  StoreLe(h + kOffValRaw, scratch->val_raw.size(), 8);
  StoreLe(h + kOffValStored, val_stored, 8);
  uint64_t sum = XXH3_64bits(out->data() + header_at, out->size() - header_at);
  PutLe(*out, sum, 8);
}

uint64_t EncodeChunk(const ChunkSpec& spec, std::span<const uint8_t> base, std::span<const uint8_t> next,
                     const EncodeOptions& options, EncodeScratch* scratch, std::vector<uint8_t>* out) {
  DiffElements(base, next, DTypeWidth(spec.dtype), spec.kind, &scratch->changes);
  if (scratch->changes.size() == 0) return 0;
  EncodeChanges(spec, scratch->changes, options, scratch, out);
  return scratch->changes.size();
}

Result<PayloadIdentity> PeekPayloadIdentity(std::span<const uint8_t> p) {
  if (p.size() < kPayloadHeaderBytes + kPayloadTrailerBytes || LoadLe(p.data(), 4) != kPayloadMagic)
    return Corrupt("not a dcr payload");
  return PayloadIdentity{LoadLe(p.data() + kOffTransfer, 8),
                         static_cast<uint32_t>(LoadLe(p.data() + kOffProducer, 4)),
                         static_cast<uint32_t>(LoadLe(p.data() + kOffSequence, 4))};
}

Status DecodePayload(std::span<const uint8_t> p, DecodedChunk* out) {
  if (p.size() < kPayloadHeaderBytes + kPayloadTrailerBytes)
    return Corrupt("payload of " + std::to_string(p.size()) + " bytes is shorter than its header");
  const uint8_t* h = p.data();
  if (LoadLe(h + kOffMagic, 4) != kPayloadMagic) return Corrupt("payload magic mismatch");
  uint64_t stored_sum = LoadLe(p.data() + p.size() - 8, 8);
  if (XXH3_64bits(p.data(), p.size() - 8) != stored_sum) return Corrupt("payload checksum mismatch");
  uint64_t version = LoadLe(h + kOffVersion, 2);
  if (version != kPayloadFormatVersion)
    return Unsupported("payload format version " + std::to_string(version) + " (this build reads " +
                       std::to_string(kPayloadFormatVersion) + ")");
  if (h[kOffMode] != static_cast<uint8_t>(CodecMode::kPlain))
    return Unsupported("payload codec mode " + std::to_string(h[kOffMode]));
  if (h[kOffKind] > static_cast<uint8_t>(ValueKind::kOverwrite))
    return Corrupt("payload value kind " + std::to_string(h[kOffKind]));
  auto dtype = DTypeFromCode(h[kOffDType]);
  if (!dtype) return Corrupt("payload dtype code " + std::to_string(h[kOffDType]));
  if (h[kOffLocCodec] > 1 || h[kOffValCodec] > 1) return Corrupt("payload section codec unknown");
  if (LoadLe(h + kOffReserved, 8) != 0) return Corrupt("payload reserved field is not zero");

  DecodedChunk& d = *out;
  d.mode = CodecMode::kPlain;
  d.spec.kind = static_cast<ValueKind>(h[kOffKind]);
  d.spec.dtype = *dtype;
  d.spec.tensor_index = static_cast<uint32_t>(LoadLe(h + kOffTensor, 4));
  d.spec.identity = {LoadLe(h + kOffTransfer, 8), static_cast<uint32_t>(LoadLe(h + kOffProducer, 4)),
                     static_cast<uint32_t>(LoadLe(h + kOffSequence, 4))};
  d.spec.start = LoadLe(h + kOffStart, 8);
  d.spec.count = LoadLe(h + kOffCount, 8);
  const uint64_t changed = LoadLe(h + kOffChanged, 8);
  const uint64_t loc_raw = LoadLe(h + kOffLocRaw, 8), loc_stored = LoadLe(h + kOffLocStored, 8);
  const uint64_t val_raw = LoadLe(h + kOffValRaw, 8), val_stored = LoadLe(h + kOffValStored, 8);
  const int block_log2 = h[kOffBlockLog2];
  const uint32_t w = DTypeWidth(*dtype);

  if (d.spec.count == 0 || d.spec.count > UINT32_MAX) return Corrupt("payload chunk size " + std::to_string(d.spec.count));
  if (d.spec.start > UINT64_MAX - d.spec.count) return Corrupt("payload chunk range overflows");
  if (changed == 0 || changed > d.spec.count)
    return Corrupt("payload declares " + std::to_string(changed) + " changes in " + std::to_string(d.spec.count) + " elements");
  if (val_raw != changed * w) return Corrupt("payload value section size disagrees with its change count");
  if (block_log2 < 3 || block_log2 > 31) return Corrupt("payload location block size out of range");
  if (loc_raw > MaxLocationBytes(d.spec.count, changed, block_log2)) return Corrupt("payload location section too large");
  const uint64_t body = p.size() - kPayloadHeaderBytes - kPayloadTrailerBytes;
  if (loc_stored > body || val_stored != body - loc_stored)
    return Corrupt("payload section sizes disagree with the payload size");

  auto loc_bytes = p.subspan(kPayloadHeaderBytes, loc_stored);
  auto val_bytes = p.subspan(kPayloadHeaderBytes + loc_stored, val_stored);
  std::vector<uint8_t> loc, planes;
  DCR_RETURN_IF_ERROR(DecompressSection(static_cast<SectionCodec>(h[kOffLocCodec]), loc_bytes, loc_raw, &loc)
                          .WithContext("location section"));
  DCR_RETURN_IF_ERROR(DecompressSection(static_cast<SectionCodec>(h[kOffValCodec]), val_bytes, val_raw, &planes)
                          .WithContext("value section"));
  d.changes.width = w;
  DCR_RETURN_IF_ERROR(DecodeLocations(loc, d.spec.count, block_log2, changed, &d.changes.positions));
  FromBytePlanes(planes, w, &d.changes.values);
  return Status::Ok();
}

Status ApplyChunk(const DecodedChunk& chunk, std::span<uint8_t> tensor) {
  const uint32_t w = chunk.changes.width;
  if (tensor.size() % w != 0 || chunk.spec.start + chunk.spec.count > tensor.size() / w)
    return Corrupt("chunk [" + std::to_string(chunk.spec.start) + ", +" + std::to_string(chunk.spec.count) +
                   ") lies outside a tensor of " + std::to_string(tensor.size() / w) + " elements");
  uint8_t* base = tensor.data() + chunk.spec.start * w;
  const uint8_t* vals = chunk.changes.values.data();
  const bool is_xor = chunk.spec.kind == ValueKind::kXor;
  for (size_t k = 0; k < chunk.changes.size(); ++k) {
    uint8_t* dst = base + uint64_t{chunk.changes.positions[k]} * w;
    const uint8_t* v = vals + k * w;
    if (is_xor) {
      for (uint32_t b = 0; b < w; ++b) dst[b] ^= v[b];
    } else {
      std::memcpy(dst, v, w);
    }
  }
  return Status::Ok();
}

}  // namespace dcr
