// Codec tests, part 5: context mode (codec mode 1, context_coding.h). Locations are coded per
// class of the old value's exponent across all segments of a payload, so decoding needs the old
// bits. Round trips for every dtype, density and value kind; kWhenSmaller picks one of the two
// forms and decodes identically; without a base the payload is kUnsupported; against a different
// base it never crashes and never addresses elements outside its segments; hostile class tables
// are kCorrupt. The band fit minimises its own estimate over every contiguous banding.
#include <algorithm>
#include <bit>
#include <random>
#include <string>
#include <vector>

#include "codec/band_context.h"
#include "codec/band_fit.h"
#include "codec/band_parts.h"
#include "codec/band_walk.h"
#include "codec/context_test_support.h"
#include "codec/simd_masks.h"

namespace dcr {
namespace {

// ---------------------------------------------------------------------------------------------
// Band parts

// The encoder's parts stay within kMaxEncodedPartElements (below the decoder's 2^32-element
// and 2^29-byte stream bounds) wherever BandedCodeFits, at any requested part size; where the
// requested size already keeps them small the count is the plain rule's (a power of two, at most
// total / part_elements and total / kBandPartAlign, within 1..kMaxBandParts).
TEST(BandParts, EncodedPartsStayWithinTheirBound) {
  static_assert(kMaxEncodedPartElements < kMaxPartElements);
  const uint64_t g = kMaxEncodedPartElements, most = kMaxBandParts * (g - kBandPartAlign);
  EXPECT_TRUE(BandedCodeFits(most));
  EXPECT_FALSE(BandedCodeFits(most + 1));
  EXPECT_FALSE(BandedCodeFits(uint64_t{1} << 40));
  for (uint64_t total : {uint64_t{0}, uint64_t{1}, uint64_t{4096}, uint64_t{5} << 20, g - kBandPartAlign, g,
                         g + 1, 3 * g, 5 * g, most}) {
    for (uint64_t part_elements : {kDefaultBandPartElements, uint64_t{1} << 40}) {
      const size_t parts = ChooseBandParts(total, part_elements);
      const std::string what = "total " + std::to_string(total) + " part_elements " + std::to_string(part_elements);
      EXPECT_TRUE(std::has_single_bit(parts) && parts <= kMaxBandParts) << what;
      EXPECT_LE(MaxPartElements(total, parts), g) << what;
      const uint64_t rule = std::min<uint64_t>({total / part_elements, total / kBandPartAlign, kMaxBandParts});
      const size_t plain = rule == 0 ? 1 : std::bit_floor(rule);
      if (MaxPartElements(total, plain) <= g)
        EXPECT_EQ(parts, plain) << what;
      else
        EXPECT_GT(parts, plain) << what;
    }
  }
  EXPECT_EQ(ChooseBandParts(5 * g, uint64_t{1} << 40), 8u);  // in 4 parts, 1.25 g each
  EXPECT_EQ(ChooseBandParts(3 * g, uint64_t{1} << 40), 4u);  // in 2, 1.5 g each
}

// Actual parts (FindBandPartStarts over segments of assorted sizes) are no larger than
// MaxPartElements says.
TEST(BandParts, PartStartsKeepMaxPartElements) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint64_t> sizes(1 + rng() % 40);
    for (uint64_t& n : sizes) n = 1 + rng() % (rng() % 2 != 0 ? 300'000 : 5'000);
    uint64_t total = 0;
    for (uint64_t n : sizes) total += n;
    std::vector<uint8_t> bytes(total);
    std::vector<ContextSegment> segs;
    for (uint64_t at = 0; uint64_t n : sizes) {
      segs.push_back({DType::kU8, std::span<const uint8_t>(bytes).subspan(at, n)});
      at += n;
    }
    for (uint64_t part_elements : {uint64_t{4096}, uint64_t{100'000}, kDefaultBandPartElements}) {
      const size_t parts = ChooseBandParts(total, part_elements);
      const BandPartStarts starts = FindBandPartStarts(segs, total, parts);
      for (size_t p = 0; p < parts; ++p)
        EXPECT_LE(starts[p + 1].at - starts[p].at, MaxPartElements(total, parts)) << "trial " << trial << " part " << p;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Band fit

// The fitted bands estimate no more than any other contiguous banding of the present class values
// into at most kMaxContextBands bands (all of them tried: up to 11 present values), and the
// fitted bands' change counts add up to the changes.
TEST(BandFit, NoContiguousBandingEstimatesLess) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 300; ++trial) {
    FitCounts counts;
    const int m = 2 + static_cast<int>(rng() % 10);
    std::vector<uint32_t> classes;
    while (classes.size() < static_cast<size_t>(m)) {
      const auto v = static_cast<uint32_t>(100 + rng() % 40);
      if (std::find(classes.begin(), classes.end(), v) == classes.end()) classes.push_back(v);
    }
    std::sort(classes.begin(), classes.end());
    uint64_t changes = 0;
    for (uint32_t v : classes) {
      const uint64_t pop = 1 + rng() % (uint64_t{1} << (4 + rng() % 16));
      const uint64_t chg = rng() % 4 == 0 ? 0 : rng() % (pop + 1);  // some classes without changes
      counts.population[v] = pop, counts.changes[v] = chg, changes += chg;
      counts.elements += pop;
    }
    const FittedBands fit = FitBandsToCounts(counts);
    ASSERT_GE(fit.bands.k, 1);
    ASSERT_LE(fit.bands.k, static_cast<int>(kMaxContextBands));
    uint64_t fitted = 0;
    for (uint64_t c : fit.changes) fitted += c;
    EXPECT_EQ(fitted, changes) << "trial " << trial;
    const double got = BandFitEstimate(counts, fit.bands);
    // Every cut set of the m - 1 gaps between present values with at most 7 cuts.
    double best = 1e300;
    for (uint32_t cuts = 0; cuts < (1u << (m - 1)); ++cuts) {
      if (std::popcount(cuts) > static_cast<int>(kMaxContextBands) - 1) continue;
      ContextBands b;
      b.k = 1 + std::popcount(cuts);
      for (int g = 0, i = 0; g < m - 1; ++g)
        if (cuts >> g & 1) b.t[static_cast<size_t>(i++)] = static_cast<uint8_t>(classes[static_cast<size_t>(g + 1)]);
      best = std::min(best, BandFitEstimate(counts, b));
    }
    EXPECT_LE(got, best * (1 + 1e-12)) << "trial " << trial << ": " << m << " classes, " << fit.bands.k << " bands";
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(ContextRoundTrip, EveryDTypeDensityAndKind) {
  std::mt19937_64 rng(1);
  for (DType t : AllDTypes())
    for (double density : {0.0001, 0.01, 0.3, 1.0})
      for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
        const std::string what = std::string(DTypeName(t)) + " density " + std::to_string(density) +
                                 (kind == ValueKind::kXor ? " xor" : " overwrite");
        World w;
        // Two segments of one tensor, one of another: classes run across segments and tensors.
        w.Add(2, t, 40000, rng, 0, 40000, density);
        w.Add(5, t, 3000, rng, 0, 3000, density);
        // At least one change per segment, also at the lowest density.
        for (auto [index, at] : {std::pair{2u, 17ull}, std::pair{2u, 39999ull}, std::pair{5u, 1000ull}}) {
          const uint32_t wd = DTypeWidth(t);
          StoreElem(w.next[index], at, wd, ChangedBits(t, LoadElem(w.base[index], at, wd), rng));
        }
        const CodecMode m =
            ExpectContextRoundTrip(w, {{2, t, kind, 0, 25000}, {2, t, kind, 25000, 15000}, {5, t, kind, 100, 2900}}, what);
        // Large segments: the class table is small next to the limit, so kAlways means context
        // unless every element changed (one bit per element, as the limit's bitmap term, plus the
        // class table is over the limit when there are many classes).
        if (density < 1.0 || FloatBits(t).first == 0) {
          EXPECT_EQ(m, CodecMode::kContextSplitRice) << what;
        }
        if (testing::Test::HasFailure()) return;
      }
}

TEST(ContextRoundTrip, MixedDTypesShareOneClassCodePerPayload) {
  std::mt19937_64 rng(2);
  World w;
  const std::vector<DType> types = {DType::kBF16, DType::kF32, DType::kU8, DType::kF64, DType::kBool,
                                    DType::kF8E5M2, DType::kF16, DType::kI64, DType::kF8E4M3};
  std::vector<SegmentSpec> specs;
  for (uint32_t i = 0; i < types.size(); ++i) {
    w.Add(i * 2, types[i], 5000, rng, 0, 5000, i % 2 ? 0.05 : 0.005);
    specs.push_back({i * 2, types[i], i % 3 ? ValueKind::kXor : ValueKind::kOverwrite, 0, 5000});
  }
  EXPECT_EQ(ExpectContextRoundTrip(w, specs, "mixed"), CodecMode::kContextSplitRice);
  for (int block_log2 : {3, 8, 12})
    EXPECT_EQ(ExpectContextRoundTrip(w, specs, "mixed, blocks 2^" + std::to_string(block_log2), block_log2), CodecMode::kContextSplitRice);
}

TEST(ContextRoundTrip, SmallSegmentsWithManyClassesAndEveryElementChanged) {
  // Segments of a few elements whose old values each have their own exponent. In legacy mode 1
  // the class table dominated the location code and could exceed the decoder's location limit
  // (kAlways then fell back to plain mode). A band table is at most 24 bytes and the fit drops
  // bands that do not pay, so banded mode stays within the limit and is always used here.
  std::mt19937_64 rng(3);
  int context = 0, plain = 0;
  for (DType t : {DType::kBF16, DType::kF32, DType::kF64, DType::kF16, DType::kF8E5M2, DType::kF8E4M3}) {
    for (uint64_t n : {1ull, 2ull, 7ull, 16ull, 64ull, 300ull}) {
      World w;
      const uint32_t wd = DTypeWidth(t);
      auto [e, m] = FloatBits(t);
      std::vector<SegmentSpec> specs;
      for (uint32_t tensor = 0; tensor < 3; ++tensor) {
        w.Add(tensor, t, n, rng, 0, n, 1.0);
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t exp = (i * 7 + tensor) % (1ull << std::min(e, 8));
          StoreElem(w.base[tensor], i, wd, exp << m);
          StoreElem(w.next[tensor], i, wd, (exp << m) ^ 1);
        }
        specs.push_back({tensor, t, ValueKind::kXor, 0, n});
      }
      (ExpectContextRoundTrip(w, specs, std::string(DTypeName(t)) + " n " + std::to_string(n)) == CodecMode::kContextSplitRice ? context : plain)++;
      if (testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(context, 0);
  EXPECT_EQ(plain, 0);
}

TEST(ContextRoundTrip, SpecialValuesInTheBaseAndOneElementSegments) {
  std::mt19937_64 rng(4);
  World w;
  // BF16 zeros, subnormals, infinities and NaNs (classes 0 and 255) next to normal values.
  const std::vector<uint64_t> specials = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0x3f80, 0xffff};
  w.Add(0, DType::kBF16, specials.size() * 50, rng, 0, 0, 0.0);
  for (size_t i = 0; i < specials.size() * 50; ++i) {
    StoreElem(w.base[0], i, 2, specials[i % specials.size()]);
    StoreElem(w.next[0], i, 2, i % 3 ? specials[i % specials.size()] : specials[(i + 1) % specials.size()]);
  }
  w.Add(1, DType::kF32, 1, rng, 0, 1, 1.0);
  w.Add(2, DType::kU8, 1000, rng, 999, 1000, 1.0);
  ExpectContextRoundTrip(w, {{0, DType::kBF16, ValueKind::kXor, 0, 500}, {1, DType::kF32, ValueKind::kOverwrite, 0, 1},
                             {2, DType::kU8, ValueKind::kXor, 999, 1}},
                         "specials");
}

TEST(ContextRoundTrip, WhenSmallerPicksContextWhenTheExponentPredictsChangesAndPlainForRuns) {
  std::mt19937_64 rng(5);
  // Small magnitudes change often (one ulp is small), large ones rarely: interleaved at random,
  // class-blind gaps cannot see it.
  World w;
  w.Add(0, DType::kBF16, 100000, rng, 0, 100000, [](uint64_t old) { return ((old >> 7) & 0xff) < 0x7a ? 0.3 : 0.001; });
  const std::vector<SegmentSpec> specs = {{0, DType::kBF16, ValueKind::kXor, 0, 100000}};
  ExpectContextRoundTrip(w, specs, "exponent-predicted");
  const auto smaller = w.Encode(specs, With(Context::kWhenSmaller));
  EXPECT_EQ(ModeOf(smaller), CodecMode::kContextSplitRice);
  EXPECT_LT(smaller.size(), w.Encode(specs, With(Context::kNever)).size());
  // One contiguous run: plain location coding stores it as a range; context mode cannot beat that.
  World r;
  r.Add(0, DType::kU8, 100000, rng, 20000, 30000, 1.0);
  const std::vector<SegmentSpec> run = {{0, DType::kU8, ValueKind::kXor, 0, 100000}};
  ExpectContextRoundTrip(r, run, "run");
  EXPECT_EQ(ModeOf(r.Encode(run, With(Context::kWhenSmaller))), CodecMode::kPlain);
}

TEST(ContextRoundTrip, EverySimdTargetAndBothBitDepositsGiveTheSameBytesAndPositions) {
  // The band walks are compiled per SIMD target, and decoding deposits ordinals with BMI2 pdep
  // where it is fast or a portable select otherwise: every combination must agree.
  std::mt19937_64 rng(6);
  World w;
  w.Add(0, DType::kBF16, 70000, rng, 0, 70000, [](uint64_t old) {
    const uint64_t e = (old >> 7) & 0xff;
    return e < 0x76 ? 0.6 : e < 0x79 ? 0.1 : 0.002;
  });
  w.Add(1, DType::kF32, 9000, rng, 0, 9000, 0.05);
  w.Add(2, DType::kF16, 5000, rng, 0, 5000, 0.3);
  const std::vector<SegmentSpec> specs = {{0, DType::kBF16, ValueKind::kXor, 0, 40000},
                                          {0, DType::kBF16, ValueKind::kXor, 40000, 30000},
                                          {1, DType::kF32, ValueKind::kXor, 0, 9000},
                                          {2, DType::kF16, ValueKind::kOverwrite, 17, 4983}};
  const auto want = w.Encode(specs, With(Context::kAlways));
  ASSERT_EQ(ModeOf(want), CodecMode::kContextSplitRice);
  ForEachSimdTarget([&](const std::string& target) {
    for (bool portable : {false, true}) {
      const std::string what = target + (portable ? ", portable deposit" : "");
      ForcePortableBitDeposit(portable);
      EXPECT_EQ(w.Encode(specs, With(Context::kAlways)), want) << what;
      ExpectContextRoundTrip(w, specs, what);
      ForcePortableBitDeposit(false);
      if (testing::Test::HasFailure()) return;
    }
  });
}

// PayloadBuilder::CountFitAhead on one thread (two: codec_context_threads_test).
TEST(ContextEncode, FitCountedAheadGivesTheBytesOfTheFitCountedAtFinish) { ExpectFitCountedAheadGivesFinishBytes(1); }

TEST(ContextEncode, FitCountedInRangesOfLargeSegmentsGivesTheBytesOfTheFitCountedAtFinish) {
  ExpectRangedFitCountsGiveFinishBytes(1);
}

// ---------------------------------------------------------------------------------------------
// Decoding needs the right base

TEST(ContextDecode, WithoutABaseIsUnsupportedButTheLayoutParses) {
  ContextPayload c;
  DecodedPayload d;
  Status s = DecodePayload(c.p, &d);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_FALSE(s.message().empty());
  PayloadLayout l;
  ASSERT_TRUE(ParsePayload(c.p, &l).ok());
  EXPECT_EQ(l.mode, CodecMode::kContextSplitRice);
  EXPECT_EQ(l.identity, kIdentity);
  ASSERT_EQ(l.segments.size(), c.specs.size());
  for (size_t i = 0; i < l.segments.size(); ++i) {
    EXPECT_EQ(l.segments[i].tensor_index, c.specs[i].tensor_index);
    EXPECT_EQ(l.segments[i].start, c.specs[i].start);
    EXPECT_EQ(l.segments[i].count, c.specs[i].count);
    EXPECT_GT(l.changed[i], 0u);
  }
  EXPECT_EQ(c.p[kMode], static_cast<uint8_t>(CodecMode::kContextSplitRice));
  auto id = PeekPayloadIdentity(c.p);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, kIdentity);
}

TEST(ContextDecode, BaseLookupFailuresArePassedOn) {
  ContextPayload c;
  DecodedPayload d;
  BaseLookup refuse = [](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    return Corrupt("tensor " + std::to_string(s.tensor_index) + " does not fit");
  };
  Status s = DecodePayload(c.p, &d, refuse);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_NE(s.message().find("does not fit"), std::string::npos) << s.ToString();
  // Only the last segment is refused.
  BaseLookup last = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    if (s.tensor_index == 4) return Mismatch("u8 tensor has another shape");
    return c.w.Lookup()(s);
  };
  EXPECT_EQ(DecodePayload(c.p, &d, last).code(), StatusCode::kMismatch);
  // A lookup returning the wrong number of bytes is a bug in the caller, not a decodable payload.
  std::vector<uint8_t> short_base(10);
  BaseLookup wrong = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(short_base); };
  EXPECT_FALSE(DecodePayload(c.p, &d, wrong).ok());
}

TEST(ContextDecode, AgainstADifferentBaseItIsCorruptOrStaysInsideItsSegments) {
  std::mt19937_64 rng(7);
  int refused = 0, accepted = 0;
  for (double density : {0.001, 0.02, 0.3, 1.0}) {
    ContextPayload c(density);
    PayloadLayout layout;
    ASSERT_TRUE(ParsePayload(c.p, &layout).ok());
    for (int round = 0; round < 60; ++round) {
      World other = c.w;
      for (auto& [index, bytes] : other.base) {
        const DType t = other.dtype[index];
        const uint32_t wd = DTypeWidth(t);
        const size_t n = bytes.size() / wd;
        switch (round % 6) {
          case 0: for (size_t i = 0; i < n; ++i) StoreElem(bytes, i, wd, WeightBits(t, rng)); break;  // unrelated
          case 1: std::fill(bytes.begin(), bytes.end(), 0); break;                                  // one class
          case 2: bytes = c.w.next.at(index); break;                                                // already applied
          case 3: StoreElem(bytes, rng() % n, wd, WeightBits(t, rng)); break;                      // one element off
          case 4: std::rotate(bytes.begin(), bytes.begin() + wd, bytes.end()); break;             // shifted
          default: for (auto& b : bytes) b = static_cast<uint8_t>(rng()); break;                   // noise
        }
      }
      DecodedPayload d;
      Status s = DecodePayload(c.p, &d, other.Lookup());
      if (s.ok()) {
        ++accepted;
        ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(d, layout));
      } else {
        ++refused;
        ASSERT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
      }
    }
  }
  // Both outcomes occur: a different base is not always detectable here (the delta's digests are).
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace dcr
