// Banded context-mode location coding (payload codec mode 2, docs/format.md §2.7). Both sides hold
// the old bits, and the exponent of an element's old value predicts whether it changes (one BF16
// ulp is smaller for small magnitudes). The encoder cuts the class axis (the exponent field,
// ContextClassFor) into at most 8 contiguous bands fitted to the payload; each band's elements,
// taken in payload order across all segments, form a sequence in which the changed ones are
// Rice-coded by gap with a parameter fitted to that band.
//
// On the real trajectories deltas with fitted bands are within 0.2 % of their size with one class
// per exponent value (mode 1, context_coding.h), and both directions are several times faster:
// band membership of 64 elements is a few SIMD compares and popcounts (simd_masks.h), so neither
// side visits unchanged elements one by one. The O(dense) walk over the old bits still bounds
// decoding (docs/format.md §2.7).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "codec/band_fit.h"
#include "codec/context_coding.h"

namespace dcr {

// Appends the banded code of the changed positions (positions[i] ascending, relative to segment
// i, at least one in all) to `out`. Deterministic: a function of the segments' bytes only.
void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out);

// Inverse: fills *positions[i] with exactly expected[i] ascending positions of segment i, or fails
// with kCorrupt. Never reads outside `in` or the segments' base bytes; memory is bounded by the
// sum of `expected`.
Status DecodeBandedLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                             std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions);

// Slots past a segment's last position that the decoder's walk may write (dropped before
// DecodeBandedLocations returns).
inline constexpr size_t kPositionSlack = 3;

// For tests: decode without BMI2 pdep even where it is fast (the path of other CPUs), or not.
void ForcePortableBitDeposit(bool portable);

}  // namespace dcr
