// The entropy stage: a payload section is stored raw or zstd-compressed, whichever is smaller
// (zstd tried at the caller's level only where a fast probe shrinks the section).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dcr {

enum class SectionCodec : uint8_t { kRaw = 0, kZstd = 1 };

inline constexpr int kDefaultZstdLevel = 3;

// From kZstdProbeMinBytes, a section is first compressed at kZstdProbeLevel: if that does not
// shrink it, it is stored raw, else compressed at the caller's level.
inline constexpr size_t kZstdProbeMinBytes = 4096;
inline constexpr int kZstdProbeLevel = -1;

// Appends the stored form of `raw` to `out` and returns the codec chosen: zstd at `zstd_level`
// if that is smaller than raw (sections under 64 bytes, and from kZstdProbeMinBytes those the
// probe cannot shrink, are raw without trying). Deterministic.
SectionCodec CompressSection(std::span<const uint8_t> raw, int zstd_level, std::vector<uint8_t>* out);

// The section's `raw_len` raw bytes, with DecompressSection's checks: `stored` itself when it is
// raw (no copy), else decompressed into *scratch. The view lives as long as `stored` or
// *scratch, whichever it points into.
Result<std::span<const uint8_t>> SectionBytes(SectionCodec codec, std::span<const uint8_t> stored, uint64_t raw_len,
                                              std::vector<uint8_t>* scratch);

// Restores exactly `raw_len` bytes into `out` (resized); kCorrupt if `stored` does not decode to
// exactly that many bytes. Memory used is bounded by raw_len, which the caller must bound.
Status DecompressSection(SectionCodec codec, std::span<const uint8_t> stored, uint64_t raw_len,
                         std::vector<uint8_t>* out);

}  // namespace dcr
