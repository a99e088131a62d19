// Codec tests, part 5: context mode (codec mode 1, context_coding.h). Locations are coded per
// class of the old value's exponent across all segments of a payload, so decoding needs the old
// bits. Round trips for every dtype, density and value kind; kWhenSmaller picks one of the two
// forms and decodes identically; without a base the payload is kUnsupported; against a different
// base it never crashes and never addresses elements outside its segments; hostile class tables
// are kCorrupt.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/context_coding.h"
#include "codec/payload_codec.h"
#include "codec/section_coding.h"

namespace dcr {
namespace {

using Context = EncodeOptions::Context;

// Header field offsets (docs/format.md §2).
enum : size_t {
  kMagic = 0, kVersion = 4, kMode = 6, kBlockLog2 = 7, kTransfer = 8, kSegments = 24, kTableLen = 28,
  kLocCodec = 32, kValCodec = 33, kLocRaw = 40, kLocStored = 48, kValRaw = 56, kValStored = 64,
};

const PayloadIdentity kIdentity{0xc0ffee, 4, 9};

uint64_t LoadElem(const std::vector<uint8_t>& v, size_t i, uint32_t w) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + i * w, w);
  return x;
}
void StoreElem(std::vector<uint8_t>& v, size_t i, uint32_t w, uint64_t x) { std::memcpy(v.data() + i * w, &x, w); }
uint64_t MaskFor(uint32_t w) { return w == 8 ? ~0ull : (1ull << (8 * w)) - 1; }

void Resign(std::vector<uint8_t>& p) { StoreLe(p.data() + p.size() - 8, XXH3_64bits(p.data(), p.size() - 8), 8); }

const std::vector<DType>& AllDTypes() {
  static const std::vector<DType> v = {DType::kBF16, DType::kF16, DType::kF32, DType::kF64, DType::kF8E4M3,
                                       DType::kF8E5M2, DType::kI8, DType::kU8, DType::kI16, DType::kU16,
                                       DType::kI32, DType::kU32, DType::kI64, DType::kU64, DType::kBool};
  return v;
}

// Exponent and mantissa widths of the float dtypes; {0, 0} for the others.
std::pair<int, int> FloatBits(DType t) {
  switch (t) {
    case DType::kBF16: return {8, 7};
    case DType::kF16: return {5, 10};
    case DType::kF32: return {8, 23};
    case DType::kF64: return {11, 52};
    case DType::kF8E4M3: return {4, 3};
    case DType::kF8E5M2: return {5, 2};
    default: return {0, 0};
  }
}

// Element bits as trained weights have them: floats of either sign with exponents spread over a
// dozen binades below 1 (so many classes), now and then a zero, subnormal, inf or NaN.
uint64_t WeightBits(DType t, std::mt19937_64& rng) {
  const uint32_t w = DTypeWidth(t);
  if (t == DType::kBool) return rng() & 1;
  auto [e, m] = FloatBits(t);
  if (e == 0) return rng() & MaskFor(w);
  const uint64_t emax = (1ull << e) - 1, bias = emax / 2;
  uint64_t exp;
  switch (rng() % 40) {
    case 0: exp = 0; break;
    case 1: exp = emax; break;
    default: exp = bias > 12 ? bias - rng() % 12 : rng() % (emax + 1); break;
  }
  const uint64_t man = rng() & ((1ull << m) - 1);
  const uint64_t sign = rng() & 1;
  return (sign << (e + m)) | (exp << m) | man;
}

// A changed value: a few low bits flipped (one-ulp-like steps) or, sometimes, random bits.
uint64_t ChangedBits(DType t, uint64_t old, std::mt19937_64& rng) {
  const uint64_t mask = MaskFor(DTypeWidth(t));
  if (t == DType::kBool) return old ^ 1;
  for (;;) {
    uint64_t v = rng() % 8 == 0 ? rng() & mask : old ^ (((1ull << (1 + rng() % 3)) - 1) & mask);
    if (v != old) return v;
  }
}

// Tensors held by index, with the base lookup a receiver would give: the segment's old bytes.
struct World {
  std::map<uint32_t, DType> dtype;
  std::map<uint32_t, std::vector<uint8_t>> base, next;

  // Adds tensor `index` of n elements; elements in [from, to) change with probability p(old).
  template <typename P>
  void Add(uint32_t index, DType t, uint64_t n, std::mt19937_64& rng, uint64_t from, uint64_t to, P&& p) {
    const uint32_t w = DTypeWidth(t);
    dtype[index] = t;
    auto& b = base[index];
    b.resize(n * w);
    for (uint64_t i = 0; i < n; ++i) StoreElem(b, i, w, WeightBits(t, rng));
    auto& x = next[index];
    x = b;
    std::uniform_real_distribution<double> u(0, 1);
    for (uint64_t i = from; i < to; ++i)
      if (u(rng) < p(LoadElem(b, i, w))) StoreElem(x, i, w, ChangedBits(t, LoadElem(b, i, w), rng));
  }
  void Add(uint32_t index, DType t, uint64_t n, std::mt19937_64& rng, uint64_t from, uint64_t to, double density) {
    Add(index, t, n, rng, from, to, [density](uint64_t) { return density; });
  }

  std::span<const uint8_t> Seg(const std::vector<uint8_t>& v, const SegmentSpec& s) const {
    const uint32_t w = DTypeWidth(s.dtype);
    return std::span<const uint8_t>(v).subspan(s.start * w, s.count * w);
  }

  BaseLookup Lookup() const {
    return [this](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
      auto it = base.find(s.tensor_index);
      if (it == base.end()) return Corrupt("no tensor " + std::to_string(s.tensor_index));
      const uint32_t w = DTypeWidth(s.dtype);
      if (s.dtype != dtype.at(s.tensor_index) || s.start > it->second.size() / w ||
          s.count > it->second.size() / w - s.start)
        return Corrupt("segment does not fit");
      return Seg(it->second, s);
    };
  }

  // Encodes `specs` (ascending) with `opt`; returns the payload and the number of changes.
  std::vector<uint8_t> Encode(const std::vector<SegmentSpec>& specs, const EncodeOptions& opt, uint64_t* changed = nullptr) const {
    PayloadBuilder b(opt);
    for (const SegmentSpec& s : specs) b.AddDiff(s, Seg(base.at(s.tensor_index), s), Seg(next.at(s.tensor_index), s));
    if (changed) *changed = b.changed();
    std::vector<uint8_t> p;
    if (b.segments() > 0) b.Finish(kIdentity, &p);
    return p;
  }

  // Applies every segment to a copy of the bases and expects exactly the next bits.
  void ExpectApplies(const DecodedPayload& d, const std::string& what) const {
    auto tensors = base;
    for (const DecodedSegment& seg : d.segments) ASSERT_TRUE(ApplySegment(seg, tensors.at(seg.spec.tensor_index)).ok()) << what;
    // Elements outside the segments keep their base bits; inside they take the next bits.
    for (auto& [index, bytes] : tensors) {
      std::vector<uint8_t> want = base.at(index);
      for (const DecodedSegment& seg : d.segments) {
        if (seg.spec.tensor_index != index) continue;
        const uint32_t w = DTypeWidth(seg.spec.dtype);
        std::memcpy(want.data() + seg.spec.start * w, next.at(index).data() + seg.spec.start * w, seg.spec.count * w);
      }
      ASSERT_EQ(bytes, want) << what << " tensor " << index;
    }
  }
};

EncodeOptions With(Context c, int block_log2 = kDefaultLocationBlockLog2) {
  EncodeOptions o;
  o.context = c;
  o.block_log2 = block_log2;
  return o;
}

CodecMode ModeOf(const std::vector<uint8_t>& p) {
  PayloadLayout l;
  Status s = ParsePayload(p, &l);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return l.mode;
}

void ExpectSameSegments(const DecodedPayload& a, const DecodedPayload& b, const std::string& what) {
  ASSERT_EQ(a.segments.size(), b.segments.size()) << what;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const auto &x = a.segments[i], &y = b.segments[i];
    EXPECT_EQ(x.spec.tensor_index, y.spec.tensor_index) << what;
    EXPECT_EQ(x.spec.dtype, y.spec.dtype) << what;
    EXPECT_EQ(x.spec.kind, y.spec.kind) << what;
    EXPECT_EQ(x.spec.start, y.spec.start) << what;
    EXPECT_EQ(x.spec.count, y.spec.count) << what;
    ASSERT_EQ(x.changes.width, y.changes.width) << what;
    ASSERT_EQ(x.changes.positions, y.changes.positions) << what << " segment " << i;
    ASSERT_EQ(x.changes.values, y.changes.values) << what << " segment " << i;
  }
}

// The decoder contract, as in codec_hostile_test.cc: positions inside their segment, strictly
// ascending, one value per position, exactly the declared number of changes.
void ExpectWellFormed(const DecodedPayload& d, const PayloadLayout& layout) {
  ASSERT_EQ(d.segments.size(), layout.segments.size());
  for (size_t i = 0; i < d.segments.size(); ++i) {
    const DecodedSegment& s = d.segments[i];
    ASSERT_EQ(s.changes.size(), layout.changed[i]);
    ASSERT_EQ(s.changes.values.size(), s.changes.size() * DTypeWidth(s.spec.dtype));
    for (size_t k = 0; k < s.changes.size(); ++k) {
      ASSERT_LT(s.changes.positions[k], s.spec.count);
      if (k > 0) {
        ASSERT_LT(s.changes.positions[k - 1], s.changes.positions[k]);
      }
    }
  }
}

std::vector<uint8_t> LocationSection(const std::vector<uint8_t>& p);

// The decoder's limit on a location section (docs/format.md §2.1), in either mode.
uint64_t LocationBound(const std::vector<DecodedSegment>& segs, int block_log2) {
  uint64_t b = 0;
  for (const DecodedSegment& s : segs) b += ((s.spec.count >> block_log2) + 1) * 12 + s.spec.count / 8 + 8;
  return b;
}

// Encodes `specs` plainly, with kAlways, and when smaller; checks that each decodes to the same
// segments, that context mode needs the base, and that the segments apply exactly. kAlways
// gives context mode unless its code would exceed the decoder's location limit (then plain);
// returns the mode it gave.
CodecMode ExpectContextRoundTrip(const World& w, const std::vector<SegmentSpec>& specs, const std::string& what,
                                 int block_log2 = kDefaultLocationBlockLog2) {
  uint64_t changed = 0;
  const auto plain = w.Encode(specs, With(Context::kNever, block_log2), &changed);
  if (changed == 0) return CodecMode::kPlain;
  const auto ctx = w.Encode(specs, With(Context::kAlways, block_log2));
  const auto smaller = w.Encode(specs, With(Context::kWhenSmaller, block_log2));
  EXPECT_FALSE(ctx.empty());
  EXPECT_EQ(ctx, w.Encode(specs, With(Context::kAlways, block_log2))) << what << ": not deterministic";
  EXPECT_EQ(ModeOf(plain), CodecMode::kPlain) << what;
  // kWhenSmaller emits exactly one of the two forms.
  EXPECT_TRUE(smaller == plain || smaller == ctx) << what;

  DecodedPayload dp, dc, ds;
  Status s = DecodePayload(plain, &dp);
  EXPECT_TRUE(s.ok()) << what << ": " << s.ToString();
  if (!s.ok()) return CodecMode::kPlain;
  // The context code, computed here from the decoded positions, decides kAlways' mode.
  std::vector<uint8_t> code;
  {
    std::vector<ContextSegment> segs;
    std::vector<std::span<const uint32_t>> positions;
    for (const DecodedSegment& seg : dp.segments) {
      segs.push_back({seg.spec.dtype, w.Seg(w.base.at(seg.spec.tensor_index), seg.spec)});
      positions.push_back(seg.changes.positions);
    }
    EncodeContextLocations(segs, positions, &code);
  }
  const CodecMode want = code.size() <= LocationBound(dp.segments, block_log2) ? CodecMode::kContext : CodecMode::kPlain;
  EXPECT_EQ(ModeOf(ctx), want) << what << ": context code " << code.size() << " bytes";
  if (want == CodecMode::kPlain) {
    EXPECT_EQ(ctx, plain) << what;
    EXPECT_EQ(smaller, plain) << what;
  } else {
    EXPECT_EQ(LocationSection(ctx), code) << what;
  }
  s = DecodePayload(ctx, &dc, w.Lookup());
  EXPECT_TRUE(s.ok()) << what << " (kAlways): " << s.ToString();
  if (!s.ok()) return want;
  EXPECT_EQ(dc.mode, want);
  EXPECT_EQ(dc.identity, kIdentity);
  EXPECT_EQ(dc.changed(), changed);
  ExpectSameSegments(dp, dc, what + " (context)");
  s = DecodePayload(smaller, &ds, w.Lookup());
  EXPECT_TRUE(s.ok()) << what << " (when smaller): " << s.ToString();
  ExpectSameSegments(dp, ds, what + " (when smaller)");
  // A plain payload ignores the base it is given.
  DecodedPayload dpb;
  EXPECT_TRUE(DecodePayload(plain, &dpb, w.Lookup()).ok());
  ExpectSameSegments(dp, dpb, what + " (plain with base)");
  // Without the old bits a context payload cannot be decoded.
  if (want == CodecMode::kContext) {
    DecodedPayload none;
    EXPECT_EQ(DecodePayload(ctx, &none).code(), StatusCode::kUnsupported) << what;
  }
  w.ExpectApplies(dc, what);
  return want;
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
          EXPECT_EQ(m, CodecMode::kContext) << what;
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
  EXPECT_EQ(ExpectContextRoundTrip(w, specs, "mixed"), CodecMode::kContext);
  for (int block_log2 : {3, 8, 12})
    EXPECT_EQ(ExpectContextRoundTrip(w, specs, "mixed, blocks 2^" + std::to_string(block_log2), block_log2), CodecMode::kContext);
}

TEST(ContextRoundTrip, SmallSegmentsWithManyClassesAndEveryElementChanged) {
  // Segments of a few elements whose old values each have their own exponent: the class table
  // dominates the location code, which can exceed the decoder's location limit. kAlways then
  // falls back to plain mode (it used to emit a payload its own decoder refused).
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
      (ExpectContextRoundTrip(w, specs, std::string(DTypeName(t)) + " n " + std::to_string(n)) == CodecMode::kContext ? context : plain)++;
      if (testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(context, 0);
  EXPECT_GT(plain, 0);
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
  EXPECT_EQ(ModeOf(smaller), CodecMode::kContext);
  EXPECT_LT(smaller.size(), w.Encode(specs, With(Context::kNever)).size());
  // One contiguous run: plain location coding stores it as a range; context mode cannot beat that.
  World r;
  r.Add(0, DType::kU8, 100000, rng, 20000, 30000, 1.0);
  const std::vector<SegmentSpec> run = {{0, DType::kU8, ValueKind::kXor, 0, 100000}};
  ExpectContextRoundTrip(r, run, "run");
  EXPECT_EQ(ModeOf(r.Encode(run, With(Context::kWhenSmaller))), CodecMode::kPlain);
}

// ---------------------------------------------------------------------------------------------
// Decoding needs the right base

// A BF16 + F32 + U8 payload in context mode (sections stored raw or zstd as the encoder chose).
struct ContextPayload {
  World w;
  std::vector<SegmentSpec> specs;
  std::vector<uint8_t> p;
  explicit ContextPayload(double density = 0.02, uint64_t n = 6000) {
    std::mt19937_64 rng(6);
    w.Add(1, DType::kBF16, n, rng, 0, n, density);
    w.Add(3, DType::kF32, 500, rng, 0, 500, density * 5);
    w.Add(4, DType::kU8, 300, rng, 0, 300, 0.1);
    specs = {{1, DType::kBF16, ValueKind::kXor, 0, n / 2}, {1, DType::kBF16, ValueKind::kXor, n / 2, n - n / 2},
             {3, DType::kF32, ValueKind::kOverwrite, 0, 500}, {4, DType::kU8, ValueKind::kXor, 0, 300}};
    p = w.Encode(specs, With(Context::kAlways));
  }
};

TEST(ContextDecode, WithoutABaseIsUnsupportedButTheLayoutParses) {
  ContextPayload c;
  DecodedPayload d;
  Status s = DecodePayload(c.p, &d);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_FALSE(s.message().empty());
  PayloadLayout l;
  ASSERT_TRUE(ParsePayload(c.p, &l).ok());
  EXPECT_EQ(l.mode, CodecMode::kContext);
  EXPECT_EQ(l.identity, kIdentity);
  ASSERT_EQ(l.segments.size(), c.specs.size());
  for (size_t i = 0; i < l.segments.size(); ++i) {
    EXPECT_EQ(l.segments[i].tensor_index, c.specs[i].tensor_index);
    EXPECT_EQ(l.segments[i].start, c.specs[i].start);
    EXPECT_EQ(l.segments[i].count, c.specs[i].count);
    EXPECT_GT(l.changed[i], 0u);
  }
  EXPECT_EQ(c.p[kMode], 1);
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

// ---------------------------------------------------------------------------------------------
// Hostile context payloads

StatusCode DecodeWith(const World& w, std::span<const uint8_t> p) {
  DecodedPayload d;
  return DecodePayload(p, &d, w.Lookup()).code();
}

TEST(ContextHostile, EveryTruncationAndEveryBitFlipIsCorrupt) {
  for (double density : {0.02, 1.0}) {
    ContextPayload c(density, 2000);
    ASSERT_EQ(DecodeWith(c.w, c.p), StatusCode::kOk);
    for (size_t len = 0; len < c.p.size(); ++len)
      ASSERT_EQ(DecodeWith(c.w, std::span<const uint8_t>(c.p.data(), len)), StatusCode::kCorrupt) << "length " << len;
    auto longer = c.p;
    longer.push_back(0);
    EXPECT_EQ(DecodeWith(c.w, longer), StatusCode::kCorrupt);
    for (size_t byte = 0; byte < c.p.size(); ++byte)
      for (int bit = 0; bit < 8; ++bit) {
        auto q = c.p;
        q[byte] ^= static_cast<uint8_t>(1u << bit);
        ASSERT_EQ(DecodeWith(c.w, q), StatusCode::kCorrupt) << "byte " << byte << " bit " << bit;
      }
  }
}

// The parts of a context location code: class table and Rice bit stream (docs/format.md §2.6).
struct ClassCode {
  struct Entry {
    uint8_t id;
    uint64_t k;
    uint8_t rice;
  };
  std::vector<Entry> entries;
  std::vector<uint8_t> bits;

  static ClassCode Parse(std::span<const uint8_t> raw) {
    ClassCode c;
    ByteReader r(raw);
    uint64_t present = 0;
    EXPECT_TRUE(r.ReadVarint(&present));
    for (uint64_t i = 0; i < present; ++i) {
      Entry e{};
      EXPECT_TRUE(r.ReadByte(&e.id) && r.ReadVarint(&e.k) && r.ReadByte(&e.rice));
      c.entries.push_back(e);
    }
    auto rest = r.Rest();
    c.bits.assign(rest.begin(), rest.end());
    return c;
  }
  std::vector<uint8_t> Bytes(int64_t present_override = -1) const {
    std::vector<uint8_t> out;
    PutVarint(out, present_override >= 0 ? static_cast<uint64_t>(present_override) : entries.size());
    for (const Entry& e : entries) {
      out.push_back(e.id);
      PutVarint(out, e.k);
      out.push_back(e.rice);
    }
    out.insert(out.end(), bits.begin(), bits.end());
    return out;
  }
};

// The raw location section of a payload.
std::vector<uint8_t> LocationSection(const std::vector<uint8_t>& p) {
  PayloadLayout l;
  EXPECT_TRUE(ParsePayload(p, &l).ok());
  std::vector<uint8_t> raw;
  EXPECT_TRUE(DecompressSection(l.loc_codec, l.loc_stored, l.loc_raw, &raw).ok());
  return raw;
}

// `p` with its location section replaced by `loc`, stored raw, and re-signed.
std::vector<uint8_t> WithLocationSection(const std::vector<uint8_t>& p, const std::vector<uint8_t>& loc) {
  const uint64_t table_len = LoadLe(p.data() + kTableLen, 4), loc_stored = LoadLe(p.data() + kLocStored, 8);
  const size_t loc_at = kPayloadHeaderBytes + table_len;
  std::vector<uint8_t> q(p.begin(), p.begin() + static_cast<ptrdiff_t>(loc_at));
  q.insert(q.end(), loc.begin(), loc.end());
  q.insert(q.end(), p.begin() + static_cast<ptrdiff_t>(loc_at + loc_stored), p.end());
  q[kLocCodec] = static_cast<uint8_t>(SectionCodec::kRaw);
  StoreLe(q.data() + kLocRaw, loc.size(), 8);
  StoreLe(q.data() + kLocStored, loc.size(), 8);
  Resign(q);
  return q;
}

TEST(ContextHostile, ResignedBadClassTablesAreCorrupt) {
  ContextPayload c(0.05);
  const auto raw = LocationSection(c.p);
  const ClassCode code = ClassCode::Parse(raw);
  ASSERT_GE(code.entries.size(), 3u);
  ASSERT_EQ(code.Bytes(), raw);
  // The re-assembled payload decodes as the original does (the helpers are faithful).
  {
    DecodedPayload a, b;
    ASSERT_TRUE(DecodePayload(c.p, &a, c.w.Lookup()).ok());
    Status s = DecodePayload(WithLocationSection(c.p, raw), &b, c.w.Lookup());
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectSameSegments(a, b, "re-assembled");
  }
  const auto kC = StatusCode::kCorrupt;
  auto decode = [&](const ClassCode& k, int64_t present = -1) { return DecodeWith(c.w, WithLocationSection(c.p, k.Bytes(present))); };
  auto decode_raw = [&](const std::vector<uint8_t>& loc) { return DecodeWith(c.w, WithLocationSection(c.p, loc)); };
  ASSERT_EQ(decode(code), StatusCode::kOk);

  ClassCode k = code;
  std::swap(k.entries[0], k.entries[1]);  // class ids not ascending
  EXPECT_EQ(decode(k), kC) << "swapped classes";
  k = code;
  k.entries[1].id = k.entries[0].id;  // a class twice
  EXPECT_EQ(decode(k), kC) << "duplicate class";
  k = code;
  k.entries.back().id = k.entries.front().id;  // last class id below the others
  EXPECT_EQ(decode(k), kC) << "descending last class";
  // Counts that do not add up to the payload's changes, or a class without changes.
  for (size_t i : {size_t{0}, code.entries.size() - 1}) {
    k = code;
    k.entries[i].k += 1;
    EXPECT_EQ(decode(k), kC) << "class " << i << " count + 1";
    k = code;
    k.entries[i].k -= 1;
    EXPECT_EQ(decode(k), kC) << "class " << i << " count - 1";
    k = code;
    k.entries[i].k = 0;
    EXPECT_EQ(decode(k), kC) << "class " << i << " count 0";
    k = code;
    k.entries[i].k = 1ull << 40;
    EXPECT_EQ(decode(k), kC) << "class " << i << " count 2^40";
    k = code;
    k.entries[i].k = UINT64_MAX;
    EXPECT_EQ(decode(k), kC) << "class " << i << " count max";
  }
  // Rice parameters over 30.
  for (uint8_t rice : {31, 32, 63, 255}) {
    k = code;
    k.entries[1].rice = rice;
    EXPECT_EQ(decode(k), kC) << "rice " << int{rice};
  }
  // Class counts: none, more than 256, or entries missing.
  EXPECT_EQ(decode(code, 0), kC);
  EXPECT_EQ(decode(code, 257), kC);
  EXPECT_EQ(decode(code, 1ll << 40), kC);
  k = code;
  k.entries.pop_back();
  EXPECT_EQ(decode(k, static_cast<int64_t>(code.entries.size())), kC) << "one entry missing";
  // The bit stream: trailing bytes, a missing last byte, nothing at all.
  for (uint8_t extra : {0x00, 0x01, 0xff}) {
    auto loc = raw;
    loc.push_back(extra);
    EXPECT_EQ(decode_raw(loc), kC) << "trailing byte " << int{extra};
  }
  k = code;
  k.bits.pop_back();
  EXPECT_EQ(decode(k), kC) << "last bit byte missing";
  k.bits.clear();
  EXPECT_EQ(decode(k), kC) << "no bits";
  EXPECT_EQ(decode_raw({}), kC) << "empty section";
  // A class no old value belongs to: its ordinals lie past its (empty) population.
  {
    std::vector<bool> populated(256, false);
    for (const auto& [index, bytes] : c.w.base) {
      const DType t = c.w.dtype.at(index);
      const ContextClassFn f = ContextClassFor(t);
      const uint32_t wd = DTypeWidth(t);
      for (size_t i = 0; i < bytes.size() / wd; ++i) populated[(LoadElem(bytes, i, wd) >> f.shift) & f.mask] = true;
    }
    k = code;
    int id = 255;
    while (id > k.entries[k.entries.size() - 2].id && populated[static_cast<size_t>(id)]) --id;
    ASSERT_GT(id, k.entries[k.entries.size() - 2].id);
    k.entries.back().id = static_cast<uint8_t>(id);
    EXPECT_EQ(decode(k), kC) << "empty class " << id;
  }
  // Moving one change between two classes keeps the total: refused or well formed.
  k = code;
  k.entries[0].k -= 1;
  k.entries[1].k += 1;
  if (k.entries[0].k > 0) {
    DecodedPayload d;
    auto q = WithLocationSection(c.p, k.Bytes());
    Status s = DecodePayload(q, &d, c.w.Lookup());
    if (s.ok()) {
      PayloadLayout l;
      ASSERT_TRUE(ParsePayload(q, &l).ok());
      ExpectWellFormed(d, l);
    } else {
      EXPECT_EQ(s.code(), kC);
    }
  }
}

TEST(ContextHostile, ResignedRandomLocationEditsAreCorruptOrWellFormed) {
  ContextPayload c(0.05, 3000);
  const auto raw = LocationSection(c.p);
  PayloadLayout layout;
  ASSERT_TRUE(ParsePayload(c.p, &layout).ok());
  std::mt19937_64 rng(8);
  int refused = 0;
  for (int i = 0; i < 4000; ++i) {
    auto loc = raw;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % 3 == 0 ? rng() % std::min<size_t>(loc.size(), 40) : rng() % loc.size();
      loc[at] = rng() % 3 == 0 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(loc[at] ^ (1u << (rng() % 8)));
    }
    if (rng() % 8 == 0) loc.resize(loc.size() - 1 - rng() % std::min<size_t>(loc.size() - 1, 8));
    DecodedPayload d;
    Status s = DecodePayload(WithLocationSection(c.p, loc), &d, c.w.Lookup());
    if (s.ok()) {
      ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(d, layout));
    } else {
      ++refused;
      ASSERT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
    }
  }
  EXPECT_GT(refused, 2000);
}

// ---------------------------------------------------------------------------------------------
// Hand-built context payloads: the format as documented, written without the encoder.

std::vector<uint8_t> Seg(DType dtype, ValueKind kind, uint64_t tensor, uint64_t start, uint64_t count, uint64_t n) {
  std::vector<uint8_t> t = {DTypeCode(dtype), static_cast<uint8_t>(kind)};
  PutVarint(t, tensor);
  PutVarint(t, start);
  PutVarint(t, count);
  PutVarint(t, n);
  return t;
}
std::vector<uint8_t> Cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A context-mode payload with raw sections and raw byte-plane values.
std::vector<uint8_t> CraftContext(uint32_t segments, const std::vector<uint8_t>& table, const std::vector<uint8_t>& loc,
                                  const std::vector<uint8_t>& val) {
  std::vector<uint8_t> p(kPayloadHeaderBytes, 0);
  StoreLe(p.data() + kMagic, kPayloadMagic, 4);
  StoreLe(p.data() + kVersion, kPayloadFormatVersion, 2);
  p[kMode] = static_cast<uint8_t>(CodecMode::kContext);
  p[kBlockLog2] = 16;
  StoreLe(p.data() + kTransfer, 5, 8);
  StoreLe(p.data() + kSegments, segments, 4);
  StoreLe(p.data() + kTableLen, table.size(), 4);
  p[kValCodec] = static_cast<uint8_t>(ValueCodec::kPlanesRaw);
  StoreLe(p.data() + kLocRaw, loc.size(), 8);
  StoreLe(p.data() + kLocStored, loc.size(), 8);
  StoreLe(p.data() + kValRaw, val.size(), 8);
  StoreLe(p.data() + kValStored, val.size(), 8);
  p.insert(p.end(), table.begin(), table.end());
  p.insert(p.end(), loc.begin(), loc.end());
  p.insert(p.end(), val.begin(), val.end());
  p.resize(p.size() + 8);
  Resign(p);
  return p;
}

TEST(ContextHostile, HandBuiltContextCodesFollowTheFormat) {
  const auto kC = StatusCode::kCorrupt;
  // U8 (class 0 only): one change at 5: present 1, class 0, k 1, rice 0, gap 5 = 11111 0.
  std::vector<uint8_t> u8_base(16, 9);
  BaseLookup u8_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(u8_base); };
  const auto u8_table = Seg(DType::kU8, ValueKind::kXor, 0, 0, 16, 1);
  auto u8 = [&](const std::vector<uint8_t>& loc) {
    DecodedPayload d;
    Status s = DecodePayload(CraftContext(1, u8_table, loc, {0x42}), &d, u8_lookup);
    if (s.ok()) {
      EXPECT_EQ(d.segments[0].changes.values, (std::vector<uint8_t>{0x42}));
      return d.segments[0].changes.positions.empty() ? int64_t{-1} : int64_t{d.segments[0].changes.positions[0]};
    }
    return -static_cast<int64_t>(s.code()) - 100;
  };
  const int64_t corrupt = -static_cast<int64_t>(kC) - 100;
  EXPECT_EQ(u8({1, 0, 1, 0, 0x1f}), 5);
  EXPECT_EQ(u8({1, 0, 1, 2, 0x05}), 5);              // rice 2: q=1 (1 0), r=01: bits 1 0 1 0 -> 0b0101
  EXPECT_EQ(u8({1, 0, 1, 0, 0xff, 0x7f}), 15);       // the last element
  EXPECT_EQ(u8({1, 0, 1, 0, 0xff, 0xff}), corrupt);  // gap 16 of 16 elements
  EXPECT_EQ(u8({1, 1, 1, 0, 0x1f}), corrupt);        // class 1: integers have class 0 only
  EXPECT_EQ(u8({1, 0, 1, 31, 0x1f, 0, 0, 0}), corrupt);  // rice 31
  EXPECT_EQ(u8({1, 0, 2, 0, 0x1f}), corrupt);        // two changes in a one-change payload
  EXPECT_EQ(u8({2, 0, 1, 0, 1, 1, 0, 0x1f}), corrupt);  // a second class
  EXPECT_EQ(u8({1, 0, 1, 0, 0x1f, 0x00}), corrupt);  // trailing byte
  EXPECT_EQ(u8({1, 0, 1, 0}), corrupt);              // no bits
  EXPECT_EQ(u8({0}), corrupt);                       // no classes
  EXPECT_EQ(u8({1, 0, 1}), corrupt);                 // truncated table
  EXPECT_EQ(u8({1, 0, 0, 0, 0x1f}), corrupt);        // class with no changes

  // BF16 overwrite, 16 elements alternating 1.0 (class 0x7f) and 2.0 (class 0x80); changes at 1
  // (class 0x80, ordinal 0) and 4 (class 0x7f, ordinal 2). Classes in ascending id order:
  // 0x7f: gap 2 = 1 1 0; 0x80: gap 0 = 0. Values as byte planes: {0x11, 0x22} {0x33, 0x44}.
  std::vector<uint8_t> bf16_base(32);
  for (size_t i = 0; i < 16; ++i) StoreElem(bf16_base, i, 2, i % 2 ? 0x4000 : 0x3f80);
  BaseLookup bf16_lookup = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    EXPECT_EQ(s.count, 16u);
    return std::span<const uint8_t>(bf16_base);
  };
  const auto bf16_table = Seg(DType::kBF16, ValueKind::kOverwrite, 7, 100, 16, 2);
  const std::vector<uint8_t> loc = {2, 0x7f, 1, 0, 0x80, 1, 0, 0b0011};
  DecodedPayload d;
  Status s = DecodePayload(CraftContext(1, bf16_table, loc, {0x11, 0x22, 0x33, 0x44}), &d, bf16_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(d.segments[0].spec.start, 100u);
  EXPECT_EQ(d.segments[0].changes.positions, (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(d.segments[0].changes.values, (std::vector<uint8_t>{0x11, 0x33, 0x22, 0x44}));
  // The encoder writes the same changes with the Rice parameters it fits (1 for both classes:
  // population 8, one change): 0x7f: gap 2 = 1 0 | 0; 0x80: gap 0 = 0 | 0.
  {
    std::vector<uint8_t> next = bf16_base;
    StoreElem(next, 1, 2, 0x3311);
    StoreElem(next, 4, 2, 0x4422);
    PayloadBuilder b(With(Context::kAlways));
    b.AddDiff({7, DType::kBF16, ValueKind::kOverwrite, 100, 16}, bf16_base, next);
    std::vector<uint8_t> p;
    b.Finish(kIdentity, &p);
    const std::vector<uint8_t> enc_loc = {2, 0x7f, 1, 1, 0x80, 1, 1, 0b00001};
    EXPECT_EQ(LocationSection(p), enc_loc);
    DecodedPayload e;
    ASSERT_TRUE(DecodePayload(p, &e, bf16_lookup).ok());
    EXPECT_EQ(e.segments[0].changes.positions, (std::vector<uint32_t>{1, 4}));
  }
  // Classes out of order, and the same code against a base with a single class.
  EXPECT_EQ(DecodePayload(CraftContext(1, bf16_table, {2, 0x80, 1, 0, 0x7f, 1, 0, 0b0011}, {1, 2, 3, 4}), &d, bf16_lookup).code(), kC);
  std::vector<uint8_t> flat(32);
  for (size_t i = 0; i < 16; ++i) StoreElem(flat, i, 2, 0x3f80);
  BaseLookup flat_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(flat); };
  EXPECT_EQ(DecodePayload(CraftContext(1, bf16_table, loc, {1, 2, 3, 4}), &d, flat_lookup).code(), kC);

  // Two segments sharing class 0 (U8 then I16): ordinals run across segments. Changes at U8[3]
  // (ordinal 3) and I16[0] (ordinal 8): gaps 3, 4 = 1110 11110.
  std::vector<uint8_t> a(8, 0), b(4, 0);
  BaseLookup two_lookup = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    return std::span<const uint8_t>(s.tensor_index == 0 ? a : b);
  };
  const auto two_table = Cat(Seg(DType::kU8, ValueKind::kXor, 0, 0, 8, 1), Seg(DType::kI16, ValueKind::kXor, 1, 0, 2, 1));
  s = DecodePayload(CraftContext(2, two_table, {1, 0, 2, 0, 0b11110111, 0b0}, {5, 6, 7}), &d, two_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(d.segments[0].changes.positions, (std::vector<uint32_t>{3}));
  EXPECT_EQ(d.segments[1].changes.positions, (std::vector<uint32_t>{0}));
  // Both changes in the first segment: its table entry says one.
  EXPECT_EQ(DecodePayload(CraftContext(2, two_table, {1, 0, 2, 0, 0b00000111}, {5, 6, 7}), &d, two_lookup).code(), kC);
  // Both in the second.
  EXPECT_EQ(DecodePayload(CraftContext(2, two_table, {1, 0, 2, 0, 0xff, 0x00}, {5, 6, 7}), &d, two_lookup).code(), kC);
}

}  // namespace
}  // namespace dcr
