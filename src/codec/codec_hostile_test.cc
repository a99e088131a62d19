// Codec tests, part 3: hostile payloads. Truncated or bit-flipped payloads are caught by the
// checksum; payloads re-signed with a valid checksum but a bad structure (header fields, segment
// table, location codes, sections, Huffman tables and streams) are caught by the structural
// checks. Every failure is kCorrupt or kUnsupported, and nothing crashes. Context-mode payloads
// are in codec_context_test.cc.
#include <gtest/gtest.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/payload_codec.h"
#include "codec/payload_craft_test_support.h"
#include "codec/section_coding.h"
#include "codec/value_coding.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

// The decoder's contract on an accepted payload: every segment's positions lie inside it and
// ascend strictly, one value of the declared width per position; segments ascend by
// (tensor, start) and are disjoint.
void ExpectWellFormed(const DecodedPayload& d) {
  ASSERT_FALSE(d.segments.empty());
  for (size_t i = 0; i < d.segments.size(); ++i) {
    const DecodedSegment& s = d.segments[i];
    const uint32_t w = DTypeWidth(s.spec.dtype);
    ASSERT_GE(s.spec.count, 1u);
    ASSERT_LE(s.spec.count, kMaxSegmentElements);
    ASSERT_GT(s.changes.size(), 0u);
    ASSERT_LE(s.changes.size(), s.spec.count);
    ASSERT_EQ(s.changes.width, w);
    ASSERT_EQ(s.changes.values.size(), s.changes.size() * w);
    for (size_t k = 0; k < s.changes.size(); ++k) {
      ASSERT_LT(s.changes.positions[k], s.spec.count);
      if (k > 0) {
        ASSERT_LT(s.changes.positions[k - 1], s.changes.positions[k]);
      }
    }
    if (i > 0) {
      const SegmentSpec& q = d.segments[i - 1].spec;
      ASSERT_TRUE(s.spec.tensor_index > q.tensor_index ||
                  (s.spec.tensor_index == q.tensor_index && s.spec.start >= q.start + q.count));
    }
  }
}

// Re-signs `q` and decodes it into *status: a refusal must be kCorrupt or kUnsupported, an
// accepted payload must be well formed (ExpectWellFormed). Failures are fatal.
void ExpectResignedRefusedOrWellFormed(std::vector<uint8_t>& q, Status* status) {
  Resign(q);
  DecodedPayload d;
  *status = DecodePayload(q, &d);
  if (status->ok()) {
    ExpectWellFormed(d);
  } else {
    ASSERT_TRUE(status->code() == StatusCode::kCorrupt || status->code() == StatusCode::kUnsupported)
        << status->ToString();
  }
}

// Three segments (a multi-block BF16 segment with scattered, dense and run-shaped blocks, an F32
// segment and a U8 segment) whose sections are zstd-compressed.
std::vector<uint8_t> LargePayload() {
  std::mt19937_64 rng(11);
  const uint64_t n = 20000;
  std::vector<uint8_t> base(n * 2), next;
  for (auto& b : base) b = static_cast<uint8_t>(rng());
  next = base;
  for (uint64_t i = 0; i < n; ++i) {
    bool change = (i < 4096 && rng() % 100 == 0) || (i >= 4096 && i < 8192 && i % 3 != 0) ||
                  (i >= 9000 && i < 9500) || (i >= 12288 && rng() % 1000 == 0);
    if (change) next[i * 2] ^= 1;
  }
  std::vector<uint8_t> f32(300 * 4), f32_next;
  for (auto& b : f32) b = static_cast<uint8_t>(rng());
  f32_next = f32;
  for (size_t i = 0; i < 300; i += 10) f32_next[i * 4] ^= 3;
  std::vector<uint8_t> u8(1000, 0), u8_next(1000, 0);
  for (size_t i = 200; i < 400; ++i) u8_next[i] = 1;
  EncodeOptions opt;
  opt.block_log2 = 12;
  PayloadBuilder b(opt);
  EXPECT_GT(b.AddDiff({5, DType::kBF16, ValueKind::kXor, 1000, n}, base, next), 0u);
  EXPECT_GT(b.AddDiff({6, DType::kF32, ValueKind::kOverwrite, 0, 300}, f32, f32_next), 0u);
  EXPECT_GT(b.AddDiff({9, DType::kU8, ValueKind::kXor, 50, 1000}, u8, u8_next), 0u);
  std::vector<uint8_t> p;
  b.Finish({0x0123456789abcdefull, 3, 17}, &p);
  EXPECT_EQ(p[kLocCodec], static_cast<uint8_t>(SectionCodec::kZstd));
  // Mostly one-bit XOR masks plus a few escaped F32 overwrites: the symbol Huffman form.
  EXPECT_EQ(p[kValCodec], static_cast<uint8_t>(ValueCodec::kHuffman));
  return p;
}

// Overwrites of F32 values that share their high bytes: every value escapes, so the values are
// stored as zstd-compressed byte planes.
std::vector<uint8_t> ZstdValuesPayload() {
  std::mt19937_64 rng(15);
  const uint64_t n = 3000;
  std::vector<uint8_t> base(n * 4), next;
  for (auto& b : base) b = static_cast<uint8_t>(rng());
  next = base;
  for (uint64_t i = 0; i < n; i += 2) {
    const uint32_t v = 0x3f800000u | static_cast<uint32_t>(rng() % 3) << 16 | static_cast<uint32_t>(rng() & 0xff);
    std::memcpy(next.data() + i * 4, &v, 4);
  }
  PayloadBuilder b;
  EXPECT_GT(b.AddDiff({1, DType::kF32, ValueKind::kOverwrite, 0, n}, base, next), 0u);
  std::vector<uint8_t> p;
  b.Finish({99, 1, 1}, &p);
  EXPECT_EQ(p[kValCodec], static_cast<uint8_t>(ValueCodec::kPlanesZstd));
  return p;
}

// Two segments, small enough to flip every bit of: raw sections.
std::vector<uint8_t> SmallPayload() {
  std::vector<uint8_t> base(40, 0), next(40, 0);
  next[3] = 1;
  next[17] = 0x80;
  next[39] = 0xff;
  std::vector<uint8_t> u8(8, 0), u8_next(8, 0);
  u8_next[6] = 2;
  PayloadBuilder b;
  EXPECT_EQ(b.AddDiff({0, DType::kF32, ValueKind::kOverwrite, 0, 10}, base, next), 3u);
  EXPECT_EQ(b.AddDiff({2, DType::kU8, ValueKind::kXor, 0, 8}, u8, u8_next), 1u);
  std::vector<uint8_t> p;
  b.Finish({77, 1, 2}, &p);
  EXPECT_EQ(p[kLocCodec], static_cast<uint8_t>(SectionCodec::kRaw));
  // 12 of 13 value bytes escape: raw byte planes are the smallest form.
  EXPECT_EQ(p[kValCodec], static_cast<uint8_t>(ValueCodec::kPlanesRaw));
  return p;
}

// Small masks of a BF16 and a U8 segment and one escaped value (2 of 51 value bytes, under 5 %):
// a small payload whose values are Huffman-coded.
std::vector<uint8_t> SmallHuffmanPayload() {
  std::vector<uint8_t> base(64, 0x55), next = base;
  for (size_t i = 0; i < 24; ++i) next[i * 2] ^= i % 3 ? 1 : 3;
  next[63] ^= 0x40;  // one escaped value: 0x4000
  std::vector<uint8_t> u8(8, 0), u8_next(8, 0);
  u8_next[1] = 7;
  PayloadBuilder b;
  EXPECT_EQ(b.AddDiff({0, DType::kBF16, ValueKind::kXor, 0, 32}, base, next), 25u);
  EXPECT_EQ(b.AddDiff({1, DType::kU8, ValueKind::kXor, 0, 8}, u8, u8_next), 1u);
  std::vector<uint8_t> p;
  b.Finish({78, 1, 3}, &p);
  EXPECT_EQ(p[kValCodec], static_cast<uint8_t>(ValueCodec::kHuffman));
  return p;
}

// A hand-built payload with raw sections, for crafting tables and location codes.
std::vector<uint8_t> Craft(int block_log2, uint32_t segments, const std::vector<uint8_t>& table,
                           const std::vector<uint8_t>& loc, const std::vector<uint8_t>& val) {
  return CraftPayload(CodecMode::kPlain, block_log2, segments, table, loc, val);
}

// A valid location code for 16 elements with one change at 5 (Rice r=0: five ones, a zero).
const std::vector<uint8_t> kLocAt5 = {1, 0, 0, 0x1f};

TEST(HostilePayload, ValidPayloadsUsedBelowDecode) {
  for (const auto& p : {LargePayload(), SmallPayload(), ZstdValuesPayload(), SmallHuffmanPayload()}) {
    DecodedPayload d;
    Status s = DecodePayload(p, &d);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectWellFormed(d);
  }
}

TEST(HostilePayload, HandBuiltPayloadsFollowingTheFormatDecode) {
  DecodedPayload d;
  auto one = Craft(4, 1, Seg(DType::kU8, 0, 0, 0, 16, 1), kLocAt5, {0x42});
  Status s = DecodePayload(one, &d);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(AsVector(d.segments[0].changes.positions), (std::vector<uint32_t>{5}));
  EXPECT_EQ(AsVector(d.segments[0].changes.values), (std::vector<uint8_t>{0x42}));
  // Two segments of one tensor, adjacent: [0, 16) U8 and [16, 32) U16 overwrite (bitmap {0, 2});
  // the U16 values are stored as byte planes {1, 2} {3, 4}.
  auto two = Craft(4, 2, Cat(Seg(DType::kU8, 0, 7, 0, 16, 1), Seg(DType::kU16, 1, 7, 16, 16, 2)),
                   Cat(kLocAt5, {2, 1, 0x05, 0x00}), {0x42, 1, 2, 3, 4});
  s = DecodePayload(two, &d);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(d.segments.size(), 2u);
  EXPECT_EQ(d.segments[1].spec.start, 16u);
  EXPECT_EQ(d.segments[1].spec.kind, ValueKind::kOverwrite);
  EXPECT_EQ(AsVector(d.segments[1].changes.positions), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(AsVector(d.segments[1].changes.values), (std::vector<uint8_t>{1, 3, 2, 4}));
}

TEST(HostilePayload, EveryTruncationIsCorrupt) {
  for (const auto& p : {LargePayload(), SmallPayload(), ZstdValuesPayload(), SmallHuffmanPayload()}) {
    for (size_t len = 0; len < p.size(); ++len)
      ASSERT_EQ(DecodeCode(std::span<const uint8_t>(p.data(), len)), StatusCode::kCorrupt) << "length " << len;
    std::vector<uint8_t> longer = p;
    longer.push_back(0);
    EXPECT_EQ(DecodeCode(longer), StatusCode::kCorrupt);
  }
}

TEST(HostilePayload, EverySingleBitFlipOfASmallPayloadIsCorrupt) {
  for (const auto& p : {SmallPayload(), SmallHuffmanPayload()})
    for (size_t byte = 0; byte < p.size(); ++byte)
      for (int bit = 0; bit < 8; ++bit) {
        auto q = p;
        q[byte] ^= static_cast<uint8_t>(1u << bit);
        ASSERT_EQ(DecodeCode(q), StatusCode::kCorrupt) << "byte " << byte << " bit " << bit;
      }
}

TEST(HostilePayload, BitFlipsAnywhereInALargePayloadAreCorrupt) {
  const auto p = LargePayload();
  std::mt19937_64 rng(12);
  for (size_t byte = 0; byte < p.size(); ++byte) {
    auto q = p;
    q[byte] ^= static_cast<uint8_t>(1u << (byte % 8));
    ASSERT_EQ(DecodeCode(q), StatusCode::kCorrupt) << "byte " << byte;
  }
  for (int i = 0; i < 2000; ++i) {
    auto q = p;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) q[rng() % q.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (q == p) continue;
    ASSERT_EQ(DecodeCode(q), StatusCode::kCorrupt) << "case " << i;
  }
}

TEST(HostilePayload, ResignedVersionOrModeChangesAreUnsupported) {
  const auto p = LargePayload();
  for (uint64_t v : {0ull, 2ull, 0xffffull})
    EXPECT_EQ(DecodeCode(Edited(p, kVersion, v, 2)), StatusCode::kUnsupported) << "version " << v;
  // Modes 1 to 4 are context modes, which need the old bits; 5 and above are unknown.
  for (uint64_t m : {1ull, 2ull, 3ull, 4ull}) EXPECT_EQ(DecodeCode(Edited(p, kMode, m, 1)), StatusCode::kUnsupported) << "mode " << m;
  for (uint64_t m : {5ull, 6ull, 0xffull}) {
    EXPECT_EQ(DecodeCode(Edited(p, kMode, m, 1)), StatusCode::kUnsupported) << "mode " << m;
    PayloadLayout l;
    EXPECT_EQ(ParsePayload(Edited(p, kMode, m, 1), &l).code(), StatusCode::kUnsupported) << "mode " << m;
  }
}

// A plain payload relabelled as context mode and decoded with a base: its plain location code is
// read as a class code, which is refused or yields positions inside the segments.
TEST(HostilePayload, ResignedPlainPayloadsRelabelledAsContextModeAreCorruptOrWellFormed) {
  for (const auto& p : {LargePayload(), SmallPayload(), SmallHuffmanPayload()}) {
    const auto q = Edited(p, kMode, 1, 1);
    std::deque<std::vector<uint8_t>> bases;  // stable addresses: the spans must outlive the lookups
    BaseLookup zeros = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
      bases.emplace_back(s.count * DTypeWidth(s.dtype), 0);
      return std::span<const uint8_t>(bases.back());
    };
    DecodedPayload d;
    Status s = DecodePayload(q, &d, zeros);
    if (s.ok()) {
      ExpectWellFormed(d);
    } else {
      EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
    }
  }
}

TEST(HostilePayload, ResignedBadHeaderFieldsAreCorrupt) {
  const auto p = LargePayload();
  const uint64_t nseg = Field(p, kSegments, 4), table_len = Field(p, kTableLen, 4);
  const uint64_t loc_raw = Field(p, kLocRaw, 8), loc_stored = Field(p, kLocStored, 8);
  const uint64_t val_raw = Field(p, kValRaw, 8), val_stored = Field(p, kValStored, 8);
  struct Case {
    const char* what;
    size_t off;
    uint64_t value;
    int bytes;
  };
  const Case cases[] = {
      {"magic", kMagic, 0x50524345, 4},
      {"block 2^2", kBlockLog2, 2, 1},
      {"block 2^32", kBlockLog2, 32, 1},
      {"block 2^255", kBlockLog2, 255, 1},
      {"location codec 2", kLocCodec, 2, 1},
      {"value codec 4", kValCodec, 4, 1},
      {"value codec 3 (streams) for one stream's bytes", kValCodec, 3, 1},
      {"value codec 255", kValCodec, 255, 1},
      {"location codec raw for zstd bytes", kLocCodec, 0, 1},
      {"value codec raw planes for Huffman bytes", kValCodec, 0, 1},
      {"value codec zstd planes for Huffman bytes", kValCodec, 1, 1},
      {"0 segments", kSegments, 0, 4},
      {"segments + 1", kSegments, nseg + 1, 4},
      {"segments - 1", kSegments, nseg - 1, 4},
      {"segments max", kSegments, 0xffffffff, 4},
      {"table length + 1", kTableLen, table_len + 1, 4},
      {"table length - 1", kTableLen, table_len - 1, 4},
      {"table length max", kTableLen, 0xffffffff, 4},
      {"value length + 2", kValRaw, val_raw + 2, 8},
      {"value length - 2", kValRaw, val_raw - 2, 8},
      {"location length + 1", kLocRaw, loc_raw + 1, 8},
      {"location length - 1", kLocRaw, loc_raw - 1, 8},
      {"location length 2^40", kLocRaw, 1ull << 40, 8},
      {"location length max", kLocRaw, UINT64_MAX, 8},
      {"location stored + 1", kLocStored, loc_stored + 1, 8},
      {"location stored - 1", kLocStored, loc_stored - 1, 8},
      {"location stored max", kLocStored, UINT64_MAX, 8},
      {"value stored + 1", kValStored, val_stored + 1, 8},
      {"value stored - 1", kValStored, val_stored - 1, 8},
      {"value stored max", kValStored, UINT64_MAX, 8},
  };
  for (const Case& c : cases) EXPECT_EQ(DecodeCode(Edited(p, c.off, c.value, c.bytes)), StatusCode::kCorrupt) << c.what;
  for (size_t i = kReserved8; i < kLocRaw; ++i)
    EXPECT_EQ(DecodeCode(Edited(p, i, 1, 1)), StatusCode::kCorrupt) << "reserved byte " << i;
  for (uint64_t form : {2, 3, 255})
    EXPECT_EQ(DecodeCode(Edited(p, kValForm, form, 1)), StatusCode::kCorrupt) << "value form " << form;
  // Moving the boundary between the sections keeps their total but breaks both.
  auto q = p;
  StoreLe(q.data() + kLocStored, loc_stored + 1, 8);
  StoreLe(q.data() + kValStored, val_stored - 1, 8);
  Resign(q);
  EXPECT_EQ(DecodeCode(q), StatusCode::kCorrupt);
  // Zstd-coded planes read as raw planes or as a Huffman form.
  const auto z = ZstdValuesPayload();
  EXPECT_EQ(DecodeCode(Edited(z, kValCodec, 0, 1)), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeCode(Edited(z, kValCodec, 2, 1)), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeCode(Edited(z, kValCodec, 3, 1)), StatusCode::kCorrupt);
}

TEST(HostilePayload, ResignedBadSegmentTablesAreCorrupt) {
  const auto kC = StatusCode::kCorrupt;
  auto one = [&](const std::vector<uint8_t>& table, uint32_t m = 1) { return DecodeCode(Craft(4, m, table, kLocAt5, {1})); };
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 1)), StatusCode::kOk);  // the reference entry
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 1, 15)), kC);             // dtype code 15
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 1, 0xfe)), kC);           // dtype code 254
  EXPECT_EQ(one(Seg(DType::kU8, 2, 0, 0, 16, 1)), kC);                 // value kind 2
  EXPECT_EQ(one(Seg(DType::kU8, 0, 1ull << 32, 0, 16, 1)), kC);        // tensor index beyond u32
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 1ull << 61, 16, 1)), kC);        // (start + count) * 8 overflows
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, UINT64_MAX, 16, 1)), kC);
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 0)), kC);                 // no changes
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 17)), kC);                // more changes than elements
  EXPECT_EQ(one(Cat(Seg(DType::kU8, 0, 0, 0, 16, 1), {0})), kC);       // trailing table byte
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 1), 2), kC);              // two segments declared, one present
  EXPECT_EQ(one(Seg(DType::kU8, 0, 0, 0, 16, 1), 0), kC);              // zero segments
  // A table truncated inside its second entry (padded so the size check alone does not catch it).
  auto truncated = Cat(Seg(DType::kU8, 0, 0, 0, 16, 1), {0, 0, 0x80, 0x80, 0x80, 0x80});
  EXPECT_EQ(one(truncated, 2), kC);
  EXPECT_EQ(DecodeCode(Craft(4, 1, Seg(DType::kU8, 0, 0, 0, 0, 1), {}, {1})), kC);  // count 0
  EXPECT_EQ(DecodeCode(Craft(4, 1, Seg(DType::kU8, 0, 0, 0, 1ull << 32, 1), kLocAt5, {1})), kC);  // count 2^32

  // Two segments: out of order, overlapping, or duplicated are refused; adjacent is fine.
  auto two = [&](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    return DecodeCode(Craft(4, 2, Cat(a, b), Cat(kLocAt5, kLocAt5), {1, 1}));
  };
  EXPECT_EQ(two(Seg(DType::kU8, 0, 3, 0, 16, 1), Seg(DType::kU8, 0, 3, 16, 16, 1)), StatusCode::kOk);
  EXPECT_EQ(two(Seg(DType::kU8, 0, 3, 0, 16, 1), Seg(DType::kU8, 0, 4, 0, 16, 1)), StatusCode::kOk);
  EXPECT_EQ(two(Seg(DType::kU8, 0, 4, 0, 16, 1), Seg(DType::kU8, 0, 3, 0, 16, 1)), kC);
  EXPECT_EQ(two(Seg(DType::kU8, 0, 3, 0, 16, 1), Seg(DType::kU8, 0, 3, 15, 16, 1)), kC);
  EXPECT_EQ(two(Seg(DType::kU8, 0, 3, 16, 16, 1), Seg(DType::kU8, 0, 3, 0, 16, 1)), kC);
  EXPECT_EQ(two(Seg(DType::kU8, 0, 3, 0, 16, 1), Seg(DType::kU8, 0, 3, 0, 16, 1)), kC);
  // The value section must hold exactly sum(n * width) bytes.
  EXPECT_EQ(DecodeCode(Craft(4, 1, Seg(DType::kU16, 0, 0, 0, 16, 1), kLocAt5, {1})), kC);
  EXPECT_EQ(DecodeCode(Craft(4, 1, Seg(DType::kU16, 0, 0, 0, 16, 1), kLocAt5, {1, 2})), StatusCode::kOk);
  EXPECT_EQ(DecodeCode(Craft(4, 1, Seg(DType::kU16, 0, 0, 0, 16, 1), kLocAt5, {1, 2, 3})), kC);
}

TEST(HostilePayload, ResignedLocationCodesClaimingPositionsOutsideTheirSegmentAreCorrupt) {
  const auto kC = StatusCode::kCorrupt;
  auto u8 = [&](uint64_t count, uint64_t n, const std::vector<uint8_t>& loc) {
    return DecodeCode(Craft(4, 1, Seg(DType::kU8, 0, 0, 0, count, n), loc, std::vector<uint8_t>(n, 1)));
  };
  EXPECT_EQ(u8(16, 1, {1, 0, 0, 0xff, 0xff, 0x00}), kC);  // Rice gap 16 in a 16-element block
  EXPECT_EQ(u8(12, 1, {1, 1, 0x00, 0x08}), StatusCode::kOk);  // bitmap bit 11 of 12
  EXPECT_EQ(u8(12, 1, {1, 1, 0x00, 0x10}), kC);            // bitmap bit 12 of 12
  EXPECT_EQ(u8(16, 2, {2, 2, 1, 15, 1}), kC);              // range 15..16 leaves the block
  EXPECT_EQ(u8(16, 1, Cat(kLocAt5, {1, 0, 0, 0})), kC);    // a second block in a one-block segment
  EXPECT_EQ(u8(4, 4, {5, 1, 0x1f}), kC);                   // more changes than the block holds
  EXPECT_EQ(u8(16, 2, {1, 1, 0x01, 0x00}), kC);            // fewer positions than declared
  EXPECT_EQ(u8(16, 1, {1, 3, 0}), kC);                     // unknown method
  EXPECT_EQ(u8(16, 1, {1, 0, 31, 0}), kC);                 // Rice parameter 31
  // Two segments whose codes are back to back: the second one missing, or one byte too many.
  auto two = [&](const std::vector<uint8_t>& loc) {
    return DecodeCode(Craft(4, 2, Cat(Seg(DType::kU8, 0, 0, 0, 16, 1), Seg(DType::kU8, 0, 1, 0, 16, 1)), loc, {1, 1}));
  };
  EXPECT_EQ(two(Cat(kLocAt5, kLocAt5)), StatusCode::kOk);
  EXPECT_EQ(two(kLocAt5), kC);
  EXPECT_EQ(two(Cat(Cat(kLocAt5, kLocAt5), {0})), kC);
  // The first segment's Rice code running on into the second segment's bytes.
  EXPECT_EQ(two(Cat({1, 0, 0, 0xff}, kLocAt5)), kC);
}

// zstd frames that do not record their content size are accepted only when they decode to
// exactly the declared length.
TEST(HostilePayload, ZstdSectionsWithoutContentSizeMustDecodeToTheDeclaredLength) {
  auto frame_without_size = [](const std::vector<uint8_t>& raw) {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
    std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
    size_t n = ZSTD_compress2(cctx, out.data(), out.size(), raw.data(), raw.size());
    ZSTD_freeCCtx(cctx);
    EXPECT_FALSE(ZSTD_isError(n));
    out.resize(n);
    EXPECT_EQ(ZSTD_getFrameContentSize(out.data(), out.size()), ZSTD_CONTENTSIZE_UNKNOWN);
    return out;
  };
  // 64 changes (positions 0..63) of a U8 segment of 64: one bitmap block.
  std::vector<uint8_t> loc = {64, 1};
  loc.resize(2 + 8, 0xff);
  const std::vector<uint8_t> table = Seg(DType::kU8, 0, 0, 0, 64, 64);
  const std::vector<uint8_t> val(64, 7);
  auto build = [&](const std::vector<uint8_t>& stored_val) {
    auto p = Craft(6, 1, table, loc, stored_val);
    p[kValCodec] = static_cast<uint8_t>(SectionCodec::kZstd);
    StoreLe(p.data() + kValRaw, 64, 8);
    Resign(p);
    return p;
  };
  DecodedPayload d;
  Status ok = DecodePayload(build(frame_without_size(val)), &d);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(AsVector(d.segments[0].changes.values), val);
  EXPECT_EQ(DecodeCode(build(frame_without_size(std::vector<uint8_t>(65, 7)))), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeCode(build(frame_without_size(std::vector<uint8_t>(63, 7)))), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeCode(build(std::vector<uint8_t>(40, 0xab))), StatusCode::kCorrupt);  // not a zstd frame
}

// ---------------------------------------------------------------------------------------------
// Hostile Huffman value sections, spliced into a real payload and re-signed.

// The Huffman section of LargePayload rebuilt from its decoded values.
HuffmanSection LargePayloadSection(const std::vector<uint8_t>& p) {
  DecodedPayload d;
  EXPECT_TRUE(DecodePayload(p, &d).ok());
  HuffmanSection h;
  for (const auto& seg : d.segments) h.AddValues(seg.changes.values, seg.changes.width);
  h.FlatLengths();
  return h;
}

TEST(HostilePayload, ResignedHuffmanValueSectionsWrittenByTheFormatDecode) {
  const auto p = LargePayload();
  DecodedPayload want;
  ASSERT_TRUE(DecodePayload(p, &want).ok());
  HuffmanSection h = LargePayloadSection(p);
  ASSERT_GE(h.lengths.size(), 2u);
  ASSERT_FALSE(h.escapes.empty());
  DecodedPayload got;
  Status s = DecodePayload(WithValueSection(p, ValueCodec::kHuffman, h.Bytes()), &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(got.segments.size(), want.segments.size());
  for (size_t i = 0; i < got.segments.size(); ++i) {
    EXPECT_EQ(AsVector(got.segments[i].changes.positions), AsVector(want.segments[i].changes.positions));
    EXPECT_EQ(AsVector(got.segments[i].changes.values), AsVector(want.segments[i].changes.values));
  }
  // Longer codes than needed and an incomplete code are fine too.
  for (auto& [sym, l] : h.lengths) l = 15;
  EXPECT_EQ(DecodeCode(WithValueSection(p, ValueCodec::kHuffman, h.Bytes())), StatusCode::kOk);
}

TEST(HostilePayload, ResignedBrokenHuffmanValueSectionsAreCorrupt) {
  const auto p = LargePayload();
  const HuffmanSection ref = LargePayloadSection(p);
  ASSERT_EQ(DecodeCode(WithValueSection(p, ValueCodec::kHuffman, ref.Bytes())), StatusCode::kOk);
  const auto kC = StatusCode::kCorrupt;
  auto code = [&](const HuffmanSection& h) { return DecodeCode(WithValueSection(p, ValueCodec::kHuffman, h.Bytes())); };
  auto code_bytes = [&](const std::vector<uint8_t>& v) { return DecodeCode(WithValueSection(p, ValueCodec::kHuffman, v)); };
  HuffmanSection h = ref;

  // Broken tables.
  EXPECT_EQ(code_bytes({}), kC) << "empty section";
  h.m_override = 0;
  EXPECT_EQ(code(h), kC) << "no symbols";
  h.m_override = static_cast<int64_t>(ref.lengths.size()) + 1;
  EXPECT_EQ(code(h), kC) << "one more symbol declared than listed";
  h.m_override = 4097;
  EXPECT_EQ(code(h), kC) << "4097 symbols";
  h = ref;
  h.lengths.begin()->second = 0;
  EXPECT_EQ(code(h), kC) << "length 0";
  h = ref;
  h.lengths[4096] = 12;
  EXPECT_EQ(code(h), kC) << "symbol 4096";
  h = ref;
  h.lengths[2] = 1, h.lengths[5] = 1;
  for (auto& [sym, l] : h.lengths) l = 1;  // three or more 1-bit codes
  EXPECT_EQ(code(h), kC) << "over-subscribed";
  h = ref;
  for (uint32_t sym = 100; sym < 110; ++sym) h.lengths[sym] = 4;  // 1/2 + 1/2 + 10/16 > 1
  EXPECT_EQ(code(h), kC) << "over-subscribed by unused symbols";

  // Escapes: truncated, missing, unused, below the threshold.
  h = ref;
  h.escapes.pop_back();
  EXPECT_EQ(code(h), kC) << "last escape truncated";
  h = ref;
  h.escapes.clear();
  EXPECT_EQ(code(h), kC) << "no escapes";
  h = ref;
  h.escapes.resize(h.escapes.size() - 4);  // the last F32 escape missing altogether
  EXPECT_EQ(code(h), kC) << "one escape missing";
  for (size_t extra : {1, 4, 8}) {
    h = ref;
    h.escapes.insert(h.escapes.end(), extra, 0xff);
    EXPECT_EQ(code(h), kC) << extra << " unused escape bytes";
  }
  h = ref;
  std::fill(h.escapes.begin(), h.escapes.begin() + 4, 0);  // the first escaped F32 is 0
  EXPECT_EQ(code(h), kC) << "escaped value below 4095";
  h = ref;
  StoreLe(h.escapes.data(), 4094, 4);
  EXPECT_EQ(code(h), kC) << "escaped value 4094";
  h = ref;
  StoreLe(h.escapes.data(), 4095, 4);
  EXPECT_EQ(code(h), StatusCode::kOk) << "escaped value 4095";
  {
    // An escape length larger than the rest of the section.
    auto v = ref.Bytes();
    std::vector<uint8_t> table_only;
    HuffmanSection t = ref;
    t.escapes.clear();
    t.symbols.clear();
    table_only = t.Bytes();  // table, escape length 0
    ASSERT_EQ(table_only.back(), 0);
    std::vector<uint8_t> q(table_only.begin(), table_only.end() - 1);
    PutVarint(q, v.size() * 2);
    q.insert(q.end(), v.begin() + static_cast<ptrdiff_t>(table_only.size()), v.end());
    EXPECT_EQ(code_bytes(q), kC) << "escape length past the end";
  }

  // Symbols wider than a 1-byte dtype: the U8 segment is the last; its values are the last symbols.
  DecodedPayload d;
  ASSERT_TRUE(DecodePayload(p, &d).ok());
  ASSERT_EQ(d.segments.back().spec.dtype, DType::kU8);
  const size_t u8_first = ref.symbols.size() - d.segments.back().changes.size();
  for (uint32_t sym : {256u, 300u, 4094u}) {
    h = ref;
    h.symbols[u8_first] = sym;
    h.lengths[sym] = 0;
    int len = 1;
    while ((size_t{1} << len) < h.lengths.size()) ++len;
    for (auto& [s2, l] : h.lengths) l = len;
    EXPECT_EQ(code(h), kC) << "U8 symbol " << sym;
  }
  h = ref;
  h.symbols[u8_first] = 255;
  h.lengths[255] = 0;
  for (auto& [s2, l] : h.lengths) l = 2;
  EXPECT_EQ(code(h), StatusCode::kOk) << "U8 symbol 255";
  h = ref;
  h.symbols[u8_first] = 4095;  // an escape for a U8 value: its byte cannot reach 4095
  h.escapes.push_back(0xff);
  EXPECT_EQ(code(h), kC) << "escaped U8 value";

  // The bit stream: a symbol missing, an unused code word, trailing bytes.
  {
    auto v = ref.Bytes();
    v.pop_back();
    EXPECT_EQ(code_bytes(v), kC) << "last stream byte missing";
    v = ref.Bytes();
    v.push_back(0);
    EXPECT_EQ(code_bytes(v), kC) << "trailing byte";
  }
  // (One symbol fewer is not always detectable: the zero padding of the last byte can decode as
  // a short code. Two bytes fewer are.)
  h = ref;
  h.symbols.resize(h.symbols.size() - 16);
  EXPECT_EQ(code(h), kC) << "16 symbols fewer than values";
  h = ref;
  h.symbols.resize(h.symbols.size() + 16, h.symbols.front());
  EXPECT_EQ(code(h), kC) << "16 symbols more than values";
  {
    // An unused code word: all codes 15 bits (an incomplete code), and the stream written for a
    // table with one more symbol (4000), so escapes use the code that follows the table's last.
    h = ref;
    for (auto& [sym, l] : h.lengths) l = 15;
    HuffmanSection more = h;
    more.lengths[4000] = 15;
    auto prefix = [](HuffmanSection x) {
      x.symbols.clear();
      return x.Bytes().size();
    };
    auto v = h.Bytes(), w = more.Bytes();
    ASSERT_EQ(code_bytes(v), StatusCode::kOk);
    v.resize(prefix(h));
    v.insert(v.end(), w.begin() + static_cast<ptrdiff_t>(prefix(more)), w.end());
    EXPECT_EQ(code_bytes(v), kC) << "unused code word";
  }
}

// Random edits anywhere, re-signed so the checksum passes: the decoder either refuses with
// kCorrupt/kUnsupported or returns segments that honour its contract.
TEST(HostilePayload, ResignedRandomEditsNeverBreakTheDecoderContract) {
  std::mt19937_64 rng(13);
  const std::vector<std::vector<uint8_t>> seeds = {LargePayload(), SmallPayload()};
  int refused = 0;
  for (int i = 0; i < 30000; ++i) {
    auto q = seeds[static_cast<size_t>(i % 2)];
    const size_t table_end = kPayloadHeaderBytes + Field(q, kTableLen, 4);
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at;
      switch (rng() % 4) {
        case 0: at = rng() % kPayloadHeaderBytes; break;                                       // header
        case 1: at = kPayloadHeaderBytes + rng() % (table_end - kPayloadHeaderBytes); break;   // segment table
        case 2: at = table_end + rng() % 16; break;                                            // start of the sections
        default: at = rng() % (q.size() - 8); break;                                           // anywhere
      }
      if (at >= q.size() - 8) continue;
      q[at] = rng() % 4 == 0 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(q[at] ^ (1u << (rng() % 8)));
    }
    Status s;
    ASSERT_NO_FATAL_FAILURE(ExpectResignedRefusedOrWellFormed(q, &s));
    if (!s.ok()) {
      ++refused;
      ASSERT_FALSE(s.message().empty());
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(HostilePayload, ArbitraryBytesWithAValidChecksumAreRefusedOrWellFormed) {
  std::mt19937_64 rng(14);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> q(kPayloadHeaderBytes + kPayloadTrailerBytes + rng() % 64);
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    StoreLe(q.data(), kPayloadMagic, 4);
    if (i % 2) {
      // Plausible header: valid version, mode, block size, codecs and small lengths.
      StoreLe(q.data() + kVersion, kPayloadFormatVersion, 2);
      q[kMode] = 0;
      q[kBlockLog2] = static_cast<uint8_t>(3 + rng() % 8);
      q[kLocCodec] = 0;
      q[kValCodec] = static_cast<uint8_t>(rng() % 4);  // raw planes, zstd planes, Huffman in one or in streams
      StoreLe(q.data() + kValForm, 0, 6);
      const uint64_t body = q.size() - kPayloadHeaderBytes - kPayloadTrailerBytes;
      const uint64_t t = body == 0 ? 0 : rng() % (body + 1), l = body - t == 0 ? 0 : rng() % (body - t + 1);
      StoreLe(q.data() + kSegments, 1 + rng() % 3, 4);
      StoreLe(q.data() + kTableLen, t, 4);
      StoreLe(q.data() + kLocRaw, l, 8);
      StoreLe(q.data() + kLocStored, l, 8);
      StoreLe(q.data() + kValRaw, body - t - l, 8);
      StoreLe(q.data() + kValStored, body - t - l, 8);
    }
    Status s;
    ASSERT_NO_FATAL_FAILURE(ExpectResignedRefusedOrWellFormed(q, &s));
  }
}

}  // namespace
}  // namespace dcr
