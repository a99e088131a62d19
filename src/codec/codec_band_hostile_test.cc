// Codec tests, part 7: banded context mode (mode 2, docs/format.md §2.7) on hostile input. Every
// truncation and bit flip is refused; re-signed band tables that break a rule of the format are
// kCorrupt; random edits are refused or decode well formed; hand-built codes written from the
// format description decode, and the encoder's fit of a small case is pinned.
#include "codec/context_test_support.h"

namespace dcr {
namespace {

TEST(BandHostile, EveryTruncationAndEveryBitFlipIsCorrupt) {
  for (double density : {0.02, 1.0}) {
    ContextPayload c(density, 2000);
    ASSERT_EQ(ModeOf(c.p), CodecMode::kContextBands);
    ASSERT_NO_FATAL_FAILURE(ExpectEveryTruncationAndBitFlipCorrupt(c.w, c.p)) << "density " << density;
  }
}

// A BF16 payload whose changes depend on the old exponent as in training (small magnitudes change
// more often), so the encoder fits several bands; plus an F32 segment.
struct ExponentPayload {
  World w;
  std::vector<uint8_t> p;
  explicit ExponentPayload(uint64_t n) {
    std::mt19937_64 rng(7);
    auto by_exponent = [](uint64_t v) {
      const uint64_t e = (v >> 7) & 0xff;
      return e < 117 ? 0.6 : e < 120 ? 0.15 : e < 122 ? 0.03 : 0.004;
    };
    w.Add(1, DType::kBF16, n, rng, 0, n, by_exponent);
    w.Add(2, DType::kF32, 400, rng, 0, 400, 0.05);
    p = w.Encode({{1, DType::kBF16, ValueKind::kXor, 0, n}, {2, DType::kF32, ValueKind::kXor, 0, 400}},
                 With(Context::kAlways));
  }
};

// The parts of a banded location code: band count, thresholds, per band (count, Rice parameter
// when the count is not 0), then the Rice bit stream.
struct BandCode {
  struct Band {
    uint64_t count;
    uint8_t rice;
  };
  uint8_t k = 0;
  std::vector<uint8_t> thresholds;
  std::vector<Band> bands;
  std::vector<uint8_t> bits;

  static BandCode Parse(std::span<const uint8_t> raw) {
    BandCode c;
    ByteReader r(raw);
    EXPECT_TRUE(r.ReadByte(&c.k));
    c.thresholds.resize(c.k - 1u);
    for (uint8_t& t : c.thresholds) EXPECT_TRUE(r.ReadByte(&t));
    for (int b = 0; b < c.k; ++b) {
      Band band{0, 0};
      EXPECT_TRUE(r.ReadVarint(&band.count));
      if (band.count > 0) {
        EXPECT_TRUE(r.ReadByte(&band.rice));
      }
      c.bands.push_back(band);
    }
    auto rest = r.Rest();
    c.bits.assign(rest.begin(), rest.end());
    return c;
  }
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out = {k};
    out.insert(out.end(), thresholds.begin(), thresholds.end());
    for (const Band& b : bands) {
      PutVarint(out, b.count);
      if (b.count > 0) out.push_back(b.rice);
    }
    out.insert(out.end(), bits.begin(), bits.end());
    return out;
  }
};

TEST(BandHostile, ResignedBadBandTablesAreCorrupt) {
  const ExponentPayload c(20000);
  ASSERT_EQ(ModeOf(c.p), CodecMode::kContextBands);
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
  for (size_t i = 0; i < code.bands.size(); ++i) {
    if (code.bands[i].count == 0) continue;
    for (uint64_t count : {code.bands[i].count + 1, code.bands[i].count - 1, uint64_t{1} << 40, UINT64_MAX}) {
      k = code;
      k.bands[i].count = count;
      EXPECT_EQ(decode(k), kC) << "band " << i << " count " << count;
    }
  }
  // Rice parameters over 30.
  for (uint8_t rice : {31, 32, 63, 255}) {
    k = code;
    for (auto& b : k.bands)
      if (b.count > 0) b.rice = rice;
    EXPECT_EQ(decode(k), kC) << "rice " << int{rice};
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
    DecodedPayload d;
    Status s = DecodePayload(WithLocationSection(c.p, k.Bytes()), &d, c.w.Lookup());
    if (s.ok()) {
      ExpectWellFormed(d, layout);
    } else {
      EXPECT_EQ(s.code(), kC) << s.ToString();
    }
  }
}

TEST(BandHostile, ResignedRandomLocationEditsAreCorruptOrWellFormed) {
  const ExponentPayload c(3000);
  int refused = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectRandomLocationEditsCorruptOrWellFormed(c.w, c.p, 9, 24, &refused));
  EXPECT_GT(refused, 2000);
}

TEST(BandHostile, HandBuiltBandCodesFollowTheFormat) {
  const auto kC = StatusCode::kCorrupt;
  const CodecMode kBands = CodecMode::kContextBands;
  // U8 (class 0 only): one band, one change at 5: k 1, count 1, rice 0, gap 5 = 11111 0.
  std::vector<uint8_t> u8_base(16, 9);
  BaseLookup u8_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(u8_base); };
  const auto u8_table = Seg(DType::kU8, ValueKind::kXor, 0, 0, 16, 1);
  auto u8 = [&](const std::vector<uint8_t>& loc) {
    DecodedPayload d;
    Status s = DecodePayload(CraftContext(kBands, 1, u8_table, loc, {0x42}), &d, u8_lookup);
    if (s.ok()) {
      EXPECT_EQ(d.segments[0].changes.values, (std::vector<uint8_t>{0x42}));
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
  const std::vector<uint8_t> loc = {2, 0x80, 1, 0, 1, 0, 0b0011};
  DecodedPayload d;
  Status s = DecodePayload(CraftContext(kBands, 1, bf16_table, loc, {0x11, 0x22, 0x33, 0x44}), &d, bf16_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(d.mode, kBands);
  EXPECT_EQ(d.segments[0].spec.start, 100u);
  EXPECT_EQ(d.segments[0].changes.positions, (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(d.segments[0].changes.values, (std::vector<uint8_t>{0x11, 0x33, 0x22, 0x44}));
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
    EXPECT_EQ(ModeOf(p), kBands);
    EXPECT_EQ(LocationSection(p), (std::vector<uint8_t>{1, 2, 1, 0b00110}));
    DecodedPayload e;
    ASSERT_TRUE(DecodePayload(p, &e, bf16_lookup).ok());
    EXPECT_EQ(e.segments[0].changes.positions, (std::vector<uint32_t>{1, 4}));
  }

  // Two segments sharing band 0 (U8 then I16): ordinals run across segments. Changes at U8[3]
  // (ordinal 3) and I16[0] (ordinal 8): gaps 3, 4 = 1110 11110.
  std::vector<uint8_t> a(8, 0), b(4, 0);
  BaseLookup two_lookup = [&](const SegmentSpec& sp) -> Result<std::span<const uint8_t>> {
    return std::span<const uint8_t>(sp.tensor_index == 0 ? a : b);
  };
  const auto two_table = Cat(Seg(DType::kU8, ValueKind::kXor, 0, 0, 8, 1), Seg(DType::kI16, ValueKind::kXor, 1, 0, 2, 1));
  s = DecodePayload(CraftContext(kBands, 2, two_table, {1, 2, 0, 0b11110111, 0b0}, {5, 6, 7}), &d, two_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(d.segments[0].changes.positions, (std::vector<uint32_t>{3}));
  EXPECT_EQ(d.segments[1].changes.positions, (std::vector<uint32_t>{0}));
  // Both changes placed in the first segment: more than its table entry allows.
  EXPECT_EQ(DecodePayload(CraftContext(kBands, 2, two_table, {1, 2, 0, 0b00000111}, {5, 6, 7}), &d, two_lookup).code(), kC);
}

}  // namespace
}  // namespace dcr
