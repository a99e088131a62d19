// Codec tests, part 1: byte helpers, varints, bit streams, byte planes, sections and the diff
// scan. Location coding is in location_coding_test.cc, payload round trips in
// codec_payload_test.cc, hostile payloads in codec_hostile_test.cc.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/diff.h"
#include "codec/span_test_support.h"
#include "codec/simd_masks.h"
#include "codec/section_coding.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

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

// AlignToByte pads the partial byte with zeros and keeps writing in the same room: the bytes are
// those of flushing after each area and appending, and a writer given exact room never grows.
TEST(BitStream, AlignToByteGivesTheBytesOfFlushingBetweenAreas) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::vector<std::pair<uint64_t, int>>> areas(1 + rng() % 4);
    for (auto& area : areas) {
      const size_t n = rng() % 40;
      for (size_t i = 0; i < n; ++i) {
        const int bits = 1 + static_cast<int>(rng() % 56);
        area.push_back({rng() & ((1ull << bits) - 1), bits});
      }
    }
    std::vector<uint8_t> flushed = {0x5a};  // appending after other bytes
    for (const auto& area : areas) {
      BitWriter w(flushed);
      for (auto [v, n] : area) w.Put(v, n);
      w.Flush();
    }
    std::vector<uint8_t> aligned = {0x5a};
    BitWriter w(aligned, flushed.size() - 1);
    const uint8_t* room = aligned.data();
    for (size_t a = 0; a < areas.size(); ++a) {
      {
        BitWriter::Local bits(w);
        for (auto [v, n] : areas[a]) bits.Put(v, n);
      }
      if (a + 1 < areas.size()) w.AlignToByte();
    }
    w.Flush();
    ASSERT_EQ(aligned, flushed) << "round " << round;
    EXPECT_EQ(aligned.data(), room) << "round " << round << ": the writer grew";
  }
}

TEST(BitStream, PutRiceAndGetRiceEqualUnaryThenLowBitsEvenForLongQuotientsLimitsAndTruncation) {
  std::mt19937_64 rng(12);
  for (int rep = 0; rep < 300; ++rep) {
    std::vector<uint8_t> buf, one_step;
    BitWriter w(buf), rice(one_step);
    const int r = static_cast<int>(rng() % 31);
    for (int i = 0; i < 50; ++i) {
      const uint64_t q = rng() % 4 == 0 ? rng() % 150 : rng() % 6, low = rng() & ((uint64_t{1} << r) - 1);
      w.PutUnary(q);
      if (r > 0) w.Put(low, r);
      rice.PutRice(q << r | low, r);
    }
    w.Flush();
    rice.Flush();
    ASSERT_EQ(one_step, buf) << "PutRice differs from PutUnary then Put, rep " << rep;
    buf.resize(buf.size() - rng() % 3);  // sometimes cut short
    const uint64_t limit = rng() % 2 ? UINT64_MAX : rng() % 100;
    BitReader fast(buf), slow(buf);
    for (int i = 0; i < 60 && !slow.overrun(); ++i) {
      const uint64_t q = slow.GetUnary(limit);
      const uint64_t want = q << r | (r > 0 ? slow.Get(r) : 0);
      const uint64_t got = fast.GetRice(r, limit);
      ASSERT_EQ(fast.overrun(), slow.overrun()) << "rep " << rep << " code " << i;
      if (!slow.overrun()) {
        ASSERT_EQ(got, want) << "rep " << rep << " code " << i;
      }
      ASSERT_EQ(fast.bytes_consumed(), slow.bytes_consumed()) << "rep " << rep << " code " << i;
    }
    // GetRiceRun (the window in registers) reads the codes GetRice reads, stops where it overruns,
    // and, stopped early by its callback, has consumed exactly the codes taken.
    BitReader ref(buf), run(buf), stopped(buf), stopped_ref(buf);
    std::vector<uint64_t> want_codes, got_codes;
    for (int i = 0; i < 60; ++i) {
      const uint64_t c = ref.GetRice(r, limit);
      if (ref.overrun()) break;
      want_codes.push_back(c);
    }
    const bool all = run.GetRiceRun(60, r, limit, [&](uint64_t c) {
      got_codes.push_back(c);
      return true;
    });
    ASSERT_EQ(got_codes, want_codes) << "rep " << rep;
    ASSERT_EQ(all, want_codes.size() == 60) << "rep " << rep;
    ASSERT_EQ(run.overrun(), ref.overrun()) << "rep " << rep;
    if (!ref.overrun()) {
      ASSERT_EQ(run.bytes_consumed(), ref.bytes_consumed()) << "rep " << rep;
    }
    const size_t take = std::min<size_t>(want_codes.size(), 1 + rng() % 20);
    size_t taken = 0;
    ASSERT_FALSE(stopped.GetRiceRun(60, r, limit, [&](uint64_t) { return ++taken < take; })) << "rep " << rep;
    for (size_t i = 0; i < taken; ++i) stopped_ref.GetRice(r, limit);
    if (!stopped.overrun()) {
      ASSERT_EQ(stopped.bytes_consumed(), stopped_ref.bytes_consumed()) << "rep " << rep;
      // The window it hands back reads on as GetRice's does (GetRiceRun keeps it inverted).
      for (int i = 0; i < 5; ++i) {
        const uint64_t want = stopped_ref.GetRice(r, limit);
        ASSERT_EQ(stopped.GetRice(r, limit), want) << "rep " << rep << " code after the run " << i;
        ASSERT_EQ(stopped.overrun(), stopped_ref.overrun()) << "rep " << rep;
      }
    }
  }
}

// Writes `groups` groups of kCodes Rice codes (parameter below `max_r`, quotients from
// `quotient`) with put_group, and the same codes one PutRice at a time, after a field of 0-7
// bits, 2000 times; the bits must agree.
template <size_t kCodes, typename Quotient, typename PutGroup>
void ExpectGroupedRiceEqualsSingles(uint64_t seed, int max_r, Quotient&& quotient, PutGroup&& put_group) {
  std::mt19937_64 rng(seed);
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<uint8_t> grouped, singles;
    BitWriter a(grouped), b(singles);
    const int r = static_cast<int>(rng() % static_cast<uint64_t>(max_r));
    {
      BitWriter::Local la(a), lb(b);
      const int lead = static_cast<int>(rng() % 8);
      const uint64_t field = rng() & ((uint64_t{1} << lead) - 1);
      la.Put(field, lead);
      lb.Put(field, lead);
      for (int i = 0; i < 20; ++i) {
        std::array<uint64_t, kCodes> x;
        for (uint64_t& v : x) v = quotient(rng) << r | (rng() & ((uint64_t{1} << r) - 1));
        put_group(la, x, r);
        for (uint64_t v : x) lb.PutRice(v, r);
      }
    }
    a.Flush();
    b.Flush();
    ASSERT_EQ(grouped, singles) << "rep " << rep << " r " << r;
  }
}

TEST(BitStream, PutRice2WritesTheBitsOfTwoPutRices) {
  // Quotients and parameters around where the pair stops fitting one write (quotient 16, r 12),
  // long quotients, and every bit alignment left by a field before the pair.
  ExpectGroupedRiceEqualsSingles<2>(
      21, 16, [](std::mt19937_64& rng) { return rng() % 8 == 0 ? rng() % 70 : 12 + rng() % 6; },  // 12..17 straddles 16
      [](BitWriter::Local& w, const std::array<uint64_t, 2>& x, int r) { w.PutRice2(x[0], x[1], r); });
}

TEST(BitStream, PutRice4WritesTheBitsOfFourPutRices) {
  // Quotients and parameters around where four codes stop fitting one write (quotient 8, r 6),
  // long quotients, and every bit alignment left by a field before them.
  ExpectGroupedRiceEqualsSingles<4>(
      22, 9, [](std::mt19937_64& rng) { return rng() % 16 == 0 ? rng() % 70 : rng() % 9; },  // 0..8 straddles 8
      [](BitWriter::Local& w, const std::array<uint64_t, 4>& x, int r) { w.PutRice4(x[0], x[1], x[2], x[3], r); });
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
    std::vector<uint8_t> back(values.size());
    FromBytePlanes(std::span<const uint8_t>(planes).subspan(1), w, back);
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
    if (raw == &zeros) {
      EXPECT_EQ(codec, SectionCodec::kZstd);
    }
    if (raw == &small) {
      EXPECT_EQ(codec, SectionCodec::kRaw);  // under 64 bytes: never zstd
    }
    if (codec == SectionCodec::kZstd) {
      EXPECT_LT(stored.size(), raw->size());
    }
    std::vector<uint8_t> back;
    ASSERT_TRUE(DecompressSection(codec, stored, raw->size(), &back).ok());
    EXPECT_EQ(back, *raw);
    EXPECT_EQ(DecompressSection(codec, stored, raw->size() + 1, &back).code(), StatusCode::kCorrupt);
    EXPECT_EQ(DecompressSection(codec, stored, raw->size() - 1, &back).code(), StatusCode::kCorrupt);
    // SectionBytes: the same bytes and checks; a raw section is viewed where it is stored.
    std::vector<uint8_t> scratch;
    auto view = SectionBytes(codec, stored, raw->size(), &scratch);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_TRUE(std::equal(view->begin(), view->end(), raw->begin(), raw->end()));
    EXPECT_EQ(view->data(), codec == SectionCodec::kRaw ? stored.data() : scratch.data());
    EXPECT_EQ(SectionBytes(codec, stored, raw->size() + 1, &scratch).status().code(), StatusCode::kCorrupt);
    EXPECT_EQ(SectionBytes(codec, stored, raw->size() - 1, &scratch).status().code(), StatusCode::kCorrupt);
  }
  std::vector<uint8_t> back;
  EXPECT_EQ(DecompressSection(SectionCodec::kZstd, noise, 100, &back).code(), StatusCode::kCorrupt);
  EXPECT_EQ(DecompressSection(SectionCodec::kZstd, {}, 0, &back).code(), StatusCode::kCorrupt);
}

// From kZstdProbeMinBytes a fast probe decides whether zstd is tried: a section it cannot
// shrink is stored raw (the bytes themselves); one it can is stored exactly as zstd at the
// caller's level stores it (the probe changes no compressed byte).
TEST(SectionCoding, ProbeStoresIncompressibleSectionsRawAndChangesNoCompressedByte) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> noise(64 * 1024);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> stored = {7};  // appended after what the buffer holds
  EXPECT_EQ(CompressSection(noise, kDefaultZstdLevel, &stored), SectionCodec::kRaw);
  ASSERT_EQ(stored.size(), 1 + noise.size());
  EXPECT_EQ(stored[0], 7);
  EXPECT_TRUE(std::equal(noise.begin(), noise.end(), stored.begin() + 1));

  // Mostly noise with a repeated stretch: compressible, though not by much.
  std::vector<uint8_t> mixed = noise;
  std::copy(noise.begin(), noise.begin() + 8192, mixed.begin() + 32768);
  for (int level : {1, kDefaultZstdLevel, 9}) {
    std::vector<uint8_t> want(ZSTD_compressBound(mixed.size()));
    ZSTD_CCtx* c = ZSTD_createCCtx();
    want.resize(ZSTD_compressCCtx(c, want.data(), want.size(), mixed.data(), mixed.size(), level));
    ZSTD_freeCCtx(c);
    ASSERT_LT(want.size(), mixed.size());
    std::vector<uint8_t> got;
    EXPECT_EQ(CompressSection(mixed, level, &got), SectionCodec::kZstd) << "level " << level;
    EXPECT_EQ(got, want) << "level " << level;
    std::vector<uint8_t> back;
    ASSERT_TRUE(DecompressSection(SectionCodec::kZstd, got, mixed.size(), &back).ok());
    EXPECT_EQ(back, mixed);
  }
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
  EXPECT_EQ(AsVector(cs.positions), (std::vector<uint32_t>{0, 2, 4}));
  ASSERT_EQ(cs.values.size(), 12u);
  EXPECT_EQ(LoadLe(cs.values.data(), 4), 0x80000000u);
  EXPECT_EQ(LoadLe(cs.values.data() + 4, 4), 0x7fc00001u ^ 0x7fc00002u);
  DiffElements(bytes(base), bytes(next), 4, ValueKind::kOverwrite, &cs);
  EXPECT_EQ(AsVector(cs.positions), (std::vector<uint32_t>{0, 2, 4}));
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
      EXPECT_EQ(AsVector(cs.positions), want) << "width " << w << " n " << n;
      EXPECT_EQ(cs.width, w);
      EXPECT_EQ(cs.values.size(), want.size() * w);
    }
  }
}

TEST(DiffElements, HandsOverEachRunsChangesWhileDiffing) {
  // Runs of kDiffChunkElements: every run with changes is handed over once, in order, with
  // exactly its changes, their values and their old bits; a run without changes is skipped. The
  // element count leaves a partial last run. Every width, both value kinds, every SIMD target
  // (2-byte runs dense enough take AVX-512's one-pass diff and compressing extraction: runs 0 and
  // 1 are dense, runs 3 to 5 sparse, and their tiles switch between the ways).
  std::mt19937_64 rng(9);
  const size_t n = 5 * kDiffChunkElements + 1234;
  ForEachSimdTarget([&](const std::string& target) {
    for (uint32_t w : {1u, 2u, 4u, 8u})
      for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
        const std::string what = target + " width " + std::to_string(w) + (kind == ValueKind::kXor ? " xor" : " overwrite");
        std::vector<uint8_t> a(n * w), b;
        for (auto& x : a) x = static_cast<uint8_t>(rng());
        b = a;
        for (size_t i = 0; i < n; ++i) {
          const size_t run = i / kDiffChunkElements;  // run 2 has no changes
          if (run != 2 && rng() % (run < 2 ? 10 : 200) == 0) b[i * w + rng() % w] ^= static_cast<uint8_t>(1 + rng() % 255);
        }
        ChangeSet plain, chunked;
        DiffElements(a, b, w, kind, &plain);
        std::vector<std::vector<uint32_t>> runs;
        std::vector<uint8_t> values, old_bits;
        DiffElements(a, b, w, kind, &chunked, [&](const DiffChunk& c) {
          runs.emplace_back(c.positions.begin(), c.positions.end());
          ASSERT_EQ(c.values.size(), c.positions.size() * w) << what;
          ASSERT_EQ(c.old_bits.size(), c.positions.size() * w) << what;
          values.insert(values.end(), c.values.begin(), c.values.end());
          old_bits.insert(old_bits.end(), c.old_bits.begin(), c.old_bits.end());
        });
        // The element-by-element definition.
        std::vector<uint32_t> want_pos;
        std::vector<uint8_t> want_val, want_old;
        for (size_t i = 0; i < n; ++i) {
          if (std::equal(a.begin() + i * w, a.begin() + (i + 1) * w, b.begin() + i * w)) continue;
          want_pos.push_back(static_cast<uint32_t>(i));
          for (size_t j = 0; j < w; ++j)
            want_val.push_back(kind == ValueKind::kXor ? a[i * w + j] ^ b[i * w + j] : b[i * w + j]);
          want_old.insert(want_old.end(), a.begin() + i * w, a.begin() + (i + 1) * w);
        }
        EXPECT_EQ(AsVector(plain.positions), want_pos) << what;
        EXPECT_EQ(AsVector(plain.values), want_val) << what;
        EXPECT_EQ(AsVector(chunked.positions), want_pos) << what;
        EXPECT_EQ(AsVector(chunked.values), want_val) << what;
        EXPECT_EQ(values, want_val) << what;
        EXPECT_EQ(old_bits, want_old) << what;
        ASSERT_EQ(runs.size(), 5u) << what;  // runs 0, 1, 3, 4 and the partial run 5; not run 2
        std::vector<uint32_t> joined;
        for (size_t r = 0; r < runs.size(); ++r) {
          ASSERT_FALSE(runs[r].empty());
          const uint32_t run = runs[r].front() / kDiffChunkElements;
          EXPECT_EQ(run, r < 2 ? r : r + 1);
          for (uint32_t p : runs[r]) EXPECT_EQ(p / kDiffChunkElements, run);
          joined.insert(joined.end(), runs[r].begin(), runs[r].end());
        }
        EXPECT_EQ(joined, AsVector(plain.positions)) << what;
      }
  });
}

TEST(DiffElements, PiecesAppendedInOrderMakeTheWholeRunsChanges) {
  // DiffElementsAppend: pieces of any lengths (tile-aligned or not), diffed in order into one
  // ChangeSet, with positions counted from the run's start.
  std::mt19937_64 rng(10);
  const size_t n = 3 * kDiffChunkElements + 777;
  ForEachSimdTarget([&](const std::string& target) {
    for (uint32_t w : {1u, 2u, 4u, 8u}) {
      std::vector<uint8_t> a(n * w), b;
      for (auto& x : a) x = static_cast<uint8_t>(rng());
      b = a;
      for (size_t i = 0; i < n; ++i)
        if (rng() % 20 == 0) b[i * w + rng() % w] ^= static_cast<uint8_t>(1 + rng() % 255);
      ChangeSet whole, pieces;
      DiffElements(a, b, w, ValueKind::kXor, &whole);
      for (size_t first = 0, len = 1; first < n; first += len, len = len * 3 + 4096) {
        const size_t m = std::min(len, n - first);
        DiffElementsAppend(std::span<const uint8_t>(a).subspan(first * w, m * w),
                           std::span<const uint8_t>(b).subspan(first * w, m * w), w, ValueKind::kXor, first, &pieces);
      }
      EXPECT_EQ(AsVector(pieces.positions), AsVector(whole.positions)) << target << " width " << w;
      EXPECT_EQ(AsVector(pieces.values), AsVector(whole.values)) << target << " width " << w;
      EXPECT_EQ(pieces.width, w);
    }
  });
}

}  // namespace
}  // namespace dcr
