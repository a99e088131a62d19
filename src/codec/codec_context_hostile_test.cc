// Codec tests, part 6: legacy context mode 1 (one class per exponent value; read, no longer
// written) on hostile input. Every truncation and bit flip is refused;
// re-signed class tables that break a rule of docs/format.md §2.6 are kCorrupt; random edits are
// refused or decode well formed; hand-built codes written from the format description decode.
#include "codec/context_test_support.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

// ---------------------------------------------------------------------------------------------
// Hostile context payloads

TEST(LegacyContextHostile, EveryTruncationAndEveryBitFlipIsCorrupt) {
  for (double density : {0.02, 1.0}) {
    ContextPayload c(density, 2000, ContextPayload::Mode::kLegacy);
    ASSERT_NO_FATAL_FAILURE(ExpectEveryTruncationAndBitFlipCorrupt(c.w, c.p)) << "density " << density;
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

TEST(LegacyContextHostile, ResignedBadClassTablesAreCorrupt) {
  ContextPayload c(0.05, 6000, ContextPayload::Mode::kLegacy);
  const auto raw = LocationSection(c.p);
  const ClassCode code = ClassCode::Parse(raw);
  ASSERT_GE(code.entries.size(), 3u);
  ASSERT_EQ(code.Bytes(), raw);
  ASSERT_NO_FATAL_FAILURE(ExpectReassembledDecodesAlike(c.w, c.p, raw));
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
  ExpectDamagedBitStreamsCorrupt(code, raw, decode, decode_raw);
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

TEST(LegacyContextHostile, ResignedRandomLocationEditsAreCorruptOrWellFormed) {
  ContextPayload c(0.05, 3000, ContextPayload::Mode::kLegacy);
  int refused = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectRandomLocationEditsCorruptOrWellFormed(c.w, c.p, 8, 40, &refused));
  EXPECT_GT(refused, 2000);
}

// ---------------------------------------------------------------------------------------------
// Hand-built context payloads: the format as documented, written without the encoder.

TEST(LegacyContextHostile, HandBuiltContextCodesFollowTheFormat) {
  const auto kC = StatusCode::kCorrupt;
  // U8 (class 0 only): one change at 5: present 1, class 0, k 1, rice 0, gap 5 = 11111 0.
  std::vector<uint8_t> u8_base(16, 9);
  BaseLookup u8_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(u8_base); };
  const auto u8_table = Seg(DType::kU8, ValueKind::kXor, 0, 0, 16, 1);
  auto u8 = [&](const std::vector<uint8_t>& loc) {
    DecodedPayload d;
    Status s = DecodePayload(CraftContext(CodecMode::kContext, 1, u8_table, loc, {0x42}), &d, u8_lookup);
    if (s.ok()) {
      EXPECT_EQ(AsVector(d.segments[0].changes.values), (std::vector<uint8_t>{0x42}));
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
  Status s = DecodePayload(CraftContext(CodecMode::kContext, 1, bf16_table, loc, {0x11, 0x22, 0x33, 0x44}), &d, bf16_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(d.segments[0].spec.start, 100u);
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(AsVector(d.segments[0].changes.values), (std::vector<uint8_t>{0x11, 0x33, 0x22, 0x44}));
  // Classes out of order, and the same code against a base with a single class.
  EXPECT_EQ(DecodePayload(CraftContext(CodecMode::kContext, 1, bf16_table, {2, 0x80, 1, 0, 0x7f, 1, 0, 0b0011}, {1, 2, 3, 4}), &d, bf16_lookup).code(), kC);
  std::vector<uint8_t> flat(32);
  for (size_t i = 0; i < 16; ++i) StoreElem(flat, i, 2, 0x3f80);
  BaseLookup flat_lookup = [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> { return std::span<const uint8_t>(flat); };
  EXPECT_EQ(DecodePayload(CraftContext(CodecMode::kContext, 1, bf16_table, loc, {1, 2, 3, 4}), &d, flat_lookup).code(), kC);

  // Two segments sharing class 0 (U8 then I16): ordinals run across segments. Changes at U8[3]
  // (ordinal 3) and I16[0] (ordinal 8): gaps 3, 4 = 1110 11110.
  std::vector<uint8_t> a(8, 0), b(4, 0);
  BaseLookup two_lookup = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    return std::span<const uint8_t>(s.tensor_index == 0 ? a : b);
  };
  const auto two_table = Cat(Seg(DType::kU8, ValueKind::kXor, 0, 0, 8, 1), Seg(DType::kI16, ValueKind::kXor, 1, 0, 2, 1));
  s = DecodePayload(CraftContext(CodecMode::kContext, 2, two_table, {1, 0, 2, 0, 0b11110111, 0b0}, {5, 6, 7}), &d, two_lookup);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{3}));
  EXPECT_EQ(AsVector(d.segments[1].changes.positions), (std::vector<uint32_t>{0}));
  // Both changes in the first segment: its table entry says one.
  EXPECT_EQ(DecodePayload(CraftContext(CodecMode::kContext, 2, two_table, {1, 0, 2, 0, 0b00000111}, {5, 6, 7}), &d, two_lookup).code(), kC);
  // Both in the second.
  EXPECT_EQ(DecodePayload(CraftContext(CodecMode::kContext, 2, two_table, {1, 0, 2, 0, 0xff, 0x00}, {5, 6, 7}), &d, two_lookup).code(), kC);
}

}  // namespace
}  // namespace dcr
