// Codec tests, part 5: context mode (codec mode 1, context_coding.h). Locations are coded per
// class of the old value's exponent across all segments of a payload, so decoding needs the old
// bits. Round trips for every dtype, density and value kind; kWhenSmaller picks one of the two
// forms and decodes identically; without a base the payload is kUnsupported; against a different
// base it never crashes and never addresses elements outside its segments; hostile class tables
// are kCorrupt.
#include "codec/band_walk.h"
#include "codec/context_test_support.h"
#include "codec/simd_masks.h"

namespace dcr {
namespace {

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
          EXPECT_EQ(m, CodecMode::kContextBands) << what;
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
  EXPECT_EQ(ExpectContextRoundTrip(w, specs, "mixed"), CodecMode::kContextBands);
  for (int block_log2 : {3, 8, 12})
    EXPECT_EQ(ExpectContextRoundTrip(w, specs, "mixed, blocks 2^" + std::to_string(block_log2), block_log2), CodecMode::kContextBands);
}

TEST(ContextRoundTrip, SmallSegmentsWithManyClassesAndEveryElementChanged) {
  // Segments of a few elements whose old values each have their own exponent. In legacy mode 1
  // the class table dominated the location code and could exceed the decoder's location limit
  // (kAlways then fell back to plain mode). A band table is at most 24 bytes and the fit drops
  // bands that do not pay, so mode 2 stays within the limit and is always used here.
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
      (ExpectContextRoundTrip(w, specs, std::string(DTypeName(t)) + " n " + std::to_string(n)) == CodecMode::kContextBands ? context : plain)++;
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
  EXPECT_EQ(ModeOf(smaller), CodecMode::kContextBands);
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
  ASSERT_EQ(ModeOf(want), CodecMode::kContextBands);
  for (int64_t target : CompiledSimdTargets())
    for (bool portable : {false, true}) {
      const std::string what = std::string(SimdTargetName(target)) + (portable ? ", portable deposit" : "");
      ForceSimdTarget(target);
      ForcePortableBitDeposit(portable);
      EXPECT_EQ(w.Encode(specs, With(Context::kAlways)), want) << what;
      ExpectContextRoundTrip(w, specs, what);
      ForceSimdTarget(0);
      ForcePortableBitDeposit(false);
      if (testing::Test::HasFailure()) return;
    }
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
  EXPECT_EQ(l.mode, CodecMode::kContextBands);
  EXPECT_EQ(l.identity, kIdentity);
  ASSERT_EQ(l.segments.size(), c.specs.size());
  for (size_t i = 0; i < l.segments.size(); ++i) {
    EXPECT_EQ(l.segments[i].tensor_index, c.specs[i].tensor_index);
    EXPECT_EQ(l.segments[i].start, c.specs[i].start);
    EXPECT_EQ(l.segments[i].count, c.specs[i].count);
    EXPECT_GT(l.changed[i], 0u);
  }
  EXPECT_EQ(c.p[kMode], 2);
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

// DecodePayload with a second thread (values beside locations) gives what one thread gives: the
// same changes, and on re-signed damage to either section the same status, message included.
TEST(ConcurrentDecode, TwoThreadsGiveTheSameChangesAndTheSameErrorsAsOne) {
  World w;
  std::mt19937_64 rng(31);
  w.Add(1, DType::kBF16, 300000, rng, 0, 300000, 0.12);
  w.Add(2, DType::kF32, 5000, rng, 0, 5000, 0.3);
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 300000},
                                          {2, DType::kF32, ValueKind::kXor, 0, 5000}};
  for (Context mode : {Context::kNever, Context::kAlways}) {
    uint64_t changed = 0;
    const std::vector<uint8_t> p = w.Encode(specs, With(mode), &changed);
    ASSERT_GE(changed, kConcurrentSectionsMinChanges) << "the payload must be large enough to use the second thread";
    const std::string what = mode == Context::kNever ? "plain" : "context";
    DecodedPayload one, two;
    ASSERT_TRUE(DecodePayload(p, &one, w.Lookup(), 1).ok()) << what;
    ASSERT_TRUE(DecodePayload(p, &two, w.Lookup(), 2).ok()) << what;
    ExpectSameSegments(one, two, what);
    ASSERT_NO_FATAL_FAILURE(w.ExpectApplies(two, what));

    // Damage: a location-section byte, a value-section byte (the last bytes before the
    // checksum are the value section's), or both; each re-signed.
    PayloadLayout layout;
    ASSERT_TRUE(ParsePayload(p, &layout).ok());
    const size_t loc_at = static_cast<size_t>(layout.loc_stored.data() - p.data());
    const size_t val_at = static_cast<size_t>(layout.val_stored.data() - p.data());
    int refused = 0;
    for (int i = 0; i < 60; ++i) {
      std::vector<uint8_t> q = p;
      if (i % 3 != 1) q[loc_at + rng() % layout.loc_stored.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      if (i % 3 != 0) q[val_at + rng() % layout.val_stored.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      Resign(q);
      DecodedPayload a, b;
      const Status sa = DecodePayload(q, &a, w.Lookup(), 1), sb = DecodePayload(q, &b, w.Lookup(), 2);
      ASSERT_EQ(sa.code(), sb.code()) << what << " edit " << i << ": " << sa.ToString() << " / " << sb.ToString();
      ASSERT_EQ(sa.message(), sb.message()) << what << " edit " << i;
      if (sa.ok()) {
        ExpectSameSegments(a, b, what + " edit " + std::to_string(i));
      } else {
        ++refused;
      }
    }
    EXPECT_GE(refused, 15) << what;
  }
}

// Payloads whose walks two threads split (at least kSplitWalkMinElements elements): inside the
// first segment, inside a later one and on a segment boundary, with few and many changes.
struct SplitSeg {
  DType dtype;
  uint64_t n;
  double density;
};
const std::vector<std::vector<SplitSeg>> kSplitLayouts = {
    {{DType::kBF16, 100000, 0.01}, {DType::kF32, 200000, 0.05}},                             // split in segment 1
    {{DType::kBF16, 131072, 0.004}, {DType::kBF16, 131072, 0.02}},                           // on the boundary
    {{DType::kF16, 20000, 0.1}, {DType::kBF16, 250000, 0.002}, {DType::kBF16, 30000, 0.3}},  // segment 1 of 3
    {{DType::kBF16, 280000, 0.2}}};                                                          // one segment

World SplitWorld(const std::vector<SplitSeg>& layout, std::mt19937_64& rng, std::vector<SegmentSpec>* specs) {
  World w;
  for (size_t i = 0; i < layout.size(); ++i) {
    const SplitSeg& g = layout[i];
    w.Add(static_cast<uint32_t>(i + 1), g.dtype, g.n, rng, 0, g.n, g.density);
    specs->push_back({static_cast<uint32_t>(i + 1), g.dtype, ValueKind::kXor, 0, g.n});
  }
  return w;
}

// The body of the test below, for one setting of SetSecondPartWalkerForTests.
void ExpectSplitWalksAgree(SecondPartWalker walker) {
  std::mt19937_64 rng(77);
  for (size_t l = 0; l < kSplitLayouts.size(); ++l) {
    std::vector<SegmentSpec> specs;
    const World w = SplitWorld(kSplitLayouts[l], rng, &specs);
    const std::vector<uint8_t> p = w.Encode(specs, With(Context::kAlways));
    const std::string what = "layout " + std::to_string(l);
    const BandWalkSplitCounts before = GetBandWalkSplitCounts();
    DecodedPayload one, two;
    ASSERT_TRUE(DecodePayload(p, &one, w.Lookup(), 1).ok()) << what;
    ASSERT_TRUE(DecodePayload(p, &two, w.Lookup(), 2).ok()) << what;
    const BandWalkSplitCounts after = GetBandWalkSplitCounts();
    // Only a second part walked as a helper walks it counts as a split.
    if (walker == SecondPartWalker::kHelperPath) {
      EXPECT_EQ(after.splits, before.splits + 1) << what;
    } else if (walker == SecondPartWalker::kCallerWalksOn) {
      EXPECT_EQ(after.splits, before.splits) << what;
    }
    EXPECT_EQ(after.fallbacks, before.fallbacks) << what << ": a valid payload's parts must agree";
    ExpectSameSegments(one, two, what);
    ASSERT_NO_FATAL_FAILURE(w.ExpectApplies(two, what));

    PayloadLayout layout;
    ASSERT_TRUE(ParsePayload(p, &layout).ok());
    const size_t loc_at = static_cast<size_t>(layout.loc_stored.data() - p.data());
    for (int i = 0; i < 30; ++i) {
      std::vector<uint8_t> q = p;
      q[loc_at + rng() % layout.loc_stored.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      Resign(q);
      DecodedPayload a, b;
      const Status sa = DecodePayload(q, &a, w.Lookup(), 1), sb = DecodePayload(q, &b, w.Lookup(), 2);
      ASSERT_EQ(sa.code(), sb.code()) << what << " edit " << i << ": " << sa.ToString() << " / " << sb.ToString();
      ASSERT_EQ(sa.message(), sb.message()) << what << " edit " << i;
      if (sa.ok()) ExpectSameSegments(a, b, what + " edit " + std::to_string(i));
    }
  }
}

// The context decoder's O(dense) walk split between two threads, at a point inside the first
// segment, inside a later one and on a segment boundary, with few and many changes: the same
// changes as one thread, and under damage to the location section the same status and message.
// Valid payloads must not need the one-thread retry. Run for each thread that may walk the
// second part, and as the decoder chooses.
TEST(ConcurrentDecode, TheContextWalkSplitAnywhereGivesTheSameChangesAndErrorsAsOne) {
  for (SecondPartWalker walker : {SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn, SecondPartWalker::kClaimed}) {
    SCOPED_TRACE("second part walker " + std::to_string(static_cast<int>(walker)));
    SetSecondPartWalkerForTests(walker);
    ExpectSplitWalksAgree(walker);
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  }
}

// The context encoder's walk split between two threads (each layout above; and one band's
// changes all before the split, another's all after it): the bytes of one thread, whichever
// thread walks the second part, for both context choices.
TEST(ConcurrentEncode, TheContextWalkSplitAnywhereGivesTheBytesOfOneThread) {
  std::mt19937_64 rng(79);
  std::vector<std::pair<World, std::vector<SegmentSpec>>> worlds;
  for (const auto& layout : kSplitLayouts) {
    std::vector<SegmentSpec> specs;
    World w = SplitWorld(layout, rng, &specs);
    worlds.emplace_back(std::move(w), specs);
  }
  World w;
  auto exponent = [](uint64_t bits) { return (bits >> 7) & 0xff; };
  w.Add(1, DType::kBF16, 150000, rng, 0, 150000, [&](uint64_t old) { return exponent(old) >= 121 ? 0.03 : 0.0; });
  w.Add(2, DType::kBF16, 150000, rng, 0, 150000, [&](uint64_t old) { return exponent(old) >= 121 ? 0.0 : 0.03; });
  worlds.emplace_back(std::move(w), std::vector<SegmentSpec>{{1, DType::kBF16, ValueKind::kXor, 0, 150000},
                                                             {2, DType::kBF16, ValueKind::kXor, 0, 150000}});
  for (SecondPartWalker walker : {SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn, SecondPartWalker::kClaimed}) {
    SetSecondPartWalkerForTests(walker);
    for (size_t i = 0; i < worlds.size(); ++i)
      for (Context mode : {Context::kAlways, Context::kWhenSmaller}) {
        const auto& [world, specs] = worlds[i];
        // Two threads first: per-thread buffers then hold another payload's gaps, not these.
        const std::vector<uint8_t> two = world.Encode(specs, With(mode), nullptr, 2), one = world.Encode(specs, With(mode));
        EXPECT_EQ(one, two) << "walker " << static_cast<int>(walker) << " payload " << i << " mode " << static_cast<int>(mode);
        DecodedPayload d;
        ASSERT_TRUE(DecodePayload(two, &d, world.Lookup(), 1).ok()) << i;
        ASSERT_NO_FATAL_FAILURE(world.ExpectApplies(d, "payload " + std::to_string(i)));
      }
  }
  SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
}

// A band whose changes all lie before the split: the first part stops counting it once they are
// placed, and the helper's second part must still be accepted (no one-thread retry). Here the
// larger-magnitude elements (their own band) change only in the first half of the first segment;
// the split is at the start of the second.
TEST(ConcurrentDecode, ABandWhoseChangesAllLieBeforeTheSplitNeedsNoRetry) {
  std::mt19937_64 rng(78);
  World w;
  auto exponent = [](uint64_t bits) { return (bits >> 7) & 0xff; };
  w.Add(1, DType::kBF16, 150000, rng, 0, 75000, [](uint64_t) { return 0.03; });
  w.Add(2, DType::kBF16, 150000, rng, 0, 150000, [&](uint64_t old) { return exponent(old) >= 121 ? 0.0 : 0.03; });
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 150000},
                                          {2, DType::kBF16, ValueKind::kXor, 0, 150000}};
  const std::vector<uint8_t> p = w.Encode(specs, With(Context::kAlways));
  SetSecondPartWalkerForTests(SecondPartWalker::kHelperPath);
  const BandWalkSplitCounts before = GetBandWalkSplitCounts();
  DecodedPayload one, two;
  const Status s1 = DecodePayload(p, &one, w.Lookup(), 1), s2 = DecodePayload(p, &two, w.Lookup(), 2);
  const BandWalkSplitCounts after = GetBandWalkSplitCounts();
  SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_EQ(after.splits, before.splits + 1);
  EXPECT_EQ(after.fallbacks, before.fallbacks);
  ExpectSameSegments(one, two, "band exhausted before the split");
}

}  // namespace
}  // namespace dcr
