// Band fitting for banded context mode (band_context.h): where to cut the class axis.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "codec/context_coding.h"

namespace dcr {

inline constexpr int kMaxContextBands = 8;

// At most kMaxContextBands contiguous bands of class values: band(c) = #{i < k - 1 : c >= t[i]},
// with 1 <= t[0] < t[1] < ... < t[k - 2].
struct ContextBands {
  int k = 1;
  std::array<uint8_t, kMaxContextBands - 1> t{};
  int BandOf(uint32_t c) const {
    int b = 0;
    for (int i = 0; i + 1 < k; ++i) b += c >= t[static_cast<size_t>(i)];
    return b;
  }
};

// Bands and how many of the fitted changes fall in each.
struct FittedBands {
  ContextBands bands;
  std::array<uint64_t, kMaxContextBands> changes{};
};

// The bands that minimise an estimate of the code size for these changes: contiguous groups of
// class values with the binary entropy of "changed" in each, plus each band's table cost.
// Populations are sampled (every 8th element, sparser in large payloads) and changes counted
// exactly; deterministic.
FittedBands FitContextBands(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions);

}  // namespace dcr
