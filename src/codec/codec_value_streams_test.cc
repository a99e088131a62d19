// Codec tests: the value section in streams (codec 3, docs/format.md §2.3). The encoder writes
// eight streams from the threshold on, the same bytes on one thread and on two (either thread
// taking the second share); sections written from the format description with 2..8 streams
// decode, share by share in any order, on two threads at once or both shares as one, four or two
// streams at a time (codes longer than the lookup window and escapes included); broken stream
// headers, lengths, escapes and cuts are kCorrupt with the same error however the shares were run.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec/band_context.h"
#include "codec/payload_codec.h"
#include "codec/payload_craft_test_support.h"
#include "codec/value_coding.h"
#include "codec/value_symbols.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

// Runs of the given widths with `n` values each: mostly small XOR masks, some escaped.
struct Values {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ValueRun> runs;
  uint64_t total = 0;
};

Values MakeValues(const std::vector<std::pair<uint32_t, uint64_t>>& shape, uint32_t seed) {
  std::mt19937_64 rng(seed);
  Values v;
  for (auto [width, n] : shape) {
    std::vector<uint8_t> b(n * width);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t x = (uint64_t{1} << (1 + rng() % 4)) - 1;  // 0x1, 0x3, 0x7, 0xf
      if (rng() % 50 == 0) x = rng();                      // escaped, or a rare small value
      if (width == 1) x &= 0xff;
      std::memcpy(b.data() + i * width, &x, width);
    }
    v.bytes.push_back(std::move(b));
    v.total += n;
  }
  for (size_t k = 0; k < shape.size(); ++k) v.runs.push_back({shape[k].first, shape[k].second, v.bytes[k]});
  return v;
}

// Decoder inputs for v's runs (widths and counts, no bytes) and their outputs, in *out.
struct DecodeTargets {
  std::vector<ValueRun> runs;
  std::vector<std::span<uint8_t>> outs;
  DecodeTargets(const Values& v, std::vector<std::vector<uint8_t>>* out) {
    for (const ValueRun& r : v.runs) runs.push_back({r.width, r.count, {}});
    out->assign(runs.size(), {});
    for (size_t k = 0; k < runs.size(); ++k) {
      (*out)[k].resize(runs[k].count * runs[k].width);
      outs.push_back((*out)[k]);
    }
  }
};

// Decodes `stored` with DecodeValues into *out.
Status DecodeInto(ValueCodec codec, std::span<const uint8_t> stored, const Values& v, std::vector<std::vector<uint8_t>>* out) {
  const DecodeTargets targets(v, out);
  return DecodeValues(codec, stored, targets.runs, targets.outs);
}

// The shares run as asked: 0 then 1, 1 then 0, on two threads at once, or both as one
// (DecodeAll: the streams four at a time across the shares). Returns Result().
constexpr int kEveryOrder[] = {0, 1, 2, 3};
Status RunShares(ValueSectionDecoder& d, int how) {
  if (how == 0) d.DecodeShare(0), d.DecodeShare(1);
  if (how == 1) d.DecodeShare(1), d.DecodeShare(0);
  if (how == 2) {
    std::thread t([&] { d.DecodeShare(1); });
    d.DecodeShare(0);
    t.join();
  }
  if (how == 3) d.DecodeAll();
  return d.Result();
}

// RunShares into separate buffers, one per run (*out).
Status DecodeByShares(ValueCodec codec, std::span<const uint8_t> stored, const Values& v, int how,
                      std::vector<std::vector<uint8_t>>* out) {
  const DecodeTargets targets(v, out);
  ValueSectionDecoder d(codec, stored, targets.runs, targets.outs);
  return RunShares(d, how);
}

HuffmanSection SectionOf(const Values& v) {
  HuffmanSection h;
  for (const ValueRun& r : v.runs) h.AddValues(r.bytes, r.width);
  h.FlatLengths();
  return h;
}

// The stream count byte of a codec-3 section (after the code table).
int StreamCount(std::span<const uint8_t> section) {
  ByteReader r(section);
  HuffmanDecoder code;
  uint8_t s = 0;
  if (!code.ReadTable(r, kHuffmanMaxSymbols).ok() || !r.ReadByte(&s)) return -1;
  return s;
}

TEST(ValueStreams, EncoderWritesEightStreamsFromTheThresholdTheSameOnAnyThreadCount) {
  for (uint64_t n : {uint64_t{999}, uint64_t{1000}, uint64_t{40001}}) {
    // The cut between the streams falls inside a run of every width.
    const Values v = MakeValues({{2, n / 2}, {1, n / 8}, {4, n / 8}, {8, n - n / 2 - n / 4}}, static_cast<uint32_t>(n));
    std::vector<uint8_t> one;
    const ValueCodec codec = EncodeValues(v.runs, 3, &one, 1, 1000);
    EXPECT_EQ(codec, n >= 1000 ? ValueCodec::kHuffmanStreams : ValueCodec::kHuffman) << n;
    if (n >= 1000) {
      EXPECT_EQ(StreamCount(one), 8) << n;
    }
    std::vector<std::vector<uint8_t>> back;
    ASSERT_TRUE(DecodeInto(codec, one, v, &back).ok()) << n;
    for (size_t k = 0; k < v.runs.size(); ++k) EXPECT_EQ(back[k], v.bytes[k]) << n << " run " << k;
    // Two threads (from kConcurrentValuesMin values), with either thread writing the second share.
    for (SecondPartWalker who : {SecondPartWalker::kClaimed, SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn}) {
      SetSecondPartWalkerForTests(who);
      std::vector<uint8_t> two;
      EXPECT_EQ(EncodeValues(v.runs, 3, &two, 2, 1000), codec);
      EXPECT_EQ(two, one) << n << " values, walker " << static_cast<int>(who);
    }
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  }
  // The default threshold: codec 2 below it, and about 20 bytes more at it.
  const Values below = MakeValues({{2, kValueStreamsMin - 1}}, 3), at = MakeValues({{2, kValueStreamsMin}}, 3);
  std::vector<uint8_t> a, b;
  EXPECT_EQ(EncodeValues(below.runs, 3, &a), ValueCodec::kHuffman);
  EXPECT_EQ(EncodeValues(at.runs, 3, &b), ValueCodec::kHuffmanStreams);
  EXPECT_LT(b.size(), a.size() + 32);
  // Fewer values than streams: one stream per value.
  const Values three = MakeValues({{2, 3}}, 4);
  std::vector<uint8_t> c;
  ASSERT_EQ(EncodeValues(three.runs, 3, &c, 1, 2), ValueCodec::kHuffmanStreams);
  EXPECT_EQ(StreamCount(c), 3);
  std::vector<std::vector<uint8_t>> back;
  ASSERT_TRUE(DecodeInto(ValueCodec::kHuffmanStreams, c, three, &back).ok());
  EXPECT_EQ(back[0], three.bytes[0]);
}

// Values counted beforehand (ValueTally, as the diff's threads count them) code to the bytes the
// encoder's own counts give: symbols, escapes and the form chosen, however the values were
// grouped into tallies (whole runs, pieces of runs, one tally or three), on one thread and two.
TEST(ValueStreams, TalliedValuesCodeToTheSameBytes) {
  // Few escapes (symbol Huffman, one stream and four) and mostly escapes (byte planes).
  Values many_escapes = MakeValues({{4, 3000}}, 9);
  for (size_t i = 0; i < 3000; ++i) many_escapes.bytes[0][i * 4 + 3] |= 0x40;
  const Values cases[] = {MakeValues({{2, 700}, {4, 200}}, 5), MakeValues({{2, 30000}, {1, 999}, {4, 5000}, {8, 3001}}, 6),
                          many_escapes};
  const ValueCodec want_codec[] = {ValueCodec::kHuffman, ValueCodec::kHuffmanStreams, ValueCodec::kPlanesZstd};
  for (size_t c = 0; c < std::size(cases); ++c) {
    const Values& v = cases[c];
    std::vector<uint8_t> want;
    ASSERT_EQ(EncodeValues(v.runs, 3, &want, 1, 1000), want_codec[c]) << c;
    // Three tallies: the first run's first third, the rest of the runs but the last, the last;
    // and all in one.
    ValueTally split[3], whole;
    const ValueRun& first = v.runs[0];
    const uint64_t cut = first.count / 3 * first.width;
    split[0].Add(first.bytes.subspan(0, cut), first.width);
    split[1].Add(first.bytes.subspan(cut), first.width);
    for (size_t k = 0; k < v.runs.size(); ++k) {
      if (k > 0) (k + 1 == v.runs.size() ? split[2] : split[1]).Add(v.runs[k].bytes, v.runs[k].width);
      whole.Add(v.runs[k].bytes, v.runs[k].width);
    }
    const ValueTally* const three[] = {&split[0], &split[1], &split[2]};
    const ValueTally* const one[] = {&whole};
    for (std::span<const ValueTally* const> tallies : {std::span<const ValueTally* const>(three), std::span<const ValueTally* const>(one)})
      for (SecondPartWalker who : {SecondPartWalker::kClaimed, SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn})
        for (int threads : {1, 2}) {
          SetSecondPartWalkerForTests(who);
          std::vector<uint8_t> got;
          EXPECT_EQ(EncodeValues(v.runs, 3, &got, threads, 1000, tallies), want_codec[c]);
          EXPECT_EQ(got, want) << "case " << c << ", " << tallies.size() << " tallies, " << threads << " threads";
        }
    SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  }
}

// Work(first, own_streams_only) codes the counts, the choice and share `first`'s streams only;
// the other share's streams are left to a later Work (here on this thread, or on another at once),
// and the section is the bytes of a one-thread encode either way, counted or tallied.
TEST(ValueStreams, OwnStreamsFirstThenTheRestGiveTheSameBytes) {
  const Values v = MakeValues({{2, 30000}, {1, 999}, {4, 5000}}, 12);
  std::vector<uint8_t> want;
  ASSERT_EQ(EncodeValues(v.runs, 3, &want, 1, 1000), ValueCodec::kHuffmanStreams);
  ValueTally whole;
  for (const ValueRun& r : v.runs) whole.Add(r.bytes, r.width);
  const ValueTally* const tallied[] = {&whole};
  for (std::span<const ValueTally* const> tallies : {std::span<const ValueTally* const>(), std::span<const ValueTally* const>(tallied)})
    for (int own : {0, 1})
      for (bool rest_on_another_thread : {false, true}) {
        ValueSectionEncoder e(v.runs, 3, 1000, false, tallies);
        e.Work(own, /*own_streams_only=*/true);
        if (rest_on_another_thread) {
          std::thread t([&] { e.Work(1 - own); });
          t.join();
        } else {
          e.Work(1 - own);
        }
        std::vector<uint8_t> got;
        EXPECT_EQ(e.Write(&got), ValueCodec::kHuffmanStreams);
        EXPECT_EQ(got, want) << "own share " << own << ", " << tallies.size() << " tallies, rest on another thread "
                             << rest_on_another_thread;
      }
}

// Four or two streams decode at a time (their lookups interleaved) where their runs' widths
// agree: codes longer than the 10-bit lookup window, escapes and width changes at different
// points in the streams all give the values back, in every stream count's grouping of a
// share's streams (and of both shares' as one), on one thread and on two.
TEST(ValueStreams, StreamPairsDecodeLongCodesEscapesAndWidthChanges) {
  std::mt19937_64 rng(11);
  // Symbols of falling frequency, 1 in 20 a rare one (code lengths up to 15), 1 in 40 escaped;
  // runs of every width, cut by the streams at different values.
  auto skewed = [&](uint32_t width, uint64_t n) {
    std::vector<uint8_t> b(n * width);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t x = (uint64_t{1} << (rng() % 12)) + rng() % 3;
      x = x >> (rng() % 12);
      if (rng() % 20 == 0) x = 16 + rng() % 4079;  // rare symbols: long codes
      if (rng() % 40 == 0) x = 4095 + rng() % 100000;
      if (width == 1) x &= 0xff;
      std::memcpy(b.data() + i * width, &x, width);
    }
    return b;
  };
  Values v;
  const std::vector<std::pair<uint32_t, uint64_t>> shape = {{2, 9001}, {4, 3000}, {2, 17}, {8, 2500}, {1, 1200}, {2, 6000}};
  for (auto [w, n] : shape) v.bytes.push_back(skewed(w, n)), v.total += n;
  for (size_t k = 0; k < shape.size(); ++k) v.runs.push_back({shape[k].first, shape[k].second, v.bytes[k]});
  std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
  for (const ValueRun& r : v.runs)
    for (uint64_t i = 0; i < r.count; ++i) ++freq[std::min<uint64_t>(value_symbols::LoadValue(r.bytes.data() + i * r.width, r.width), 4095)];
  const HuffmanEncoder code(freq);
  uint64_t long_codes = 0;
  HuffmanSection crafted;  // the same code, written in other stream counts
  for (const ValueRun& r : v.runs) crafted.AddValues(r.bytes, r.width);
  for (uint32_t sym = 0; sym < kHuffmanMaxSymbols; ++sym) {
    std::vector<uint64_t> one(kHuffmanMaxSymbols, 0);
    one[sym] = 1;
    if (freq[sym] == 0) continue;
    const int length = static_cast<int>(code.CostBits(one));
    crafted.lengths[sym] = length;
    if (length > 10) long_codes += freq[sym];
  }
  ASSERT_GT(long_codes, 100u) << "values with codes longer than the lookup window";
  std::vector<uint8_t> stored;
  ASSERT_EQ(EncodeValues(v.runs, 3, &stored, 1, 1000), ValueCodec::kHuffmanStreams);
  ASSERT_EQ(StreamCount(stored), 8);
  // Eight streams as the encoder writes them; two (one per share), four (pairs), six (shares of
  // three: a pair and one; as one, a quad and a pair) as the format allows.
  std::vector<std::pair<int, std::vector<uint8_t>>> sections = {{8, stored}};
  for (int streams : {2, 4, 6}) sections.emplace_back(streams, crafted.StreamsBytes(static_cast<size_t>(streams)));
  ASSERT_EQ(crafted.StreamsBytes(8), stored) << "the crafted section is the encoder's";
  for (const auto& [streams, bytes] : sections)
    for (int how : kEveryOrder) {
      std::vector<std::vector<uint8_t>> back;
      const Status s = DecodeByShares(ValueCodec::kHuffmanStreams, bytes, v, how, &back);
      ASSERT_TRUE(s.ok()) << streams << " streams, order " << how << ": " << s.ToString();
      for (size_t k = 0; k < v.runs.size(); ++k)
        EXPECT_EQ(back[k], v.bytes[k]) << streams << " streams, order " << how << ", run " << k;
    }
}

// Runs whose outputs lie back to back in one buffer (as a payload decode lays them out) are
// decoded across their boundaries, four streams at a time while widths agree: the values of
// separate buffers, in every order of the shares, with the streams' cuts inside runs, runs of
// one and of 13 values, and widths that change (1, 4 and 8 bytes between 2-byte runs).
TEST(ValueStreams, RunsBackToBackDecodeAsIntoSeparateBuffers) {
  const Values v = MakeValues(
      {{2, 5000}, {2, 1}, {2, 3001}, {4, 700}, {2, 9000}, {2, 13}, {1, 300}, {2, 2000}, {8, 50}, {2, 12345}}, 12);
  std::vector<uint8_t> stored;
  ASSERT_EQ(EncodeValues(v.runs, 3, &stored, 1, 1000), ValueCodec::kHuffmanStreams);
  ASSERT_EQ(StreamCount(stored), 8);
  uint64_t bytes = 0;
  for (const ValueRun& r : v.runs) bytes += r.count * r.width;
  for (int how : kEveryOrder) {
    std::vector<std::vector<uint8_t>> apart;
    const Status s = DecodeByShares(ValueCodec::kHuffmanStreams, stored, v, how, &apart);
    ASSERT_TRUE(s.ok()) << "order " << how << ": " << s.ToString();
    std::vector<uint8_t> all(bytes);
    std::vector<ValueRun> runs;
    std::vector<std::span<uint8_t>> outs;
    for (uint64_t at = 0; const ValueRun& r : v.runs) {
      runs.push_back({r.width, r.count, {}});
      outs.push_back(std::span<uint8_t>(all).subspan(at, r.count * r.width));
      at += r.count * r.width;
    }
    ValueSectionDecoder d(ValueCodec::kHuffmanStreams, stored, runs, outs);
    const Status together = RunShares(d, how);
    ASSERT_TRUE(together.ok()) << "order " << how << ": " << together.ToString();
    for (size_t k = 0; k < v.runs.size(); ++k) {
      EXPECT_EQ(apart[k], v.bytes[k]) << "order " << how << ", run " << k;
      EXPECT_TRUE(std::equal(outs[k].begin(), outs[k].end(), v.bytes[k].begin(), v.bytes[k].end()))
          << "order " << how << ", run " << k << " back to back";
    }
  }
}

TEST(ValueStreams, SectionsWrittenFromTheFormatDecodeShareByShareInAnyOrder) {
  const Values v = MakeValues({{2, 3001}, {4, 700}, {1, 299}}, 5);
  const HuffmanSection h = SectionOf(v);
  ASSERT_FALSE(h.escapes.empty());
  for (size_t streams : {2, 3, 5, 8}) {
    const std::vector<uint8_t> bytes = h.StreamsBytes(streams);
    for (int how : kEveryOrder) {
      std::vector<std::vector<uint8_t>> back;
      const Status s = DecodeByShares(ValueCodec::kHuffmanStreams, bytes, v, how, &back);
      ASSERT_TRUE(s.ok()) << streams << " streams, order " << how << ": " << s.ToString();
      for (size_t k = 0; k < v.runs.size(); ++k) EXPECT_EQ(back[k], v.bytes[k]) << streams << " streams, run " << k;
    }
  }
  // One value per stream at most: 4000 values in 8 streams, 8 values in 8.
  const Values few = MakeValues({{2, 8}}, 6);
  std::vector<std::vector<uint8_t>> back;
  ASSERT_TRUE(DecodeInto(ValueCodec::kHuffmanStreams, SectionOf(few).StreamsBytes(8), few, &back).ok());
  EXPECT_EQ(back[0], few.bytes[0]);
}

TEST(ValueStreams, BrokenStreamsAreCorruptWithTheSameErrorInEveryOrder) {
  const Values v = MakeValues({{2, 3001}, {4, 700}, {1, 299}}, 7);
  const HuffmanSection h = SectionOf(v);
  using S = HuffmanSection::Streams;
  auto check = [&](const std::string& what, const std::vector<uint8_t>& bytes) {
    std::vector<std::vector<uint8_t>> back;
    const Status first = DecodeByShares(ValueCodec::kHuffmanStreams, bytes, v, 0, &back);
    EXPECT_EQ(first.code(), StatusCode::kCorrupt) << what << ": " << first.ToString();
    for (int how : {1, 2, 3})
      EXPECT_EQ(DecodeByShares(ValueCodec::kHuffmanStreams, bytes, v, how, &back).ToString(), first.ToString()) << what;
  };
  check("stream count 0", h.StreamsBytes(2, [](S& s) { s.count = 0; }));
  check("stream count 1", h.StreamsBytes(2, [](S& s) { s.count = 1; }));
  check("stream count 9", h.StreamsBytes(2, [](S& s) { s.count = 9; }));
  check("stream count 3 for 2 streams' fields", h.StreamsBytes(2, [](S& s) { s.count = 3; }));
  {
    // More streams than values: 3 values in 4 streams (as written for 2).
    const Values tiny = MakeValues({{2, 3}}, 8);
    std::vector<std::vector<uint8_t>> back;
    const auto bytes = SectionOf(tiny).StreamsBytes(2, [](S& s) { s.count = 4; });
    EXPECT_EQ(DecodeByShares(ValueCodec::kHuffmanStreams, bytes, tiny, 0, &back).code(), StatusCode::kCorrupt);
  }
  check("stream 0 one byte longer", h.StreamsBytes(2, [](S& s) { ++s.lengths[0]; }));
  check("stream 0 one byte shorter", h.StreamsBytes(2, [](S& s) { --s.lengths[0]; }));
  check("stream 0 past the section", h.StreamsBytes(2, [](S& s) { s.lengths[0] = 1 << 30; }));
  check("stream 1 of 3 past the section", h.StreamsBytes(3, [](S& s) { s.lengths[1] += s.bits[2].size() + 1; }));
  check("an escape counted in the wrong stream", h.StreamsBytes(2, [](S& s) {
    s.escape_bytes[0] -= 2, s.escape_bytes[1] += 2;
  }));
  check("escapes past the section", h.StreamsBytes(2, [](S& s) { s.escape_bytes[1] = 1 << 30; }));
  check("an unused escape byte", h.StreamsBytes(2, [](S& s) { ++s.escape_bytes[1], s.escapes[1].push_back(0); }));
  check("a trailing byte in the last stream", h.StreamsBytes(2, [](S& s) { s.bits[1].push_back(0); }));
  check("stream 1 missing its last byte", h.StreamsBytes(2, [](S& s) { s.bits[1].pop_back(); }));
  check("16 symbols cut into the wrong stream", [&] {
    // Stream 0 written with 16 symbols fewer and stream 1 with them: the cut is derived.
    HuffmanSection moved = h;
    const size_t n = h.symbols.size(), cut = n / 2 - 16;
    std::vector<uint8_t> first, second;
    moved.PutStream(0, cut, &first);
    moved.PutStream(cut, n, &second);
    return h.StreamsBytes(2, [&](S& s) { s.bits = {first, second}, s.lengths = {first.size()}; });
  }());
  check("truncated stream header", [&] {
    std::vector<uint8_t> b = h.StreamsBytes(2);
    b.resize(h.TableBytes().size() + 2);
    return b;
  }());
  check("empty section", {});
  // In four streams (each share a pair): either stream of a pair broken.
  check("stream 1 of 4 missing its last byte", h.StreamsBytes(4, [](S& s) { s.bits[1].pop_back(); }));
  check("stream 2 of 4 one byte longer", h.StreamsBytes(4, [](S& s) { ++s.lengths[2]; }));
  check("an escape counted in stream 0 of 4 instead of 1", h.StreamsBytes(4, [](S& s) {
    s.escape_bytes[0] += 2, s.escape_bytes[1] -= 2;
  }));
  // In eight streams (each share four, decoded as one quad): any of a quad's streams broken.
  check("stream 5 of 8 missing its last byte", h.StreamsBytes(8, [](S& s) { s.bits[5].pop_back(); }));
  check("stream 2 of 8 one byte longer", h.StreamsBytes(8, [](S& s) { ++s.lengths[2]; }));
  check("a trailing byte in stream 7 of 8", h.StreamsBytes(8, [](S& s) { s.bits[7].push_back(0); }));
  check("an escape counted in stream 6 of 8 instead of 7", h.StreamsBytes(8, [](S& s) {
    s.escape_bytes[6] += 2, s.escape_bytes[7] -= 2;
  }));
  for (size_t broken : {0, 1, 3}) {
    std::vector<std::vector<uint8_t>> back;
    const Status s = DecodeByShares(ValueCodec::kHuffmanStreams, h.StreamsBytes(4, [&](S& s) {
      s.bits[broken].push_back(0);
      if (broken < 3) ++s.lengths[broken];
    }), v, 2, &back);
    EXPECT_NE(s.message().find("value stream " + std::to_string(broken)), std::string::npos) << s.ToString();
  }
  // A broken stream 1 is reported as stream 1, after a good stream 0.
  std::vector<std::vector<uint8_t>> back;
  const Status s = DecodeByShares(ValueCodec::kHuffmanStreams, h.StreamsBytes(2, [](S& s) { s.bits[1].push_back(0); }), v, 2, &back);
  EXPECT_NE(s.message().find("value stream 1"), std::string::npos) << s.ToString();
}

// Through the payload: a codec-3 payload is the same encoded on one and two threads (plain and
// context mode), decodes alike on both, and a broken stream gives one and the same error.
TEST(ValueStreams, PayloadsDecodeAndFailAlikeOnOneAndTwoThreads) {
  std::mt19937_64 rng(9);
  const uint64_t n = 60000;
  std::vector<uint8_t> base(n * 2), next;
  for (auto& b : base) b = static_cast<uint8_t>(rng());
  next = base;
  for (uint64_t i = 0; i < n; ++i)
    if (rng() % 4 == 0) next[i * 2] ^= static_cast<uint8_t>(1 + rng() % 7);
  EncodeOptions opt;
  opt.value_streams_min = 1000;
  auto encode = [&](const EncodeOptions& o, int threads) {
    PayloadBuilder b(o);
    EXPECT_GT(b.AddDiff({2, DType::kBF16, ValueKind::kXor, 0, n}, base, next), 10000u);
    std::vector<uint8_t> p;
    b.Finish({7, 1, 2}, &p, threads);
    return p;
  };
  const std::vector<uint8_t> p = encode(opt, 2);
  ASSERT_EQ(p[kValCodec], static_cast<uint8_t>(ValueCodec::kHuffmanStreams));
  EXPECT_EQ(encode(opt, 1), p);
  // In context mode the two streams' stages are shared with the banded code's parts: the same
  // bytes as one thread, however the parts go.
  EncodeOptions ctx = opt;
  ctx.context = EncodeOptions::Context::kAlways;
  ctx.band_part_elements = 8192;
  const std::vector<uint8_t> c1 = encode(ctx, 1);
  ASSERT_EQ(c1[kValCodec], static_cast<uint8_t>(ValueCodec::kHuffmanStreams));
  ASSERT_EQ(c1[kMode], static_cast<uint8_t>(CodecMode::kContextSplitRice));
  for (SecondPartWalker who : {SecondPartWalker::kClaimed, SecondPartWalker::kHelperPath, SecondPartWalker::kCallerWalksOn}) {
    SetSecondPartWalkerForTests(who);
    for (int rep = 0; rep < 20; ++rep) EXPECT_EQ(encode(ctx, 2), c1) << "walker " << static_cast<int>(who);
  }
  SetSecondPartWalkerForTests(SecondPartWalker::kClaimed);
  DecodedPayload one, two;
  ASSERT_TRUE(DecodePayload(p, &one, {}, 1).ok());
  ASSERT_TRUE(DecodePayload(p, &two, {}, 2).ok());
  EXPECT_EQ(AsVector(one.segments[0].changes.values), AsVector(two.segments[0].changes.values));
  std::vector<uint8_t> applied = base;
  ASSERT_TRUE(ApplySegment(one.segments[0], applied).ok());
  EXPECT_EQ(applied, next);
  // The section re-written with stream 0 one byte longer.
  const uint64_t table_len = Field(p, kTableLen, 4), loc_stored = Field(p, kLocStored, 8);
  const size_t val_at = kPayloadHeaderBytes + table_len + loc_stored;
  HuffmanSection h;
  h.AddValues(one.segments[0].changes.values, 2);
  h.FlatLengths();
  const auto broken = WithValueSection(p, ValueCodec::kHuffmanStreams, h.StreamsBytes(2, [](HuffmanSection::Streams& s) {
    ++s.lengths[0];
  }));
  ASSERT_GT(broken.size(), val_at);
  const Status e1 = DecodePayload(broken, &one, {}, 1), e2 = DecodePayload(broken, &two, {}, 2);
  EXPECT_EQ(e1.code(), StatusCode::kCorrupt);
  EXPECT_EQ(e1.ToString(), e2.ToString());
}

}  // namespace
}  // namespace dcr
