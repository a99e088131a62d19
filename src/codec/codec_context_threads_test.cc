// Codec tests, part 5b: context mode with a second thread. DecodePayload decodes the value
// section beside the locations and the banded code's parts on both threads; the encoder splits
// the band fit's counts (the producer's, made as two threads diff), the parts, and the value
// section's counts and symbols. Whichever thread does which part, the changes, errors and bytes
// are those of one thread.
#include <functional>
#include <thread>

#include "codec/band_context.h"
#include "codec/context_test_support.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

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

// Payloads in parts (several per payload with small band_part_elements): part boundaries inside
// the first segment, inside a later one and on or near a segment boundary, with few and many
// changes.
struct SplitSeg {
  DType dtype;
  uint64_t n;
  double density;
};
const std::vector<std::vector<SplitSeg>> kSplitLayouts = {
    {{DType::kBF16, 100000, 0.01}, {DType::kF32, 200000, 0.05}},
    {{DType::kBF16, 131072, 0.004}, {DType::kBF16, 131072, 0.02}},
    {{DType::kF16, 20000, 0.1}, {DType::kBF16, 250000, 0.002}, {DType::kBF16, 30000, 0.3}},
    {{DType::kBF16, 280000, 0.2}}};

World SplitWorld(const std::vector<SplitSeg>& layout, std::mt19937_64& rng, std::vector<SegmentSpec>* specs) {
  World w;
  for (size_t i = 0; i < layout.size(); ++i) {
    const SplitSeg& g = layout[i];
    w.Add(static_cast<uint32_t>(i + 1), g.dtype, g.n, rng, 0, g.n, g.density);
    specs->push_back({static_cast<uint32_t>(i + 1), g.dtype, ValueKind::kXor, 0, g.n});
  }
  return w;
}

EncodeOptions InParts(Context mode, uint64_t part_elements) {
  EncodeOptions o = With(mode);
  o.band_part_elements = part_elements;
  return o;
}

// The number of parts of a mode-3 payload (its location section's byte after the thresholds).
size_t PartsOf(const std::vector<uint8_t>& p) {
  const std::vector<uint8_t> loc = LocationSection(p);
  return loc.at(loc.at(0));
}

// The body of the test below, for one setting of SetSecondPartWalkerForTests.
void ExpectPartsAgree(SecondPartWalker walker) {
  std::mt19937_64 rng(77);
  for (size_t l = 0; l < kSplitLayouts.size(); ++l)
    for (uint64_t part_elements : {120000, 60000, 20000}) {
      std::vector<SegmentSpec> specs;
      const World w = SplitWorld(kSplitLayouts[l], rng, &specs);
      const std::vector<uint8_t> p = w.Encode(specs, InParts(Context::kAlways, part_elements));
      const std::string what = "layout " + std::to_string(l) + ", parts of " + std::to_string(part_elements);
      ASSERT_EQ(ModeOf(p), CodecMode::kContextSplitRice) << what;
      const size_t parts = PartsOf(p);
      EXPECT_EQ(parts, part_elements == 120000 ? 2u : part_elements == 60000 ? 4u : 8u) << what;
      const uint64_t before = GetBandPartsDecodedByHelper();
      DecodedPayload one, two;
      ASSERT_TRUE(DecodePayload(p, &one, w.Lookup(), 1).ok()) << what;
      EXPECT_EQ(GetBandPartsDecodedByHelper(), before) << what;
      ASSERT_TRUE(DecodePayload(p, &two, w.Lookup(), 2).ok()) << what;
      const uint64_t by_helper = GetBandPartsDecodedByHelper() - before;
      if (walker == SecondPartWalker::kHelperPath) {
        EXPECT_EQ(by_helper, parts - 1) << what;
      } else if (walker == SecondPartWalker::kCallerWalksOn) {
        EXPECT_EQ(by_helper, 0u) << what;
      }
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

// The context decoder's parts on two threads (2, 4 and 8 parts; boundaries inside the first
// segment, inside a later one and on a segment boundary; few and many changes): the same changes
// as one thread, and under damage to the location section the same status and message. Run for
// each way of sharing the parts, and as the decoder chooses.
TEST(ConcurrentDecode, PartsOnTwoThreadsGiveTheSameChangesAndErrorsAsOne) {
  for (SecondPartWalker walker : {SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn, SecondPartWalker::kClaimed}) {
    SCOPED_TRACE("second part walker " + std::to_string(static_cast<int>(walker)));
    SetSecondPartWalkerForTests(walker);
    ExpectPartsAgree(walker);
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  }
}

// The context encoder on two threads (each layout above in 1, 2 and 8 parts; and one band's
// changes all in the first half, another's all in the second): the bytes of one thread,
// whichever thread codes which part, for both context choices.
TEST(ConcurrentEncode, PartsOnTwoThreadsGiveTheBytesOfOneThread) {
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
      for (uint64_t part_elements : {kDefaultBandPartElements, uint64_t{120000}, uint64_t{20000}})
        for (Context mode : {Context::kAlways, Context::kWhenSmaller}) {
          const auto& [world, specs] = worlds[i];
          const std::string what = "walker " + std::to_string(static_cast<int>(walker)) + " payload " + std::to_string(i) +
                                   " parts of " + std::to_string(part_elements) + " mode " +
                                   std::to_string(static_cast<int>(mode));
          // Two threads first: per-thread buffers then hold another payload's gaps, not these.
          const std::vector<uint8_t> two = world.Encode(specs, InParts(mode, part_elements), nullptr, 2),
                                     one = world.Encode(specs, InParts(mode, part_elements));
          EXPECT_EQ(one, two) << what;
          DecodedPayload d;
          ASSERT_TRUE(DecodePayload(two, &d, world.Lookup(), 1).ok()) << what;
          ASSERT_NO_FATAL_FAILURE(world.ExpectApplies(d, what));
        }
  }
  SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
}

// PayloadBuilder::CountFitAhead with two threads coding the payload (one: codec_context_test).
TEST(ConcurrentEncode, FitCountedAheadGivesTheBytesOfTheFitCountedAtFinish) { ExpectFitCountedAheadGivesFinishBytes(2); }

TEST(ConcurrentEncode, FitCountedInRangesOfLargeSegmentsGivesTheBytesOfTheFitCountedAtFinish) {
  ExpectRangedFitCountsGiveFinishBytes(2);
}

// EncodeBandedLocations' `coded`: run once per encode, with the whole code (one thread's bytes)
// already in `out`, and before the encode returns; on the calling thread when it codes every part,
// else on whichever thread finished the last part.
TEST(ConcurrentEncode, CodedRunsOnceWithTheWholeCodeWritten) {
  std::mt19937_64 rng(80);
  World w;
  w.Add(1, DType::kBF16, 200000, rng, 0, 200000, [](uint64_t) { return 0.03; });
  w.Add(2, DType::kBF16, 150000, rng, 0, 150000, [](uint64_t) { return 0.01; });
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 200000},
                                          {2, DType::kBF16, ValueKind::kXor, 0, 150000}};
  DecodedPayload d;
  ASSERT_TRUE(DecodePayload(w.Encode(specs, With(Context::kNever)), &d).ok());
  std::vector<ContextSegment> segs;
  std::vector<std::span<const uint32_t>> positions;
  for (const DecodedSegment& seg : d.segments) {
    segs.push_back({seg.spec.dtype, w.Seg(w.base.at(seg.spec.tensor_index), seg.spec)});
    positions.push_back(seg.changes.positions);
  }
  ASSERT_TRUE(EncodeUsesHelper(segs, 2));
  constexpr uint64_t kPartElements = 100000;  // 3 parts
  std::vector<uint8_t> one;
  EncodeBandedLocations(segs, positions, &one, kPartElements);
  for (SecondPartWalker walker : {SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn, SecondPartWalker::kClaimed}) {
    SetSecondPartWalkerForTests(walker);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<uint8_t> two, seen;
      int runs = 0;
      std::thread::id ran_on;
      const std::function<void()> coded = [&] { ++runs, seen = two, ran_on = std::this_thread::get_id(); };
      EncodeBandedLocations(segs, positions, &two, kPartElements, 2, nullptr, nullptr, nullptr, true, coded);
      const std::string what = "walker " + std::to_string(static_cast<int>(walker)) + " rep " + std::to_string(rep);
      ASSERT_EQ(runs, 1) << what;
      EXPECT_EQ(seen, one) << what;
      EXPECT_EQ(two, one) << what;
      if (walker == SecondPartWalker::kCallerWalksOn) {
        EXPECT_EQ(ran_on, std::this_thread::get_id()) << what;
      }
    }
  }
  SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
}

// The encoder's part bound, lowered for the test (SetMaxEncodedPartElementsForTests): a payload
// its part size keeps in one part is cut into the fewest parts within the bound (4 of 40,960
// elements for a bound of 16,384), and one that 8 parts within the bound cannot hold (a bound
// of 8,192) has plain locations; each decodes, on one thread and two, to the changes of the
// one-part payload and applies to the next bits.
TEST(ConcurrentEncode, PartsStayWithinTheEncodersBound) {
  std::mt19937_64 rng(80);
  World w;
  w.Add(1, DType::kBF16, 40960, rng, 0, 40960, [](uint64_t) { return 0.05; });
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 40960}};
  const EncodeOptions opt = InParts(Context::kAlways, kDefaultBandPartElements);
  const std::vector<uint8_t> whole = w.Encode(specs, opt);
  ASSERT_EQ(ModeOf(whole), CodecMode::kContextSplitRice);
  ASSERT_EQ(PartsOf(whole), 1u);
  DecodedPayload want;
  ASSERT_TRUE(DecodePayload(whole, &want, w.Lookup(), 1).ok());
  for (uint64_t bound : {uint64_t{16384}, uint64_t{8192}}) {
    SetMaxEncodedPartElementsForTests(bound);
    std::vector<uint8_t> p;
    for (int threads : {1, 2}) {
      const std::vector<uint8_t> q = w.Encode(specs, opt, nullptr, threads);
      if (threads == 1) p = q;
      EXPECT_EQ(q, p) << "bound " << bound << ": two threads' bytes differ from one's";
    }
    SetMaxEncodedPartElementsForTests(0);
    const std::string what = "bound " + std::to_string(bound);
    if (bound == 16384) {
      ASSERT_EQ(ModeOf(p), CodecMode::kContextSplitRice) << what;
      EXPECT_EQ(PartsOf(p), 4u) << what;
    } else {
      EXPECT_EQ(ModeOf(p), CodecMode::kPlain) << what;
    }
    for (int threads : {1, 2}) {
      DecodedPayload got;
      ASSERT_TRUE(DecodePayload(p, &got, w.Lookup(), threads).ok()) << what;
      ExpectSameSegments(want, got, what + ", " + std::to_string(threads) + " thread(s)");
      ASSERT_NO_FATAL_FAILURE(w.ExpectApplies(got, what));
    }
  }
}

// A band whose changes all lie in the first part: the later parts code it with count 0 (no Rice
// parameter), and every part decodes, on either thread.
TEST(ConcurrentDecode, ABandWithoutChangesInAPartDecodes) {
  std::mt19937_64 rng(78);
  World w;
  auto exponent = [](uint64_t bits) { return (bits >> 7) & 0xff; };
  w.Add(1, DType::kBF16, 150000, rng, 0, 75000, [](uint64_t) { return 0.03; });
  w.Add(2, DType::kBF16, 150000, rng, 0, 150000, [&](uint64_t old) { return exponent(old) >= 121 ? 0.0 : 0.03; });
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 150000},
                                          {2, DType::kBF16, ValueKind::kXor, 0, 150000}};
  const std::vector<uint8_t> p = w.Encode(specs, InParts(Context::kAlways, 150000));
  ASSERT_EQ(PartsOf(p), 2u);
  SetSecondPartWalkerForTests(SecondPartWalker::kHelperPath);
  const uint64_t before = GetBandPartsDecodedByHelper();
  DecodedPayload one, two;
  const Status s1 = DecodePayload(p, &one, w.Lookup(), 1), s2 = DecodePayload(p, &two, w.Lookup(), 2);
  const uint64_t after = GetBandPartsDecodedByHelper();
  SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  ASSERT_TRUE(s2.ok()) << s2.ToString();
  EXPECT_EQ(after, before + 1);
  ExpectSameSegments(one, two, "band without changes in a part");
  ASSERT_NO_FATAL_FAILURE(w.ExpectApplies(two, "band without changes in a part"));
}

// The value section on two threads (each half's symbol counts and bit stream, value codec 3's
// two streams) is byte for byte the one-thread section, for every walker setting: runs
// of every width, the cut inside a run or between runs, a run of one value, escapes few (Huffman)
// and many (byte planes), and bit streams of every length mod 8.
TEST(ConcurrentEncode, TheValueSectionOnTwoThreadsGivesTheBytesOfOneThread) {
  std::mt19937_64 rng(57);
  // Mostly XOR-like low-bit masks; `escapes` of them at or above the 12-bit escape: random
  // ones where few, where many three values over and over (which zstd packs better).
  auto values = [&](uint32_t width, uint64_t n, double escapes) {
    std::vector<uint8_t> b(n * width);
    const uint64_t top = width == 1 ? 0xff : width == 2 ? 0xffff : ~uint64_t{0} >> (64 - 8 * width);
    const uint64_t repeated[3] = {0x4000, 0x8001, 0xffff};
    for (uint64_t i = 0; i < n; ++i) {
      const bool escape = std::uniform_real_distribution<double>(0, 1)(rng) < escapes;
      uint64_t v = !escape ? (uint64_t{1} << (rng() % 5)) - 1 + (rng() % 3) : escapes < 0.1 ? rng() & top : repeated[rng() % 3];
      std::memcpy(b.data() + i * width, &v, width);
    }
    return b;
  };
  struct Case {
    std::vector<std::pair<uint32_t, uint64_t>> runs;  // width, count
    double escapes;
  };
  const std::vector<Case> cases = {
      {{{2, 40001}}, 0.001},                                // one run, cut inside it
      {{{2, 9000}, {2, 9000}, {2, 3}}, 0.0},                // cut at a run boundary, no escapes
      {{{1, 7000}, {2, 20000}, {4, 5000}, {8, 777}}, 0.01}, // every width
      {{{2, 30000}}, 0.5},                                  // escapes many: byte planes
  };
  std::vector<std::vector<uint8_t>> bytes;
  for (const Case& c : cases) {
    for (int extra = 0; extra < 3; ++extra) {  // bit streams of different lengths
      bytes.clear();
      std::vector<ValueRun> runs;
      uint64_t total = 0;
      for (const auto& [width, count] : c.runs) bytes.push_back(values(width, count + static_cast<uint64_t>(extra), c.escapes));
      for (size_t i = 0; i < c.runs.size(); ++i) {
        runs.push_back({c.runs[i].first, c.runs[i].second + static_cast<uint64_t>(extra), bytes[i]});
        total += runs.back().count;
      }
      ASSERT_GE(total, kConcurrentValuesMin);
      std::vector<uint8_t> one = {0x5a};
      const ValueCodec codec = EncodeValues(runs, 1, &one, 1);
      // From kConcurrentValuesMin values the Huffman form is in two streams.
      EXPECT_EQ(codec == ValueCodec::kHuffmanStreams, c.escapes < 0.1) << "the cases cover both forms";
      for (SecondPartWalker walker : {SecondPartWalker::kClaimed, SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn}) {
        SetSecondPartWalkerForTests(walker);
        std::vector<uint8_t> two = {0x5a};
        const ValueCodec codec_two = EncodeValues(runs, 1, &two, 2);
        SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
        const std::string what = "case with " + std::to_string(c.runs.size()) + " runs, +" + std::to_string(extra) +
                                 ", walker " + std::to_string(static_cast<int>(walker));
        EXPECT_EQ(codec_two, codec) << what;
        EXPECT_EQ(two, one) << what;
      }
    }
  }
}

}  // namespace
}  // namespace dcr
