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
// exactly; deterministic. The same as FitBandsToCounts of the counts of all segments.
FittedBands FitContextBands(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions);

// What the fit works from, per class value: populations (sampled, scaled by the stride) and
// changes, and the elements of the segments counted. Counts of disjoint segment ranges add up to
// the counts of their union.
struct FitCounts {
  std::array<uint64_t, 256> population{}, changes{};
  uint64_t elements = 0;
  void Add(const FitCounts& other) {
    for (size_t c = 0; c < population.size(); ++c) population[c] += other.population[c], changes[c] += other.changes[c];
    elements += other.elements;
  }
};

// The sampling stride of a payload of `elements` elements (every segment is sampled with it):
// every 8th element, or a power-of-two stride giving about 32 Ki samples in larger payloads.
uint64_t FitSampleStride(uint64_t elements);
inline uint64_t FitSampleStride(std::span<const ContextSegment> segs) { return FitSampleStride(TotalElements(segs)); }

// Counts segments for the fit one at a time, with one sampling stride, so that a segment can be
// counted right after it is diffed, while its old bits are still in cache. 32-bit counters in
// four interleaved histograms (neighbouring elements mostly share a class, and increments of one
// counter in a row would wait on each other's stores), folded into 64-bit totals by AddTo, or
// before 2^31 elements could overflow them.
class FitCounter {
 public:
  explicit FitCounter(uint64_t stride) : stride_(stride) {}
  uint64_t stride() const { return stride_; }
  // Counts one segment: its elements at multiples of the stride, and its changed positions
  // (ascending, relative to the segment).
  void Count(const ContextSegment& seg, std::span<const uint32_t> positions);
  // The same counts in two steps, for a caller that has the changes' old bits at hand (the
  // diff's runs, DiffChunk::old_bits): the changes from their old bits (width bytes each, back
  // to back), run by run, then the segment's sampled elements. Reading the old bits where the
  // diff left them, in cache, instead of gathering them from the segment again.
  void CountChangedOldBits(DType dtype, std::span<const uint8_t> old_bits);
  void CountPopulation(const ContextSegment& seg);
  // Adds everything counted since the last AddTo to *counts, and clears it.
  void AddTo(FitCounts* counts);

 private:
  using Interleaved = std::array<uint32_t, 4 * 256>;
  void Fold();
  // Before counting n more elements or changes: folds first if a counter could pass 2^31.
  void MakeRoom(uint64_t n);
  uint64_t stride_;
  Interleaved pop4_{}, chg4_{};
  // Elements and changes counted since the last fold: no counter has grown by more.
  uint64_t unfolded_ = 0;
  FitCounts folded_;
};

// Adds the counts of every segment to *counts.
void CountFitClasses(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                     uint64_t stride, FitCounts* counts);

// The fit of FitContextBands, given the counts of all the payload's segments.
FittedBands FitBandsToCounts(const FitCounts& counts);

// The estimate of the code size in bits that FitBandsToCounts minimises, for `bands` (each band's
// binary entropy of "changed" over its classes' populations, its Rice parameter and table entry;
// bands without present classes count nothing). Where at most 48 class values are present the fit
// is exact: no contiguous banding of them into at most kMaxContextBands bands estimates less.
double BandFitEstimate(const FitCounts& counts, const ContextBands& bands);

}  // namespace dcr
