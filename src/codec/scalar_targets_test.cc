// The bit coders compiled once per Highway target for its scalar instructions (location_coding.cc,
// rice_gaps.cc, value_symbols.cc: BMI1/BMI2 on x86-64 AVX2 and later, baseline code below) must
// write the same bytes and read the same results on every target, malformed input included.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/location_coding.h"
#include "codec/payload_checksum.h"
#include "codec/rice_gaps.h"
#include "codec/simd_masks.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

std::string Describe(const Status& s) { return s.ToString(); }
const std::string kOk = Describe(Status::Ok());

// Positions among `count` elements: scattered at `density`, plus a contiguous run and a dense
// stretch, so that every block method appears.
std::vector<uint32_t> MakePositions(uint64_t count, double density, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution scattered(density), dense(0.6);
  std::vector<uint32_t> pos;
  for (uint32_t p = 0; p < count; ++p)
    if (scattered(rng) || (p >= count / 3 && p < count / 3 + 200) || (p >= count / 2 && p < count / 2 + 3000 && dense(rng)))
      pos.push_back(p);
  return pos;
}

TEST(ScalarTargets, LocationCodesAreTheSameBytesAndDecodeAlikeOnEveryTarget) {
  const uint64_t count = 200000;
  for (double density : {0.0005, 0.01, 0.05, 0.3})
    for (int block_log2 : {6, 12, 16}) {
      const std::vector<uint32_t> pos = MakePositions(count, density, static_cast<uint32_t>(block_log2));
      std::vector<uint8_t> want;
      EncodeLocations(pos, count, block_log2, &want);
      const uint64_t bound = LocationCodeBytesLowerBound(pos, count, block_log2);
      // The best target's answers to every strict prefix and to corrupted copies.
      std::vector<std::vector<uint8_t>> inputs;
      for (size_t len = 0; len < want.size(); len += 1 + len / 16) inputs.emplace_back(want.begin(), want.begin() + len);
      std::mt19937_64 rng(7);
      for (int i = 0; i < 40; ++i) {
        std::vector<uint8_t> bad = want;
        bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        inputs.push_back(std::move(bad));
      }
      std::vector<std::string> status(inputs.size());
      std::vector<std::vector<uint32_t>> decoded(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i)
        status[i] = Describe(DecodeLocations(inputs[i], count, block_log2, pos.size(), &decoded[i]));

      ForEachSimdTarget([&](const std::string& target) {
        const std::string what = target + ", density " + std::to_string(density) + ", block 2^" + std::to_string(block_log2);
        std::vector<uint8_t> code;
        EncodeLocations(pos, count, block_log2, &code);
        EXPECT_EQ(code, want) << what;
        EXPECT_EQ(LocationCodeBytes(pos, count, block_log2), want.size()) << what;
        EXPECT_EQ(LocationCodeBytesLowerBound(pos, count, block_log2), bound) << what;
        std::vector<uint32_t> back;
        ASSERT_TRUE(DecodeLocations(want, count, block_log2, pos.size(), &back).ok()) << what;
        EXPECT_EQ(back, pos) << what;
        for (size_t i = 0; i < inputs.size(); ++i) {
          std::vector<uint32_t> out;
          EXPECT_EQ(Describe(DecodeLocations(inputs[i], count, block_log2, pos.size(), &out)), status[i]) << what << ", input " << i;
          if (status[i] == kOk) {
            EXPECT_EQ(out, decoded[i]) << what << ", input " << i;
          }
        }
      });
      if (testing::Test::HasFailure()) return;
    }
}

TEST(ScalarTargets, RiceGapStreamsAreTheSameBytesAndReadAlikeOnEveryTarget) {
  std::mt19937_64 rng(3);
  for (int r : {0, 2, 5, 9, 14}) {
    // Gaps around 2^r with a few long ones (quotients past one window).
    std::vector<uint64_t> gaps(3001);
    uint64_t limit = 0;
    for (auto& g : gaps) {
      g = rng() % (uint64_t{4} << r) + (rng() % 500 == 0 ? (uint64_t{90} << r) : 0);
      limit += g + 1;
    }
    std::vector<uint8_t> want;
    {
      BitWriter w(want);
      PutRiceGaps(w, gaps, r);
      w.Flush();
    }
    std::vector<uint64_t> ordinals(gaps.size());
    for (uint64_t i = 0, next = 0; i < gaps.size(); ++i) ordinals[i] = next + gaps[i], next = ordinals[i] + 1;

    ForEachSimdTarget([&](const std::string& target) {
      const std::string what = target + ", r " + std::to_string(r);
      std::vector<uint8_t> code;
      {
        BitWriter w(code);
        PutRiceGaps(w, gaps, r);
        w.Flush();
      }
      EXPECT_EQ(code, want) << what;
      std::vector<uint64_t> out(gaps.size());
      BitReader bits(want);
      ASSERT_TRUE(GetRiceOrdinals(bits, gaps.size(), r, limit, out.data())) << what;
      EXPECT_EQ(out, ordinals) << what;
      EXPECT_EQ(bits.bytes_consumed(), want.size()) << what;
      // The last ordinal is limit - 1: one less room, and it is out of range.
      BitReader tight(want);
      EXPECT_FALSE(GetRiceOrdinals(tight, gaps.size(), r, limit - 1, out.data())) << what;
      // Cut short, the stream runs out.
      BitReader cut(std::span<const uint8_t>(want).first(want.size() - 2));
      EXPECT_FALSE(GetRiceOrdinals(cut, gaps.size(), r, limit, out.data())) << what;
      EXPECT_TRUE(cut.overrun()) << what;
      // The band decoder's 32-bit ordinals alike (the limits here are below 2^32).
      ASSERT_LE(limit, uint64_t{1} << 32);
      std::vector<uint32_t> out32(gaps.size());
      BitReader bits32(want);
      ASSERT_TRUE(GetRiceOrdinals(bits32, gaps.size(), r, limit, out32.data())) << what;
      EXPECT_TRUE(std::equal(ordinals.begin(), ordinals.end(), out32.begin())) << what;
      EXPECT_EQ(bits32.bytes_consumed(), want.size()) << what;
      BitReader tight32(want);
      EXPECT_FALSE(GetRiceOrdinals(tight32, gaps.size(), r, limit - 1, out32.data())) << what;
    });
    if (testing::Test::HasFailure()) return;
  }
}

TEST(ScalarTargets, QuotientSumsAreTheScalarSumsOnEveryTarget) {
  std::mt19937_64 rng(4);
  std::vector<uint64_t> gaps(1000);
  for (auto& g : gaps) g = rng() >> (rng() % 64);  // every magnitude, sums that wrap
  ForEachSimdTarget([&](const std::string& target) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{31}, size_t{1000}})
      for (int lo : {0, 1, 5, 29, 61}) {
        const std::span<const uint64_t> some = std::span<const uint64_t>(gaps).first(n);
        std::array<uint64_t, 3> want{};
        for (uint64_t g : some)
          for (size_t j = 0; j < 3; ++j) want[j] += g >> (lo + static_cast<int>(j));
        EXPECT_EQ(QuotientSums(some, lo), want) << target << ", " << n << " gaps, lo " << lo;
      }
  });
}

TEST(ScalarTargets, ValueSectionsAreTheSameBytesAndDecodeAlikeOnEveryTarget) {
  // Runs of every width: mostly small XOR masks, some escaped values; 1-byte values above the
  // escape threshold cannot exist, so the symbol forms are taken for the wider runs.
  std::mt19937_64 rng(5);
  const std::vector<std::pair<uint32_t, uint64_t>> shape = {{2, 30000}, {1, 700}, {4, 5000}, {8, 900}, {2, 20000}};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ValueRun> runs;
  for (auto [width, n] : shape) {
    std::vector<uint8_t> b(n * width);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t x = (uint64_t{1} << (1 + rng() % 5)) - 1;
      if (rng() % 40 == 0) x = rng() >> (rng() % 64);
      std::memcpy(b.data() + i * width, &x, width);
    }
    bytes.push_back(std::move(b));
  }
  for (size_t k = 0; k < shape.size(); ++k) runs.push_back({shape[k].first, shape[k].second, bytes[k]});
  auto decode = [&](std::span<const uint8_t> stored, ValueCodec codec, std::vector<std::vector<uint8_t>>* out) {
    std::vector<ValueRun> shapes;
    for (const ValueRun& r : runs) shapes.push_back({r.width, r.count, {}});
    out->clear();
    for (const ValueRun& r : runs) out->emplace_back(r.count * r.width);
    std::vector<std::span<uint8_t>> outs(out->begin(), out->end());
    return Describe(DecodeValues(codec, stored, shapes, outs));
  };
  for (uint64_t streams_min : {uint64_t{1} << 40, kValueStreamsMin}) {  // codec 2, then codec 3
    std::vector<uint8_t> want;
    const ValueCodec codec = EncodeValues(runs, 1, &want, 1, streams_min);
    ASSERT_EQ(codec, streams_min == kValueStreamsMin ? ValueCodec::kHuffmanStreams : ValueCodec::kHuffman);
    std::vector<std::vector<uint8_t>> inputs;
    for (size_t len = 0; len < want.size(); len += 1 + len / 8) inputs.emplace_back(want.begin(), want.begin() + len);
    for (int i = 0; i < 60; ++i) {
      std::vector<uint8_t> bad = want;
      bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      inputs.push_back(std::move(bad));
    }
    std::vector<std::string> status(inputs.size());
    std::vector<std::vector<std::vector<uint8_t>>> decoded(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) status[i] = decode(inputs[i], codec, &decoded[i]);

    ForEachSimdTarget([&](const std::string& target) {
      const std::string what = target + ", codec " + std::to_string(static_cast<int>(codec));
      std::vector<uint8_t> stored;
      EXPECT_EQ(EncodeValues(runs, 1, &stored, 1, streams_min), codec) << what;
      EXPECT_EQ(stored, want) << what;
      std::vector<std::vector<uint8_t>> back;
      ASSERT_EQ(decode(want, codec, &back), kOk) << what;
      EXPECT_EQ(back, bytes) << what;
      for (size_t i = 0; i < inputs.size(); ++i) {
        std::vector<std::vector<uint8_t>> out;
        EXPECT_EQ(decode(inputs[i], codec, &out), status[i]) << what << ", input " << i;
        if (status[i] == kOk) {
          EXPECT_EQ(out, decoded[i]) << what << ", input " << i;
        }
      }
    });
    if (testing::Test::HasFailure()) return;
  }
}

// A tally's counts are each symbol's number of values (kHuffmanMaxSymbols - 1 and above: the
// escape symbol) on every target, for every width, whatever the values' start and count: the
// 2-byte values' vector path (the commonest masks by compares, the rest one by one, or packed and
// counted in batches of 1024, which 20,000 values, a fifth of them others, fill several times)
// included; also in a tally cleared after each count (Clear zeroes only the groups of counters
// used); and SumUsed lists the used symbols of one or two tallies with their summed counts.
TEST(ScalarTargets, ValueTalliesCountEverySymbolOnEveryTarget) {
  std::mt19937_64 rng(17);
  std::vector<uint8_t> bytes(8 * 20000 + 8);
  for (size_t i = 0; i < bytes.size(); i += 2) {
    // Mostly the masks 0x1..0xf, then small and large values, escapes and runs of one symbol.
    const uint64_t pick = rng() % 100;
    uint16_t v = pick < 80 ? static_cast<uint16_t>((2u << (rng() % 4)) - 1)
                 : pick < 90 ? static_cast<uint16_t>(rng() % 4095) : pick < 95 ? static_cast<uint16_t>(4095 + rng() % 100)
                                                                       : static_cast<uint16_t>(rng());
    if (i / 2 % 700 < 40) v = 7;
    std::memcpy(bytes.data() + i, &v, 2);
  }
  ValueTally reused;  // cleared between counts: what one count left must not reach the next
  for (uint32_t width : {1u, 2u, 4u, 8u})
    for (size_t offset : {size_t{0}, size_t{2}, size_t{6}})
      for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{31}, uint64_t{64}, uint64_t{65}, uint64_t{4999},
                         uint64_t{20000}}) {
        const std::span<const uint8_t> values(bytes.data() + offset, n * width);
        std::vector<uint64_t> want(kHuffmanMaxSymbols, 0);
        for (uint64_t i = 0; i < n; ++i) {
          uint64_t v = 0;
          std::memcpy(&v, values.data() + i * width, width);
          ++want[std::min<uint64_t>(v, kHuffmanMaxSymbols - 1)];
        }
        ForEachSimdTarget([&](const std::string& target) {
          ValueTally tally;
          tally.Add(values, width);
          // SumUsed over this tally and `reused` (still holding the previous count), and over
          // this one alone: the used symbols of the summed frequencies, ascending, and their sums.
          for (bool with_reused : {true, false}) {
            std::vector<uint64_t> sum = tally.Frequencies();
            const std::vector<uint64_t> previous = reused.Frequencies();
            if (with_reused)
              for (size_t s = 0; s < sum.size(); ++s) sum[s] += previous[s];
            std::vector<uint32_t> want_symbols;
            std::vector<uint64_t> want_counts;
            for (uint32_t s = 0; s < sum.size(); ++s)
              if (sum[s] > 0) want_symbols.push_back(s), want_counts.push_back(sum[s]);
            const ValueTally* both[] = {&tally, &reused};
            std::vector<uint32_t> symbols = {1, 2, 3};  // replaced
            std::vector<uint64_t> counts = {4};
            ValueTally::SumUsed(std::span<const ValueTally* const>(both, with_reused ? 2 : 1), &symbols, &counts);
            EXPECT_EQ(symbols, want_symbols) << target << ", width " << width << ", " << n << " values";
            EXPECT_EQ(counts, want_counts) << target << ", width " << width << ", " << n << " values";
          }
          EXPECT_EQ(tally.values(), n);
          EXPECT_EQ(tally.Frequencies(), want)
              << target << ", width " << width << ", offset " << offset << ", " << n << " values";
          reused.Clear();
          reused.Add(values, width);
          EXPECT_EQ(reused.Frequencies(), want)
              << target << ", width " << width << ", offset " << offset << ", " << n << " values, reused";
        });
      }
}

}  // namespace
}  // namespace dcr

namespace dcr {
namespace {

// The payload checksum is libxxhash's XXH3_64bits whichever build of it runs (the AVX2 one where
// the CPU has AVX2): every length from 0 to past xxh3's 1 KiB stripes' block, at every alignment,
// and a payload-sized buffer.
TEST(ScalarTargets, PayloadChecksumIsTheLibraryXxh3) {
  std::mt19937_64 rng(29);
  std::vector<uint8_t> bytes(72 * 1024 + 64);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 2200; ++n) lengths.push_back(n);
  lengths.push_back(72 * 1024);
  for (bool library : {false, true}) {
    ForceLibraryChecksum(library);
    for (size_t skew : {0, 1, 7, 33})
      for (size_t n : lengths) {
        const std::span<const uint8_t> s(bytes.data() + skew, n);
        ASSERT_EQ(PayloadChecksum(s), XXH3_64bits(s.data(), s.size())) << "length " << n << ", skew " << skew;
      }
  }
  ForceLibraryChecksum(false);
}

}  // namespace
}  // namespace dcr
