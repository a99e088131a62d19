// Value coding: the values of all segments of a payload (XOR masks or new bits), in order.
// Three stored forms, the encoder keeping the smallest (docs/format.md §2.3):
//  - byte planes (all byte-0s, then all byte-1s, ...), raw or zstd-compressed: generic;
//  - symbol Huffman: values below 4095 are symbols of one Huffman code, larger ones escape to
//    raw bytes. XOR masks of neighbouring floats are mostly 0x1, 0x3, 0x7, ..., so this reaches the
//    order-0 entropy (~2.6 bits per BF16 change) where zstd spends ~3.5.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dcr {

enum class ValueCodec : uint8_t { kPlanesRaw = 0, kPlanesZstd = 1, kHuffman = 2 };

// One segment's values: count × width bytes, packed little-endian.
struct ValueRun {
  uint32_t width = 0;
  uint64_t count = 0;
  std::span<const uint8_t> bytes;  // encoder input only
};

// Appends the stored form of `runs` to `out` and returns its codec. Deterministic: the same
// bytes with any thread count. With threads >= 2 and at least kConcurrentValuesMin values, a
// helper thread may count and write half of the symbols.
inline constexpr uint64_t kConcurrentValuesMin = 16384;
ValueCodec EncodeValues(std::span<const ValueRun> runs, int zstd_level, std::vector<uint8_t>* out, int threads = 1);

// Decodes `stored` into outs[i] (resized to runs[i].count × width). kCorrupt on any
// inconsistency; never reads outside `stored`. Memory use is bounded by Σ count × width.
Status DecodeValues(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                    std::span<std::vector<uint8_t>* const> outs);

// Byte-plane transposition, exposed for tests: values (n × width) -> width planes of n bytes.
void ToBytePlanes(std::span<const uint8_t> values, uint32_t width, std::vector<uint8_t>* planes);
void FromBytePlanes(std::span<const uint8_t> planes, uint32_t width, std::vector<uint8_t>* values);

}  // namespace dcr
