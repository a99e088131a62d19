#include "codec/band_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace dcr {
namespace {

constexpr int kClassValues = 256;
// Fitting sees every 8th element's class (plus every change's): enough to place thresholds, and
// it keeps the fit a small part of the O(dense) work.
constexpr uint64_t kSampleStride = 8;
// The fit works on at most this many groups of adjacent present class values.
constexpr size_t kMaxFitUnits = 48;

// Estimated bits of coding c changes among p elements as one band: the binary entropy, plus the
// band's table entry and Rice parameter.
double BandBits(double p, double c) {
  if (c <= 0) return 8;
  if (c >= p) return c + 24;
  const double q = c / p;
  return -p * (q * std::log2(q) + (1 - q) * std::log2(1 - q)) + 24;
}

template <typename U>
void CountClasses(const ContextSegment& seg, std::span<const uint32_t> positions, std::array<uint64_t, kClassValues>* pop,
                  std::array<uint64_t, kClassValues>* chg) {
  const ContextClassFn f = ContextClassFor(seg.dtype);
  const uint8_t* p = seg.base.data();
  const uint64_t n = seg.base.size() / sizeof(U);
  auto class_at = [&](uint64_t i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    return static_cast<size_t>((static_cast<uint64_t>(v) >> f.shift) & f.mask);
  };
  for (uint64_t i = 0; i < n; i += kSampleStride) (*pop)[class_at(i)] += kSampleStride;
  for (uint32_t i : positions) ++(*chg)[class_at(i)];
}

}  // namespace

FittedBands FitContextBands(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions) {
  std::array<uint64_t, kClassValues> pop{}, chg{};
  for (size_t s = 0; s < segs.size(); ++s) {
    switch (DTypeWidth(segs[s].dtype)) {
      case 1: CountClasses<uint8_t>(segs[s], positions[s], &pop, &chg); break;
      case 2: CountClasses<uint16_t>(segs[s], positions[s], &pop, &chg); break;
      case 4: CountClasses<uint32_t>(segs[s], positions[s], &pop, &chg); break;
      default: CountClasses<uint64_t>(segs[s], positions[s], &pop, &chg); break;
    }
  }
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
  cost[0][0] = 0;
  for (size_t k = 1; k <= static_cast<size_t>(kmax); ++k)
    for (size_t j = 1; j <= m; ++j)
      for (size_t i = k - 1; i < j; ++i) {
        if (cost[k - 1][i] >= kInf) continue;
        const double v = cost[k - 1][i] + BandBits(sp[j] - sp[i], sc[j] - sc[i]) + 8;
        if (v < cost[k][j]) cost[k][j] = v, from[k][j] = i;
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
