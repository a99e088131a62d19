// The SIMD mask kernels give the same masks as a plain scalar model on every Highway target this
// build compiled and this CPU runs (each forced in turn), for every element width, run lengths
// around word and tile edges, and class functions of every float dtype.
#include "codec/simd_masks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/context_coding.h"

namespace dcr {
namespace {

uint64_t Load(const std::vector<uint8_t>& v, size_t i, uint32_t w) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + i * w, w);
  return x;
}

std::vector<uint64_t> ModelDiffer(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, uint32_t w, size_t n) {
  std::vector<uint64_t> m((n + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) m[i / 64] |= static_cast<uint64_t>(Load(a, i, w) != Load(b, i, w)) << (i % 64);
  return m;
}

std::vector<uint64_t> ModelClass(const std::vector<uint8_t>& e, uint32_t w, size_t n, ContextClassFn f,
                                 const std::vector<uint8_t>& t) {
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> m(t.size() * words, 0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t c = (Load(e, i, w) >> f.shift) & f.mask;
    for (size_t k = 0; k < t.size(); ++k) m[k * words + i / 64] |= static_cast<uint64_t>(c >= t[k]) << (i % 64);
  }
  return m;
}

// Elements with a few bits flipped, and runs of equal elements, in proportions that give both
// empty and full words.
void Fill(std::mt19937_64& rng, uint32_t w, size_t n, std::vector<uint8_t>* a, std::vector<uint8_t>* b) {
  a->resize(n * w + 16);
  for (auto& x : *a) x = static_cast<uint8_t>(rng());
  *b = *a;
  const int density = static_cast<int>(rng() % 4);  // none, sparse, half, all
  for (size_t i = 0; i < n; ++i) {
    const bool flip = density == 3 || (density == 2 && rng() % 2) || (density == 1 && rng() % 97 == 0);
    if (flip) (*b)[i * w + rng() % w] ^= static_cast<uint8_t>(1u << (rng() % 8));
  }
}

class SimdMasks : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { ForceSimdTarget(GetParam()); }
  void TearDown() override { ForceSimdTarget(0); }
};

TEST_P(SimdMasks, DifferMasksMatchTheScalarModel) {
  EXPECT_STREQ(ActiveSimdTargetName(), SimdTargetName(GetParam()));
  std::mt19937_64 rng(11);
  for (uint32_t w : {1u, 2u, 4u, 8u})
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{63}, size_t{64}, size_t{65}, size_t{200}, kMaskTileElements - 1,
                     kMaskTileElements})
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<uint8_t> a, b;
        Fill(rng, w, n, &a, &b);
        // Unaligned starts: the kernels must not assume alignment.
        const size_t off = rep % 2;
        std::vector<uint8_t> a2(a.begin() + static_cast<ptrdiff_t>(off * w), a.end()), b2(b.begin() + static_cast<ptrdiff_t>(off * w), b.end());
        const size_t m = n > off ? n - off : 0;
        std::vector<uint64_t> got((m + 63) / 64 + 1, 0xdeadbeef);
        const size_t count = DifferMasks(a2.data() + 0, b2.data() + 0, w, m, got.data());
        const auto want = ModelDiffer(a2, b2, w, m);
        got.resize(want.size());
        ASSERT_EQ(got, want) << "width " << w << " n " << m;
        size_t bits = 0;
        for (uint64_t x : want) bits += static_cast<size_t>(__builtin_popcountll(x));
        ASSERT_EQ(count, bits) << "width " << w << " n " << m;
      }
}

// The changes of `a` against `b` (n elements of w bytes) by definition: positions first + i,
// values (XOR or new bits) and old bits, each element's bytes back to back.
struct ModelChanges {
  std::vector<uint32_t> pos;
  std::vector<uint8_t> val, old;
};
ModelChanges ScalarChanges(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, uint32_t w, size_t n,
                           bool is_xor, uint32_t first) {
  ModelChanges m;
  for (size_t i = 0; i < n; ++i) {
    if (Load(a, i, w) == Load(b, i, w)) continue;
    m.pos.push_back(first + static_cast<uint32_t>(i));
    const uint64_t v = is_xor ? Load(a, i, w) ^ Load(b, i, w) : Load(b, i, w);
    for (uint32_t k = 0; k < w; ++k) m.val.push_back(static_cast<uint8_t>(v >> (8 * k)));
    m.old.insert(m.old.end(), a.begin() + i * w, a.begin() + (i + 1) * w);
  }
  return m;
}

// Output buffers of `room` entries and one guard entry past them, which must stay untouched.
struct ExtractOut {
  static constexpr uint8_t kGuard = 0xA5;
  ExtractOut(size_t room, uint32_t w) : pos(room + 1, 0xA5A5A5A5u), val((room + 1) * w, kGuard), old(val.size(), kGuard) {}
  std::vector<uint32_t> pos;
  std::vector<uint8_t> val, old;
};

// `out` holds `want` (its old bits only where asked for, else untouched), guards intact.
void ExpectExtracted(const ModelChanges& want, ExtractOut out, uint32_t w, bool with_old, const std::string& what) {
  EXPECT_EQ(out.pos.back(), 0xA5A5A5A5u) << what;
  for (uint32_t k = 0; k < w; ++k) EXPECT_EQ(out.val[out.val.size() - 1 - k], ExtractOut::kGuard) << what;
  for (uint32_t k = 0; k < w; ++k) EXPECT_EQ(out.old[out.old.size() - 1 - k], ExtractOut::kGuard) << what;
  const size_t n = want.pos.size();
  out.pos.resize(n), out.val.resize(n * w), out.old.resize(n * w);
  EXPECT_EQ(out.pos, want.pos) << what;
  EXPECT_EQ(out.val, want.val) << what;
  if (with_old) EXPECT_EQ(out.old, want.old) << what;
  else EXPECT_EQ(out.old, std::vector<uint8_t>(n * w, ExtractOut::kGuard)) << what;
}

// Positions and values of the marked elements, in order, from `first`; at most kExtractSlack
// entries written past them. Densities from none to all cover both of the AVX-512 path's ways
// (a compress per word from one change per word up, a walk over set bits below), and runs
// longer than a tile its fallback; with and without the old bits.
TEST_P(SimdMasks, ExtractChangesMatchTheScalarModel) {
  std::mt19937_64 rng(13);
  for (uint32_t w : {1u, 2u, 4u, 8u})
    for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{200}, kMaskTileElements - 1, kMaskTileElements,
                     kMaskTileElements + 70})
      for (int rep = 0; rep < 6; ++rep) {
        std::vector<uint8_t> a, b;
        Fill(rng, w, n, &a, &b);
        std::vector<uint64_t> masks((n + 63) / 64);
        const size_t differ = DifferMasks(a.data(), b.data(), w, n, masks.data());
        const bool is_xor = rep % 2 == 0;
        const uint32_t first = static_cast<uint32_t>(rng() % 100000);
        const ModelChanges want = ScalarChanges(a, b, w, n, is_xor, first);
        ASSERT_EQ(differ, want.pos.size());
        for (bool with_old : {false, true}) {
          const std::string what = "width " + std::to_string(w) + " n " + std::to_string(n) + " xor " +
                                   std::to_string(is_xor) + (with_old ? " with old bits" : "");
          ExtractOut out(differ + kExtractSlack, w);
          ASSERT_EQ(ExtractChanges(a.data(), b.data(), w, n, masks.data(), differ, is_xor, first, out.pos.data(),
                                   out.val.data(), with_old ? out.old.data() : nullptr),
                    differ);
          ExpectExtracted(want, std::move(out), w, with_old, what);
        }
      }
}

// DiffExtractTile against the element-by-element definition, at densities from none to all,
// tile lengths that end inside a vector and a word, with and without the old bits; nothing
// written past the allowed slack.
TEST_P(SimdMasks, DiffExtractTileMatchesTheScalarModel) {
  std::mt19937_64 rng(14);
  for (uint32_t w : {1u, 2u, 4u, 8u})
    for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{64}, size_t{200}, kMaskTileElements - 1, kMaskTileElements})
      for (int rep = 0; rep < 6; ++rep) {
        std::vector<uint8_t> a, b;
        Fill(rng, w, n, &a, &b);
        const bool is_xor = rep % 2 == 0, with_old = rep % 3 != 0;
        const uint32_t first = static_cast<uint32_t>(rng() % 100000);
        const ModelChanges want = ScalarChanges(a, b, w, n, is_xor, first);
        const std::string what = "width " + std::to_string(w) + " n " + std::to_string(n) + " xor " +
                                 std::to_string(is_xor) + " old " + std::to_string(with_old);
        ExtractOut out(n + kExtractSlack, w);
        ASSERT_EQ(DiffExtractTile(a.data(), b.data(), w, n, is_xor, first, out.pos.data(), out.val.data(),
                                  with_old ? out.old.data() : nullptr),
                  want.pos.size())
            << what;
        ExpectExtracted(want, std::move(out), w, with_old, what);
      }
}

TEST_P(SimdMasks, ClassMasksMatchTheScalarModelForEveryFloatDType) {
  std::mt19937_64 rng(12);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64, DType::kF8E4M3, DType::kF8E5M2, DType::kI32}) {
    const ContextClassFn f = ContextClassFor(t);
    const uint32_t w = DTypeWidth(t);
    for (size_t n : {size_t{1}, size_t{63}, size_t{64}, size_t{130}, kMaskTileElements})
      for (int k = 1; k <= 7; ++k) {
        std::vector<uint8_t> e(n * w), thresholds;
        for (auto& x : e) x = static_cast<uint8_t>(rng());
        // Ascending thresholds in 1..255, around the classes present (and above them).
        uint8_t t0 = static_cast<uint8_t>(1 + rng() % 40);
        for (int i = 0; i < k; ++i) thresholds.push_back(t0), t0 = static_cast<uint8_t>(std::min(255, t0 + 1 + static_cast<int>(rng() % 40)));
        bool ascending = true;
        for (size_t i = 1; i < thresholds.size(); ++i) ascending &= thresholds[i] > thresholds[i - 1];
        if (!ascending) continue;
        std::vector<uint64_t> got(static_cast<size_t>(k) * ((n + 63) / 64), 0xdeadbeef);
        ClassAtLeastMasks(e.data(), w, n, f.shift, static_cast<uint32_t>(f.mask), thresholds.data(), k, got.data());
        ASSERT_EQ(got, ModelClass(e, w, n, f, thresholds)) << DTypeName(t) << " n " << n << " k " << k;
      }
  }
}

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) { return SimdTargetName(info.param); }

INSTANTIATE_TEST_SUITE_P(EveryTarget, SimdMasks, ::testing::ValuesIn(CompiledSimdTargets()), TargetParamName);

// The dispatcher runs the best compiled target the CPU supports.
TEST(SimdMasksTargets, TheBestSupportedTargetIsActive) {
  const auto targets = CompiledSimdTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_STREQ(ActiveSimdTargetName(), SimdTargetName(targets.front()));
}

}  // namespace
}  // namespace dcr
