#include "codec/band_fit.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace dcr {
namespace {

constexpr int kClassValues = 256;
// Fitting sees every 8th element's class (plus every change's): enough to place thresholds, and
// it keeps the fit a small part of the O(dense) work. Larger payloads are sampled more sparsely
// (about kMinSamples elements at a power-of-two stride) so that the fit does not read every cache
// line of the old bits once more.
constexpr uint64_t kSampleStride = 8;
constexpr uint64_t kMinSamples = 1 << 15;

// The fit works on at most this many groups of adjacent present class values.
constexpr size_t kMaxFitUnits = 48;

// Bits the fit charges per band for its threshold in the section's table.
constexpr double kBandEntryBits = 8;

// Estimated bits of coding c changes among p elements as one band: the binary entropy, plus the
// band's table entry and Rice parameter.
double BandBits(double p, double c) {
  if (c <= 0) return 8;
  if (c >= p) return c + 24;
  const double q = c / p;
  return -p * (q * std::log2(q) + (1 - q) * std::log2(1 - q)) + 24;
}

using Interleaved = std::array<uint32_t, 4 * kClassValues>;

// The class of element i of `p` (elements of type U).
template <typename U>
size_t ClassAt(const uint8_t* p, const ContextClassFn& f, uint64_t i) {
  U v;
  std::memcpy(&v, p + i * sizeof(U), sizeof(U));
  return static_cast<size_t>((static_cast<uint64_t>(v) >> f.shift) & f.mask);
}

// The classes of elements index(0..n-1) of `p` into the interleaved histogram.
template <typename U, typename Index>
void CountInto(const uint8_t* p, const ContextClassFn& f, uint64_t n, Index&& index, Interleaved* h) {
  uint64_t k = 0;
  for (; k + 4 <= n; k += 4)
    #pragma GCC unroll 4
    for (size_t lane = 0; lane < 4; ++lane) ++(*h)[lane * kClassValues + ClassAt<U>(p, f, index(k + lane))];
  for (; k < n; ++k) ++(*h)[ClassAt<U>(p, f, index(k))];
}

template <typename U>
void CountPopulationOf(const ContextSegment& seg, uint64_t stride, Interleaved* pop) {
  const uint64_t n = seg.base.size() / sizeof(U);
  CountInto<U>(seg.base.data(), ContextClassFor(seg.dtype), (n + stride - 1) / stride, [&](uint64_t k) { return k * stride; },
               pop);
}

template <typename U>
void CountChangesAt(const ContextSegment& seg, std::span<const uint32_t> positions, Interleaved* chg) {
  CountInto<U>(seg.base.data(), ContextClassFor(seg.dtype), positions.size(), [&](uint64_t k) { return positions[k]; },
               chg);
}

template <typename U>
void CountOldBits(DType dtype, std::span<const uint8_t> old_bits, Interleaved* chg) {
  CountInto<U>(old_bits.data(), ContextClassFor(dtype), old_bits.size() / sizeof(U), [](uint64_t k) { return k; }, chg);
}

// Calls fn.template operator()<U>() for the unsigned type U of the dtype's width.
template <typename Fn>
void WithWidth(DType dtype, Fn&& fn) {
  switch (DTypeWidth(dtype)) {
    case 1: fn.template operator()<uint8_t>(); break;
    case 2: fn.template operator()<uint16_t>(); break;
    case 4: fn.template operator()<uint32_t>(); break;
    default: fn.template operator()<uint64_t>(); break;
  }
}

}  // namespace

uint64_t FitSampleStride(uint64_t elements) {
  return std::max(kSampleStride, std::bit_floor(std::max<uint64_t>(elements / kMinSamples, 1)));
}

void FitCounter::Fold() {
  for (size_t c = 0; c < kClassValues; ++c) {
    folded_.population[c] +=
        stride_ * (uint64_t{pop4_[c]} + pop4_[kClassValues + c] + pop4_[2 * kClassValues + c] + pop4_[3 * kClassValues + c]);
    folded_.changes[c] += uint64_t{chg4_[c]} + chg4_[kClassValues + c] + chg4_[2 * kClassValues + c] + chg4_[3 * kClassValues + c];
  }
  pop4_.fill(0);
  chg4_.fill(0);
  unfolded_ = 0;
}

void FitCounter::MakeRoom(uint64_t n) {
  if (unfolded_ + n > (uint64_t{1} << 31)) Fold();
  unfolded_ += n;
}

void FitCounter::Count(const ContextSegment& seg, std::span<const uint32_t> positions) {
  CountPopulation(seg);
  MakeRoom(positions.size());
  WithWidth(seg.dtype, [&]<typename U>() { CountChangesAt<U>(seg, positions, &chg4_); });
}

void FitCounter::CountChangedOldBits(DType dtype, std::span<const uint8_t> old_bits) {
  MakeRoom(old_bits.size() / DTypeWidth(dtype));
  WithWidth(dtype, [&]<typename U>() { CountOldBits<U>(dtype, old_bits, &chg4_); });
}

void FitCounter::CountPopulation(const ContextSegment& seg) {
  const uint64_t n = seg.elements();
  MakeRoom(n);
  folded_.elements += n;
  WithWidth(seg.dtype, [&]<typename U>() { CountPopulationOf<U>(seg, stride_, &pop4_); });
}

void FitCounter::AddTo(FitCounts* counts) {
  Fold();
  counts->Add(folded_);
  folded_ = FitCounts{};
}

void CountFitClasses(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                     uint64_t stride, FitCounts* counts) {
  FitCounter counter(stride);
  for (size_t s = 0; s < segs.size(); ++s) counter.Count(segs[s], positions[s]);
  counter.AddTo(counts);
}

FittedBands FitContextBands(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions) {
  FitCounts counts;
  CountFitClasses(segs, positions, FitSampleStride(segs), &counts);
  return FitBandsToCounts(counts);
}

double BandFitEstimate(const FitCounts& counts, const ContextBands& bands) {
  std::array<double, kMaxContextBands> p{}, c{};
  std::array<bool, kMaxContextBands> present{};
  for (int v = 0; v < kClassValues; ++v) {
    const uint64_t pop = counts.population[static_cast<size_t>(v)], chg = counts.changes[static_cast<size_t>(v)];
    if (std::max(pop, chg) == 0) continue;
    const size_t b = static_cast<size_t>(bands.BandOf(static_cast<uint32_t>(v)));
    p[b] += static_cast<double>(std::max(pop, chg)), c[b] += static_cast<double>(chg), present[b] = true;
  }
  double bits = 0;
  for (size_t b = 0; b < kMaxContextBands; ++b)
    if (present[b]) bits += BandBits(p[b], c[b]) + kBandEntryBits;
  return bits;
}

FittedBands FitBandsToCounts(const FitCounts& counts) {
  const std::array<uint64_t, kClassValues>& pop = counts.population;
  const std::array<uint64_t, kClassValues>& chg = counts.changes;
  std::vector<int> present;
  for (int c = 0; c < kClassValues; ++c)
    if (std::max(pop[c], chg[c]) > 0) present.push_back(c);
  FittedBands fitted;
  ContextBands& best = fitted.bands;
  auto count_changes = [&] {
    for (int c = 0; c < kClassValues; ++c) fitted.changes[static_cast<size_t>(best.BandOf(static_cast<uint32_t>(c)))] += chg[c];
    return fitted;
  };
  if (present.size() < 2) return count_changes();
  const size_t per_unit = (present.size() + kMaxFitUnits - 1) / kMaxFitUnits;
  std::vector<int> first;            // first class value of each unit
  std::vector<double> sp{0}, sc{0};  // prefix sums of population and changes over units
  for (size_t i = 0; i < present.size(); i += per_unit) {
    first.push_back(present[i]);
    double p = 0, c = 0;
    for (size_t j = i; j < std::min(present.size(), i + per_unit); ++j)
      p += static_cast<double>(std::max(pop[present[j]], chg[present[j]])), c += static_cast<double>(chg[present[j]]);
    sp.push_back(sp.back() + p);
    sc.push_back(sc.back() + c);
  }
  const size_t m = first.size();
  const int kmax = static_cast<int>(std::min<size_t>(kMaxContextBands, m));
  constexpr double kInf = 1e300;
  // cost[k][j]: best cost of units [0, j) in k bands; from[k][j]: where the last band starts.
  std::vector<std::vector<double>> cost(static_cast<size_t>(kmax) + 1, std::vector<double>(m + 1, kInf));
  std::vector<std::vector<size_t>> from(static_cast<size_t>(kmax) + 1, std::vector<size_t>(m + 1, 0));
  // band[i * (m + 1) + j]: the cost of units [i, j) as one band, shared by every band count.
  std::vector<double> band((m + 1) * (m + 1), kInf);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = i + 1; j <= m; ++j) band[i * (m + 1) + j] = BandBits(sp[j] - sp[i], sc[j] - sc[i]);
  cost[0][0] = 0;
  // The first i with the least cost, as a scan keeping strictly smaller costs finds it. An
  // unreachable i (cost kInf) adds a band's finite bits to 1e300, which stays kInf and so is never
  // taken: no test for it, and the running best in registers, not a branch per i on the stored
  // costs (the real 4.8 % pair's fit, 29 classes and 8 bands: 8.4 -> 7.7 us; two interleaved
  // scans were no faster).
  for (size_t k = 1; k <= static_cast<size_t>(kmax); ++k) {
    const double* before = cost[k - 1].data();
    for (size_t j = 1; j <= m; ++j) {
      double best = kInf;
      size_t arg = 0;
      for (size_t i = k - 1; i < j; ++i) {
        const double v = before[i] + band[i * (m + 1) + j] + kBandEntryBits;
        arg = v < best ? i : arg;
        best = v < best ? v : best;
      }
      cost[k][j] = best, from[k][j] = arg;
    }
  }
  size_t k_best = 1;
  for (size_t k = 2; k <= static_cast<size_t>(kmax); ++k)
    if (cost[k][m] < cost[k_best][m]) k_best = k;
  best.k = static_cast<int>(k_best);
  size_t j = m;
  for (size_t k = k_best; k > 1; --k) {
    j = from[k][j];
    best.t[k - 2] = static_cast<uint8_t>(first[j]);
  }
  return count_changes();
}

}  // namespace dcr
