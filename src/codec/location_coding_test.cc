// Location coding (location_coding.h): round trips of every method (split Rice gaps, bitmaps,
// ranges, and the interleaved Rice codes of formats 1-5), block boundaries, pieces coded one
// after another, the size bound, and random codes that must decode or be refused as corrupt.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/location_coding.h"

namespace dcr {
namespace {

int LocationMethodOfSingleBlock(const std::vector<uint8_t>& code) {
  ByteReader r(code);
  uint64_t n = 0;
  uint8_t m = 0;
  if (!r.ReadVarint(&n) || n == 0 || !r.ReadByte(&m)) return -1;
  return m;
}

// The location code of `pos` (ascending, each below `count`) in blocks of 2^block_log2 elements.
std::vector<uint8_t> LocationCode(const std::vector<uint32_t>& pos, uint64_t count, int block_log2) {
  std::vector<uint8_t> code;
  EncodeLocations(pos, count, block_log2, &code);
  return code;
}

// A one-block code of `pos` (ascending, below the block length) in method 0, interleaved Rice
// codes with parameter r, which delta formats 1-5 wrote and this build still reads.
std::vector<uint8_t> InterleavedRiceBlock(const std::vector<uint32_t>& pos, int r) {
  std::vector<uint8_t> code;
  PutVarint(code, pos.size());
  code.push_back(static_cast<uint8_t>(LocationMethod::kRice));
  code.push_back(static_cast<uint8_t>(r));
  BitWriter w(code);
  uint64_t next = 0;
  for (uint32_t p : pos) w.PutRice(p - next, r), next = uint64_t{p} + 1;
  w.Flush();
  return code;
}

// Success when `code` decodes, as pos.size() changes among `count` elements in blocks of
// 2^block_log2, to exactly `pos`, replacing what the output vector held before: nothing, one
// element, or more elements than `pos` (a vector reused from a larger payload keeps its size
// while the decoder fills it).
::testing::AssertionResult DecodesTo(const std::vector<uint8_t>& code, uint64_t count, int block_log2,
                                     const std::vector<uint32_t>& pos) {
  for (size_t held : {size_t{0}, size_t{1}, pos.size() + 100}) {
    std::vector<uint32_t> back(held, 0xdeadbeef);
    Status s = DecodeLocations(code, count, block_log2, pos.size(), &back);
    if (!s.ok()) return ::testing::AssertionFailure() << s.ToString() << " (output held " << held << ")";
    if (back != pos)
      return ::testing::AssertionFailure() << "decoded " << ::testing::PrintToString(back) << ", want "
                                           << ::testing::PrintToString(pos) << " (output held " << held << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(LocationCoding, PiecesOfWholeBlocksCodedOneAfterAnotherMakeTheWholeCodeAndBound) {
  std::mt19937_64 rng(11);
  for (int block_log2 : {3, 10, 16}) {
    const uint64_t block = uint64_t{1} << block_log2, count = 5 * block + block / 3;
    std::vector<uint32_t> pos;
    for (uint64_t i = 0; i < count; ++i)
      if (i >= block && i < 2 * block ? rng() % 2 == 0 : rng() % 30 == 0) pos.push_back(static_cast<uint32_t>(i));
    std::vector<uint8_t> whole, pieces;
    uint64_t bound = 0;
    EncodeLocations(pos, count, block_log2, &whole);
    for (uint64_t first = 0, blocks = 1; first < count; first += blocks * block, ++blocks) {
      const uint64_t m = std::min(blocks * block, count - first);
      const auto from = std::lower_bound(pos.begin(), pos.end(), first);
      const auto to = std::lower_bound(pos.begin(), pos.end(), first + m);
      const std::span<const uint32_t> in(pos.data() + (from - pos.begin()), static_cast<size_t>(to - from));
      EncodeLocationsFrom(in, first, m, block_log2, &pieces);
      bound += LocationCodeBytesLowerBoundFrom(in, first, m, block_log2);
    }
    EXPECT_EQ(pieces, whole) << "block 2^" << block_log2;
    EXPECT_EQ(bound, LocationCodeBytesLowerBound(pos, count, block_log2)) << "block 2^" << block_log2;
  }
}

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
        const std::vector<uint8_t> code = LocationCode(pos, count, block_log2);
        ASSERT_TRUE(DecodesTo(code, count, block_log2, pos)) << " block 2^" << block_log2 << " density " << density;
        // The code is a pure function of its input, and its size is known without writing it.
        EXPECT_EQ(LocationCode(pos, count, block_log2), code);
        EXPECT_EQ(LocationCodeBytes(pos, count, block_log2), code.size()) << " block 2^" << block_log2 << " density " << density;
      }
    }
  }
}

TEST(LocationCoding, TheLowerBoundNeverExceedsTheCodeAndIsCloseForScatteredChanges) {
  // Context mode's choice trusts the bound: a bound above the real size would pick a larger code.
  std::mt19937_64 rng(16);
  for (int block_log2 : {3, 4, 7, 10, 16})
    for (double density : {0.0, 0.0001, 0.005, 0.05, 0.3, 0.9, 1.0})
      for (int runs : {0, 1}) {
        const uint64_t count = 1 + rng() % 70000;
        std::vector<uint32_t> pos;
        std::bernoulli_distribution coin(density);
        for (uint64_t i = 0; i < count; ++i)
          if (runs ? coin(rng) || (!pos.empty() && pos.back() + 1 == i && i % 7 != 0) : coin(rng))
            pos.push_back(static_cast<uint32_t>(i));
        const uint64_t exact = LocationCodeBytes(pos, count, block_log2), bound = LocationCodeBytesLowerBound(pos, count, block_log2);
        const std::string what = "block 2^" + std::to_string(block_log2) + " density " + std::to_string(density) + " runs " + std::to_string(runs);
        EXPECT_LE(bound, exact) << what;
        // Scattered changes in large blocks (the real case) are Rice-coded: within ~10 %.
        if (!runs && block_log2 == 16 && density > 0 && density <= 0.05 && pos.size() > 200) {
          EXPECT_GE(static_cast<double>(bound), 0.9 * static_cast<double>(exact)) << what;
        }
      }
}

TEST(LocationCoding, BlockBoundariesAndTheLastElementRoundTrip) {
  const int block_log2 = 4;
  const uint64_t count = 16 * 5 + 3;  // last block is short
  std::vector<uint32_t> pos = {0, 15, 16, 31, 32, 47, 48, 63, 64, 79, 80, 81, 82};
  ASSERT_TRUE(DecodesTo(LocationCode(pos, count, block_log2), count, block_log2, pos));
}

// Split Rice codes hold the interleaved code's bits in two byte-padded areas: at most one byte
// more; both decode.
TEST(LocationCoding, ScatteredChangesUseSplitRiceGaps) {
  std::vector<uint32_t> pos;
  for (uint32_t p = 17; p < 65536; p += 997) pos.push_back(p);
  const std::vector<uint8_t> code = LocationCode(pos, 65536, 16);
  EXPECT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kSplitRice));
  ASSERT_TRUE(DecodesTo(code, 65536, 16, pos));
  const int r = code[2];
  EXPECT_EQ(r, 9);  // mean gap 996
  const std::vector<uint8_t> interleaved = InterleavedRiceBlock(pos, r);
  EXPECT_LE(code.size(), interleaved.size() + 1);
  ASSERT_TRUE(DecodesTo(interleaved, 65536, 16, pos));
}

TEST(LocationCoding, DenseRandomChangesUseABitmap) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> pos;
  for (uint32_t p = 0; p < 4096; ++p)
    if (rng() % 2) pos.push_back(p);
  const std::vector<uint8_t> code = LocationCode(pos, 4096, 16);
  EXPECT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kBitmap));
  ASSERT_TRUE(DecodesTo(code, 4096, 16, pos));
}

TEST(LocationCoding, ContiguousRunsUseRanges) {
  std::vector<uint32_t> pos;
  for (uint32_t p = 100; p < 3000; ++p) pos.push_back(p);
  for (uint32_t p = 40000; p < 41000; ++p) pos.push_back(p);
  const std::vector<uint8_t> code = LocationCode(pos, 65536, 16);
  EXPECT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kRanges));
  EXPECT_LT(code.size(), 16u);
  ASSERT_TRUE(DecodesTo(code, 65536, 16, pos));
}

// A Rice code whose first unary run is exactly 63 ones fills the reader's first 64-bit window
// up to its last bit. Positions 126, 128, 130, ... in a 1024-element block choose Rice with r=1
// (first gap 126 -> 63 ones, a zero, one remainder bit).
TEST(LocationCoding, RiceRunEndingAtTheLastBitOfTheReaderWindowRoundTrips) {
  std::vector<uint32_t> pos;
  for (uint32_t p = 126; p < 1024; p += 2) pos.push_back(p);
  ASSERT_TRUE(DecodesTo(InterleavedRiceBlock(pos, 1), 1024, 10, pos));
  const std::vector<uint8_t> code = LocationCode(pos, 1024, 10);  // split: a 63-bit quotient
  ASSERT_EQ(LocationMethodOfSingleBlock(code), static_cast<int>(LocationMethod::kSplitRice));
  ASSERT_EQ(code[3], 1);  // after the two-byte count and the method
  ASSERT_TRUE(DecodesTo(code, 1024, 10, pos));
}

// Long unary runs of every length: one isolated change after a gap of g, then a dense tail
// that keeps the Rice parameter small.
TEST(LocationCoding, RiceCodesWithLongGapsRoundTrip) {
  for (uint32_t gap = 0; gap < 700; ++gap) {
    std::vector<uint32_t> pos = {gap};
    for (uint32_t p = gap + 2; p < 2048; p += 2) pos.push_back(p);
    ASSERT_TRUE(DecodesTo(LocationCode(pos, 2048, 11), 2048, 11, pos)) << "gap " << gap;
  }
}

TEST(LocationCoding, EveryStrictPrefixOfAValidCodeIsRejected) {
  std::mt19937_64 rng(8);
  std::vector<uint32_t> pos;
  for (uint32_t p = 0; p < 5000; ++p)
    if (rng() % 20 == 0 || (p > 3000 && p < 3100) || (p > 4000 && rng() % 2)) pos.push_back(p);
  std::vector<uint8_t> code = LocationCode(pos, 5000, 8);
  ASSERT_TRUE(DecodesTo(code, 5000, 8, pos));
  std::vector<uint32_t> back;
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
  EXPECT_EQ(decode({1, 3, 0, 0x20}, 16, 1), StatusCode::kOk);          // split Rice r=0: 5 zeros, one -> 5
  EXPECT_EQ(out, (std::vector<uint32_t>{5}));
  EXPECT_EQ(decode({2, 3, 2, 0x01, 0x06, 0}, 32, 2), StatusCode::kOk);  // r=2: gaps 5, 0 (01 00 | 01 1); empty block
  EXPECT_EQ(out, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(decode({1, 3, 0, 0x20, 1, 3, 0, 0x20}, 32, 2), StatusCode::kOk);  // one change per block
  EXPECT_EQ(out, (std::vector<uint32_t>{5, 21}));

  EXPECT_EQ(decode({17}, 16, 17), kC);                                 // more changes than elements
  EXPECT_EQ(decode({2, 1, 0x05, 0x00}, 16, 1), kC);                   // more than the payload declares
  EXPECT_EQ(decode({1, 1, 0x05, 0x00}, 16, 1), kC);                   // bitmap holds 2 bits, count 1
  EXPECT_EQ(decode({3, 1, 0x05, 0x00}, 16, 3), kC);                   // bitmap holds 2 bits, count 3
  EXPECT_EQ(decode({1, 1, 0x00, 0x08}, 12, 1), StatusCode::kOk);      // bitmap bit 11 is in a 12-block...
  EXPECT_EQ(decode({1, 1, 0x00, 0x10}, 12, 1), kC);                   // ...bit 12 is beyond a 12-block
  EXPECT_EQ(decode({1, 4}, 16, 1), kC);                               // unknown method
  EXPECT_EQ(decode({1, 3, 31, 0x01}, 16, 1), kC);                     // split Rice parameter 31
  EXPECT_EQ(decode({1, 3, 0, 0x00, 0x00, 0x01}, 16, 1), kC);          // split Rice gap 16 beyond block
  EXPECT_EQ(decode({1, 3, 0, 0x00}, 16, 1), kC);                      // split Rice quotient unterminated
  EXPECT_EQ(decode({1, 3, 0}, 16, 1), kC);                            // split Rice code missing
  EXPECT_EQ(decode({1, 3, 2, 0x05, 0x02}, 16, 1), kC);                // split Rice remainder padding not zero
  EXPECT_EQ(decode({1, 3, 0, 0x60}, 16, 1), kC);                      // a one bit after the code
  EXPECT_EQ(decode({1, 3, 0, 0x20, 0x00}, 16, 1), kC);                // trailing byte
  EXPECT_EQ(decode({2, 3, 0, 0x20}, 16, 2), kC);                      // second quotient missing
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
    if (code.size() > 1) code[1] = static_cast<uint8_t>(code[1] % 4);
    if (code.size() > 2 && (code[1] == 0 || code[1] == 3)) code[2] = static_cast<uint8_t>(code[2] % 4);
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
      if (k > 0) {
        ASSERT_LT(pos[k - 1], pos[k]);
      }
    }
  }
  EXPECT_GT(accepted, 0);  // the generator does reach valid codes
}

}  // namespace
}  // namespace dcr
