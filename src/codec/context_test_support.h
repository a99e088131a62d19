// Shared data and helpers of the context-mode codec tests (codec_context_test.cc,
// codec_context_hostile_test.cc for legacy mode 1, codec_band_hostile_test.cc): a seeded "world" of tensors with exponent-dependent changes,
// encoders for each context setting, and structural checks of decoded payloads.
// Each test binary includes it once and uses only some helpers, hence the unused-function
// warning is off here.
#pragma once
#pragma GCC diagnostic ignored "-Wunused-function"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codec/band_context.h"
#include "codec/bit_stream.h"
#include "codec/context_coding.h"
#include "codec/payload_codec.h"
#include "codec/payload_craft_test_support.h"
#include "codec/section_coding.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

using Context = EncodeOptions::Context;

const PayloadIdentity kIdentity{0xc0ffee, 4, 9};

uint64_t LoadElem(const std::vector<uint8_t>& v, size_t i, uint32_t w) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + i * w, w);
  return x;
}
void StoreElem(std::vector<uint8_t>& v, size_t i, uint32_t w, uint64_t x) { std::memcpy(v.data() + i * w, &x, w); }
uint64_t MaskFor(uint32_t w) { return w == 8 ? ~0ull : (1ull << (8 * w)) - 1; }

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

  BaseLookup Lookup() const { return LookupIn(base); }
  // The same, reading old bits from `tensors` (copies of the bases; they must outlive the lookup).
  BaseLookup LookupIn(const std::map<uint32_t, std::vector<uint8_t>>& tensors) const {
    return [this, &tensors](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
      auto it = tensors.find(s.tensor_index);
      if (it == tensors.end()) return Corrupt("no tensor " + std::to_string(s.tensor_index));
      const uint32_t w = DTypeWidth(s.dtype);
      if (s.dtype != dtype.at(s.tensor_index) || s.start > it->second.size() / w ||
          s.count > it->second.size() / w - s.start)
        return Corrupt("segment does not fit");
      return Seg(it->second, s);
    };
  }

  // Encodes `specs` (ascending) with `opt`; returns the payload and the number of changes.
  std::vector<uint8_t> Encode(const std::vector<SegmentSpec>& specs, const EncodeOptions& opt, uint64_t* changed = nullptr,
                              int threads = 1) const {
    PayloadBuilder b(opt);
    for (const SegmentSpec& s : specs) b.AddDiff(s, Seg(base.at(s.tensor_index), s), Seg(next.at(s.tensor_index), s));
    if (changed) *changed = b.changed();
    std::vector<uint8_t> p;
    if (b.segments() > 0) b.Finish(kIdentity, &p, threads);
    return p;
  }
  // The same by `b` (empty, and kept for the caller to reuse) with the band fit counted ahead
  // (PayloadBuilder::CountFitAhead(planned)), each segment by AddDiff as it is diffed.
  std::vector<uint8_t> EncodeCountingFitAhead(PayloadBuilder* b, const std::vector<SegmentSpec>& specs,
                                              uint64_t planned, uint64_t* changed, int threads) const {
    b->CountFitAhead(planned);
    for (const SegmentSpec& s : specs) b->AddDiff(s, Seg(base.at(s.tensor_index), s), Seg(next.at(s.tensor_index), s));
    *changed = b->changed();
    std::vector<uint8_t> p;
    if (b->segments() > 0) b->Finish(kIdentity, &p, threads);
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

ValueForm ValueFormOf(const std::vector<uint8_t>& p) {
  PayloadLayout l;
  Status s = ParsePayload(p, &l);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return l.val_form;
}

// `values`: compare the values too (not where one side holds a decode+apply's differences).
void ExpectSameSegments(const DecodedPayload& a, const DecodedPayload& b, const std::string& what, bool values = true) {
  ASSERT_EQ(a.segments.size(), b.segments.size()) << what;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const auto &x = a.segments[i], &y = b.segments[i];
    EXPECT_EQ(x.spec.tensor_index, y.spec.tensor_index) << what;
    EXPECT_EQ(x.spec.dtype, y.spec.dtype) << what;
    EXPECT_EQ(x.spec.kind, y.spec.kind) << what;
    EXPECT_EQ(x.spec.start, y.spec.start) << what;
    EXPECT_EQ(x.spec.count, y.spec.count) << what;
    ASSERT_EQ(x.changes.width, y.changes.width) << what;
    ASSERT_EQ(AsVector(x.changes.positions), AsVector(y.changes.positions)) << what << " segment " << i;
    if (values) ASSERT_EQ(AsVector(x.changes.values), AsVector(y.changes.values)) << what << " segment " << i;
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

std::vector<uint8_t> LocationSection(const std::vector<uint8_t>& p) {
  PayloadLayout l;
  EXPECT_TRUE(ParsePayload(p, &l).ok());
  std::vector<uint8_t> raw;
  EXPECT_TRUE(DecompressSection(l.loc_codec, l.loc_stored, l.loc_raw, &raw).ok());
  return raw;
}

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
  // Where context mode is allowed the values are steps, in either mode.
  EXPECT_EQ(ValueFormOf(plain), ValueForm::kAsKind) << what;
  EXPECT_EQ(ValueFormOf(ctx), ValueForm::kSteps) << what;
  EXPECT_EQ(ValueFormOf(smaller), ValueForm::kSteps) << what;
  // kWhenSmaller emits exactly one of the two location codes.
  if (ModeOf(smaller) == CodecMode::kPlain)
    EXPECT_EQ(LocationSection(smaller), LocationSection(plain)) << what;
  else
    EXPECT_EQ(smaller, ctx) << what;

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
    EncodeBandedLocations(segs, positions, &code);
  }
  const CodecMode want = code.size() <= LocationBound(dp.segments, block_log2) ? CodecMode::kContextSplitRice : CodecMode::kPlain;
  EXPECT_EQ(ModeOf(ctx), want) << what << ": context code " << code.size() << " bytes";
  if (want == CodecMode::kPlain) {
    EXPECT_EQ(LocationSection(ctx), LocationSection(plain)) << what;
    EXPECT_EQ(smaller, ctx) << what;
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
  // Without the old bits neither a context payload nor steps can be decoded.
  DecodedPayload none;
  EXPECT_EQ(DecodePayload(ctx, &none).code(), StatusCode::kUnsupported) << what;
  EXPECT_EQ(DecodePayload(smaller, &none).code(), StatusCode::kUnsupported) << what;
  // Context mode with the values as their kind (value form 0, as builds before steps wrote).
  EncodeOptions as_kind = With(Context::kAlways, block_log2);
  as_kind.value_steps = false;
  const auto ctx_as_kind = w.Encode(specs, as_kind);
  EXPECT_EQ(ValueFormOf(ctx_as_kind), ValueForm::kAsKind) << what;
  EXPECT_EQ(LocationSection(ctx_as_kind), LocationSection(ctx)) << what;
  DecodedPayload dk;
  s = DecodePayload(ctx_as_kind, &dk, w.Lookup());
  EXPECT_TRUE(s.ok()) << what << " (values as their kind): " << s.ToString();
  ExpectSameSegments(dp, dk, what + " (values as their kind)");
  w.ExpectApplies(dc, what);
  return want;
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

// The payload re-assembled with `loc` (its own location section, parsed and written back by a
// test's helpers) decodes as the original does: the helpers are faithful.
[[maybe_unused]] void ExpectReassembledDecodesAlike(const World& w, const std::vector<uint8_t>& p, const std::vector<uint8_t>& loc) {
  DecodedPayload a, b;
  ASSERT_TRUE(DecodePayload(p, &a, w.Lookup()).ok());
  Status s = DecodePayload(WithLocationSection(p, loc), &b, w.Lookup());
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameSegments(a, b, "re-assembled");
}

// A location code whose bit stream is damaged at its end (trailing bytes, its last byte missing,
// no bits at all) is kCorrupt. `Code` has `bits` and `Bytes()` (BandCode, ClassCode); `decode`
// and `decode_raw` decode the payload with a code, or with raw section bytes, to a status code.
template <typename Code, typename Decode, typename DecodeRaw>
void ExpectDamagedBitStreamsCorrupt(const Code& code, const std::vector<uint8_t>& raw, Decode decode,
                                    DecodeRaw decode_raw) {
  for (uint8_t extra : {0x00, 0x01, 0xff}) {
    auto loc = raw;
    loc.push_back(extra);
    EXPECT_EQ(decode_raw(loc), StatusCode::kCorrupt) << "trailing byte " << int{extra};
  }
  Code k = code;
  k.bits.pop_back();
  EXPECT_EQ(decode(k), StatusCode::kCorrupt) << "last bit byte missing";
  k.bits.clear();
  EXPECT_EQ(decode(k), StatusCode::kCorrupt) << "no bits";
}

// `p` re-coded in legacy context mode 1 (one class per exponent value, context_coding.h), which
// this build reads but no longer writes: the per-class code of the same changes, re-signed.
std::vector<uint8_t> AsLegacyContextPayload(const World& w, const std::vector<uint8_t>& p) {
  DecodedPayload d;
  const Status s = DecodePayload(p, &d, w.Lookup());
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<ContextSegment> segs;
  std::vector<std::span<const uint32_t>> positions;
  for (const DecodedSegment& seg : d.segments) {
    segs.push_back({seg.spec.dtype, w.Seg(w.base.at(seg.spec.tensor_index), seg.spec)});
    positions.push_back(seg.changes.positions);
  }
  std::vector<uint8_t> code;
  EncodeContextLocations(segs, positions, &code);
  std::vector<uint8_t> q = p;
  q[kMode] = static_cast<uint8_t>(CodecMode::kContext);
  Resign(q);
  return WithLocationSection(q, code);
}

StatusCode DecodeWith(const World& w, std::span<const uint8_t> p) {
  DecodedPayload d;
  return DecodePayload(p, &d, w.Lookup()).code();
}

// Payload `p` (of world `w`) decodes; every truncation, an extra byte and every single bit flip
// of it are corrupt (the checksum covers everything).
void ExpectEveryTruncationAndBitFlipCorrupt(const World& w, const std::vector<uint8_t>& p) {
  ASSERT_EQ(DecodeWith(w, p), StatusCode::kOk);
  for (size_t len = 0; len < p.size(); ++len)
    ASSERT_EQ(DecodeWith(w, std::span<const uint8_t>(p.data(), len)), StatusCode::kCorrupt) << "length " << len;
  auto longer = p;
  longer.push_back(0);
  EXPECT_EQ(DecodeWith(w, longer), StatusCode::kCorrupt);
  for (size_t byte = 0; byte < p.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      auto q = p;
      q[byte] ^= static_cast<uint8_t>(1u << bit);
      ASSERT_EQ(DecodeWith(w, q), StatusCode::kCorrupt) << "byte " << byte << " bit " << bit;
    }
}

// Payload `p` (of world `w`, its layout `layout`) re-signed with location section `loc` is
// refused as kCorrupt (then ++*refused) or decodes well formed.
void ExpectCorruptOrWellFormed(const World& w, const std::vector<uint8_t>& p, const std::vector<uint8_t>& loc,
                               const PayloadLayout& layout, int* refused) {
  DecodedPayload d;
  Status s = DecodePayload(WithLocationSection(p, loc), &d, w.Lookup());
  if (s.ok()) {
    ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(d, layout));
  } else {
    ++*refused;
    ASSERT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
  }
}

// 4,000 copies of payload `p` (of world `w`) with 1-3 random byte edits in its location section
// (the first `table_bytes` bytes, where the mode's table sits, hit more often) and sometimes a
// truncation, each re-signed: every one is refused as kCorrupt or decodes well formed. Sets
// *refused to how many were refused.
void ExpectRandomLocationEditsCorruptOrWellFormed(const World& w, const std::vector<uint8_t>& p, uint64_t seed,
                                                  size_t table_bytes, int* refused) {
  const auto raw = LocationSection(p);
  PayloadLayout layout;
  ASSERT_TRUE(ParsePayload(p, &layout).ok());
  std::mt19937_64 rng(seed);
  *refused = 0;
  for (int i = 0; i < 4000; ++i) {
    auto loc = raw;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % 3 == 0 ? rng() % std::min<size_t>(loc.size(), table_bytes) : rng() % loc.size();
      loc[at] = rng() % 3 == 0 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(loc[at] ^ (1u << (rng() % 8)));
    }
    if (rng() % 8 == 0) loc.resize(loc.size() - 1 - rng() % std::min<size_t>(loc.size() - 1, 8));
    ASSERT_NO_FATAL_FAILURE(ExpectCorruptOrWellFormed(w, p, loc, layout, refused));
  }
}

// A context-mode payload with raw sections and raw byte-plane values.
std::vector<uint8_t> CraftContext(CodecMode mode, uint32_t segments, const std::vector<uint8_t>& table, const std::vector<uint8_t>& loc,
                                  const std::vector<uint8_t>& val) {
  return CraftPayload(mode, 16, segments, table, loc, val);
}


// A BF16 + F32 + U8 payload in context mode (sections stored raw or zstd as the encoder chose).
struct ContextPayload {
  World w;
  std::vector<SegmentSpec> specs;
  std::vector<uint8_t> p;
  // kBands: as the encoder writes it (mode 4, split Rice streams); kInterleaved: mode 3;
  // kLegacy: mode 1.
  enum class Mode { kBands, kInterleaved, kLegacy };
  explicit ContextPayload(double density = 0.02, uint64_t n = 6000, Mode mode = Mode::kBands) {
    std::mt19937_64 rng(6);
    w.Add(1, DType::kBF16, n, rng, 0, n, density);
    w.Add(3, DType::kF32, 500, rng, 0, 500, density * 5);
    w.Add(4, DType::kU8, 300, rng, 0, 300, 0.1);
    specs = {{1, DType::kBF16, ValueKind::kXor, 0, n / 2}, {1, DType::kBF16, ValueKind::kXor, n / 2, n - n / 2},
             {3, DType::kF32, ValueKind::kOverwrite, 0, 500}, {4, DType::kU8, ValueKind::kXor, 0, 300}};
    EncodeOptions o = With(Context::kAlways);
    o.split_rice = mode != Mode::kInterleaved;
    p = w.Encode(specs, o);
    if (mode == Mode::kLegacy) p = AsLegacyContextPayload(w, p);
  }
};

// The payload of `specs` in context mode with the band fit counted at Finish (*want, *changed),
// and by `b` (empty, kept for the caller to reuse) counting ahead as AddDiff diffs each segment:
// the same bytes and change count, with `threads` threads coding.
inline void ExpectFitCountedAheadGivesContextBytes(const World& w, const std::vector<SegmentSpec>& specs,
                                                   uint64_t planned, int threads, PayloadBuilder* b,
                                                   std::vector<uint8_t>* want, uint64_t* changed) {
  const std::string what = std::to_string(threads) + " thread(s)";
  *want = w.Encode(specs, With(Context::kAlways), changed, threads);
  ASSERT_EQ(ModeOf(*want), CodecMode::kContextSplitRice) << what;
  uint64_t diffed = 0;
  EXPECT_EQ(w.EncodeCountingFitAhead(b, specs, planned, &diffed, threads), *want) << what;
  EXPECT_EQ(diffed, *changed) << what;
}

// PayloadBuilder::CountFitAhead with segments larger than the ranges AddDiff counts them in (2^18
// elements): one changed in every range, one unchanged (counted range by range, then left out),
// one of F32 whose last range is short. The bytes are those of the counts Finish makes, with
// `threads` threads coding (Finish also checks that each counted element belongs to a segment
// with changes).
inline void ExpectRangedFitCountsGiveFinishBytes(int threads) {
  std::mt19937_64 rng(37);
  World w;
  auto by_exponent = [](int shift, uint64_t below) {
    return [=](uint64_t old) { return ((old >> shift) & 0xff) < below ? 0.05 : 0.003; };
  };
  w.Add(1, DType::kBF16, 800000, rng, 0, 800000, by_exponent(7, 124));
  // Its first range's magnitudes 2^-8 of the rest's (both sides alike): a range's samples taken
  // from another range would change the counts.
  for (auto* side : {&w.base[1], &w.next[1]})
    for (size_t i = 0; i < (size_t{1} << 18); ++i) {
      const uint64_t v = LoadElem(*side, i, 2);
      if (((v >> 7) & 0xff) > 8) StoreElem(*side, i, 2, v - (uint64_t{8} << 7));
    }
  w.Add(2, DType::kBF16, 500000, rng, 0, 500000, 0.0);
  w.Add(3, DType::kF32, 300000, rng, 0, 300000, by_exponent(23, 122));
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 800000},
                                          {2, DType::kBF16, ValueKind::kXor, 0, 500000},
                                          {3, DType::kF32, ValueKind::kXor, 0, 300000}};
  const uint64_t planned = 1600000;
  // 1.6 M elements planned, 1.1 M of them in changed segments: both sample every 32nd element.
  ASSERT_EQ(FitSampleStride(planned), 32u);
  ASSERT_EQ(FitSampleStride(planned - 500000), 32u);
  PayloadBuilder b(With(Context::kAlways));
  std::vector<uint8_t> want;
  uint64_t changed = 0;
  ExpectFitCountedAheadGivesContextBytes(w, specs, planned, threads, &b, &want, &changed);
}

// PayloadBuilder::CountFitAhead: the band fit's counts made segment by segment as they are
// diffed (by AddDiff, or by the caller for AddChanges, split between counters in any way) give
// the bytes of the counts Finish makes, with `threads` threads coding.
inline void ExpectFitCountedAheadGivesFinishBytes(int threads) {
  std::mt19937_64 rng(31);
  World w;
  // Changes depend on the exponent, so that the fit has bands to find.
  auto by_exponent = [](int shift, uint64_t mask, uint64_t below) {
    return [=](uint64_t old) { return ((old >> shift) & mask) < below ? 0.06 : 0.004; };
  };
  w.Add(1, DType::kBF16, 400000, rng, 0, 400000, by_exponent(7, 0xff, 124));
  w.Add(2, DType::kF32, 200000, rng, 0, 200000, by_exponent(23, 0xff, 122));
  w.Add(3, DType::kBF16, 50000, rng, 0, 50000, 0.0);  // no changes: planned, not counted
  w.Add(4, DType::kBF16, 40000, rng, 0, 40000, by_exponent(7, 0xff, 120));
  const std::vector<SegmentSpec> specs = {{1, DType::kBF16, ValueKind::kXor, 0, 250000},
                                          {1, DType::kBF16, ValueKind::kXor, 250000, 150000},
                                          {2, DType::kF32, ValueKind::kOverwrite, 0, 200000},
                                          {3, DType::kBF16, ValueKind::kXor, 0, 50000},
                                          {4, DType::kBF16, ValueKind::kXor, 0, 40000}};
  uint64_t planned = 0;
  for (const SegmentSpec& s : specs) planned += s.count;
  // 640 Ki elements, 600 Ki of them in changed segments: both sample every 16th element.
  ASSERT_EQ(FitSampleStride(planned), 16u);
  ASSERT_EQ(FitSampleStride(planned - 50000), 16u);
  PayloadBuilder b(With(Context::kAlways));
  std::vector<uint8_t> want;
  uint64_t changed = 0;
  ExpectFitCountedAheadGivesContextBytes(w, specs, planned, threads, &b, &want, &changed);
  const std::string what = std::to_string(threads) + " thread(s)";
  // The caller diffs and counts, alternating between two counters; the builder reuses its
  // buffers from the payload before.
  std::vector<uint8_t> by_caller;
  b.CountFitAhead(planned);
  FitCounter even(b.fit_stride()), odd(b.fit_stride());
  for (size_t i = 0; i < specs.size(); ++i) {
    const SegmentSpec& s = specs[i];
    ChangeSet cs;
    DiffElements(w.Seg(w.base.at(s.tensor_index), s), w.Seg(w.next.at(s.tensor_index), s), DTypeWidth(s.dtype), s.kind, &cs,
                 {}, With(Context::kAlways).value_form());
    if (cs.size() == 0) continue;
    b.AddChanges(s, cs, w.Seg(w.base.at(s.tensor_index), s));
    (i % 2 == 0 ? even : odd).Count({s.dtype, w.Seg(w.base.at(s.tensor_index), s)}, cs.positions);
  }
  FitCounts first, second;
  even.AddTo(&first);
  odd.AddTo(&second);
  b.AddFitCounts(second);
  b.AddFitCounts(first);
  b.Finish(kIdentity, &by_caller, threads);
  EXPECT_EQ(by_caller, want) << what;
  EXPECT_GT(changed, 10000u);
}

}  // namespace
}  // namespace dcr
