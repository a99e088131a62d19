// Split Rice streams (split_rice.h): round trips of random runs on the SIMD and the scalar
// decoder, their agreement on every truncation and bit flip, the bounds, and streams written by
// hand from docs/format.md §2.9.
#include "codec/split_rice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"
#include "codec/simd_masks.h"

namespace dcr {
namespace {

using Kind = SplitRiceError::Kind;

struct Runs {
  std::vector<std::vector<uint64_t>> gaps;
  std::vector<uint8_t> rice;
  std::vector<uint64_t> counts;
  std::vector<uint64_t> ordinals;  // expected: each run's ordinals, run after run
  uint64_t limit = 0;              // one past the largest ordinal

  std::vector<uint8_t> Encode() const {
    std::vector<RiceRun> runs;
    for (size_t b = 0; b < gaps.size(); ++b) runs.push_back({gaps[b], rice[b]});
    std::vector<uint8_t> out;
    PutSplitRice(runs, &out);
    return out;
  }
};

// `k` runs of up to `max_count` geometric gaps (mean about 2^r) with Rice parameters up to
// `max_rice`; some runs empty.
Runs RandomRuns(std::mt19937_64& rng, size_t k, uint64_t max_count, int max_rice) {
  Runs r;
  for (size_t b = 0; b < k; ++b) {
    const int rice = static_cast<int>(rng() % static_cast<uint64_t>(max_rice + 1));
    const uint64_t n = rng() % 5 == 0 ? 0 : rng() % (max_count + 1);
    std::geometric_distribution<uint64_t> geo(1.0 / (static_cast<double>(uint64_t{1} << rice) + 1));
    std::vector<uint64_t> g(n);
    uint64_t next = 0;
    for (uint64_t& x : g) {
      x = rng() % 50 == 0 ? geo(rng) * 40 : geo(rng);  // some quotients of tens of words
      r.ordinals.push_back(next + x);
      next += x + 1;
      r.limit = std::max(r.limit, next);
    }
    r.gaps.push_back(std::move(g));
    r.rice.push_back(static_cast<uint8_t>(rice));
    r.counts.push_back(n);
  }
  return r;
}

struct Decoded {
  SplitRiceError error;
  std::vector<uint64_t> ordinals;
};

Decoded Decode(std::span<const uint8_t> stream, const Runs& r, uint64_t limit, bool scalar) {
  ForceScalarSplitRice(scalar);
  uint64_t total = 0;
  for (uint64_t c : r.counts) total += c;
  // Guards on both sides: the decoder writes only out[0, total).
  std::vector<uint64_t> out(total + 16, 0xabababababababab);
  Decoded d;
  d.error = GetSplitRiceOrdinals(stream, r.counts, r.rice, limit, out.data() + 8);
  ForceScalarSplitRice(false);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i], 0xabababababababab) << "written before the output";
    EXPECT_EQ(out[total + 8 + i], 0xabababababababab) << "written past the output";
  }
  if (d.error.ok()) d.ordinals.assign(out.begin() + 8, out.begin() + 8 + static_cast<std::ptrdiff_t>(total));
  // The 32-bit decoder (the band decoder's) gives the same error, or the same ordinals, and also
  // writes only its output.
  if (limit <= (uint64_t{1} << 32)) {
    ForceScalarSplitRice(scalar);
    std::vector<uint32_t> out32(total + 16, 0xabababab);
    const SplitRiceError e32 = GetSplitRiceOrdinals(stream, r.counts, r.rice, limit, out32.data() + 8);
    ForceScalarSplitRice(false);
    EXPECT_EQ(e32.kind, d.error.kind) << "32-bit ordinals";
    EXPECT_EQ(e32.band, d.error.band) << "32-bit ordinals";
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(out32[i], 0xababababu) << "32-bit ordinals written before the output";
      EXPECT_EQ(out32[total + 8 + i], 0xababababu) << "32-bit ordinals written past the output";
    }
    if (e32.ok() && d.error.ok()) {
      EXPECT_TRUE(std::equal(d.ordinals.begin(), d.ordinals.end(), out32.begin() + 8)) << "32-bit ordinals";
    }
  }
  return d;
}

// Both decoders give the same result: the same error (kind and band), or the same ordinals.
Decoded DecodeAlike(std::span<const uint8_t> stream, const Runs& r, uint64_t limit, const std::string& what) {
  const Decoded simd = Decode(stream, r, limit, false), scalar = Decode(stream, r, limit, true);
  EXPECT_EQ(simd.error.kind, scalar.error.kind) << what;
  EXPECT_EQ(simd.error.band, scalar.error.band) << what;
  EXPECT_EQ(simd.ordinals, scalar.ordinals) << what;
  return simd;
}

TEST(SplitRice, RandomRunsRoundTripOnBothDecodersInTheInterleavedCodesBits) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 300; ++trial) {
    const Runs r = RandomRuns(rng, 1 + rng() % 8, trial < 100 ? 20 : 2000, trial % 3 == 0 ? 30 : 8);
    const std::vector<uint8_t> stream = r.Encode();
    const Decoded d = DecodeAlike(stream, r, r.limit, "trial " + std::to_string(trial));
    ASSERT_TRUE(d.error.ok()) << "trial " << trial << ": " << d.error.Message();
    EXPECT_EQ(d.ordinals, r.ordinals) << "trial " << trial;
    // The same bits as the interleaved code, each area padded to a byte.
    std::vector<uint8_t> interleaved;
    BitWriter w(interleaved);
    uint64_t bits = 0;
    for (size_t b = 0; b < r.gaps.size(); ++b) {
      if (!r.gaps[b].empty()) PutRiceGaps(w, r.gaps[b], r.rice[b]);
      for (uint64_t g : r.gaps[b]) bits += (g >> r.rice[b]) + 1 + r.rice[b];
    }
    w.Flush();
    EXPECT_EQ(interleaved.size(), (bits + 7) / 8);
    EXPECT_LE(stream.size(), interleaved.size() + 1) << "trial " << trial;
    // The bound is exact: every ordinal below one past the largest, none below the largest.
    if (!r.ordinals.empty()) {
      EXPECT_EQ(DecodeAlike(stream, r, r.limit - 1, "limit").error.kind, Kind::kOutOfRange) << "trial " << trial;
    }
  }
}

// The encoder's eight-code vector steps (AVX-512 targets) write the bytes of its scalar steps:
// runs of every length mod 8, every parameter, quotients small and large; on every compiled
// target.
TEST(SplitRice, VectorAndScalarEncodersWriteTheSameBytes) {
  ForEachSimdTarget([](const std::string& target) {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 400; ++trial) {
      const Runs r = RandomRuns(rng, 1 + rng() % 8, trial < 200 ? 40 : 3000, trial % 4 == 0 ? 30 : 12);
      ForceScalarSplitRice(true);
      const std::vector<uint8_t> scalar = r.Encode();
      ForceScalarSplitRice(false);
      EXPECT_EQ(r.Encode(), scalar) << target << " trial " << trial;
    }
  });
}

TEST(SplitRice, NoCodesIsAnEmptyStream) {
  Runs r;
  r.gaps = {{}, {}};
  r.rice = {3, 0};
  r.counts = {0, 0};
  EXPECT_TRUE(r.Encode().empty());
  EXPECT_TRUE(DecodeAlike({}, r, 10, "empty").error.ok());
  const std::vector<uint8_t> one = {0};
  EXPECT_EQ(DecodeAlike(one, r, 10, "a byte").error.kind, Kind::kTrailingBytes);
}

// Every truncation and every single-bit flip: both decoders agree; truncations and flips in the
// unary area's last byte are refused; nothing decodes past the limit.
TEST(SplitRice, TruncationsAndBitFlipsDecodeAlikeOnBothDecoders) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 12; ++trial) {
    const Runs r = RandomRuns(rng, 1 + trial % 8, 60, trial % 2 ? 30 : 6);
    const std::vector<uint8_t> stream = r.Encode();
    if (stream.empty()) continue;
    for (size_t len = 0; len < stream.size(); ++len)
      EXPECT_FALSE(DecodeAlike(std::span(stream).first(len), r, r.limit, "truncated").error.ok())
          << "trial " << trial << " length " << len;
    for (size_t bit = 0; bit < 8 * stream.size(); ++bit) {
      std::vector<uint8_t> q = stream;
      q[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      const Decoded d = DecodeAlike(q, r, r.limit, "flip " + std::to_string(bit));
      if (bit / 8 + 1 == stream.size()) {
        EXPECT_FALSE(d.error.ok()) << "trial " << trial << " flip in the last byte " << bit;
      }
      for (uint64_t o : d.ordinals) EXPECT_LT(o, r.limit);
    }
  }
}

// GetSplitRiceRuns of [0, m) and [m, k), on one decoder: true for both exactly when
// GetSplitRiceOrdinals succeeds, and then the two outputs are its ordinals. Guards around each
// output: a call writes only its range's codes.
bool RunsSplitAt(std::span<const uint8_t> stream, const Runs& r, uint64_t limit, size_t m, bool scalar,
                 std::vector<uint64_t>* ordinals) {
  ForceScalarSplitRice(scalar);
  uint64_t head = 0, total = 0;
  for (size_t b = 0; b < r.counts.size(); ++b) (b < m ? head : total) += r.counts[b];
  total += head;
  std::vector<uint64_t> out_head(head + 16, 0xcdcdcdcdcdcdcdcd), out_tail(total - head + 16, 0xcdcdcdcdcdcdcdcd);
  const bool ok_head = GetSplitRiceRuns(stream, r.counts, r.rice, limit, 0, m, out_head.data() + 8);
  const bool ok_tail = GetSplitRiceRuns(stream, r.counts, r.rice, limit, m, r.counts.size(), out_tail.data() + 8);
  ForceScalarSplitRice(false);
  for (const auto* out : {&out_head, &out_tail})
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ((*out)[i], 0xcdcdcdcdcdcdcdcd) << "written before the output";
      EXPECT_EQ((*out)[out->size() - 1 - i], 0xcdcdcdcdcdcdcdcd) << "written past the output";
    }
  ordinals->assign(out_head.begin() + 8, out_head.end() - 8);
  ordinals->insert(ordinals->end(), out_tail.begin() + 8, out_tail.end() - 8);
  // The 32-bit ranges (the band decoder's hand-off) alike, writing only their outputs.
  if (limit > (uint64_t{1} << 32)) return ok_head && ok_tail;
  ForceScalarSplitRice(scalar);
  std::vector<uint32_t> head32(head + 16, 0xcdcdcdcd), tail32(total - head + 16, 0xcdcdcdcd);
  const bool ok_head32 = GetSplitRiceRuns(stream, r.counts, r.rice, limit, 0, m, head32.data() + 8);
  const bool ok_tail32 = GetSplitRiceRuns(stream, r.counts, r.rice, limit, m, r.counts.size(), tail32.data() + 8);
  ForceScalarSplitRice(false);
  EXPECT_EQ(ok_head32, ok_head) << "32-bit ordinals, split " << m;
  EXPECT_EQ(ok_tail32, ok_tail) << "32-bit ordinals, split " << m;
  for (const auto* out : {&head32, &tail32})
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ((*out)[i], 0xcdcdcdcdu) << "32-bit ordinals written before the output";
      EXPECT_EQ((*out)[out->size() - 1 - i], 0xcdcdcdcdu) << "32-bit ordinals written past the output";
    }
  if (ok_head && ok_tail && ok_head32 && ok_tail32) {
    std::vector<uint64_t> got32(head32.begin() + 8, head32.end() - 8);
    got32.insert(got32.end(), tail32.begin() + 8, tail32.end() - 8);
    EXPECT_EQ(got32, *ordinals) << "32-bit ordinals, split " << m;
  }
  return ok_head && ok_tail;
}

// Every split of random codes (empty runs included) on both decoders: the ordinals of the whole.
TEST(SplitRice, RunRangesDecodeTheirShareOfTheWhole) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    const Runs r = RandomRuns(rng, 1 + rng() % 8, trial < 100 ? 30 : 2000, trial % 3 == 0 ? 30 : 8);
    const std::vector<uint8_t> stream = r.Encode();
    for (size_t m = 0; m <= r.counts.size(); ++m)
      for (bool scalar : {false, true}) {
        std::vector<uint64_t> got;
        EXPECT_TRUE(RunsSplitAt(stream, r, r.limit, m, scalar, &got)) << "trial " << trial << " split " << m;
        EXPECT_EQ(got, r.ordinals) << "trial " << trial << " split " << m;
        if (!r.ordinals.empty()) {
          EXPECT_FALSE(RunsSplitAt(stream, r, r.limit - 1, m, scalar, &got)) << "limit, trial " << trial;
        }
      }
  }
}

// Every truncation and single-bit flip, at every split: the two ranges accept exactly the streams
// GetSplitRiceOrdinals accepts (a split decoder must refuse what the whole one refuses).
TEST(SplitRice, RunRangesRefuseWhatTheWholeRefuses) {
  std::mt19937_64 rng(5);
  int refused = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const Runs r = RandomRuns(rng, 2 + trial % 7, 40, trial % 2 ? 30 : 5);
    const std::vector<uint8_t> stream = r.Encode();
    if (stream.empty()) continue;
    auto check = [&](std::span<const uint8_t> q, const std::string& what) {
      const Decoded whole = Decode(q, r, r.limit, false);
      refused += !whole.error.ok();
      for (size_t m = 0; m <= r.counts.size(); ++m) {
        std::vector<uint64_t> got;
        const bool ok = RunsSplitAt(q, r, r.limit, m, false, &got);
        EXPECT_EQ(ok, whole.error.ok()) << what << ", trial " << trial << " split " << m;
        if (ok && whole.error.ok()) {
          EXPECT_EQ(got, whole.ordinals) << what << ", trial " << trial << " split " << m;
        }
      }
    };
    for (size_t len = 0; len < stream.size(); ++len) check(std::span(stream).first(len), "truncated");
    for (size_t bit = 0; bit < 8 * stream.size(); ++bit) {
      std::vector<uint8_t> q = stream;
      q[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      check(q, "flip " + std::to_string(bit));
    }
  }
  EXPECT_GT(refused, 100);
}

// Streams written from the format: remainders area, then quotients as zeros and a one.
TEST(SplitRice, HandBuiltStreamsFollowTheFormat) {
  auto decode = [](std::vector<uint8_t> stream, std::vector<uint64_t> counts, std::vector<uint8_t> rice, uint64_t limit) {
    Runs r;
    r.counts = std::move(counts);
    r.rice = std::move(rice);
    return DecodeAlike(stream, r, limit, "hand-built");
  };
  // One run, rice 0, gap 5: 00000 1.
  EXPECT_EQ(decode({0x20}, {1}, {0}, 16).ordinals, (std::vector<uint64_t>{5}));
  // Rice 2, gap 5 = quotient 1, remainder 01: remainder byte 0b01, then 01.
  EXPECT_EQ(decode({0x01, 0x02}, {1}, {2}, 16).ordinals, (std::vector<uint64_t>{5}));
  EXPECT_EQ(decode({0x05, 0x02}, {1}, {2}, 16).error.kind, Kind::kPaddingNotZero);
  // Rice 30, gap 5: four remainder bytes, then 1; quotient 1 is 2^30, past any small limit.
  EXPECT_EQ(decode({5, 0, 0, 0, 0x01}, {1}, {30}, 16).ordinals, (std::vector<uint64_t>{5}));
  EXPECT_EQ(decode({5, 0, 0, 0, 0x02}, {1}, {30}, 16).error.kind, Kind::kOutOfRange);
  EXPECT_EQ(decode({5, 0, 0}, {1}, {30}, 16).error.kind, Kind::kRemaindersTruncated);
  // Gap 16 of 16 elements; a trailing byte; a second terminator; none.
  EXPECT_EQ(decode({0x00, 0x00, 0x01}, {1}, {0}, 16).error.kind, Kind::kOutOfRange);
  EXPECT_EQ(decode({0x20, 0x00}, {1}, {0}, 16).error.kind, Kind::kTrailingBytes);
  EXPECT_EQ(decode({0x60}, {1}, {0}, 16).error.kind, Kind::kTrailingBytes);
  EXPECT_EQ(decode({0x00}, {1}, {0}, 16).error.kind, Kind::kTerminatorsMissing);
  EXPECT_EQ(decode({}, {1}, {0}, 16).error.kind, Kind::kTerminatorsMissing);
  // Two runs: gaps 3, 4 (rice 1: remainders 1, 0; quotients 1, 2) and gap 0 (rice 2: remainder
  // 00): remainder bits 1 0 0 0, then 01 001 1: ordinals 3, 8 and 0. The second run's quotients
  // count from the bit after the first run's last terminator.
  const Decoded two = decode({0x01, 0x32}, {2, 1}, {1, 2}, 16);
  ASSERT_TRUE(two.error.ok()) << two.error.Message();
  EXPECT_EQ(two.ordinals, (std::vector<uint64_t>{3, 8, 0}));
  // The same with the second run's terminator missing: named by its run.
  const Decoded missing = decode({0x01, 0x12}, {2, 1}, {1, 2}, 16);
  EXPECT_EQ(missing.error.kind, Kind::kTerminatorsMissing);
  EXPECT_EQ(missing.error.band, 1u);
  // A run with more codes than the limit allows ordinals.
  EXPECT_EQ(decode({0xff, 0xff, 0x01}, {17}, {0}, 16).error.kind, Kind::kOutOfRange);
}

// Long runs with SIMD steps across many words, quotients spanning several words, and remainder
// areas ending near the stream's end (the decoder must not read past it: run under ASan too).
TEST(SplitRice, LongRunsAtTheEndOfTheirBuffer) {
  std::mt19937_64 rng(3);
  for (int rice : {0, 1, 4, 7, 8, 9, 10, 15, 16, 29, 30}) {
    Runs r;
    std::vector<uint64_t> g(4099);
    uint64_t next = 0;
    for (uint64_t& x : g) {
      x = (rng() % 300 == 0 ? (uint64_t{200} << rice) : 0) + (rng() & ((uint64_t{1} << rice) - 1));
      r.ordinals.push_back(next + x);
      next += x + 1;
    }
    r.limit = next;
    r.gaps = {g};
    r.rice = {static_cast<uint8_t>(rice)};
    r.counts = {g.size()};
    const std::vector<uint8_t> stream = r.Encode();
    // An exact-size heap copy, so that a read past the stream leaves the allocation.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[stream.size()]);
    std::copy(stream.begin(), stream.end(), exact.get());
    const Decoded d = DecodeAlike({exact.get(), stream.size()}, r, r.limit, "rice " + std::to_string(rice));
    ASSERT_TRUE(d.error.ok()) << "rice " << rice << ": " << d.error.Message();
    EXPECT_EQ(d.ordinals, r.ordinals) << "rice " << rice;
  }
}

// The decoder's 32-code steps (r <= 9) and the 8-code steps after them: runs of lengths around
// multiples of 32, r on both sides of the bound, remainders all at their largest (a step's sum
// of them is largest) or random, after a run of 5 one-bit remainders or none (the run's fields
// then start at every bit offset in a byte).
TEST(SplitRice, ThirtyTwoCodeStepsAtEveryLengthAndParameter) {
  std::mt19937_64 rng(11);
  for (int rice = 0; rice <= 11; ++rice)
    for (uint64_t n : {31, 32, 33, 39, 40, 63, 64, 65, 95, 96, 97, 200, 1000})
      for (int variant = 0; variant < 4; ++variant) {
        const bool largest = variant % 2 != 0, lead = variant >= 2;
        Runs r;
        uint64_t next = 0;
        for (int run = lead ? 0 : 1; run < 2; ++run) {
          const int run_rice = run == 0 ? 1 : rice;
          std::vector<uint64_t> g(run == 0 ? 5 : n);
          for (uint64_t& x : g) {
            const uint64_t low = (uint64_t{1} << run_rice) - 1;
            x = (rng() % 4 == 0 ? (rng() % 5) << run_rice : 0) + (largest ? low : rng() & low);
            r.ordinals.push_back(next + x);
            next += x + 1;
          }
          next = 0;  // ordinals count from each run's start
          r.gaps.push_back(g);
          r.rice.push_back(static_cast<uint8_t>(run_rice));
          r.counts.push_back(g.size());
        }
        uint64_t limit = 0;
        for (uint64_t o : r.ordinals) limit = std::max(limit, o + 1);
        r.limit = limit;
        const std::string what =
            "rice " + std::to_string(rice) + " n " + std::to_string(n) + " variant " + std::to_string(variant);
        const Decoded d = DecodeAlike(r.Encode(), r, r.limit, what);
        ASSERT_TRUE(d.error.ok()) << what << ": " << d.error.Message();
        EXPECT_EQ(d.ordinals, r.ordinals) << what;
      }
}

// 32-bit ordinals up to their bound: a run ending at 2^32 - 1 decodes under limit 2^32 and is
// out of range under 2^32 - 1; a run whose ordinals pass 2^32 (their low 32 bits below the
// limit) is out of range as for the 64-bit decoder (Decode compares the two); a limit above 2^32
// is refused by the 32-bit decoder alone.
TEST(SplitRice, ThirtyTwoBitOrdinalsUpToTheirBound) {
  const uint64_t two32 = uint64_t{1} << 32, two30 = uint64_t{1} << 30;
  auto runs = [](std::vector<uint64_t> gaps) {
    Runs r;
    uint64_t next = 0;
    for (uint64_t g : gaps) r.ordinals.push_back(next + g), next += g + 1;
    r.limit = next;
    r.rice = {30};
    r.counts = {gaps.size()};
    r.gaps = {std::move(gaps)};
    return r;
  };
  const Runs top = runs({uint64_t{1} << 31, two30, two30 - 3});  // the last ordinal is 2^32 - 1
  ASSERT_EQ(top.ordinals.back(), two32 - 1);
  const std::vector<uint8_t> stream = top.Encode();
  const Decoded d = DecodeAlike(stream, top, two32, "last ordinal 2^32 - 1");
  ASSERT_TRUE(d.error.ok()) << d.error.Message();
  EXPECT_EQ(d.ordinals, top.ordinals);
  EXPECT_EQ(DecodeAlike(stream, top, two32 - 1, "limit 2^32 - 1").error.kind, Kind::kOutOfRange);
  // Five largest remainders: ordinals up to 5 * 2^30 - 1, whose low 32 bits are 2^30 - 1.
  const Runs past = runs({two30 - 1, two30 - 1, two30 - 1, two30 - 1, two30 - 1});
  ASSERT_GT(past.ordinals.back(), two32);
  EXPECT_EQ(DecodeAlike(past.Encode(), past, two32, "past 2^32").error.kind, Kind::kOutOfRange);
  for (bool scalar : {false, true}) {
    ForceScalarSplitRice(scalar);
    std::vector<uint32_t> out(3);
    EXPECT_EQ(GetSplitRiceOrdinals(stream, top.counts, top.rice, two32 + 1, out.data()).kind, Kind::kOutOfRange);
    EXPECT_TRUE(GetSplitRiceOrdinals(stream, top.counts, top.rice, two32, out.data()).ok());
    ForceScalarSplitRice(false);
  }
}

}  // namespace
}  // namespace dcr
