// The entropy stage: a payload section is stored raw or zstd-compressed, whichever is smaller.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dcr {

enum class SectionCodec : uint8_t { kRaw = 0, kZstd = 1 };

inline constexpr int kDefaultZstdLevel = 3;

// Appends the stored form of `raw` to `out` and returns the codec chosen. Deterministic.
SectionCodec CompressSection(std::span<const uint8_t> raw, int zstd_level, std::vector<uint8_t>* out);

// Restores exactly `raw_len` bytes into `out` (resized); kCorrupt if `stored` does not decode to
// exactly that many bytes. Memory used is bounded by raw_len, which the caller must bound.
Status DecompressSection(SectionCodec codec, std::span<const uint8_t> stored, uint64_t raw_len,
                         std::vector<uint8_t>* out);

}  // namespace dcr
