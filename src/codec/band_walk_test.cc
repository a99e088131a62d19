// The band masks under every band walk (tile_bands-inl.h) match a scalar model on every Highway
// target this build compiled and this CPU runs (each forced in turn; the AVX3_DL target also
// with GFNI taken away, as on a CPU without it, where its compare kernel runs): masks and prefix
// counts, for the float dtypes, every band count, thresholds spanning few and many classes (the
// GFNI kernel's two table forms), whole and partial tiles and tiles past a segment's first.
#include "codec/band_walk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/simd_masks.h"

namespace dcr {
namespace {

constexpr size_t kWordsPerTile = kMaskTileElements / 64;

// Each element's band from its class by the thresholds, one element at a time.
TileBandsForTests ModelTileBands(const ContextSegment& seg, const ContextBands& bands, uint64_t tile, size_t tn) {
  const ContextClassFn f = ContextClassFor(seg.dtype);
  const uint32_t w = DTypeWidth(seg.dtype);
  const size_t k = static_cast<size_t>(bands.k), words = (tn + 63) / 64;
  TileBandsForTests m;
  m.masks.assign(kMaxContextBands * words, 0);
  for (size_t i = 0; i < tn; ++i) {
    uint64_t v = 0;
    std::memcpy(&v, seg.base.data() + (tile + i) * w, w);
    const uint32_t c = static_cast<uint32_t>((v >> f.shift) & f.mask);
    size_t b = 0;
    while (b + 1 < k && c >= bands.t[b]) ++b;
    m.masks[b * words + i / 64] |= uint64_t{1} << (i % 64);
  }
  for (size_t b = 0; b < kMaxContextBands; ++b) {
    int before = 0;
    for (size_t wd = 0; wd <= kWordsPerTile; ++wd) {
      m.prefix.push_back(static_cast<int16_t>(before));
      if (wd < words) before += __builtin_popcountll(m.masks[b * words + wd]);
    }
  }
  return m;
}

class TileBandsTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { ForceSimdTarget(GetParam()); }
  void TearDown() override { ForceSimdTarget(0); }
};

// The bands of the forced target against the model; `how_run` ends each failure's message.
void ExpectTileBandsOfTheModel(const std::string& how_run) {
  std::mt19937_64 rng(21);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kF64}) {
    const ContextClassFn f = ContextClassFor(t);
    const uint32_t w = DTypeWidth(t);
    std::vector<uint8_t> bytes(2 * kMaskTileElements * w);
    for (auto& x : bytes) x = static_cast<uint8_t>(rng());
    const ContextSegment seg{t, bytes};
    for (int k = 1; k <= kMaxContextBands; ++k)
      for (const char* spread : {"narrow", "wide", "edge"}) {
        // Ascending thresholds within the class range: steps of 1..6 (a span of at most 42);
        // spread over the whole range (spans above 127 where the class has 8 bits); or spanning
        // exactly 126 or 127 classes, the most and the fewest for the GFNI kernel's forms.
        ContextBands bands;
        bands.k = k;
        const uint32_t top = static_cast<uint32_t>(f.mask);
        const std::string how = spread;
        uint32_t at = how == "narrow" ? 1 + static_cast<uint32_t>(rng() % std::max<uint64_t>(1, top / 2)) : how == "wide" ? 1 : 5;
        bool fits = how != "edge" || k >= 2;
        for (int i = 0; i + 1 < k; ++i) {
          if (how == "edge" && i + 2 == k) at = 5 + 126 + static_cast<uint32_t>(k % 2);
          fits &= at >= 1 && at <= top && (i == 0 || at > bands.t[static_cast<size_t>(i - 1)]);
          bands.t[static_cast<size_t>(i)] = static_cast<uint8_t>(at);
          at += how == "wide" ? std::max<uint32_t>(1, top / static_cast<uint32_t>(k)) : 1 + static_cast<uint32_t>(rng() % 6);
        }
        if (!fits) continue;
        for (uint64_t tile : {uint64_t{0}, uint64_t{kMaskTileElements}})
          for (size_t tn : {kMaskTileElements, kMaskTileElements - 1, kMaskTileElements - 63, size_t{520}, size_t{512},
                            size_t{64}, size_t{63}, size_t{1}}) {
            const std::string what = std::string(DTypeName(t)) + " k " + std::to_string(k) + " " + how +
                                     " tile " + std::to_string(tile) + " tn " + std::to_string(tn) + how_run;
            const TileBandsForTests got = LoadTileBandsForTests(seg, bands, tile, tn);
            const TileBandsForTests want = ModelTileBands(seg, bands, tile, tn);
            ASSERT_EQ(got.masks, want.masks) << what;
            ASSERT_EQ(got.prefix, want.prefix) << what;
          }
      }
  }
}

TEST_P(TileBandsTest, MasksAndPrefixCountsMatchTheScalarModel) {
  for (bool no_gfni : {false, true}) {
    ForceNoGfniForTests(no_gfni);
    ExpectTileBandsOfTheModel(no_gfni ? ", GFNI taken away" : "");
    ForceNoGfniForTests(false);
    if (testing::Test::HasFailure()) return;
  }
}

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) { return SimdTargetName(info.param); }

INSTANTIATE_TEST_SUITE_P(EveryTarget, TileBandsTest, ::testing::ValuesIn(CompiledSimdTargets()), TargetParamName);

}  // namespace
}  // namespace dcr
