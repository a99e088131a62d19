// Values as steps (value_steps.h): the zigzag map at every width, the encoder's conversion on
// every SIMD target against a scalar model (wrap-around, sign flips and every length's tail),
// the decoder's conversions back, and the apply operations that add and take back differences.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec/apply_changes.h"
#include "codec/simd_masks.h"
#include "codec/value_steps.h"

namespace dcr {
namespace {

template <typename U>
U LoadAt(const std::vector<uint8_t>& v, size_t i) {
  U x;
  std::memcpy(&x, v.data() + i * sizeof(U), sizeof(U));
  return x;
}

template <typename U>
void StoreAt(std::vector<uint8_t>& v, size_t i, U x) {
  std::memcpy(v.data() + i * sizeof(U), &x, sizeof(U));
}

TEST(ValueSteps, ZigzagMapsSmallDifferencesToSmallStepsAndBackAtEveryWidth) {
  EXPECT_EQ(ZigzagStep<uint16_t>(0xffff), 1);  // -1
  EXPECT_EQ(ZigzagStep<uint16_t>(1), 2);
  EXPECT_EQ(ZigzagStep<uint16_t>(0xfffe), 3);  // -2
  EXPECT_EQ(ZigzagStep<uint16_t>(2), 4);
  EXPECT_EQ(ZigzagStep<uint16_t>(0x8000), 0xffff);  // the most negative difference
  EXPECT_EQ(ZigzagStep<uint16_t>(0x7fff), 0xfffe);
  EXPECT_EQ(ZigzagStep<uint8_t>(0xff), 1);
  EXPECT_EQ(ZigzagStep<uint32_t>(0xffffffffu), 1u);
  EXPECT_EQ(ZigzagStep<uint64_t>(~uint64_t{0}), 1u);
  EXPECT_EQ(ZigzagStep<uint64_t>(uint64_t{1} << 63), ~uint64_t{0});
  for (uint32_t d = 0; d < 0x10000; ++d) {
    const auto z = ZigzagStep<uint16_t>(static_cast<uint16_t>(d));
    ASSERT_EQ(UnzigzagStep<uint16_t>(z), d);
  }
  for (uint32_t d = 0; d < 0x100; ++d) ASSERT_EQ(UnzigzagStep<uint8_t>(ZigzagStep<uint8_t>(static_cast<uint8_t>(d))), d);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t d = rng();
    ASSERT_EQ(UnzigzagStep<uint64_t>(ZigzagStep<uint64_t>(d)), d);
    ASSERT_EQ(UnzigzagStep<uint32_t>(ZigzagStep<uint32_t>(static_cast<uint32_t>(d))), static_cast<uint32_t>(d));
  }
}

// n changes of type U: old bits, and new bits a few units away (wrapping at both ends), far
// away, or with the sign flipped; values as `kind` gives them.
template <typename U>
void MakeChanges(size_t n, ValueKind kind, std::mt19937_64& rng, std::vector<uint8_t>* old, std::vector<uint8_t>* next,
                 std::vector<uint8_t>* values) {
  old->assign(n * sizeof(U), 0), next->assign(n * sizeof(U), 0), values->assign(n * sizeof(U), 0);
  for (size_t i = 0; i < n; ++i) {
    U o = static_cast<U>(rng());
    if (i % 17 == 0) o = std::numeric_limits<U>::max() - static_cast<U>(i % 3);  // wraps upwards
    if (i % 19 == 0) o = static_cast<U>(i % 3);                                   // wraps downwards
    U x;
    switch (rng() % 4) {
      case 0: x = static_cast<U>(o + 1 + rng() % 4); break;
      case 1: x = static_cast<U>(o - 1 - rng() % 4); break;
      case 2: x = static_cast<U>(o ^ (U{1} << (sizeof(U) * 8 - 1))); break;
      default: x = static_cast<U>(rng()); break;
    }
    if (x == o) x = static_cast<U>(o + 1);
    StoreAt<U>(*old, i, o), StoreAt<U>(*next, i, x);
    StoreAt<U>(*values, i, kind == ValueKind::kXor ? static_cast<U>(o ^ x) : x);
  }
}

template <typename U>
void ExpectStepsRoundTrip(size_t n, ValueKind kind, const std::string& what) {
  std::mt19937_64 rng(n * 31 + sizeof(U));
  std::vector<uint8_t> old, next, values;
  MakeChanges<U>(n, kind, rng, &old, &next, &values);
  std::vector<uint8_t> steps = values;
  ValuesToSteps(old, kind, sizeof(U), steps);
  for (size_t i = 0; i < n; ++i) {
    const U want = ZigzagStep<U>(static_cast<U>(LoadAt<U>(next, i) - LoadAt<U>(old, i)));
    ASSERT_EQ(LoadAt<U>(steps, i), want) << what << ", change " << i;
  }
  // Back: steps -> differences -> values of the kind, the old bits read at positions.
  std::vector<uint8_t> differences = steps;
  StepsToDifferences(sizeof(U), differences);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(LoadAt<U>(differences, i), static_cast<U>(LoadAt<U>(next, i) - LoadAt<U>(old, i))) << what << ", " << i;
  std::vector<uint32_t> positions(n);
  std::vector<uint8_t> base(2 * n * sizeof(U), 0xa5);  // change i's element at 2 i
  for (size_t i = 0; i < n; ++i) {
    positions[i] = static_cast<uint32_t>(2 * i);
    std::memcpy(base.data() + 2 * i * sizeof(U), old.data() + i * sizeof(U), sizeof(U));
  }
  std::vector<uint8_t> back = differences;
  DifferencesToValues(base, positions, kind, sizeof(U), back);
  EXPECT_EQ(back, values) << what;
  // Applied: adding the differences gives the new bits, subtracting them the old ones again.
  std::vector<uint8_t> applied = base;
  ApplyChangeRun(applied.data(), sizeof(U), ApplyOp::kAdd, n % 2 == 0, differences.data(), positions.data(), 0, n);
  for (size_t i = 0; i < n; ++i) {
    U now;
    std::memcpy(&now, applied.data() + 2 * i * sizeof(U), sizeof(U));
    ASSERT_EQ(now, LoadAt<U>(next, i)) << what << ", change " << i;
  }
  ApplyChangeRun(applied.data(), sizeof(U), ApplyOp::kSubtract, false, differences.data(), positions.data(), 0, n);
  EXPECT_EQ(applied, base) << what;
}

TEST(ValueSteps, ValuesBecomeStepsAndBackOnEverySimdTargetForEveryWidthKindAndLength) {
  ForEachSimdTarget([](const std::string& target) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{32}, size_t{33}, size_t{129}, size_t{1000}})
      for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
        const std::string what = target + ", " + std::to_string(n) + " changes, " +
                                 (kind == ValueKind::kXor ? "xor" : "overwrite");
        ExpectStepsRoundTrip<uint8_t>(n, kind, what + ", 1 byte");
        ExpectStepsRoundTrip<uint16_t>(n, kind, what + ", 2 bytes");
        ExpectStepsRoundTrip<uint32_t>(n, kind, what + ", 4 bytes");
        ExpectStepsRoundTrip<uint64_t>(n, kind, what + ", 8 bytes");
        if (testing::Test::HasFailure()) return;
      }
  });
}

TEST(ApplyChangeRun, StoresXorsAddsAndSubtractsAtEveryWidth) {
  std::vector<uint8_t> base = {10, 20, 30, 40, 50, 60, 70, 80};
  const std::vector<uint8_t> vals = {1, 2, 3, 4};
  const std::vector<uint32_t> pos = {0, 2, 5, 7};
  auto run = [&](ApplyOp op) {
    std::vector<uint8_t> b = base;
    ApplyChangeRun(b.data(), 1, op, false, vals.data(), pos.data(), 1, 4);  // changes 1..3 only
    return b;
  };
  EXPECT_EQ(run(ApplyOp::kStore), (std::vector<uint8_t>{10, 20, 2, 40, 50, 3, 70, 4}));
  EXPECT_EQ(run(ApplyOp::kXor), (std::vector<uint8_t>{10, 20, 30 ^ 2, 40, 50, 60 ^ 3, 70, 80 ^ 4}));
  EXPECT_EQ(run(ApplyOp::kAdd), (std::vector<uint8_t>{10, 20, 32, 40, 50, 63, 70, 84}));
  EXPECT_EQ(run(ApplyOp::kSubtract), (std::vector<uint8_t>{10, 20, 28, 40, 50, 57, 70, 76}));
  // Wrapping at the width: 0xffff + 2 = 1, 0 - 1 = 0xffff.
  std::vector<uint16_t> wide = {0xffff, 0};
  const std::vector<uint16_t> two = {2, 1};
  const std::vector<uint32_t> at = {0, 1};
  ApplyChangeRun(reinterpret_cast<uint8_t*>(wide.data()), 2, ApplyOp::kAdd, false,
                 reinterpret_cast<const uint8_t*>(two.data()), at.data(), 0, 1);
  ApplyChangeRun(reinterpret_cast<uint8_t*>(wide.data()), 2, ApplyOp::kSubtract, false,
                 reinterpret_cast<const uint8_t*>(two.data()), at.data(), 1, 2);
  EXPECT_EQ(wide, (std::vector<uint16_t>{1, 0xffff}));
}

}  // namespace
}  // namespace dcr
