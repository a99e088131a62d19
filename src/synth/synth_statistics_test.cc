// The synthetic trajectory is a stand-in for real training in benchmarks and the demo, so its
// per-step statistics must resemble the real BF16 trajectories (shared/data/trajectories/README.md):
// change rates of 0.41-0.47 %, 1.34-1.56 % and 4.49-5.06 % at learning rates 1e-6, 3e-6 and 1e-5;
// XOR masks 0x1 in ~45 % and 0x1/0x3/0x7/0xf in ~86 % of changes; small-magnitude weights (small
// exponents) changing far more often than large ones. The bands below allow the synthetic model
// to differ by up to ~1.6x in rate; the numbers are deterministic for the fixed seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "synth/trajectory.h"

namespace dcr {
namespace {

struct StepStats {
  double change_rate = 0;
  double xor_one = 0;        // share of changes whose XOR mask is 0x1
  double xor_low_runs = 0;   // share with mask 0x1, 0x3, 0x7 or 0xf
  double small_vs_large = 0; // change rate of |w| < 0.01 over that of |w| > 0.05
};

StepStats MeasureOneStepUncached(double lr) {
  SynthTrajectory traj(SynthModelConfig{}, {7, lr});
  std::vector<std::vector<uint16_t>> before, after;
  traj.Snapshot(&before);
  traj.Step();
  traj.Snapshot(&after);
  uint64_t n = 0, changed = 0, one = 0, runs = 0, small = 0, small_changed = 0, large = 0, large_changed = 0;
  for (size_t t = 0; t < before.size(); ++t)
    for (size_t i = 0; i < before[t].size(); ++i) {
      const uint16_t x = before[t][i] ^ after[t][i];
      const float w = std::fabs(Bf16ToFp32(before[t][i]));
      ++n;
      if (w < 0.01f) ++small, small_changed += x != 0;
      if (w > 0.05f) ++large, large_changed += x != 0;
      if (x == 0) continue;
      ++changed;
      one += x == 0x1;
      runs += x == 0x1 || x == 0x3 || x == 0x7 || x == 0xf;
    }
  StepStats s;
  s.change_rate = static_cast<double>(changed) / static_cast<double>(n);
  s.xor_one = static_cast<double>(one) / static_cast<double>(changed);
  s.xor_low_runs = static_cast<double>(runs) / static_cast<double>(changed);
  s.small_vs_large = (static_cast<double>(small_changed) / static_cast<double>(small)) /
                     (static_cast<double>(large_changed) / static_cast<double>(large));
  return s;
}

// Each measurement trains a 2.4M-parameter model; tests share them.
StepStats MeasureOneStep(double lr) {
  static std::map<double, StepStats> cache;
  auto it = cache.find(lr);
  if (it == cache.end()) it = cache.emplace(lr, MeasureOneStepUncached(lr)).first;
  return it->second;
}

struct Band {
  double lr, rate_lo, rate_hi;
};

class SynthStatistics : public ::testing::TestWithParam<Band> {};

TEST_P(SynthStatistics, OneStepResemblesTheRealTrajectories) {
  const Band b = GetParam();
  const StepStats s = MeasureOneStep(b.lr);
  EXPECT_GE(s.change_rate, b.rate_lo) << "lr " << b.lr;
  EXPECT_LE(s.change_rate, b.rate_hi) << "lr " << b.lr;
  EXPECT_GT(s.xor_one, 0.35);
  EXPECT_LT(s.xor_one, 0.60);
  EXPECT_GT(s.xor_low_runs, 0.75);
  EXPECT_GT(s.small_vs_large, 3.0) << "small weights must change far more often than large ones";
}

// Real: 0.41-0.47 %, 1.34-1.56 %, 4.49-5.06 %.
INSTANTIATE_TEST_SUITE_P(LearningRates, SynthStatistics,
                         ::testing::Values(Band{1e-6, 0.0026, 0.0075}, Band{3e-6, 0.0084, 0.025},
                                           Band{1e-5, 0.028, 0.080}));

TEST(SynthStatistics, ChangeRateGrowsWithTheLearningRate) {
  const double a = MeasureOneStep(1e-6).change_rate, b = MeasureOneStep(3e-6).change_rate,
               c = MeasureOneStep(1e-5).change_rate;
  EXPECT_GT(b, 1.8 * a);
  EXPECT_GT(c, 1.8 * b);
}

}  // namespace
}  // namespace dcr
