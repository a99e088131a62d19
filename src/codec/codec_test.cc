// Codec tests, part 1: bit streams, varints, location coding and the payload round trip
// (EncodeChunk -> DecodePayload -> ApplyChunk gives exactly the new bits). Hostile payloads are
// in codec_hostile_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/chunk_codec.h"
#include "codec/diff.h"
#include "codec/location_coding.h"
#include "codec/section_coding.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

uint64_t LoadElem(const std::vector<uint8_t>& v, size_t i, uint32_t w) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + i * w, w);
  return x;
}
void StoreElem(std::vector<uint8_t>& v, size_t i, uint32_t w, uint64_t x) { std::memcpy(v.data() + i * w, &x, w); }

// Bit patterns whose float values are special; changes between any two of them must be seen.
std::vector<uint64_t> SpecialPatterns(DType t) {
  switch (t) {
    case DType::kBF16:
      return {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0x7f81, 0xffff, 0x0001, 0x807f, 0x3f80};
    case DType::kF16:
      return {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7e01, 0x7c01, 0xffff, 0x0001, 0x83ff, 0x3c00};
    case DType::kF32:
      return {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7fc00001,
              0x7f800001, 0xffffffff, 0x00000001, 0x807fffff, 0x3f800000};
    case DType::kF64:
      return {0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
              0x7ff8000000000000ull, 0x7ff8000000000001ull, 0x7ff0000000000001ull, 0xffffffffffffffffull,
              0x0000000000000001ull, 0x800fffffffffffffull, 0x3ff0000000000000ull};
    case DType::kF8E4M3:
      return {0x00, 0x80, 0x7f, 0xff, 0x01, 0x81, 0x38, 0x7e};
    case DType::kF8E5M2:
      return {0x00, 0x80, 0x7c, 0xfc, 0x7e, 0x7d, 0x01, 0x3c};
    case DType::kBool:
      return {0, 1};
    default: {
      uint32_t w = DTypeWidth(t);
      uint64_t all = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
      uint64_t top = 1ull << (8 * w - 1);
      return {0, 1, all, top, top - 1, all - 1};
    }
  }
}

const std::vector<DType>& TestedDTypes() {
  static const std::vector<DType> v = {DType::kBF16, DType::kF16, DType::kF32,  DType::kF64,
                                       DType::kF8E4M3, DType::kF8E5M2, DType::kI8, DType::kU8,
                                       DType::kI16, DType::kI32, DType::kI64, DType::kBool};
  return v;
}

// Random element bits for `t`, with some special patterns mixed in (BOOL stays 0/1).
uint64_t RandomBits(DType t, std::mt19937_64& rng) {
  uint32_t w = DTypeWidth(t);
  if (t == DType::kBool) return rng() & 1;
  if (rng() % 10 == 0) {
    auto sp = SpecialPatterns(t);
    return sp[rng() % sp.size()];
  }
  uint64_t mask = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
  return rng() & mask;
}

// A new value for an element that differs from `old` in its bits: a low-bit flip (as a one-ulp
// step gives), a special pattern, or random bits.
uint64_t ChangedBits(DType t, uint64_t old, std::mt19937_64& rng) {
  uint32_t w = DTypeWidth(t);
  uint64_t mask = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
  if (t == DType::kBool) return old ^ 1;
  for (;;) {
    uint64_t v;
    switch (rng() % 3) {
      case 0: v = old ^ ((1ull << (rng() % 3 + 1)) - 1); break;
      case 1: {
        auto sp = SpecialPatterns(t);
        v = sp[rng() % sp.size()];
        break;
      }
      default: v = rng(); break;
    }
    v &= mask;
    if (v != old) return v;
  }
}

struct CodecCase {
  DType dtype;
  ValueKind kind;
  uint64_t tensor_elems, start, count;
  std::vector<uint8_t> base, next;  // whole tensors
  std::vector<uint32_t> changed;    // positions relative to start, ascending
};

// Builds base/next tensors that differ inside [start, start+count) at a `density` fraction of
// positions (Bernoulli or clustered runs), and also outside the chunk (which must stay untouched).
CodecCase MakeCase(DType t, ValueKind kind, uint64_t count, double density, bool runs, std::mt19937_64& rng) {
  CodecCase c;
  c.dtype = t;
  c.kind = kind;
  const uint32_t w = DTypeWidth(t);
  c.start = rng() % 100;
  c.count = count;
  c.tensor_elems = c.start + count + rng() % 100;
  c.base.resize(c.tensor_elems * w);
  for (uint64_t i = 0; i < c.tensor_elems; ++i) StoreElem(c.base, i, w, RandomBits(t, rng));
  c.next = c.base;
  std::vector<bool> pick(count, false);
  if (density >= 1.0) {
    std::fill(pick.begin(), pick.end(), true);
  } else if (density > 0) {
    std::bernoulli_distribution coin(density);
    if (!runs) {
      for (uint64_t i = 0; i < count; ++i) pick[i] = coin(rng);
    } else {
      // Runs of mean length 40 whose starts are spaced to hit the density.
      std::geometric_distribution<uint64_t> len(1.0 / 40);
      std::bernoulli_distribution start(density / 40);
      for (uint64_t i = 0; i < count; ++i) {
        if (!start(rng)) continue;
        uint64_t l = 1 + len(rng);
        for (uint64_t k = i; k < std::min(count, i + l); ++k) pick[k] = true;
        i += l;
      }
    }
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (!pick[i]) continue;
    uint64_t idx = c.start + i;
    StoreElem(c.next, idx, w, ChangedBits(t, LoadElem(c.base, idx, w), rng));
    c.changed.push_back(static_cast<uint32_t>(i));
  }
  // Changes outside the chunk: not encoded, so ApplyChunk must leave them at base.
  for (uint64_t i = 0; i < c.start; ++i) StoreElem(c.next, i, w, ChangedBits(t, LoadElem(c.base, i, w), rng));
  return c;
}

// The tensor an exact apply of the chunk must give: next inside the chunk, base outside.
std::vector<uint8_t> Expected(const CodecCase& c) {
  const uint32_t w = DTypeWidth(c.dtype);
  std::vector<uint8_t> e = c.base;
  std::memcpy(e.data() + c.start * w, c.next.data() + c.start * w, c.count * w);
  return e;
}

ChunkSpec SpecFor(const CodecCase& c) {
  return ChunkSpec{{0x1122334455667788ull, 7, 42}, 3, c.dtype, c.start, c.count, c.kind};
}

int LocationMethodOfSingleBlock(const std::vector<uint8_t>& code) {
  ByteReader r(code);
  uint64_t n = 0;
  uint8_t m = 0;
  if (!r.ReadVarint(&n) || n == 0 || !r.ReadByte(&m)) return -1;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Byte helpers, varints, bit streams

TEST(ByteHelpers, LittleEndianStoreAndLoadAgree) {
  std::vector<uint8_t> out;
  PutLe(out, 0x0102030405060708ull, 8);
  EXPECT_EQ(out, (std::vector<uint8_t>{8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(LoadLe(out.data(), 8), 0x0102030405060708ull);
  EXPECT_EQ(LoadLe(out.data(), 3), 0x060708ull);
  uint8_t buf[4] = {0, 0, 0, 0};
  StoreLe(buf, 0xdeadbeef, 4);
  EXPECT_EQ(buf[0], 0xef);
  EXPECT_EQ(buf[3], 0xde);
  EXPECT_EQ(LoadLe(buf, 4), 0xdeadbeefull);
}

TEST(Varint, RoundTripsBoundaryAndRandomValuesWithTheAnnouncedSize) {
  std::vector<uint64_t> values = {0, 1, 127, 128, 255, 16383, 16384, (1ull << 21) - 1, 1ull << 21,
                                  0xffffffffull, 1ull << 35, (1ull << 63) - 1, 1ull << 63, ~0ull};
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) values.push_back(rng() >> (rng() % 64));
  std::vector<uint8_t> all;
  for (uint64_t v : values) {
    std::vector<uint8_t> one;
    PutVarint(one, v);
    EXPECT_EQ(one.size(), static_cast<size_t>(VarintSize(v))) << v;
    EXPECT_EQ(one.back() & 0x80, 0);
    all.insert(all.end(), one.begin(), one.end());
  }
  ByteReader r(all);
  for (uint64_t v : values) {
    uint64_t got = 0;
    ASSERT_TRUE(r.ReadVarint(&got));
    EXPECT_EQ(got, v);
  }
  EXPECT_EQ(r.remaining(), 0u);
  uint64_t extra;
  EXPECT_FALSE(r.ReadVarint(&extra));
}

TEST(Varint, MaxValueTakesTenBytesAndOverflowingOrTruncatedCodesAreRejected) {
  std::vector<uint8_t> max;
  PutVarint(max, ~0ull);
  ASSERT_EQ(max.size(), 10u);
  EXPECT_EQ(max[9], 0x01);
  uint64_t v = 0;
  {
    auto bad = max;
    bad[9] = 0x02;  // bit 64 would be set
    ByteReader r(bad);
    EXPECT_FALSE(r.ReadVarint(&v));
  }
  {
    std::vector<uint8_t> eleven(10, 0x80);
    eleven.push_back(0x00);  // more than 64 bits of continuation
    ByteReader r(eleven);
    EXPECT_FALSE(r.ReadVarint(&v));
  }
  for (size_t len = 0; len < max.size(); ++len) {
    ByteReader r(std::span<const uint8_t>(max.data(), len));
    EXPECT_FALSE(r.ReadVarint(&v)) << "prefix of " << len << " bytes";
  }
}

TEST(ByteReader, NeverReadsPastItsSpan) {
  std::vector<uint8_t> b = {1, 2, 3};
  ByteReader r(b);
  std::span<const uint8_t> s;
  EXPECT_FALSE(r.ReadBytes(4, &s));
  EXPECT_EQ(r.pos(), 0u);
  ASSERT_TRUE(r.ReadBytes(2, &s));
  EXPECT_EQ(s[1], 2);
  r.Skip(100);
  EXPECT_EQ(r.remaining(), 0u);
  uint8_t x;
  EXPECT_FALSE(r.ReadByte(&x));
}

TEST(BitStream, RandomFieldsAndUnaryCodesRoundTrip) {
  std::mt19937_64 rng(2);
  struct Item {
    bool unary;
    uint64_t v;
    int n;
  };
  std::vector<Item> items;
  std::vector<uint8_t> buf;
  BitWriter w(buf);
  for (int i = 0; i < 20000; ++i) {
    if (rng() % 3 == 0) {
      uint64_t q = rng() % 8 == 0 ? rng() % 300 : rng() % 8;
      items.push_back({true, q, 0});
      w.PutUnary(q);
    } else {
      int n = 1 + static_cast<int>(rng() % 56);
      uint64_t v = rng() & ((1ull << n) - 1);
      items.push_back({false, v, n});
      w.Put(v, n);
    }
  }
  w.Flush();
  BitReader r(buf);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    uint64_t got = it.unary ? r.GetUnary(1000) : r.Get(it.n);
    ASSERT_FALSE(r.overrun()) << "item " << i;
    ASSERT_EQ(got, it.v) << "item " << i;
  }
  EXPECT_EQ(r.bytes_consumed(), buf.size());
}

// Every unary length 0..200 after every bit alignment 0..71, followed by a sentinel field:
// covers runs that end exactly at the last bit of a full 64-bit reader window.
TEST(BitStream, UnaryRunsOfEveryLengthAtEveryAlignmentRoundTrip) {
  for (int prefix = 0; prefix < 72; ++prefix) {
    for (uint64_t q = 0; q <= 200; ++q) {
      std::vector<uint8_t> buf;
      BitWriter w(buf);
      for (int p = 0; p < prefix; ++p) w.Put(p & 1, 1);
      w.PutUnary(q);
      w.Put(0x15, 5);
      w.PutUnary(3);
      w.Flush();
      BitReader r(buf);
      for (int p = 0; p < prefix; ++p) ASSERT_EQ(r.Get(1), static_cast<uint64_t>(p & 1));
      ASSERT_EQ(r.GetUnary(1000), q) << "prefix " << prefix << " q " << q;
      ASSERT_EQ(r.Get(5), 0x15u) << "prefix " << prefix << " q " << q;
      ASSERT_EQ(r.GetUnary(1000), 3u) << "prefix " << prefix << " q " << q;
      ASSERT_FALSE(r.overrun());
      EXPECT_EQ(r.bytes_consumed(), buf.size());
    }
  }
}

TEST(BitStream, ReadingPastTheEndSetsOverrunAndYieldsZero) {
  std::vector<uint8_t> buf = {0xff};
  BitReader r(buf);
  EXPECT_EQ(r.Get(8), 0xffu);
  EXPECT_FALSE(r.overrun());
  EXPECT_EQ(r.Get(1), 0u);
  EXPECT_TRUE(r.overrun());

  std::vector<uint8_t> ones(4, 0xff);
  BitReader u(ones);
  u.GetUnary(1000);  // no terminating zero bit
  EXPECT_TRUE(u.overrun());

  std::vector<uint8_t> long_run = {0xff, 0xff, 0x00};
  BitReader l(long_run);
  l.GetUnary(10);  // 16 ones exceed the limit of 10
  EXPECT_TRUE(l.overrun());
}

// ---------------------------------------------------------------------------------------------
// Value coding and sections

TEST(BytePlanes, SplitAndJoinAreInversesForEveryWidth) {
  std::mt19937_64 rng(3);
  for (uint32_t w : {1u, 2u, 4u, 8u}) {
    std::vector<uint8_t> values(w * 1001);
    for (auto& b : values) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> planes = {0xaa};  // appends after existing bytes
    ToBytePlanes(values, w, &planes);
    ASSERT_EQ(planes.size(), values.size() + 1);
    // Plane b holds byte b of every element.
    for (size_t i = 0; i < 1001; ++i)
      for (uint32_t b = 0; b < w; ++b) ASSERT_EQ(planes[1 + b * 1001 + i], values[i * w + b]);
    std::vector<uint8_t> back;
    FromBytePlanes(std::span<const uint8_t>(planes).subspan(1), w, &back);
    EXPECT_EQ(back, values);
  }
}

TEST(SectionCoding, RoundTripsRawAndZstdAndRejectsWrongLengths) {
  std::vector<uint8_t> small = {1, 2, 3};
  std::vector<uint8_t> zeros(5000, 0);
  std::mt19937_64 rng(4);
  std::vector<uint8_t> noise(5000);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  for (const auto* raw : {&small, &zeros, &noise}) {
    std::vector<uint8_t> stored;
    SectionCodec codec = CompressSection(*raw, kDefaultZstdLevel, &stored);
    if (raw == &zeros) EXPECT_EQ(codec, SectionCodec::kZstd);
    if (raw == &small) EXPECT_EQ(codec, SectionCodec::kRaw);  // under 64 bytes: never zstd
    if (codec == SectionCodec::kZstd) EXPECT_LT(stored.size(), raw->size());
    std::vector<uint8_t> back;
    ASSERT_TRUE(DecompressSection(codec, stored, raw->size(), &back).ok());
    EXPECT_EQ(back, *raw);
    EXPECT_EQ(DecompressSection(codec, stored, raw->size() + 1, &back).code(), StatusCode::kCorrupt);
    EXPECT_EQ(DecompressSection(codec, stored, raw->size() - 1, &back).code(), StatusCode::kCorrupt);
  }
  std::vector<uint8_t> back;
  EXPECT_EQ(DecompressSection(SectionCodec::kZstd, noise, 100, &back).code(), StatusCode::kCorrupt);
  EXPECT_EQ(DecompressSection(SectionCodec::kZstd, {}, 0, &back).code(), StatusCode::kCorrupt);
}

// ---------------------------------------------------------------------------------------------
// Diff scan

TEST(DiffElements, ComparesBitsNotFloatValues) {
  // -0.0 vs +0.0 (equal as floats) and NaN vs the same NaN (unequal as floats).
  std::vector<uint32_t> base = {0x00000000, 0x7fc00001, 0x7fc00001, 0x3f800000, 0x00000001};
  std::vector<uint32_t> next = {0x80000000, 0x7fc00001, 0x7fc00002, 0x3f800000, 0x00000002};
  auto bytes = [](const std::vector<uint32_t>& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
  };
  ChangeSet cs;
  DiffElements(bytes(base), bytes(next), 4, ValueKind::kXor, &cs);
  EXPECT_EQ(cs.positions, (std::vector<uint32_t>{0, 2, 4}));
  ASSERT_EQ(cs.values.size(), 12u);
  EXPECT_EQ(LoadLe(cs.values.data(), 4), 0x80000000u);
  EXPECT_EQ(LoadLe(cs.values.data() + 4, 4), 0x7fc00001u ^ 0x7fc00002u);
  DiffElements(bytes(base), bytes(next), 4, ValueKind::kOverwrite, &cs);
  EXPECT_EQ(cs.positions, (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(LoadLe(cs.values.data() + 8, 4), 0x00000002u);
}

TEST(DiffElements, FindsExactlyTheChangedElementsAtEveryWidthAndLength) {
  std::mt19937_64 rng(5);
  for (uint32_t w : {1u, 2u, 4u, 8u}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}}) {
      std::vector<uint8_t> a(n * w), b;
      for (auto& x : a) x = static_cast<uint8_t>(rng());
      b = a;
      std::vector<uint32_t> want;
      for (size_t i = 0; i < n; ++i)
        if (rng() % 7 == 0) {
          b[i * w + rng() % w] ^= static_cast<uint8_t>(1u << (rng() % 8));
          want.push_back(static_cast<uint32_t>(i));
        }
      ChangeSet cs;
      DiffElements(a, b, w, ValueKind::kXor, &cs);
      EXPECT_EQ(cs.positions, want) << "width " << w << " n " << n;
      EXPECT_EQ(cs.width, w);
      EXPECT_EQ(cs.values.size(), want.size() * w);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Location coding

TEST(LocationCoding, RandomSetsRoundTripForEveryBlockSizeAndDensity) {
  std::mt19937_64 rng(6);
  for (int block_log2 : {3, 4, 7, 10, 16}) {
    for (double density : {0.0, 0.0001, 0.01, 0.3, 0.9, 1.0}) {
      for (int rep = 0; rep < 4; ++rep) {
        uint64_t count = 1 + rng() % 20000;
        std::vector<uint32_t> pos;
        std::bernoulli_distribution coin(density);
        for (uint64_t i = 0; i < count; ++i)
          if (coin(rng)) pos.push_back(static_cast<uint32_t>(i));
        std::vector<uint8_t> code;
        EncodeLocations(pos, count, block_log2, &code);
        std::vector<uint32_t> back = {999};  // cleared by the decoder
        Status s = DecodeLocations(code, count, block_log2, pos.size(), &back);
        ASSERT_TRUE(s.ok()) << s.ToString() << " block 2^" << block_log2 << " density " << density;
        ASSERT_EQ(back, pos);
        // The code is a pure function of its input.
        std::vector<uint8_t> again;
        EncodeLocations(pos, count, block_log2, &again);
        EXPECT_EQ(again, code);
      }
    }
  }
}

TEST(LocationCoding, BlockBoundariesAndTheLastElementRoundTrip) {
  const int block_log2 = 4;
  const uint64_t count = 16 * 5 + 3;  // last block is short
  std::vector<uint32_t> pos = {0, 15, 16, 31, 32, 47, 48, 63, 64, 79, 80, 81, 82};
  std::vector<uint8_t> code;
  EncodeLocations(pos, count, block_log2, &code);
  std::vector<uint32_t> back;
  ASSERT_TRUE(DecodeLocations(code, count, block_log2, pos.size(), &back).ok());
  EXPECT_EQ(back, pos);
}

TEST(LocationCoding, ScatteredChangesUseRiceGaps) {
  std::vector<uint32_t> pos;
  for (uint32_t p = 17; p < 65536; p += 997) pos.push_back(p);
  std::vector<uint8_t> code;
  EncodeLocations(pos, 65536, 16, &code);
  EXPECT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kRice));
  std::vector<uint32_t> back;
  ASSERT_TRUE(DecodeLocations(code, 65536, 16, pos.size(), &back).ok());
  EXPECT_EQ(back, pos);
}

TEST(LocationCoding, DenseRandomChangesUseABitmap) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> pos;
  for (uint32_t p = 0; p < 4096; ++p)
    if (rng() % 2) pos.push_back(p);
  std::vector<uint8_t> code;
  EncodeLocations(pos, 4096, 16, &code);
  EXPECT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kBitmap));
  std::vector<uint32_t> back;
  ASSERT_TRUE(DecodeLocations(code, 4096, 16, pos.size(), &back).ok());
  EXPECT_EQ(back, pos);
}

TEST(LocationCoding, ContiguousRunsUseRanges) {
  std::vector<uint32_t> pos;
  for (uint32_t p = 100; p < 3000; ++p) pos.push_back(p);
  for (uint32_t p = 40000; p < 41000; ++p) pos.push_back(p);
  std::vector<uint8_t> code;
  EncodeLocations(pos, 65536, 16, &code);
  EXPECT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kRanges));
  EXPECT_LT(code.size(), 16u);
  std::vector<uint32_t> back;
  ASSERT_TRUE(DecodeLocations(code, 65536, 16, pos.size(), &back).ok());
  EXPECT_EQ(back, pos);
}

// A Rice code whose first unary run is exactly 63 ones fills the reader's first 64-bit window
// up to its last bit. Positions 126, 128, 130, ... in a 1024-element block choose Rice with r=1
// (first gap 126 -> 63 ones, a zero, one remainder bit).
TEST(LocationCoding, RiceRunEndingAtTheLastBitOfTheReaderWindowRoundTrips) {
  std::vector<uint32_t> pos;
  for (uint32_t p = 126; p < 1024; p += 2) pos.push_back(p);
  std::vector<uint8_t> code;
  EncodeLocations(pos, 1024, 10, &code);
  ASSERT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kRice));
  std::vector<uint32_t> back;
  Status s = DecodeLocations(code, 1024, 10, pos.size(), &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(back, pos);
}

// Long unary runs of every length: one isolated change after a gap of g, then a dense tail
// that keeps the Rice parameter small.
TEST(LocationCoding, RiceCodesWithLongGapsRoundTrip) {
  for (uint32_t gap = 0; gap < 700; ++gap) {
    std::vector<uint32_t> pos = {gap};
    for (uint32_t p = gap + 2; p < 2048; p += 2) pos.push_back(p);
    std::vector<uint8_t> code;
    EncodeLocations(pos, 2048, 11, &code);
    std::vector<uint32_t> back;
    Status s = DecodeLocations(code, 2048, 11, pos.size(), &back);
    ASSERT_TRUE(s.ok()) << "gap " << gap << ": " << s.ToString();
    ASSERT_EQ(back, pos) << "gap " << gap;
  }
}

TEST(LocationCoding, EveryStrictPrefixOfAValidCodeIsRejected) {
  std::mt19937_64 rng(8);
  std::vector<uint32_t> pos;
  for (uint32_t p = 0; p < 5000; ++p)
    if (rng() % 20 == 0 || (p > 3000 && p < 3100) || (p > 4000 && rng() % 2)) pos.push_back(p);
  std::vector<uint8_t> code;
  EncodeLocations(pos, 5000, 8, &code);
  std::vector<uint32_t> back;
  ASSERT_TRUE(DecodeLocations(code, 5000, 8, pos.size(), &back).ok());
  for (size_t len = 0; len < code.size(); ++len) {
    Status s = DecodeLocations(std::span<const uint8_t>(code.data(), len), 5000, 8, pos.size(), &back);
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << "prefix of " << len << " bytes";
  }
  code.push_back(0);
  EXPECT_EQ(DecodeLocations(code, 5000, 8, pos.size(), &back).code(), StatusCode::kCorrupt);
}

TEST(LocationCoding, MalformedCodesAreCorrupt) {
  std::vector<uint32_t> out;
  auto decode = [&](std::vector<uint8_t> code, uint64_t count, uint64_t expected, int block_log2 = 4) {
    return DecodeLocations(code, count, block_log2, expected, &out).code();
  };
  const auto kC = StatusCode::kCorrupt;
  // Valid reference points for the hand-written codes below (one 16-element block).
  EXPECT_EQ(decode({2, 1, 0x05, 0x00}, 16, 2), StatusCode::kOk);      // bitmap {0, 2}
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(decode({2, 2, 1, 3, 1}, 16, 2), StatusCode::kOk);          // ranges: run at 3, length 2
  EXPECT_EQ(out, (std::vector<uint32_t>{3, 4}));
  EXPECT_EQ(decode({1, 0, 0, 0x1f}, 16, 1), StatusCode::kOk);          // Rice r=0: 5 ones, zero -> 5
  EXPECT_EQ(out, (std::vector<uint32_t>{5}));

  EXPECT_EQ(decode({17}, 16, 17), kC);                                 // more changes than elements
  EXPECT_EQ(decode({2, 1, 0x05, 0x00}, 16, 1), kC);                   // more than the payload declares
  EXPECT_EQ(decode({1, 1, 0x05, 0x00}, 16, 1), kC);                   // bitmap holds 2 bits, count 1
  EXPECT_EQ(decode({3, 1, 0x05, 0x00}, 16, 3), kC);                   // bitmap holds 2 bits, count 3
  EXPECT_EQ(decode({1, 1, 0x00, 0x08}, 12, 1), StatusCode::kOk);      // bitmap bit 11 is in a 12-block...
  EXPECT_EQ(decode({1, 1, 0x00, 0x10}, 12, 1), kC);                   // ...bit 12 is beyond a 12-block
  EXPECT_EQ(decode({1, 3}, 16, 1), kC);                               // unknown method
  EXPECT_EQ(decode({1, 0, 31, 0x00}, 16, 1), kC);                     // Rice parameter 31
  EXPECT_EQ(decode({1, 0, 0, 0xff, 0xff, 0x00}, 16, 1), kC);          // Rice gap 16 beyond block
  EXPECT_EQ(decode({1, 0, 0}, 16, 1), kC);                            // Rice stream missing
  EXPECT_EQ(decode({2, 2, 0}, 16, 2), kC);                            // zero ranges
  EXPECT_EQ(decode({2, 2, 3, 0, 0, 0, 0, 0, 0}, 16, 2), kC);          // more runs than changes
  EXPECT_EQ(decode({2, 2, 1, 15, 1}, 16, 2), kC);                     // run 15..16 leaves the block
  EXPECT_EQ(decode({2, 2, 1, 0, 16}, 16, 2), kC);                     // length beyond the block
  EXPECT_EQ(decode({2, 2, 1, 3, 2}, 16, 2), kC);                      // covers 3, count 2
  EXPECT_EQ(decode({3, 2, 1, 3, 1}, 16, 3), kC);                      // covers 2, count 3
  EXPECT_EQ(decode({2, 2, 1, 3}, 16, 2), kC);                         // truncated run
  EXPECT_EQ(decode({0x80}, 16, 0), kC);                               // truncated count varint
  EXPECT_EQ(decode({0}, 32, 0), kC);                                  // second block missing
  EXPECT_EQ(decode({0, 0, 0}, 32, 0), kC);                            // trailing byte
  EXPECT_EQ(decode({1, 1}, 16, 1), kC);                               // bitmap missing
  EXPECT_EQ(decode({0}, 16, 0, 2), kC);                               // block size 2^2 too small
  EXPECT_EQ(decode({0}, 16, 0, 32), kC);                              // block size 2^32 too large
}

TEST(LocationCoding, ArbitraryBytesNeverDecodeToPositionsOutsideTheChunk) {
  std::mt19937_64 rng(9);
  int accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<uint8_t> code(1 + rng() % 12);
    for (auto& b : code) b = static_cast<uint8_t>(rng());
    // Small counts make short random codes plausible.
    code[0] = static_cast<uint8_t>(code[0] % 5);
    if (code.size() > 1) code[1] = static_cast<uint8_t>(code[1] % 3);
    if (code.size() > 2 && code[1] == 0) code[2] = static_cast<uint8_t>(code[2] % 4);
    uint64_t count = 1 + rng() % 24;
    uint64_t expected = code[0];
    std::vector<uint32_t> pos;
    Status s = DecodeLocations(code, count, 3 + static_cast<int>(rng() % 3), expected, &pos);
    if (!s.ok()) {
      ASSERT_EQ(s.code(), StatusCode::kCorrupt);
      continue;
    }
    ++accepted;
    ASSERT_EQ(pos.size(), expected);
    for (size_t k = 0; k < pos.size(); ++k) {
      ASSERT_LT(pos[k], count);
      if (k > 0) ASSERT_LT(pos[k - 1], pos[k]);
    }
  }
  EXPECT_GT(accepted, 0);  // the generator does reach valid codes
}

// ---------------------------------------------------------------------------------------------
// Payload round trip

void ExpectRoundTrip(const CodecCase& c, const EncodeOptions& opt, const std::string& what) {
  const uint32_t w = DTypeWidth(c.dtype);
  const ChunkSpec spec = SpecFor(c);
  std::span<const uint8_t> base_chunk(c.base.data() + c.start * w, c.count * w);
  std::span<const uint8_t> next_chunk(c.next.data() + c.start * w, c.count * w);
  EncodeScratch scratch;
  std::vector<uint8_t> payload;
  uint64_t changed = EncodeChunk(spec, base_chunk, next_chunk, opt, &scratch, &payload);
  ASSERT_EQ(changed, c.changed.size()) << what;
  if (changed == 0) {
    EXPECT_TRUE(payload.empty()) << what;
    return;
  }
  // Determinism: fresh and reused scratch, and appending after other bytes, give the same payload.
  {
    EncodeScratch fresh;
    std::vector<uint8_t> again = {1, 2, 3};
    EXPECT_EQ(EncodeChunk(spec, base_chunk, next_chunk, opt, &fresh, &again), changed);
    EXPECT_TRUE(std::equal(again.begin() + 3, again.end(), payload.begin(), payload.end())) << what;
    std::vector<uint8_t> third;
    EncodeChunk(spec, base_chunk, next_chunk, opt, &scratch, &third);
    EXPECT_EQ(third, payload) << what;
  }
  DecodedChunk d;
  Status s = DecodePayload(payload, &d);
  ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
  EXPECT_EQ(d.spec.identity, spec.identity);
  EXPECT_EQ(d.spec.tensor_index, spec.tensor_index);
  EXPECT_EQ(d.spec.dtype, spec.dtype);
  EXPECT_EQ(d.spec.start, spec.start);
  EXPECT_EQ(d.spec.count, spec.count);
  EXPECT_EQ(d.spec.kind, spec.kind);
  EXPECT_EQ(d.mode, CodecMode::kPlain);
  ASSERT_EQ(d.changes.positions, c.changed) << what;
  ASSERT_EQ(d.changes.values.size(), c.changed.size() * w);
  // Values are XOR masks or new bits, as the kind says.
  for (size_t k = 0; k < c.changed.size(); k += 1 + k / 4) {
    uint64_t idx = c.start + c.changed[k];
    uint64_t v = 0;
    std::memcpy(&v, d.changes.values.data() + k * w, w);
    uint64_t want = c.kind == ValueKind::kXor ? (LoadElem(c.base, idx, w) ^ LoadElem(c.next, idx, w))
                                              : LoadElem(c.next, idx, w);
    ASSERT_EQ(v, want) << what << " change " << k;
  }
  std::vector<uint8_t> tensor = c.base;
  ASSERT_TRUE(ApplyChunk(d, tensor).ok()) << what;
  std::vector<uint8_t> want = Expected(c);
  ASSERT_EQ(tensor.size(), want.size());
  ASSERT_EQ(std::memcmp(tensor.data(), want.data(), want.size()), 0) << what;
}

TEST(PayloadRoundTrip, EveryDTypeDensityAndKindGivesExactlyTheNewBits) {
  std::mt19937_64 rng(10);
  const int block_logs[] = {3, 6, 9, 12, 16};
  for (DType t : TestedDTypes()) {
    for (double density : {0.0, 0.0001, 0.01, 0.3, 1.0}) {
      for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
        for (int rep = 0; rep < 3; ++rep) {
          // Sparse densities need long chunks to see any change at all.
          uint64_t count = density < 0.001 ? 100000 + rng() % 150000 : 1 + rng() % 40000;
          if (rep == 0 && density >= 0.3) count = 1 + rng() % 70;  // tiny chunks too
          bool runs = rep == 2;
          CodecCase c = MakeCase(t, kind, count, density, runs, rng);
          EncodeOptions opt;
          opt.block_log2 = block_logs[rng() % 5];
          std::string what = std::string(DTypeName(t)) + " density " + std::to_string(density) +
                             (kind == ValueKind::kXor ? " xor" : " overwrite") + " count " +
                             std::to_string(count) + " block 2^" + std::to_string(opt.block_log2) +
                             (runs ? " runs" : "");
          ExpectRoundTrip(c, opt, what);
          if (density == 0.0) EXPECT_TRUE(c.changed.empty());
          if (density == 1.0) EXPECT_EQ(c.changed.size(), count);
        }
      }
    }
  }
}

// Every ordered pair of special bit patterns (NaN payloads, signed zeros, infinities,
// subnormals, extremes): a change is seen exactly when the bits differ.
TEST(PayloadRoundTrip, ChangesBetweenSpecialBitPatternsAreDetectedAndRestoredExactly) {
  for (DType t : TestedDTypes()) {
    const uint32_t w = DTypeWidth(t);
    auto sp = SpecialPatterns(t);
    const size_t m = sp.size();
    for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
      CodecCase c;
      c.dtype = t;
      c.kind = kind;
      c.start = 0;
      c.count = c.tensor_elems = m * m;
      c.base.resize(m * m * w);
      c.next.resize(m * m * w);
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < m; ++j) {
          StoreElem(c.base, i * m + j, w, sp[i]);
          StoreElem(c.next, i * m + j, w, sp[j]);
          if (i != j) c.changed.push_back(static_cast<uint32_t>(i * m + j));
        }
      ExpectRoundTrip(c, EncodeOptions{}, std::string(DTypeName(t)) + " specials");
    }
  }
}

TEST(PayloadRoundTrip, OneElementChunksAndLastElementChangesWork) {
  for (DType t : TestedDTypes()) {
    const uint32_t w = DTypeWidth(t);
    CodecCase c;
    c.dtype = t;
    c.kind = ValueKind::kXor;
    c.start = 5;
    c.count = 1;
    c.tensor_elems = 6;  // the chunk is the tensor's last element
    c.base.assign(6 * w, 0);
    c.next = c.base;
    StoreElem(c.next, 5, w, 1);
    c.changed = {0};
    ExpectRoundTrip(c, EncodeOptions{}, std::string(DTypeName(t)) + " single");
  }
}

TEST(PayloadRoundTrip, IdentityIsReadableWithoutDecoding) {
  std::vector<uint8_t> base(64, 0), next(64, 0);
  next[10] = 1;
  ChunkSpec spec{{0xfedcba9876543210ull, 0xabcdef01u, 0x12345678u}, 9, DType::kU8, 0, 64, ValueKind::kXor};
  EncodeScratch scratch;
  std::vector<uint8_t> payload;
  ASSERT_EQ(EncodeChunk(spec, base, next, EncodeOptions{}, &scratch, &payload), 1u);
  auto id = PeekPayloadIdentity(payload);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, spec.identity);
  EXPECT_EQ(PeekPayloadIdentity(std::span<const uint8_t>(payload.data(), 50)).status().code(),
            StatusCode::kCorrupt);
}

TEST(PayloadRoundTrip, ByteLayoutMatchesTheDocumentedHeader) {
  std::vector<uint8_t> base(1000, 0), next(1000, 0);
  for (int i = 0; i < 1000; i += 100) next[i] = 0x80;
  ChunkSpec spec{{0x0102030405060708ull, 0x0a0b0c0du, 0x11121314u}, 0x21222324u, DType::kU16, 77, 500,
                 ValueKind::kOverwrite};
  EncodeScratch scratch;
  std::vector<uint8_t> p;
  ASSERT_EQ(EncodeChunk(spec, base, next, EncodeOptions{}, &scratch, &p), 10u);
  EXPECT_EQ(LoadLe(p.data(), 4), kPayloadMagic);
  EXPECT_EQ(LoadLe(p.data() + 4, 2), 1u);
  EXPECT_EQ(p[6], 0);   // plain mode
  EXPECT_EQ(p[7], 1);   // overwrite
  EXPECT_EQ(p[8], DTypeCode(DType::kU16));
  EXPECT_EQ(p[9], kDefaultLocationBlockLog2);
  EXPECT_EQ(LoadLe(p.data() + 12, 4), 0x21222324u);
  EXPECT_EQ(LoadLe(p.data() + 16, 8), 0x0102030405060708ull);
  EXPECT_EQ(LoadLe(p.data() + 24, 4), 0x0a0b0c0du);
  EXPECT_EQ(LoadLe(p.data() + 28, 4), 0x11121314u);
  EXPECT_EQ(LoadLe(p.data() + 32, 8), 77u);
  EXPECT_EQ(LoadLe(p.data() + 40, 8), 500u);
  EXPECT_EQ(LoadLe(p.data() + 48, 8), 10u);
  EXPECT_EQ(LoadLe(p.data() + 72, 8), 20u);  // value section decoded length = n * width
  EXPECT_EQ(LoadLe(p.data() + 88, 8), 0u);
  EXPECT_EQ(kPayloadHeaderBytes + LoadLe(p.data() + 64, 8) + LoadLe(p.data() + 80, 8) + kPayloadTrailerBytes,
            p.size());
}

TEST(ApplyChunk, RefusesAChunkOutsideTheTensorAndLeavesItUnchanged) {
  std::vector<uint8_t> base(400, 0), next(400, 0);
  next[396] = 9;
  ChunkSpec spec{{1, 0, 0}, 0, DType::kF32, 0, 100, ValueKind::kXor};
  EncodeScratch scratch;
  std::vector<uint8_t> p;
  ASSERT_EQ(EncodeChunk(spec, base, next, EncodeOptions{}, &scratch, &p), 1u);
  DecodedChunk d;
  ASSERT_TRUE(DecodePayload(p, &d).ok());
  std::vector<uint8_t> small(99 * 4, 0x5a);
  const std::vector<uint8_t> before = small;
  EXPECT_EQ(ApplyChunk(d, small).code(), StatusCode::kCorrupt);
  EXPECT_EQ(small, before);
  std::vector<uint8_t> ragged(401, 0x5a);  // not a whole number of elements
  const std::vector<uint8_t> ragged_before = ragged;
  EXPECT_EQ(ApplyChunk(d, ragged).code(), StatusCode::kCorrupt);
  EXPECT_EQ(ragged, ragged_before);
}

TEST(ForEachChange, ReportsIndexOldAndNewBitsWithoutModifyingTheTensor) {
  std::vector<uint8_t> base(8 * 10), next;
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<uint8_t>(i * 7);
  next = base;
  StoreElem(next, 3, 8, 0x7ff8000000000001ull);
  StoreElem(next, 9, 8, 0x8000000000000000ull);
  for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
    ChunkSpec spec{{1, 0, 0}, 0, DType::kF64, 10, 10, kind};
    EncodeScratch scratch;
    std::vector<uint8_t> p;
    ASSERT_EQ(EncodeChunk(spec, base, next, EncodeOptions{}, &scratch, &p), 2u);
    DecodedChunk d;
    ASSERT_TRUE(DecodePayload(p, &d).ok());
    // The chunk sits at elements [10, 20) of a 20-element tensor.
    std::vector<uint8_t> tensor(8 * 10, 0);
    tensor.insert(tensor.end(), base.begin(), base.end());
    const std::vector<uint8_t> before = tensor;
    std::vector<std::array<uint64_t, 3>> seen;
    ForEachChange(d, tensor, [&](uint64_t idx, uint64_t o, uint64_t n) { seen.push_back({idx, o, n}); });
    EXPECT_EQ(tensor, before);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0], (std::array<uint64_t, 3>{13, LoadElem(base, 3, 8), 0x7ff8000000000001ull}));
    EXPECT_EQ(seen[1], (std::array<uint64_t, 3>{19, LoadElem(base, 9, 8), 0x8000000000000000ull}));
  }
}

}  // namespace
}  // namespace dcr
