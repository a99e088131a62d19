// Codec tests, part 7: banded context modes (modes 2 to 4, docs/format.md §2.7-2.9) on hostile
// input. Every truncation and bit flip is refused; re-signed band tables and part fields that
// break a rule of the format are kCorrupt; random edits are refused or decode well formed;
// hand-built codes written from the format description decode, and the encoder's fit of a small
// case is pinned.
#include "codec/context_test_support.h"
#include "codec/split_rice.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

TEST(BandHostile, EveryTruncationAndEveryBitFlipIsCorrupt) {
  for (const auto mode : {ContextPayload::Mode::kBands, ContextPayload::Mode::kInterleaved})
    for (double density : {0.02, 1.0}) {
      ContextPayload c(density, 2000, mode);
      ASSERT_EQ(ModeOf(c.p), mode == ContextPayload::Mode::kBands ? CodecMode::kContextSplitRice : CodecMode::kContextParts);
      ASSERT_NO_FATAL_FAILURE(ExpectEveryTruncationAndBitFlipCorrupt(c.w, c.p))
          << "density " << density << " mode " << static_cast<int>(ModeOf(c.p));
    }
}

// A BF16 payload whose changes depend on the old exponent as in training (small magnitudes change
// more often), so the encoder fits several bands; plus an F32 segment. In `parts` parts (1, or
// several with parts of 4096 elements: n must allow them). Mode 4 (split Rice streams) as the
// encoder writes it, or mode 3 without `split_rice`.
struct ExponentPayload {
  World w;
  std::vector<uint8_t> p;
  explicit ExponentPayload(uint64_t n, uint64_t part_elements = kDefaultBandPartElements, bool split_rice = true) {
    std::mt19937_64 rng(7);
    auto by_exponent = [](uint64_t v) {
      const uint64_t e = (v >> 7) & 0xff;
      return e < 117 ? 0.6 : e < 120 ? 0.15 : e < 122 ? 0.03 : 0.004;
    };
    w.Add(1, DType::kBF16, n, rng, 0, n, by_exponent);
    w.Add(2, DType::kF32, 400, rng, 0, 400, 0.05);
    EncodeOptions o = With(Context::kAlways);
    o.band_part_elements = part_elements;
    o.split_rice = split_rice;
    p = w.Encode({{1, DType::kBF16, ValueKind::kXor, 0, n}, {2, DType::kF32, ValueKind::kXor, 0, 400}}, o);
  }
};

// The fields of a mode-3 or mode-4 location code: band count, thresholds, part count, per part and band
// (count, Rice parameter when the count is not 0), the stream lengths of all parts but the last,
// then the bit streams (`bits`, all parts' back to back).
struct BandCode {
  struct Band {
    uint64_t count;
    uint8_t rice;
  };
  uint8_t k = 0;
  std::vector<uint8_t> thresholds;
  uint8_t part_count = 0;
  std::vector<std::vector<Band>> parts;
  std::vector<uint64_t> lengths;
  std::vector<uint8_t> bits;

  static BandCode Parse(std::span<const uint8_t> raw) {
    BandCode c;
    ByteReader r(raw);
    EXPECT_TRUE(r.ReadByte(&c.k));
    c.thresholds.resize(c.k - 1u);
    for (uint8_t& t : c.thresholds) EXPECT_TRUE(r.ReadByte(&t));
    EXPECT_TRUE(r.ReadByte(&c.part_count));
    c.parts.resize(c.part_count);
    for (auto& part : c.parts)
      for (int b = 0; b < c.k; ++b) {
        Band band{0, 0};
        EXPECT_TRUE(r.ReadVarint(&band.count));
        if (band.count > 0) {
          EXPECT_TRUE(r.ReadByte(&band.rice));
        }
        part.push_back(band);
      }
    c.lengths.resize(c.part_count - 1u);
    for (uint64_t& l : c.lengths) EXPECT_TRUE(r.ReadVarint(&l));
    auto rest = r.Rest();
    c.bits.assign(rest.begin(), rest.end());
    return c;
  }
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out = {k};
    out.insert(out.end(), thresholds.begin(), thresholds.end());
    out.push_back(part_count);
    for (const auto& part : parts)
      for (const Band& b : part) {
        PutVarint(out, b.count);
        if (b.count > 0) out.push_back(b.rice);
      }
    for (uint64_t l : lengths) PutVarint(out, l);
    out.insert(out.end(), bits.begin(), bits.end());
    return out;
  }
};

TEST(BandHostile, ResignedBadBandTablesAreCorrupt) {
  const ExponentPayload c(20000);
  ASSERT_EQ(ModeOf(c.p), CodecMode::kContextSplitRice);
  const auto raw = LocationSection(c.p);
  const BandCode code = BandCode::Parse(raw);
  ASSERT_GE(code.k, 3) << "the fit should use several bands on exponent-dependent changes";
  ASSERT_EQ(code.Bytes(), raw);
  ASSERT_NO_FATAL_FAILURE(ExpectReassembledDecodesAlike(c.w, c.p, raw));
  const auto kC = StatusCode::kCorrupt;
  auto decode = [&](const BandCode& k) { return DecodeWith(c.w, WithLocationSection(c.p, k.Bytes())); };
  auto decode_raw = [&](const std::vector<uint8_t>& loc) { return DecodeWith(c.w, WithLocationSection(c.p, loc)); };
  ASSERT_EQ(decode(code), StatusCode::kOk);

  // Band counts outside 1..8 (the rest of the code unchanged).
  for (uint8_t k : {0, 9, 200}) {
    auto loc = raw;
    loc[0] = k;
    EXPECT_EQ(decode_raw(loc), kC) << "band count " << int{k};
  }
  // Thresholds: 0, repeated, descending.
  BandCode k = code;
  k.thresholds[0] = 0;
  EXPECT_EQ(decode(k), kC) << "threshold 0";
  k = code;
  k.thresholds[1] = k.thresholds[0];
  EXPECT_EQ(decode(k), kC) << "repeated threshold";
  k = code;
  std::swap(k.thresholds[0], k.thresholds[1]);
  EXPECT_EQ(decode(k), kC) << "descending thresholds";
  // Counts that do not add up to the payload's changes.
  for (size_t i = 0; i < code.parts[0].size(); ++i) {
    if (code.parts[0][i].count == 0) continue;
    for (uint64_t count : {code.parts[0][i].count + 1, code.parts[0][i].count - 1, uint64_t{1} << 40, UINT64_MAX}) {
      k = code;
      k.parts[0][i].count = count;
      EXPECT_EQ(decode(k), kC) << "band " << i << " count " << count;
    }
  }
  // Rice parameters over 30.
  for (uint8_t rice : {31, 32, 63, 255}) {
    k = code;
    for (auto& b : k.parts[0])
      if (b.count > 0) b.rice = rice;
    EXPECT_EQ(decode(k), kC) << "rice " << int{rice};
  }
  // One part only fits this payload (20400 elements, parts of 4096 or more); none is no code.
  for (uint8_t parts : {0, 5, 8, 9, 255}) {
    k = code;
    k.part_count = parts;
    EXPECT_EQ(decode(k), kC) << "part count " << int{parts};
  }
  ExpectDamagedBitStreamsCorrupt(code, raw, decode, decode_raw);
  // Thresholds moved: the same counts and bits against other bands either misplace the ordinals
  // (past a band's population: corrupt) or decode to well-formed positions.
  PayloadLayout layout;
  ASSERT_TRUE(ParsePayload(c.p, &layout).ok());
  for (int shift : {-3, -1, 1, 3}) {
    k = code;
    for (auto& t : k.thresholds) t = static_cast<uint8_t>(std::clamp(int{t} + shift, 1, 255));
    bool ascending = true;
    for (size_t i = 1; i < k.thresholds.size(); ++i) ascending &= k.thresholds[i] > k.thresholds[i - 1];
    if (!ascending) continue;
    int refused = 0;
    ASSERT_NO_FATAL_FAILURE(ExpectCorruptOrWellFormed(c.w, c.p, k.Bytes(), layout, &refused)) << "shift " << shift;
  }
}

// A payload in 8 parts (40,400 elements, parts of 4096 or more): the part fields. A stream length
// one byte off leaves a part a byte short (truncated) or a byte over (trailing bytes); lengths
// past the section, and part counts the elements cannot hold, are corrupt. Moving one change
// from a part to the next (the sums unchanged) is refused or decodes well formed: the re-signed
// payload is another valid code.
TEST(BandHostile, ResignedBadPartFieldsAreCorrupt) {
  const ExponentPayload c(40000, 4096);
  const auto raw = LocationSection(c.p);
  const BandCode code = BandCode::Parse(raw);
  ASSERT_EQ(code.part_count, 8);
  ASSERT_EQ(code.Bytes(), raw);
  const auto kC = StatusCode::kCorrupt;
  auto decode = [&](const BandCode& k) { return DecodeWith(c.w, WithLocationSection(c.p, k.Bytes())); };
  ASSERT_EQ(decode(code), StatusCode::kOk);
  for (size_t i = 0; i < code.lengths.size(); ++i) {
    ASSERT_GT(code.lengths[i], 0u);
    for (uint64_t length : {code.lengths[i] - 1, code.lengths[i] + 1, uint64_t{1} << 40, UINT64_MAX}) {
      BandCode k = code;
      k.lengths[i] = length;
      EXPECT_EQ(decode(k), kC) << "part " << i << " stream length " << length;
    }
  }
  for (uint8_t parts : {0, 9, 16, 255}) {
    BandCode k = code;
    k.part_count = parts;
    EXPECT_EQ(decode(k), kC) << "part count " << int{parts};
  }
  PayloadLayout layout;
  ASSERT_TRUE(ParsePayload(c.p, &layout).ok());
  int refused = 0;
  for (size_t i = 0; i + 1 < code.parts.size(); ++i)
    for (size_t b = 0; b < code.parts[i].size(); ++b) {
      if (code.parts[i][b].count == 0 || code.parts[i + 1][b].count == 0) continue;
      BandCode k = code;
      --k.parts[i][b].count;
      ++k.parts[i + 1][b].count;
      ASSERT_NO_FATAL_FAILURE(ExpectCorruptOrWellFormed(c.w, c.p, k.Bytes(), layout, &refused))
          << "part " << i << " band " << b;
    }
  EXPECT_GT(refused, 0);
  ASSERT_NO_FATAL_FAILURE(ExpectRandomLocationEditsCorruptOrWellFormed(c.w, c.p, 12, 80, &refused));
  EXPECT_GT(refused, 2000);
}

// Mode 2 (one part, no part fields; read, no longer written) is mode 3's one-part code without
// the part count byte: such a payload decodes to the same changes, and its truncations and bit
// flips are corrupt.
TEST(BandHostile, ModeTwoPayloadsDecodeLikeOnePartModeThree) {
  const ExponentPayload c(3000, kDefaultBandPartElements, false);
  ASSERT_EQ(ModeOf(c.p), CodecMode::kContextParts);
  auto loc = LocationSection(c.p);
  const BandCode code = BandCode::Parse(loc);
  ASSERT_EQ(code.part_count, 1);
  loc.erase(loc.begin() + code.k);
  std::vector<uint8_t> q = WithLocationSection(c.p, loc);
  q[kMode] = static_cast<uint8_t>(CodecMode::kContextBands);
  Resign(q);
  DecodedPayload a, b;
  ASSERT_TRUE(DecodePayload(c.p, &a, c.w.Lookup()).ok());
  const Status s = DecodePayload(q, &b, c.w.Lookup(), 2);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(b.mode, CodecMode::kContextBands);
  ExpectSameSegments(a, b, "mode 2");
  ASSERT_NO_FATAL_FAILURE(ExpectEveryTruncationAndBitFlipCorrupt(c.w, q));
}

TEST(BandHostile, ResignedRandomLocationEditsAreCorruptOrWellFormed) {
  for (bool split_rice : {true, false}) {
    const ExponentPayload c(3000, kDefaultBandPartElements, split_rice);
    int refused = 0;
    ASSERT_NO_FATAL_FAILURE(ExpectRandomLocationEditsCorruptOrWellFormed(c.w, c.p, 9, 24, &refused)) << split_rice;
    EXPECT_GT(refused, 2000) << split_rice;
  }
}

TEST(BandHostile, HandBuiltBandCodesFollowTheFormat) {
  const auto kC = StatusCode::kCorrupt;
  // The codes below are mode 2's (§2.7); each also decodes as mode 3 with the part count byte (1)
  // after the thresholds. A code too short for that byte is given to mode 3 as is.
  for (const CodecMode kBands : {CodecMode::kContextBands, CodecMode::kContextParts}) {
  SCOPED_TRACE("mode " + std::to_string(static_cast<int>(kBands)));
  auto in_mode = [&](std::vector<uint8_t> loc) {
    if (kBands == CodecMode::kContextParts && !loc.empty() && loc[0] >= 1 && loc.size() >= loc[0])
      loc.insert(loc.begin() + loc[0], 1);
    return loc;
  };
  // U8 (class 0 only): one band, one change at 5: k 1, count 1, rice 0, gap 5 = 11111 0.
  std::vector<uint8_t> u8_base(16, 9);
  BaseLookup u8_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(u8_base); };
  const auto u8_table = Seg(DType::kU8, ValueKind::kXor, 0, 0, 16, 1);
  auto u8 = [&](const std::vector<uint8_t>& loc) {
    DecodedPayload d;
    Status s = DecodePayload(CraftContext(kBands, 1, u8_table, in_mode(loc), {0x42}), &d, u8_lookup);
    if (s.ok()) {
      EXPECT_EQ(AsVector(d.segments[0].changes.values), (std::vector<uint8_t>{0x42}));
      return d.segments[0].changes.positions.empty() ? int64_t{-1} : int64_t{d.segments[0].changes.positions[0]};
    }
    return -static_cast<int64_t>(s.code()) - 100;
  };
  const int64_t corrupt = -static_cast<int64_t>(kC) - 100;
  EXPECT_EQ(u8({1, 1, 0, 0x1f}), 5);
  EXPECT_EQ(u8({1, 1, 2, 0b101}), 5);             // rice 2: gap 5 = 1 0 | 01
  EXPECT_EQ(u8({1, 1, 0, 0xff, 0xff}), corrupt);  // gap 16 of 16 elements
  EXPECT_EQ(u8({2, 1, 0, 1, 0, 0x1f}), corrupt);  // band 1 (class >= 1) is empty for integers
  EXPECT_EQ(u8({2, 1, 1, 0, 0, 0x1f}), 5);        // an unused second band is allowed
  EXPECT_EQ(u8({1, 1, 31, 0x1f, 0, 0, 0}), corrupt);  // rice 31
  EXPECT_EQ(u8({1, 2, 0, 0x1f}), corrupt);        // two changes in a one-change payload
  EXPECT_EQ(u8({1, 1, 0, 0x1f, 0x00}), corrupt);  // trailing byte
  EXPECT_EQ(u8({1, 1, 0}), corrupt);              // no bits
  EXPECT_EQ(u8({0}), corrupt);                    // no bands
  EXPECT_EQ(u8({9}), corrupt);                    // nine bands
  EXPECT_EQ(u8({1, 1}), corrupt);                 // truncated table
  EXPECT_EQ(u8({1, 0, 0x1f}), corrupt);           // no changes in a one-change payload
  EXPECT_EQ(u8({2, 0, 1, 0, 0, 0x1f}), corrupt);  // threshold 0
  EXPECT_EQ(u8({3, 5, 5, 1, 0, 0, 0, 0x1f}), corrupt);  // thresholds not strictly ascending

  // BF16 overwrite, 16 elements alternating 1.0 (class 0x7f) and 2.0 (class 0x80); changes at 1
  // (class 0x80) and 4 (class 0x7f). Two bands cut at 0x80: band 0 holds the even elements
  // (element 4 is ordinal 2: gap 2 = 1 1 0), band 1 the odd ones (element 1 is ordinal 0: gap
  // 0 = 0). Values as byte planes: {0x11, 0x22} {0x33, 0x44}.
  std::vector<uint8_t> bf16_base(32);
  for (size_t i = 0; i < 16; ++i) StoreElem(bf16_base, i, 2, i % 2 ? 0x4000 : 0x3f80);
  BaseLookup bf16_lookup = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    EXPECT_EQ(s.count, 16u);
    return std::span<const uint8_t>(bf16_base);
  };
  const auto bf16_table = Seg(DType::kBF16, ValueKind::kOverwrite, 7, 100, 16, 2);
  const std::vector<uint8_t> loc = in_mode({2, 0x80, 1, 0, 1, 0, 0b0011});
  DecodedPayload d;
  Status s = DecodePayload(CraftContext(kBands, 1, bf16_table, loc, {0x11, 0x22, 0x33, 0x44}), &d, bf16_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(d.mode, kBands);
  EXPECT_EQ(d.segments[0].spec.start, 100u);
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(AsVector(d.segments[0].changes.values), (std::vector<uint8_t>{0x11, 0x33, 0x22, 0x44}));
  // Without the old bits the payload cannot be decoded.
  EXPECT_EQ(DecodePayload(CraftContext(kBands, 1, bf16_table, loc, {0x11, 0x22, 0x33, 0x44}), &d).code(),
            StatusCode::kUnsupported);
  // The same code against a base with one class leaves band 1 empty: its ordinal 0 is past it.
  std::vector<uint8_t> flat(32);
  for (size_t i = 0; i < 16; ++i) StoreElem(flat, i, 2, 0x3f80);
  BaseLookup flat_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(flat); };
  EXPECT_EQ(DecodePayload(CraftContext(kBands, 1, bf16_table, loc, {1, 2, 3, 4}), &d, flat_lookup).code(), kC);
  // The encoder fits one band here (two thresholds' worth of table would cost more than they
  // save): ordinals 1 and 4, gaps 1 and 2, Rice 1 (population 16, mean gap 7, best of 1..3):
  // 0 | 1 then 1 0 | 0.
  {
    std::vector<uint8_t> next = bf16_base;
    StoreElem(next, 1, 2, 0x3311);
    StoreElem(next, 4, 2, 0x4422);
    PayloadBuilder b(With(Context::kAlways));
    b.AddDiff({7, DType::kBF16, ValueKind::kOverwrite, 100, 16}, bf16_base, next);
    std::vector<uint8_t> p;
    b.Finish(kIdentity, &p);
    // Mode 4: remainders 1, 0 (0b01), then quotients 0, 1 as 1, 01 (0b101).
    EXPECT_EQ(ModeOf(p), CodecMode::kContextSplitRice);
    EXPECT_EQ(LocationSection(p), (std::vector<uint8_t>{1, 1, 2, 1, 0b01, 0b101}));
    DecodedPayload e;
    ASSERT_TRUE(DecodePayload(p, &e, bf16_lookup).ok());
    EXPECT_EQ(AsVector(e.segments[0].changes.positions), (std::vector<uint32_t>{1, 4}));
  }

  // Two segments sharing band 0 (U8 then I16): ordinals run across segments. Changes at U8[3]
  // (ordinal 3) and I16[0] (ordinal 8): gaps 3, 4 = 1110 11110.
  std::vector<uint8_t> a(8, 0), b(4, 0);
  BaseLookup two_lookup = [&](const SegmentSpec& sp) -> Result<std::span<const uint8_t>> {
    return std::span<const uint8_t>(sp.tensor_index == 0 ? a : b);
  };
  const auto two_table = Cat(Seg(DType::kU8, ValueKind::kXor, 0, 0, 8, 1), Seg(DType::kI16, ValueKind::kXor, 1, 0, 2, 1));
  s = DecodePayload(CraftContext(kBands, 2, two_table, in_mode({1, 2, 0, 0b11110111, 0b0}), {5, 6, 7}), &d, two_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{3}));
  EXPECT_EQ(AsVector(d.segments[1].changes.positions), (std::vector<uint32_t>{0}));
  // Both changes placed in the first segment: more than its table entry allows.
  EXPECT_EQ(DecodePayload(CraftContext(kBands, 2, two_table, in_mode({1, 2, 0, 0b00000111}), {5, 6, 7}), &d, two_lookup).code(), kC);
  }

  // Mode 3 in two parts: U8, 8192 elements, so part 1 starts at element 4096. Changes at 5
  // (part 0, gap 5 = 11111 0) and 4103 (part 1, ordinal 7 from the part's start: 1111111 0).
  // Fields: k 1, parts 2, (count 1, rice 0) per part, part 0's stream length 1, the streams.
  DecodedPayload d;
  Status s;
  std::vector<uint8_t> big(8192, 3);
  BaseLookup big_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(big); };
  const auto big_table = Seg(DType::kU8, ValueKind::kXor, 0, 0, 8192, 2);
  auto two_parts = [&](const std::vector<uint8_t>& loc) {
    return DecodePayload(CraftContext(CodecMode::kContextParts, 1, big_table, loc, {1, 2}), &d, big_lookup);
  };
  s = two_parts({1, 2, 1, 0, 1, 0, 1, 0x1f, 0x7f});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{5, 4103}));
  EXPECT_EQ(two_parts({1, 2, 1, 0, 1, 0, 2, 0x1f, 0x7f}).code(), kC);     // part 0's stream a byte long
  EXPECT_EQ(two_parts({1, 2, 1, 0, 1, 12, 1, 0x1f, 0x01, 0x00}).code(), kC);  // gap 4096 (rice 12: 1 0 | 0...0) of 4096
  // Both changes in part 0 (gaps 5, 6: ordinals 5, 12); part 1 has none and an empty stream.
  s = two_parts({1, 2, 2, 0, 0, 2, 0xdf, 0x0f});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{5, 12}));
  EXPECT_EQ(two_parts({1, 2, 2, 0, 0, 2, 0xdf, 0x0f, 0x00}).code(), kC);  // a byte in part 1's stream
  EXPECT_EQ(two_parts({1, 3, 1, 0, 1, 0, 0, 1, 0x1f, 0x7f}).code(), kC);  // 3 parts need 12288 elements
}

// Mode 4 payloads written from the format (§2.9): mode 3's fields, each part's stream split into
// its remainders and its quotients (zeros, then a one), on the SIMD and the scalar decoder.
TEST(BandHostile, HandBuiltSplitRiceCodesFollowTheFormat) {
  const auto kC = StatusCode::kCorrupt;
  for (bool scalar : {false, true}) {
    SCOPED_TRACE(scalar ? "scalar" : "simd");
    ForceScalarSplitRice(scalar);
    DecodedPayload d;
    // BF16 overwrite as in HandBuiltBandCodesFollowTheFormat: changes at 1 (band 1, gap 0) and 4
    // (band 0, gap 2). Rice 0: quotients 001 then 1. Rice 1 and 2: remainders 0 | 00, then 01 | 1.
    std::vector<uint8_t> bf16_base(32);
    for (size_t i = 0; i < 16; ++i) StoreElem(bf16_base, i, 2, i % 2 ? 0x4000 : 0x3f80);
    BaseLookup bf16_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> {
      return std::span<const uint8_t>(bf16_base);
    };
    const auto bf16_table = Seg(DType::kBF16, ValueKind::kOverwrite, 7, 100, 16, 2);
    auto bf16 = [&](const std::vector<uint8_t>& loc) {
      return DecodePayload(CraftContext(CodecMode::kContextSplitRice, 1, bf16_table, loc, {0x11, 0x22, 0x33, 0x44}), &d,
                           bf16_lookup);
    };
    for (const auto& loc : {std::vector<uint8_t>{2, 0x80, 1, 1, 0, 1, 0, 0b1100},
                            std::vector<uint8_t>{2, 0x80, 1, 1, 1, 1, 2, 0b000, 0b110}}) {
      const Status s = bf16(loc);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(d.mode, CodecMode::kContextSplitRice);
      EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{1, 4}));
      EXPECT_EQ(AsVector(d.segments[0].changes.values), (std::vector<uint8_t>{0x11, 0x33, 0x22, 0x44}));
    }
    EXPECT_EQ(bf16({2, 0x80, 1, 1, 0, 1, 0, 0x04, 0x08}).code(), kC);   // band 1's ordinal 8 of its 8 members
    EXPECT_EQ(bf16({2, 0x80, 1, 1, 1, 1, 2, 0b1000, 0b110}).code(), kC);  // nonzero remainder padding
    EXPECT_EQ(bf16({2, 0x80, 1, 1, 0, 1, 0, 0b1100, 0}).code(), kC);     // trailing byte
    EXPECT_EQ(bf16({2, 0x80, 1, 1, 0, 1, 0, 0b0100}).code(), kC);        // band 1's terminator missing
    EXPECT_EQ(bf16({2, 0x80, 1, 1, 0, 1, 0}).code(), kC);                // no stream
    // The interleaved code of the same changes (001 1, the same bits here) read as mode 4 differs
    // only where rice > 0: rice 1 and 2 interleaved (01 0 | 1 00) is not a split code.
    EXPECT_EQ(bf16({2, 0x80, 1, 1, 1, 1, 2, 0b00101}).code(), kC);
    // Two parts of a U8 segment of 8192 elements (part 1 from element 4096): changes at 5 (gap
    // 5: 00000 1) and 4103 (ordinal 7 in part 1: 0000000 1); part 0's stream is a byte long.
    std::vector<uint8_t> big(8192, 3);
    BaseLookup big_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(big); };
    const auto big_table = Seg(DType::kU8, ValueKind::kXor, 0, 0, 8192, 2);
    auto two_parts = [&](const std::vector<uint8_t>& loc) {
      return DecodePayload(CraftContext(CodecMode::kContextSplitRice, 1, big_table, loc, {1, 2}), &d, big_lookup);
    };
    const Status s = two_parts({1, 2, 1, 0, 1, 0, 1, 0x20, 0x80});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{5, 4103}));
    EXPECT_EQ(two_parts({1, 2, 1, 0, 1, 0, 2, 0x20, 0x80}).code(), kC);  // part 0's stream two bytes long
    EXPECT_EQ(two_parts({1, 2, 1, 0, 1, 0, 1, 0x20, 0x80, 0x00}).code(), kC);  // a byte after part 1's code
    ForceScalarSplitRice(false);
  }
}

}  // namespace
}  // namespace dcr
