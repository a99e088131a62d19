// Test support: payloads written by hand, byte by byte as docs/format.md §2 lays them out, without
// the encoder, so that tests can craft what the encoder never writes. Test-only header.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/payload_codec.h"

namespace dcr {
namespace {

// Header field offsets (docs/format.md §2).
enum : size_t {
  kMagic = 0, kVersion = 4, kMode = 6, kBlockLog2 = 7, kTransfer = 8, kProducer = 16, kSequence = 20,
  kSegments = 24, kTableLen = 28, kLocCodec = 32, kValCodec = 33, kReserved16 = 34, kReserved32 = 36,
  kLocRaw = 40, kLocStored = 48, kValRaw = 56, kValStored = 64,
};
static_assert(kValStored + 8 == kPayloadHeaderBytes);

// Recomputes the checksum in the last 8 bytes.
[[maybe_unused]] void Resign(std::vector<uint8_t>& p) { StoreLe(p.data() + p.size() - 8, XXH3_64bits(p.data(), p.size() - 8), 8); }

// One segment table entry; `dtype_code_override` (when not 0xff) replaces the dtype's code.
[[maybe_unused]] std::vector<uint8_t> Seg(DType dtype, uint8_t kind, uint64_t tensor, uint64_t start, uint64_t count, uint64_t n,
                                          uint8_t dtype_code_override = 0xff) {
  std::vector<uint8_t> t = {dtype_code_override == 0xff ? DTypeCode(dtype) : dtype_code_override, kind};
  PutVarint(t, tensor);
  PutVarint(t, start);
  PutVarint(t, count);
  PutVarint(t, n);
  return t;
}
[[maybe_unused]] std::vector<uint8_t> Seg(DType dtype, ValueKind kind, uint64_t tensor, uint64_t start, uint64_t count, uint64_t n) {
  return Seg(dtype, static_cast<uint8_t>(kind), tensor, start, count, n);
}

[[maybe_unused]] std::vector<uint8_t> Cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A payload of `mode` with the given table and raw sections (values as raw byte planes), transfer
// 5, producer 0, sequence 0, checksum included.
[[maybe_unused]] std::vector<uint8_t> CraftPayload(CodecMode mode, int block_log2, uint32_t segments,
                                                   const std::vector<uint8_t>& table, const std::vector<uint8_t>& loc,
                                                   const std::vector<uint8_t>& val) {
  std::vector<uint8_t> p(kPayloadHeaderBytes, 0);
  StoreLe(p.data() + kMagic, kPayloadMagic, 4);
  StoreLe(p.data() + kVersion, kPayloadFormatVersion, 2);
  p[kMode] = static_cast<uint8_t>(mode);
  p[kBlockLog2] = static_cast<uint8_t>(block_log2);
  StoreLe(p.data() + kTransfer, 5, 8);
  StoreLe(p.data() + kSegments, segments, 4);
  StoreLe(p.data() + kTableLen, table.size(), 4);
  p[kValCodec] = static_cast<uint8_t>(ValueCodec::kPlanesRaw);
  StoreLe(p.data() + kLocRaw, loc.size(), 8);
  StoreLe(p.data() + kLocStored, loc.size(), 8);
  StoreLe(p.data() + kValRaw, val.size(), 8);
  StoreLe(p.data() + kValStored, val.size(), 8);
  p.insert(p.end(), table.begin(), table.end());
  p.insert(p.end(), loc.begin(), loc.end());
  p.insert(p.end(), val.begin(), val.end());
  p.resize(p.size() + 8);
  Resign(p);
  return p;
}

}  // namespace
}  // namespace dcr
