// Codec tests, part 9: DecodeApplyPayload. A banded context-mode payload of XOR values is
// applied while it decodes (each tile's changes as the walk places them), on one thread or two;
// every other payload decodes, then applies. Either way the bytes, the decoded changes and the errors are
// those of DecodePayload followed by ApplyPayload, and a payload refused anywhere, also after
// some parts' walks have applied their tiles, leaves every tensor as it was.
#include "codec/context_test_support.h"
#include "codec/band_walk.h"
#include "codec/second_part_walker.h"

namespace dcr {
namespace {

// Copies of a world's tensors that a decode reads its old bits from and applies to.
struct Replica {
  const World& world;
  std::map<uint32_t, std::vector<uint8_t>> tensors;
  explicit Replica(const World& w) : world(w), tensors(w.base) {}
  BaseLookup Lookup() const { return world.LookupIn(tensors); }
  TensorBytes Tensors() {
    return [this](uint32_t t) {
      auto it = tensors.find(t);
      return it == tensors.end() ? std::span<uint8_t>() : std::span<uint8_t>(it->second);
    };
  }
};

struct Outcome {
  Status status;
  bool applied_while_decoding = false;
};

// DecodeApplyPayload of `p` on a replica of `w` against DecodePayload + ApplyPayload on another:
// the same status (code and message); when it succeeds, the same decoded changes (positions
// only where the values are steps: decode+apply leaves their differences) and bytes; when not,
// the replica holds the base bits.
Outcome ExpectLikeTwoSteps(const World& w, std::span<const uint8_t> p, int threads, const std::string& what) {
  Replica two(w), one(w);
  DecodedPayload d2, d1;
  Status s2 = DecodePayload(p, &d2, two.Lookup(), threads);
  if (s2.ok()) s2 = ApplyPayload(d2, two.Tensors(), threads);
  const uint64_t fused_before = GetPayloadsAppliedWhileDecoding();
  const Status s1 = DecodeApplyPayload(p, &d1, one.Lookup(), one.Tensors(), threads);
  Outcome out{s1, GetPayloadsAppliedWhileDecoding() > fused_before};
  EXPECT_EQ(s1.code(), s2.code()) << what << ": " << s1.ToString() << " | " << s2.ToString();
  EXPECT_EQ(s1.message(), s2.message()) << what;
  if (s1.ok() && s2.ok()) {
    PayloadLayout layout;
    EXPECT_TRUE(ParsePayload(p, &layout).ok()) << what;
    ExpectSameSegments(d1, d2, what, layout.val_form == ValueForm::kAsKind);
    EXPECT_EQ(one.tensors, two.tensors) << what;
  } else {
    EXPECT_EQ(one.tensors, w.base) << what << ": a refused payload changed the tensors (" << s1.ToString() << ")";
  }
  return out;
}

// BF16 changes that depend on the old exponent (several bands) plus an F32 segment, XOR values
// throughout, in parts of `part_elements` (1 part by default).
struct XorPayload {
  World w;
  std::vector<uint8_t> p;
  explicit XorPayload(uint64_t n, uint64_t part_elements = kDefaultBandPartElements, bool split_rice = true,
                      double scale = 1.0) {
    std::mt19937_64 rng(11);
    auto by_exponent = [scale](uint64_t v) {
      const uint64_t e = (v >> 7) & 0xff;
      return scale * (e < 117 ? 0.6 : e < 120 ? 0.15 : e < 122 ? 0.03 : 0.004);
    };
    w.Add(1, DType::kBF16, n, rng, 0, n, by_exponent);
    w.Add(2, DType::kF32, 3000, rng, 0, 3000, 0.05);
    EncodeOptions o = With(Context::kAlways);
    o.band_part_elements = part_elements;
    o.split_rice = split_rice;
    p = w.Encode({{1, DType::kBF16, ValueKind::kXor, 0, n / 3}, {1, DType::kBF16, ValueKind::kXor, n / 3, n - n / 3},
                  {2, DType::kF32, ValueKind::kXor, 0, 3000}},
                 o);
  }
};

TEST(DecodeApply, BandedXorPayloadsApplyWhileDecoding) {
  for (bool split_rice : {true, false})
    for (uint64_t part_elements : {kDefaultBandPartElements, uint64_t{4096}})
      for (double scale : {0.05, 1.0})
        for (int threads : {1, 2}) {
          const XorPayload c(60000, part_elements, split_rice, scale);
          ASSERT_EQ(ModeOf(c.p), split_rice ? CodecMode::kContextSplitRice : CodecMode::kContextParts);
          const std::string what = "split " + std::to_string(split_rice) + " parts of " + std::to_string(part_elements) +
                                   " scale " + std::to_string(scale) + " threads " + std::to_string(threads);
          const Outcome o = ExpectLikeTwoSteps(c.w, c.p, threads, what);
          ASSERT_TRUE(o.status.ok()) << what << ": " << o.status.ToString();
          EXPECT_TRUE(o.applied_while_decoding) << what;
          // And the result is the next step's bits.
          Replica r(c.w);
          DecodedPayload d;
          ASSERT_TRUE(DecodeApplyPayload(c.p, &d, r.Lookup(), r.Tensors(), threads).ok());
          EXPECT_EQ(r.tensors, c.w.next) << what;
        }
}

// A payload of more than kPrefetchTilesMinBytes of old bits, where both walks prefetch each
// next tile: the same bytes from one thread and two, decoded and applied to the next step's.
TEST(DecodeApply, PayloadsThatPrefetchTilesDecodeAlike) {
  const uint64_t n = kPrefetchTilesMinBytes / 2 + 3 * kMaskTileElements + 123;  // BF16, past a tile's end
  const XorPayload c(n, kDefaultBandPartElements, true, 0.2);
  ASSERT_GE(2 * n, kPrefetchTilesMinBytes);
  ASSERT_EQ(ModeOf(c.p), CodecMode::kContextSplitRice);
  for (int threads : {1, 2}) {
    const Outcome out = ExpectLikeTwoSteps(c.w, c.p, threads, "threads " + std::to_string(threads));
    ASSERT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_TRUE(out.applied_while_decoding);
    Replica r(c.w);
    DecodedPayload d;
    ASSERT_TRUE(DecodeApplyPayload(c.p, &d, r.Lookup(), r.Tensors(), threads).ok());
    EXPECT_EQ(r.tensors, c.w.next) << "threads " << threads;
  }
}

TEST(DecodeApply, OtherPayloadsDecodeThenApply) {
  // An overwrite segment among XOR ones, mode 1, and plain mode: the two steps, same bytes.
  for (const auto mode : {ContextPayload::Mode::kBands, ContextPayload::Mode::kLegacy}) {
    const ContextPayload c(0.05, 6000, mode);
    for (int threads : {1, 2}) {
      const Outcome o = ExpectLikeTwoSteps(c.w, c.p, threads, "context payload mode " + std::to_string(int(ModeOf(c.p))));
      EXPECT_TRUE(o.status.ok()) << o.status.ToString();
      EXPECT_FALSE(o.applied_while_decoding);
    }
  }
  XorPayload x(20000);
  EncodeOptions plain = With(Context::kNever);
  const std::vector<uint8_t> p = x.w.Encode({{1, DType::kBF16, ValueKind::kXor, 0, 20000}}, plain);
  ASSERT_EQ(ModeOf(p), CodecMode::kPlain);
  const Outcome o = ExpectLikeTwoSteps(x.w, p, 2, "plain");
  EXPECT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_FALSE(o.applied_while_decoding);
}

// Two threads: thread 0 decodes value share 0 (the first half of the values) and walks part 0,
// thread 1 share 1 and part 1. Where a part's changes and its thread's values do not line up
// (changes crowded into one half of the elements), a walk applies only the changes whose values
// are decoded and the rest follow; whichever thread runs first or alone, the bytes are the
// next step's and the decoded changes those of the two steps.
TEST(DecodeApply, TwoThreadsApplyEveryChangeWhereverItsValueLies) {
  constexpr uint64_t kN = 200000;
  const uint64_t part_start = kN / 2 / kBandPartAlign * kBandPartAlign;  // part 1's first element
  for (const int crowded : {0, 1, 2}) {  // changes crowded into part 0, into part 1, or even
    World w;
    std::mt19937_64 rng(21 + crowded);
    const double p0 = crowded == 0 ? 0.3 : crowded == 1 ? 0.03 : 0.15;
    w.Add(1, DType::kBF16, kN, rng, 0, kN, [&](uint64_t) { return 0.0; });
    std::uniform_real_distribution<double> u(0, 1);
    uint64_t in_part_0 = 0, changed = 0;
    for (uint64_t i = 0; i < kN; ++i) {
      const double p = i < part_start ? p0 : 0.33 - p0;
      if (u(rng) >= p) continue;
      const uint64_t old = LoadElem(w.base[1], i, 2);
      StoreElem(w.next[1], i, 2, old ^ (1 + rng() % 7));
      in_part_0 += i < part_start;
      ++changed;
    }
    EncodeOptions o = With(Context::kAlways);
    o.band_part_elements = kN / 2;
    const std::vector<uint8_t> p = w.Encode({{1, DType::kBF16, ValueKind::kXor, 0, kN}}, o);
    PayloadLayout layout;
    ASSERT_TRUE(ParsePayload(p, &layout).ok());
    ASSERT_EQ(layout.val_codec, ValueCodec::kHuffmanStreams) << "two value shares";
    ASSERT_EQ(LocationSection(p)[LocationSection(p)[0]], 2) << "two parts";
    if (crowded < 2) {
      ASSERT_GT(std::max(in_part_0, changed - in_part_0), changed * 3 / 4) << "crowded";
    }
    for (SecondPartWalker walker : {SecondPartWalker::kClaimed, SecondPartWalker::kHelperPath,
                                    SecondPartWalker::kCallerWalksOn}) {
      SetSecondPartWalkerForTests(walker);
      const std::string what = "crowded " + std::to_string(crowded) + " walker " + std::to_string(int(walker));
      const Outcome out = ExpectLikeTwoSteps(w, p, 2, what);
      EXPECT_TRUE(out.status.ok()) << what << ": " << out.status.ToString();
      EXPECT_TRUE(out.applied_while_decoding) << what;
      Replica r(w);
      DecodedPayload d;
      ASSERT_TRUE(DecodeApplyPayload(p, &d, r.Lookup(), r.Tensors(), 2).ok());
      EXPECT_EQ(r.tensors, w.next) << what;
    }
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  }
}

// Two threads whose parts hold unequal changes: the thread with fewer decodes the last bands'
// ordinals of the other's first part (an ordinal hand-off). Changes that depend on the old
// exponent (several bands), three times as dense in one half of the elements: the bytes are the
// next step's with every walker order, and a bit flipped anywhere in the location section is
// refused as one thread refuses it (a failing head or tail of the split ordinals gives one
// thread's error) with nothing applied.
TEST(DecodeApply, TwoThreadsHandOffTheHeavierPartsLastBands) {
  constexpr uint64_t kN = 200000;
  const uint64_t part_start = kN / 2 / kBandPartAlign * kBandPartAlign;
  for (const int heavy : {0, 1}) {
    World w;
    std::mt19937_64 rng(31 + heavy);
    auto by_exponent = [](uint64_t v) {
      const uint64_t e = (v >> 7) & 0xff;
      return e < 117 ? 0.3 : e < 120 ? 0.08 : e < 122 ? 0.02 : 0.003;
    };
    w.Add(1, DType::kBF16, kN, rng, 0, kN, by_exponent);
    for (uint64_t i = heavy == 0 ? 0 : part_start; i < (heavy == 0 ? part_start : kN); ++i) {  // twice more there
      const uint64_t old = LoadElem(w.base[1], i, 2);
      if (LoadElem(w.next[1], i, 2) != old || rng() % 1000000 >= static_cast<uint64_t>(2e6 * by_exponent(old))) continue;
      StoreElem(w.next[1], i, 2, old ^ (1 + rng() % 7));
    }
    EncodeOptions o = With(Context::kAlways);
    o.band_part_elements = kN / 2;
    const std::vector<uint8_t> p = w.Encode({{1, DType::kBF16, ValueKind::kXor, 0, kN}}, o);
    ASSERT_EQ(ModeOf(p), CodecMode::kContextSplitRice);
    const auto raw = LocationSection(p);
    ASSERT_GE(raw[0], 3) << "bands";
    ASSERT_EQ(raw[raw[0]], 2) << "two parts";
    for (SecondPartWalker walker : {SecondPartWalker::kClaimed, SecondPartWalker::kHelperPath,
                                    SecondPartWalker::kCallerWalksOn}) {
      SetSecondPartWalkerForTests(walker);
      const std::string what = "heavy " + std::to_string(heavy) + " walker " + std::to_string(int(walker));
      const uint64_t handed_off = GetOrdinalTailsHandedOff();
      Replica r(w);
      DecodedPayload d;
      const Status s = DecodeApplyPayload(p, &d, r.Lookup(), r.Tensors(), 2);
      ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
      EXPECT_EQ(r.tensors, w.next) << what;
      // Whoever claims the tail first decodes it, so only kCallerWalksOn, where thread 0 runs
      // wholly before thread 1, fixes who: with part 1 heavier, thread 0 decodes part 1's tail
      // after its values (handed off); with part 0 heavier, its own (not handed off). Elsewhere
      // either may, and the bytes are the same.
      if (walker == SecondPartWalker::kCallerWalksOn) {
        EXPECT_EQ(GetOrdinalTailsHandedOff(), handed_off + (heavy == 1 ? 1 : 0)) << what;
      }
      const Outcome out = ExpectLikeTwoSteps(w, p, 2, what);
      EXPECT_TRUE(out.status.ok()) << what << ": " << out.status.ToString();
    }
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
    std::mt19937_64 flips(heavy);
    int refused = 0;
    for (int i = 0; i < 300; ++i) {
      auto q = raw;
      const size_t at = rng() % q.size();
      q[at] = static_cast<uint8_t>(q[at] ^ (1u << (flips() % 8)));
      const auto walker = static_cast<SecondPartWalker>(i % 3);
      SetSecondPartWalkerForTests(walker);
      refused += !ExpectLikeTwoSteps(w, WithLocationSection(p, q), 2, "flip " + std::to_string(at)).status.ok();
    }
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
    EXPECT_GT(refused, 150) << "heavy " << heavy;
  }
}

// Whether `message` refuses a part's ordinals (its split Rice code, not its header fields or
// its walk) in a part after the first: on one thread, every part before it has been walked and
// applied by then.
bool IsOrdinalErrorAfterPartZero(const std::string& message) {
  const size_t at = message.rfind(" in part ");
  const bool ordinals = message.find("split Rice") != std::string::npos || message.find("out-of-range gap") != std::string::npos;
  return at != std::string::npos && ordinals && std::stoul(message.substr(at + 9)) > 0;
}

// The band thresholds moved, re-signed: the same counts and streams against other bands. Many
// such payloads are refused only by a walk's checks (a band's ordinals past its population, a
// segment's count), after that walk, and other parts' walks, have applied their tiles.
TEST(DecodeApply, PayloadsRefusedByAWalkLeaveTheTensorsAsTheyWere) {
  const XorPayload c(60000, 4096);
  const auto raw = LocationSection(c.p);
  const uint8_t k = raw[0];
  ASSERT_GE(k, 3) << "the fit should use several bands on exponent-dependent changes";
  ASSERT_EQ(raw[k], 8) << "parts";
  int walk_refusals = 0;
  for (size_t t = 1; t < k; ++t)
    for (int shift : {-4, -2, -1, 1, 2, 4}) {
      auto loc = raw;
      const int moved = int{loc[t]} + shift;
      if (moved < 1 || moved > 255 || (t > 1 && moved <= loc[t - 1]) || (t + 1 < k && moved >= loc[t + 1])) continue;
      loc[t] = static_cast<uint8_t>(moved);
      const std::vector<uint8_t> q = WithLocationSection(c.p, loc);
      for (int threads : {1, 2}) {
        const Outcome o =
            ExpectLikeTwoSteps(c.w, q, threads, "threshold " + std::to_string(t) + " shift " + std::to_string(shift));
        const std::string& m = o.status.message();
        walk_refusals += m.find("past its population") != std::string::npos || m.find("table entry") != std::string::npos;
      }
      // Also a bit flipped in the parts' streams: where a later part's ordinals fail, the
      // earlier parts' walks still decide the error, as on one thread.
      std::mt19937_64 rng(t * 16 + static_cast<uint64_t>(shift + 8));
      for (int i = 0; i < 16; ++i) {
        auto flipped = loc;
        const size_t at = flipped.size() / 8 + rng() % (flipped.size() - flipped.size() / 8);
        flipped[at] = static_cast<uint8_t>(flipped[at] ^ (1u << (rng() % 8)));
        const std::string what = "threshold " + std::to_string(t) + " shift " + std::to_string(shift) + " flip " +
                                 std::to_string(at);
        ExpectLikeTwoSteps(c.w, WithLocationSection(c.p, flipped), 2, what);
      }
    }
  EXPECT_GT(walk_refusals, 4);
  // A bit flipped in the streams of the payload as encoded: on one thread, where a later part's
  // ordinals fail, every part before it has been walked and applied, and is undone.
  std::mt19937_64 rng(99);
  int later_ordinal_refusals = 0;
  for (int i = 0; i < 300; ++i) {
    auto flipped = raw;
    const size_t at = flipped.size() / 8 + rng() % (flipped.size() - flipped.size() / 8);
    flipped[at] = static_cast<uint8_t>(flipped[at] ^ (1u << (rng() % 8)));
    for (int threads : {1, 2}) {
      const Outcome o = ExpectLikeTwoSteps(c.w, WithLocationSection(c.p, flipped), threads, "flip " + std::to_string(at));
      later_ordinal_refusals += threads == 1 && IsOrdinalErrorAfterPartZero(o.status.message());
    }
  }
  EXPECT_GT(later_ordinal_refusals, 100);
}

// Random edits anywhere in the sections (values too), re-signed: refused alike, nothing written.
TEST(DecodeApply, RandomSectionEditsAreRefusedAlikeOrApplyAlike) {
  const XorPayload c(30000, 4096);
  PayloadLayout layout;
  ASSERT_TRUE(ParsePayload(c.p, &layout).ok());
  const size_t sections_at = static_cast<size_t>(layout.loc_stored.data() - c.p.data());
  std::mt19937_64 rng(5);
  int refused = 0;
  for (int i = 0; i < 600; ++i) {
    std::vector<uint8_t> q = c.p;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = sections_at + rng() % (q.size() - 8 - sections_at);
      q[at] = static_cast<uint8_t>(q[at] ^ (1u << (rng() % 8)));
    }
    Resign(q);
    // One thread, then two with each order of their steps (DecodeApplyBandedLocations).
    const int threads = 1 + (i % 4 != 0);
    const auto walker = static_cast<SecondPartWalker>(i % 3);
    SetSecondPartWalkerForTests(walker);
    const Outcome o = ExpectLikeTwoSteps(c.w, q, threads, "edit " + std::to_string(i));
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
    refused += !o.status.ok();
  }
  EXPECT_GT(refused, 300);
}

TEST(DecodeApply, ChecksComeBeforeAnyWrite) {
  const XorPayload c(20000);
  Replica r(c.w);
  DecodedPayload d;
  // The layout check's error, as it gave it.
  const Status refused = DecodeApplyPayload(c.p, &d, r.Lookup(), r.Tensors(), 2,
                                            [](const PayloadLayout&) { return WrongBase("not this delta's payload"); });
  EXPECT_EQ(refused.code(), StatusCode::kWrongBase);
  EXPECT_EQ(refused.message(), "not this delta's payload");
  EXPECT_EQ(r.tensors, c.w.base);
  // A tensor shorter than a segment: kCorrupt, naming the segment.
  r.tensors.at(2).resize(100 * 4);
  const Status short_tensor = DecodeApplyPayload(c.p, &d, r.Lookup(), r.Tensors(), 2);
  EXPECT_EQ(short_tensor.code(), StatusCode::kCorrupt);
  EXPECT_NE(short_tensor.message().find("segment [0, +3000)"), std::string::npos) << short_tensor.ToString();
  EXPECT_EQ(r.tensors.at(1), c.w.base.at(1));
}

}  // namespace
}  // namespace dcr
