// Codec tests, part 2: hostile payloads. Truncated or bit-flipped payloads are caught by the
// checksum; payloads re-signed with a valid checksum but a bad structure are caught by the
// structural checks. Every failure is kCorrupt or kUnsupported, and nothing crashes.
#include <gtest/gtest.h>
#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <random>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/chunk_codec.h"
#include "codec/section_coding.h"

namespace dcr {
namespace {

// Header field offsets (docs/format.md, "Payload").
enum : size_t {
  kMagic = 0, kVersion = 4, kMode = 6, kKind = 7, kDType = 8, kBlockLog2 = 9, kLocCodec = 10,
  kValCodec = 11, kTensor = 12, kTransfer = 16, kProducer = 24, kSequence = 28, kStart = 32,
  kCount = 40, kChanged = 48, kLocRaw = 56, kLocStored = 64, kValRaw = 72, kValStored = 80,
  kReserved = 88,
};

void Resign(std::vector<uint8_t>& p) {
  StoreLe(p.data() + p.size() - 8, XXH3_64bits(p.data(), p.size() - 8), 8);
}

// A copy of `p` with a header field replaced and the checksum recomputed.
std::vector<uint8_t> Edited(const std::vector<uint8_t>& p, size_t off, uint64_t value, int bytes) {
  std::vector<uint8_t> q = p;
  StoreLe(q.data() + off, value, bytes);
  Resign(q);
  return q;
}

uint64_t Field(const std::vector<uint8_t>& p, size_t off, int bytes) { return LoadLe(p.data() + off, bytes); }

StatusCode DecodeCode(std::span<const uint8_t> p) {
  DecodedChunk d;
  return DecodePayload(p, &d).code();
}

// Checks the decoder's contract on an accepted payload: positions inside the chunk, strictly
// ascending, one value of the declared width per position.
void ExpectWellFormed(const DecodedChunk& d) {
  const uint32_t w = DTypeWidth(d.spec.dtype);
  ASSERT_GT(d.changes.size(), 0u);
  ASSERT_LE(d.changes.size(), d.spec.count);
  ASSERT_EQ(d.changes.width, w);
  ASSERT_EQ(d.changes.values.size(), d.changes.size() * w);
  for (size_t k = 0; k < d.changes.size(); ++k) {
    ASSERT_LT(d.changes.positions[k], d.spec.count);
    if (k > 0) ASSERT_LT(d.changes.positions[k - 1], d.changes.positions[k]);
  }
}

// A payload with a multi-block location code (scattered, dense and run-shaped blocks) whose
// sections are zstd-compressed.
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
  ChunkSpec spec{{0x0123456789abcdefull, 3, 17}, 5, DType::kBF16, 1000, n, ValueKind::kXor};
  EncodeOptions opt;
  opt.block_log2 = 12;
  EncodeScratch scratch;
  std::vector<uint8_t> p;
  EXPECT_GT(EncodeChunk(spec, base, next, opt, &scratch, &p), 0u);
  EXPECT_EQ(p[kLocCodec], static_cast<uint8_t>(SectionCodec::kZstd));
  EXPECT_EQ(p[kValCodec], static_cast<uint8_t>(SectionCodec::kZstd));
  return p;
}

// A payload small enough to flip every bit of: raw sections.
std::vector<uint8_t> SmallPayload() {
  std::vector<uint8_t> base(40, 0), next(40, 0);
  next[3] = 1;
  next[17] = 0x80;
  next[39] = 0xff;
  ChunkSpec spec{{77, 1, 2}, 0, DType::kF32, 0, 10, ValueKind::kOverwrite};
  EncodeScratch scratch;
  std::vector<uint8_t> p;
  EXPECT_EQ(EncodeChunk(spec, base, next, EncodeOptions{}, &scratch, &p), 3u);
  EXPECT_EQ(p[kLocCodec], static_cast<uint8_t>(SectionCodec::kRaw));
  return p;
}

// A hand-built payload with raw sections, for crafting location codes.
std::vector<uint8_t> Craft(DType dtype, uint64_t count, uint64_t changed, int block_log2,
                           const std::vector<uint8_t>& loc, const std::vector<uint8_t>& val) {
  std::vector<uint8_t> p(kPayloadHeaderBytes, 0);
  StoreLe(p.data() + kMagic, kPayloadMagic, 4);
  StoreLe(p.data() + kVersion, kPayloadFormatVersion, 2);
  p[kDType] = DTypeCode(dtype);
  p[kBlockLog2] = static_cast<uint8_t>(block_log2);
  StoreLe(p.data() + kTransfer, 5, 8);
  StoreLe(p.data() + kCount, count, 8);
  StoreLe(p.data() + kChanged, changed, 8);
  StoreLe(p.data() + kLocRaw, loc.size(), 8);
  StoreLe(p.data() + kLocStored, loc.size(), 8);
  StoreLe(p.data() + kValRaw, val.size(), 8);
  StoreLe(p.data() + kValStored, val.size(), 8);
  p.insert(p.end(), loc.begin(), loc.end());
  p.insert(p.end(), val.begin(), val.end());
  p.resize(p.size() + 8);
  Resign(p);
  return p;
}

TEST(HostilePayload, ValidPayloadsUsedBelowDecode) {
  for (const auto& p : {LargePayload(), SmallPayload()}) {
    DecodedChunk d;
    Status s = DecodePayload(p, &d);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectWellFormed(d);
  }
}

TEST(HostilePayload, EveryTruncationIsCorrupt) {
  for (const auto& p : {LargePayload(), SmallPayload()}) {
    for (size_t len = 0; len < p.size(); ++len)
      ASSERT_EQ(DecodeCode(std::span<const uint8_t>(p.data(), len)), StatusCode::kCorrupt) << "length " << len;
    std::vector<uint8_t> longer = p;
    longer.push_back(0);
    EXPECT_EQ(DecodeCode(longer), StatusCode::kCorrupt);
  }
}

TEST(HostilePayload, EverySingleBitFlipOfASmallPayloadIsCorrupt) {
  const auto p = SmallPayload();
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
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) q[rng() % q.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (q == p) continue;
    ASSERT_EQ(DecodeCode(q), StatusCode::kCorrupt) << "case " << i;
  }
}

TEST(HostilePayload, ResignedVersionOrModeChangesAreUnsupported) {
  const auto p = LargePayload();
  for (uint64_t v : {0ull, 2ull, 0xffffull})
    EXPECT_EQ(DecodeCode(Edited(p, kVersion, v, 2)), StatusCode::kUnsupported) << "version " << v;
  EXPECT_EQ(DecodeCode(Edited(p, kMode, 1, 1)), StatusCode::kUnsupported);
  EXPECT_EQ(DecodeCode(Edited(p, kMode, 0xff, 1)), StatusCode::kUnsupported);
}

TEST(HostilePayload, ResignedBadHeaderFieldsAreCorrupt) {
  const auto p = LargePayload();
  const uint64_t count = Field(p, kCount, 8), changed = Field(p, kChanged, 8);
  const uint64_t loc_raw = Field(p, kLocRaw, 8), loc_stored = Field(p, kLocStored, 8);
  const uint64_t val_raw = Field(p, kValRaw, 8), val_stored = Field(p, kValStored, 8);
  const auto kC = StatusCode::kCorrupt;
  struct Case {
    const char* what;
    size_t off;
    uint64_t value;
    int bytes;
  };
  const Case cases[] = {
      {"magic", kMagic, 0x50524345, 4},
      {"kind 2", kKind, 2, 1},
      {"kind 255", kKind, 255, 1},
      {"dtype 15", kDType, 15, 1},
      {"dtype 255", kDType, 255, 1},
      {"dtype of another width", kDType, DTypeCode(DType::kF32), 1},
      {"block 2^2", kBlockLog2, 2, 1},
      {"block 2^32", kBlockLog2, 32, 1},
      {"block 2^255", kBlockLog2, 255, 1},
      {"location codec 2", kLocCodec, 2, 1},
      {"value codec 2", kValCodec, 2, 1},
      {"location codec raw for zstd bytes", kLocCodec, 0, 1},
      {"count 0", kCount, 0, 8},
      {"count 2^32", kCount, 1ull << 32, 8},
      {"count below changed", kCount, changed - 1, 8},
      {"start + count overflows", kStart, UINT64_MAX - count + 1, 8},
      {"changed 0", kChanged, 0, 8},
      {"changed > count", kChanged, count + 1, 8},
      {"changed - 1", kChanged, changed - 1, 8},
      {"changed + 1", kChanged, changed + 1, 8},
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
  for (const Case& c : cases) EXPECT_EQ(DecodeCode(Edited(p, c.off, c.value, c.bytes)), kC) << c.what;
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(DecodeCode(Edited(p, kReserved + i, 1, 1)), kC) << "reserved byte " << i;
  // Moving the boundary between the sections keeps their total but breaks both.
  auto q = p;
  StoreLe(q.data() + kLocStored, loc_stored + 1, 8);
  StoreLe(q.data() + kValStored, val_stored - 1, 8);
  Resign(q);
  EXPECT_EQ(DecodeCode(q), kC);
  // A consistent but larger change count: the sections no longer hold that many changes.
  q = p;
  StoreLe(q.data() + kChanged, changed + 1, 8);
  StoreLe(q.data() + kValRaw, val_raw + 2, 8);
  Resign(q);
  EXPECT_EQ(DecodeCode(q), kC);
}

TEST(HostilePayload, HandBuiltPayloadWithAValidLocationCodeDecodes) {
  // Rice r=0, one change at position 5 of a 16-element block.
  auto p = Craft(DType::kU8, 16, 1, 4, {1, 0, 0, 0x1f}, {0x42});
  DecodedChunk d;
  Status s = DecodePayload(p, &d);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(d.changes.positions, (std::vector<uint32_t>{5}));
  EXPECT_EQ(d.changes.values, (std::vector<uint8_t>{0x42}));
}

TEST(HostilePayload, ResignedLocationCodesClaimingPositionsOutsideTheBlockAreCorrupt) {
  const auto kC = StatusCode::kCorrupt;
  // Rice gap of 16 in a 16-element block.
  EXPECT_EQ(DecodeCode(Craft(DType::kU8, 16, 1, 4, {1, 0, 0, 0xff, 0xff, 0x00}, {1})), kC);
  // Bitmap bit 12 in a 12-element chunk.
  EXPECT_EQ(DecodeCode(Craft(DType::kU8, 12, 1, 4, {1, 1, 0x00, 0x10}, {1})), kC);
  // Range 15..16 in a 16-element block.
  EXPECT_EQ(DecodeCode(Craft(DType::kU16, 16, 2, 4, {2, 2, 1, 15, 1}, {1, 1, 0, 0})), kC);
  // A second block in a one-block chunk (trailing bytes).
  EXPECT_EQ(DecodeCode(Craft(DType::kU8, 16, 1, 4, {1, 0, 0, 0x1f, 1, 0, 0, 0}, {1})), kC);
  // More changes in the block than it has elements.
  EXPECT_EQ(DecodeCode(Craft(DType::kU8, 4, 4, 3, {5, 1, 0x1f}, {1, 1, 1, 1})), kC);
  // Fewer positions than the header declares.
  EXPECT_EQ(DecodeCode(Craft(DType::kU8, 16, 2, 4, {1, 1, 0x01, 0x00}, {1, 1})), kC);
  // Unknown location method.
  EXPECT_EQ(DecodeCode(Craft(DType::kU8, 16, 1, 4, {1, 3, 0}, {1})), kC);
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
  // 64 changes (positions 0..63) of a U8 chunk of 64: bitmap block.
  std::vector<uint8_t> loc = {64, 1};
  loc.resize(2 + 8, 0xff);
  std::vector<uint8_t> val(64, 7);
  auto build = [&](const std::vector<uint8_t>& stored_val, uint64_t declared_val) {
    auto p = Craft(DType::kU8, 64, 64, 6, loc, {});
    p.resize(kPayloadHeaderBytes + loc.size());
    p.insert(p.end(), stored_val.begin(), stored_val.end());
    p.resize(p.size() + 8);
    p[kValCodec] = static_cast<uint8_t>(SectionCodec::kZstd);
    StoreLe(p.data() + kValRaw, declared_val, 8);
    StoreLe(p.data() + kValStored, stored_val.size(), 8);
    Resign(p);
    return p;
  };
  DecodedChunk d;
  Status ok = DecodePayload(build(frame_without_size(val), 64), &d);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(d.changes.values, val);
  std::vector<uint8_t> longer(65, 7), shorter(63, 7);
  EXPECT_EQ(DecodeCode(build(frame_without_size(longer), 64)), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeCode(build(frame_without_size(shorter), 64)), StatusCode::kCorrupt);
  // Garbage declared as zstd.
  EXPECT_EQ(DecodeCode(build(std::vector<uint8_t>(40, 0xab), 64)), StatusCode::kCorrupt);
}

// Random edits anywhere, re-signed so the checksum passes: the decoder either refuses with
// kCorrupt/kUnsupported or returns a chunk that honours its contract.
TEST(HostilePayload, ResignedRandomEditsNeverBreakTheDecoderContract) {
  std::mt19937_64 rng(13);
  const std::vector<std::vector<uint8_t>> seeds = {LargePayload(), SmallPayload()};
  int accepted = 0, refused = 0;
  for (int i = 0; i < 30000; ++i) {
    auto q = seeds[static_cast<size_t>(i % 2)];
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at;
      switch (rng() % 3) {
        case 0: at = rng() % kPayloadHeaderBytes; break;             // header
        case 1: at = kPayloadHeaderBytes + rng() % 16; break;        // start of the sections
        default: at = rng() % (q.size() - 8); break;                 // anywhere
      }
      if (at >= q.size() - 8) continue;
      q[at] = rng() % 4 == 0 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(q[at] ^ (1u << (rng() % 8)));
    }
    Resign(q);
    DecodedChunk d;
    Status s = DecodePayload(q, &d);
    if (s.ok()) {
      ++accepted;
      ExpectWellFormed(d);
      if (testing::Test::HasFatalFailure()) return;
    } else {
      ++refused;
      ASSERT_TRUE(s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported) << s.ToString();
      ASSERT_FALSE(s.message().empty());
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(HostilePayload, ArbitraryBytesWithAValidChecksumAreRefused) {
  std::mt19937_64 rng(14);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> q(kPayloadHeaderBytes + kPayloadTrailerBytes + rng() % 64);
    for (auto& b : q) b = static_cast<uint8_t>(rng());
    StoreLe(q.data(), kPayloadMagic, 4);
    if (i % 2) StoreLe(q.data() + kVersion, kPayloadFormatVersion, 2), q[kMode] = 0, StoreLe(q.data() + kReserved, 0, 8);
    Resign(q);
    DecodedChunk d;
    Status s = DecodePayload(q, &d);
    if (s.ok()) {
      ExpectWellFormed(d);
    } else {
      ASSERT_TRUE(s.code() == StatusCode::kCorrupt || s.code() == StatusCode::kUnsupported) << s.ToString();
    }
  }
}

}  // namespace
}  // namespace dcr
