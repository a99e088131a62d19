// Codec tests, part 4b: value coding (value_coding.h) on the Huffman code (huffman_test.cc):
// every value width with and without escapes, and runs of mixed widths; the choice between the
// symbol code and byte planes; Huffman forms written from the format description decode; hostile
// stored forms are kCorrupt and never read outside their bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/huffman_table_test_support.h"
#include "codec/value_coding.h"
#include "codec/value_symbols.h"

namespace dcr {
namespace {

struct Runs {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ValueRun> runs;
  void Add(uint32_t width, const std::vector<uint64_t>& values) {
    std::vector<uint8_t> b(values.size() * width);
    for (size_t i = 0; i < values.size(); ++i) std::memcpy(b.data() + i * width, &values[i], width);
    bytes.push_back(std::move(b));
    runs.push_back({width, values.size(), {}});
  }
  std::vector<ValueRun> Bound() const {
    std::vector<ValueRun> r = runs;
    for (size_t i = 0; i < r.size(); ++i) r[i].bytes = bytes[i];
    return r;
  }
  uint64_t RawBytes() const {
    uint64_t n = 0;
    for (const auto& b : bytes) n += b.size();
    return n;
  }
};

// Encodes, checks determinism, decodes and expects the input back; returns the codec.
ValueCodec ExpectValuesRoundTrip(const Runs& in, const std::string& what, std::vector<uint8_t>* stored_out = nullptr) {
  std::vector<uint8_t> stored = {0xaa};  // appending after other bytes
  const ValueCodec codec = EncodeValues(in.Bound(), 3, &stored);
  stored.erase(stored.begin());
  std::vector<uint8_t> again;
  EXPECT_EQ(EncodeValues(in.Bound(), 3, &again), codec) << what;
  EXPECT_EQ(again, stored) << what;
  std::vector<std::vector<uint8_t>> outs;
  std::vector<std::span<uint8_t>> spans;
  for (const ValueRun& r : in.runs) outs.emplace_back(r.count * r.width);
  for (auto& o : outs) spans.push_back(o);
  Status s = DecodeValues(codec, stored, in.runs, spans);
  EXPECT_TRUE(s.ok()) << what << ": " << s.ToString();
  for (size_t i = 0; i < outs.size(); ++i) EXPECT_EQ(outs[i], in.bytes[i]) << what << " run " << i;
  if (stored_out) *stored_out = stored;
  return codec;
}

uint64_t MaskFor(uint32_t w) { return w == 8 ? ~0ull : (1ull << (8 * w)) - 1; }

// XOR masks of one-ulp steps: 1, 3, 7, 15, ... (low bits).
uint64_t UlpMask(std::mt19937_64& rng) {
  std::geometric_distribution<int> geo(0.5);
  return (1ull << std::min(1 + geo(rng), 11)) - 1;
}

TEST(ValueCoding, SmallMasksOfEveryWidthUseHuffmanAndRoundTrip) {
  std::mt19937_64 rng(10);
  for (uint32_t w : {1u, 2u, 4u, 8u}) {
    Runs in;
    std::vector<uint64_t> v(5000);
    for (auto& x : v) x = UlpMask(rng) & MaskFor(w);
    in.Add(w, v);
    std::vector<uint8_t> stored;
    EXPECT_EQ(ExpectValuesRoundTrip(in, "width " + std::to_string(w), &stored), ValueCodec::kHuffman) << w;
    // Near the order-0 entropy (~2 bits a value here), far below the raw size.
    EXPECT_LT(stored.size() * 8, v.size() * 3) << w;
  }
}

TEST(ValueCoding, EscapesOfEveryWidthRoundTrip) {
  std::mt19937_64 rng(11);
  for (uint32_t w : {2u, 4u, 8u}) {
    // The symbol/escape boundary and the extremes, then a few percent of random wide values.
    const uint64_t max = MaskFor(w);
    std::vector<uint64_t> v = {0, 1, 4094, 4095, 4096, max, max - 1, 0x8000, 4094, 4095};
    for (int i = 0; i < 4000; ++i) v.push_back(rng() % 100 < 2 ? (rng() & max) | 4096 : UlpMask(rng));
    Runs in;
    in.Add(w, v);
    EXPECT_EQ(ExpectValuesRoundTrip(in, "width " + std::to_string(w)), ValueCodec::kHuffman) << w;
  }
  // Single values at the boundary.
  for (uint32_t w : {2u, 4u, 8u})
    for (uint64_t x : {uint64_t{4094}, uint64_t{4095}, MaskFor(w)}) {
      Runs in;
      in.Add(w, {x});
      ExpectValuesRoundTrip(in, "width " + std::to_string(w) + " value " + std::to_string(x));
    }
  Runs one;
  one.Add(1, {0xff});
  ExpectValuesRoundTrip(one, "one byte 0xff");
}

// The decoder takes up to three codes per lookup while at least a dozen values remain and falls
// back to one at a time for long codes, escapes and the tail. Runs of every length from 1 to 60 and
// longer ones, with frequent short codes between rare symbols whose codes reach 15 bits and
// escapes, decode to exactly what was coded, in one run or spread over several of mixed widths.
TEST(ValueCoding, SeveralCodesPerLookupAndTheirFallbacksRoundTrip) {
  std::mt19937_64 rng(12);
  auto value = [&](uint32_t w) -> uint64_t {
    const uint64_t r = rng() % 1000;
    if (r < 600) return UlpMask(rng) & MaskFor(w);                 // 1-6 bit codes
    if (r < 990) return (rng() % 4000) & MaskFor(w);               // rare: long codes
    return ((rng() & MaskFor(w)) | 4095) & MaskFor(w);             // escapes
  };
  for (uint32_t w : {2u, 4u, 8u}) {
    for (size_t n = 1; n <= 60; ++n) {
      Runs in;
      std::vector<uint64_t> v(n);
      for (auto& x : v) x = value(w);
      in.Add(w, v);
      ExpectValuesRoundTrip(in, "width " + std::to_string(w) + " n " + std::to_string(n));
    }
    Runs big;
    std::vector<uint64_t> v(200000);
    for (auto& x : v) x = value(w);
    big.Add(w, v);
    ExpectValuesRoundTrip(big, "width " + std::to_string(w) + " long run");
  }
  Runs mixed;
  for (int r = 0; r < 40; ++r) {
    const uint32_t w = std::array<uint32_t, 4>{1, 2, 4, 8}[rng() % 4];
    std::vector<uint64_t> v(1 + rng() % 50);
    for (auto& x : v) x = w == 1 ? UlpMask(rng) & 0xff : value(w);
    mixed.Add(w, v);
  }
  ExpectValuesRoundTrip(mixed, "mixed widths");
}

TEST(ValueCoding, MostlyEscapedValuesUseTheSmallerForm) {
  std::mt19937_64 rng(12);
  for (uint32_t w : {2u, 4u, 8u}) {
    // Uniform random wide values: Huffman would store them raw plus a symbol each, so planes win.
    Runs random;
    std::vector<uint64_t> v(3000);
    for (auto& x : v) x = rng() & MaskFor(w);
    random.Add(w, v);
    ValueCodec c = ExpectValuesRoundTrip(random, "random width " + std::to_string(w));
    EXPECT_NE(c, ValueCodec::kHuffman) << w;
    // Values sharing their high bytes (overwrites of similar floats): zstd planes win.
    Runs similar;
    for (auto& x : v) x = ((0x3f80ull + rng() % 3) << (8 * w - 16)) | (rng() & 0xff);
    similar.Add(w, v);
    EXPECT_EQ(ExpectValuesRoundTrip(similar, "similar width " + std::to_string(w)), ValueCodec::kPlanesZstd) << w;
  }
}

TEST(ValueCoding, EscapesUnderFivePercentOfTheRawBytesAlwaysUseHuffman) {
  // 1000 U16 values, 40 of them escaped: 80 of 2000 raw bytes (4%), even though they are random.
  std::mt19937_64 rng(13);
  std::vector<uint64_t> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 25 == 0 ? 4095 + rng() % 60000 : rng() % 4095;
  Runs in;
  in.Add(2, v);
  EXPECT_EQ(ExpectValuesRoundTrip(in, "4% escapes"), ValueCodec::kHuffman);
}

TEST(ValueCoding, MixedWidthRunsRoundTripInOneStoredForm) {
  std::mt19937_64 rng(14);
  for (int round = 0; round < 20; ++round) {
    Runs in;
    const int nruns = 1 + static_cast<int>(rng() % 6);
    for (int r = 0; r < nruns; ++r) {
      const uint32_t w = std::vector<uint32_t>{1, 2, 4, 8}[rng() % 4];
      const int escape_pct = std::vector<int>{0, 1, 10, 100}[rng() % 4];
      std::vector<uint64_t> v(1 + rng() % 700);
      for (auto& x : v) x = (static_cast<int>(rng() % 100) < escape_pct ? rng() : UlpMask(rng)) & MaskFor(w);
      in.Add(w, v);
    }
    ExpectValuesRoundTrip(in, "round " + std::to_string(round));
  }
  // The four widths back to back, each with escapes, in Huffman form.
  Runs in;
  std::vector<uint64_t> base(400);
  for (uint32_t w : {1u, 8u, 2u, 4u, 1u}) {
    for (size_t i = 0; i < base.size(); ++i) base[i] = (i % 50 == 7 ? (rng() | 0x10000) : UlpMask(rng)) & MaskFor(w);
    in.Add(w, base);
  }
  EXPECT_EQ(ExpectValuesRoundTrip(in, "widths 1 8 2 4 1"), ValueCodec::kHuffman);
}

TEST(ValueCoding, PlaneCodecsStillRoundTrip) {
  // Byte planes decode independently of how the encoder chose: stored raw planes of mixed widths.
  Runs in;
  in.Add(2, {0x1234, 0xabcd});
  in.Add(1, {0x77});
  std::vector<uint8_t> planes;
  ToBytePlanes(in.bytes[0], 2, &planes);
  ToBytePlanes(in.bytes[1], 1, &planes);
  EXPECT_EQ(planes, (std::vector<uint8_t>{0x34, 0xcd, 0x12, 0xab, 0x77}));
  std::vector<uint8_t> a(4), b(1);
  std::vector<std::span<uint8_t>> outs = {a, b};
  ASSERT_TRUE(DecodeValues(ValueCodec::kPlanesRaw, planes, in.runs, outs).ok());
  EXPECT_EQ(a, in.bytes[0]);
  EXPECT_EQ(b, in.bytes[1]);
}

// --- Hostile stored forms -------------------------------------------------------------------

// Canonical codes (MSB-first numbering) for the given lengths: shorter codes first, then by symbol.
std::vector<uint32_t> CanonicalCodesFor(const std::vector<std::pair<uint32_t, int>>& sym_len) {
  auto sorted = sym_len;
  std::sort(sorted.begin(), sorted.end(), [](auto& x, auto& y) { return std::tie(x.second, x.first) < std::tie(y.second, y.first); });
  std::vector<uint32_t> codes(1u << 16, 0);  // room for out-of-range symbols
  uint32_t code = 0;
  int prev = sorted.front().second;
  for (auto [s, l] : sorted) {
    code <<= (l - prev);
    prev = l;
    codes[s] = code++;
  }
  return codes;
}

// A Huffman stored form written independently of the library, following docs/format.md:
// table (symbols ascending), varint escape-byte count, escape bytes, then each symbol's
// canonical code with its first (most significant) bit first in the LSB-first bit stream.
std::vector<uint8_t> HuffmanForm(std::vector<std::pair<uint32_t, int>> sym_len, const std::vector<uint8_t>& escapes,
                                 const std::vector<uint32_t>& symbols) {
  std::sort(sym_len.begin(), sym_len.end());
  std::vector<uint8_t> out;
  PutVarint(out, sym_len.size());
  for (size_t i = 0; i < sym_len.size(); ++i)
    PutEntry(out, i == 0 ? sym_len[i].first : sym_len[i].first - sym_len[i - 1].first - 1, static_cast<uint64_t>(sym_len[i].second));
  PutVarint(out, escapes.size());
  out.insert(out.end(), escapes.begin(), escapes.end());
  auto codes = CanonicalCodesFor(sym_len);
  std::vector<int> len(1u << 16, 0);
  for (auto [s, l] : sym_len) len[s] = l;
  BitWriter w(out);
  for (uint32_t s : symbols)
    for (int b = len[s] - 1; b >= 0; --b) w.Put((codes[s] >> b) & 1, 1);
  w.Flush();
  return out;
}

Status DecodeHuffmanForm(const std::vector<uint8_t>& stored, const std::vector<ValueRun>& runs,
                         std::vector<std::vector<uint8_t>>* outs) {
  outs->clear();
  for (const ValueRun& r : runs) outs->emplace_back(r.count * r.width);
  std::vector<std::span<uint8_t>> spans(outs->begin(), outs->end());
  return DecodeValues(ValueCodec::kHuffman, stored, runs, spans);
}

TEST(ValueCoding, IndependentlyWrittenHuffmanFormsDecode) {
  // U8 values {0x42, 0x42, 7} and U16 values {4096, 3, 0xffff}: symbols 3 (len 2), 7 (len 3),
  // 0x42 (len 1), 4095 (len 3).
  const std::vector<std::pair<uint32_t, int>> code = {{3, 2}, {7, 3}, {0x42, 1}, {4095, 3}};
  const std::vector<uint8_t> escapes = {0x00, 0x10, 0xff, 0xff};
  auto stored = HuffmanForm(code, escapes, {0x42, 0x42, 7, 4095, 3, 4095});
  std::vector<std::vector<uint8_t>> outs;
  Status s = DecodeHuffmanForm(stored, {{1, 3, {}}, {2, 3, {}}}, &outs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(outs[0], (std::vector<uint8_t>{0x42, 0x42, 7}));
  EXPECT_EQ(outs[1], (std::vector<uint8_t>{0x00, 0x10, 3, 0, 0xff, 0xff}));
  // The library's encoder writes the form the independent writer writes for the library's own
  // code lengths: same table layout, escape order and bit order.
  std::mt19937_64 rng(16);
  Runs in;
  std::vector<uint64_t> u8(300), u16 = {4096, 3, 0xffff, 0x1234, 4094};
  for (auto& x : u8) x = rng() % 4 == 0 ? 7 + rng() % 5 : 0x42;
  in.Add(1, u8);
  in.Add(2, u16);
  std::vector<uint8_t> lib;
  ASSERT_EQ(EncodeValues(in.Bound(), 3, &lib), ValueCodec::kHuffman);
  auto len = TableLengths(lib, kHuffmanMaxSymbols);
  std::vector<std::pair<uint32_t, int>> lib_code;
  for (uint32_t sym = 0; sym < kHuffmanMaxSymbols; ++sym)
    if (len[sym]) lib_code.push_back({sym, len[sym]});
  std::vector<uint32_t> symbols(u8.begin(), u8.end());
  std::vector<uint8_t> lib_escapes;
  for (uint64_t x : u16) {
    symbols.push_back(x < 4095 ? static_cast<uint32_t>(x) : 4095);
    if (x >= 4095) lib_escapes.push_back(static_cast<uint8_t>(x)), lib_escapes.push_back(static_cast<uint8_t>(x >> 8));
  }
  EXPECT_EQ(HuffmanForm(lib_code, lib_escapes, symbols), lib);
}

TEST(ValueCoding, HostileHuffmanFormsAreCorrupt) {
  const auto kC = StatusCode::kCorrupt;
  const std::vector<ValueRun> u8x2 = {{1, 2, {}}};
  const std::vector<ValueRun> u16x2 = {{2, 2, {}}};
  std::vector<std::vector<uint8_t>> outs;
  auto code = [&](const std::vector<uint8_t>& stored, const std::vector<ValueRun>& runs) {
    return DecodeHuffmanForm(stored, runs, &outs).code();
  };
  const std::vector<std::pair<uint32_t, int>> two = {{1, 1}, {4095, 1}};
  // The reference: U16 {1, 4096}.
  ASSERT_EQ(code(HuffmanForm(two, {0x00, 0x10}, {1, 4095}), u16x2), StatusCode::kOk);
  EXPECT_EQ(outs[0], (std::vector<uint8_t>{1, 0, 0x00, 0x10}));

  // Broken tables.
  EXPECT_EQ(code({}, u16x2), kC);
  EXPECT_EQ(code({0, 0, 0}, u16x2), kC);                                                   // no symbols
  EXPECT_EQ(code(HuffmanForm({{1, 0}, {2, 1}}, {}, {2, 2}), u16x2), kC);                   // length 0
  EXPECT_EQ(code(HuffmanForm({{1, 1}, {2, 1}, {3, 1}}, {}, {1, 2}), u16x2), kC);           // over-subscribed
  EXPECT_EQ(code(HuffmanForm({{1, 1}, {4096, 1}}, {}, {1, 1}), u16x2), kC);                // symbol 4096
  // Symbols wider than a 1-byte dtype, directly or through an escape.
  EXPECT_EQ(code(HuffmanForm({{1, 1}, {256, 1}}, {}, {1, 256}), u8x2), kC);
  EXPECT_EQ(code(HuffmanForm({{1, 1}, {4094, 1}}, {}, {1, 4094}), u8x2), kC);
  EXPECT_EQ(code(HuffmanForm({{1, 1}, {255, 1}}, {}, {1, 255}), u8x2), StatusCode::kOk);
  EXPECT_EQ(code(HuffmanForm(two, {0xff}, {1, 4095}), u8x2), kC);
  // Escapes: missing, truncated, declared longer than present, unused, or below the threshold.
  EXPECT_EQ(code(HuffmanForm(two, {}, {1, 4095}), u16x2), kC);
  EXPECT_EQ(code(HuffmanForm(two, {0x00}, {1, 4095}), u16x2), kC);
  {
    auto q = HuffmanForm(two, {0x00, 0x10}, {1, 4095});
    // Table: m, entry (gap 1, length 1), entry (gap 4093, length 1: 3 bytes); then the escape count.
    ASSERT_EQ(q[5], 2);
    q[5] = 200;  // larger than the rest of the section
    EXPECT_EQ(code(q, u16x2), kC);
  }
  EXPECT_EQ(code(HuffmanForm(two, {0x00, 0x10, 0x00}, {1, 4095}), u16x2), kC);
  EXPECT_EQ(code(HuffmanForm(two, {0x00, 0x10, 0x00, 0x10}, {1, 4095}), u16x2), kC);
  EXPECT_EQ(code(HuffmanForm(two, {0x00, 0x10}, {1, 1}), u16x2), kC);
  EXPECT_EQ(code(HuffmanForm(two, {0xfe, 0x0f}, {1, 4095}), u16x2), kC);                  // 4094 escaped
  EXPECT_EQ(code(HuffmanForm(two, {0xff, 0x0f}, {1, 4095}), u16x2), StatusCode::kOk);     // 4095 escaped
  // The bit stream: symbols missing, an unused code word, trailing bytes.
  {
    auto q = HuffmanForm({{1, 1}, {2, 2}}, {}, {1, 2});  // code 11 is unused
    ASSERT_EQ(code(q, u16x2), StatusCode::kOk);
    q.back() = 0b111;  // 1 1 -> no symbol
    EXPECT_EQ(code(q, u16x2), kC);
  }
  {
    auto q = HuffmanForm(two, {0x00, 0x10}, {1, 4095});
    q.pop_back();
    EXPECT_EQ(code(q, u16x2), kC);
    q = HuffmanForm(two, {0x00, 0x10}, {1, 4095});
    q.push_back(0);
    EXPECT_EQ(code(q, u16x2), kC);
  }
  // More symbols than values: the stream outlasts the runs by a whole byte.
  std::vector<uint32_t> many(20, 1);
  EXPECT_EQ(code(HuffmanForm(two, {}, many), u16x2), kC);
  // Unknown codecs.
  outs.assign(1, std::vector<uint8_t>(1));
  std::vector<std::span<uint8_t>> ptrs = {outs[0]};
  for (int c : {3, 4, 255})
    EXPECT_EQ(DecodeValues(static_cast<ValueCodec>(c), std::vector<uint8_t>{1, 0}, std::vector<ValueRun>{{1, 1, {}}}, ptrs).code(), kC)
        << c;
}

TEST(ValueCoding, EveryTruncationOfAHuffmanFormIsCorruptAndFlipsNeverBreakTheBounds) {
  std::mt19937_64 rng(15);
  Runs in;
  std::vector<uint64_t> v(600);
  for (auto& x : v) x = rng() % 50 == 0 ? rng() : UlpMask(rng);
  in.Add(4, v);
  in.Add(1, std::vector<uint64_t>(50, 3));
  in.Add(8, {1, 2, ~0ull});
  std::vector<uint8_t> stored;
  ASSERT_EQ(ExpectValuesRoundTrip(in, "hostile seed", &stored), ValueCodec::kHuffman);
  std::vector<std::vector<uint8_t>> outs;
  for (size_t len = 0; len < stored.size(); ++len) {
    std::vector<uint8_t> q(stored.begin(), stored.begin() + static_cast<ptrdiff_t>(len));
    ASSERT_EQ(DecodeHuffmanForm(q, in.runs, &outs).code(), StatusCode::kCorrupt) << "length " << len;
  }
  for (size_t byte = 0; byte < stored.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      auto q = stored;
      q[byte] ^= static_cast<uint8_t>(1u << bit);
      Status s = DecodeHuffmanForm(q, in.runs, &outs);
      if (s.ok()) {
        for (size_t r = 0; r < in.runs.size(); ++r) ASSERT_EQ(outs[r].size(), in.runs[r].count * in.runs[r].width);
      } else {
        ASSERT_EQ(s.code(), StatusCode::kCorrupt);
      }
    }
}

}  // namespace
}  // namespace dcr

namespace dcr {
namespace {

// PutSymbols' vector loops for 2-byte values (32 or eight codes per step from byte tables, where
// the target has them) write the bits and escapes of its scalar loop: for groups of 32 and of
// eight below 128, groups of eight whose codes pass 56 bits (also within a group of 32), groups
// holding a larger value or an escape, runs that end mid-group and values at odd addresses.
TEST(ValueCoding, VectorAndScalarSymbolWritersWriteTheSameBits) {
  // Frequencies halving from symbol 0 on, then a flat tail: codes from 1 bit to 12 and more.
  std::vector<uint64_t> freq(value_symbols::kAlphabet, 0);
  for (uint32_t s = 0; s < 40; ++s) freq[s] = uint64_t{1} << (14 - std::min(s, 14u));
  freq[200] = freq[1000] = freq[value_symbols::kEscape] = 1 << 10;
  const HuffmanEncoder code(freq);
  const value_symbols::SmallSymbolCodes small(code);
  std::mt19937_64 rng(23);
  std::vector<uint16_t> values;
  for (int group = 0; group < 4000; ++group) {
    const uint64_t kind = rng() % 8;
    const uint64_t long_codes = kind == 0 ? 2 + rng() % 7 : 0;  // of 15 bits: groups of 30 to 120 bits and more
    for (int i = 0; i < 8; ++i) {
      uint16_t v = static_cast<uint16_t>(std::min<uint64_t>(std::countr_one(rng()), 39));  // mostly short codes
      if (static_cast<uint64_t>(i) < long_codes) v = static_cast<uint16_t>(25 + rng() % 15);
      if (kind == 1 && i == 3) v = rng() % 2 ? 200 : 1000;
      if (kind == 2 && i == 5) v = static_cast<uint16_t>(value_symbols::kEscape + rng() % 100);
      values.push_back(v);
    }
  }
  // The cases the vector loop hands back: eight values below 128 whose codes total over 56 bits
  // (up to 64 they would still fit one register).
  int long_groups = 0, barely_long_groups = 0;
  for (size_t g = 0; g + 8 <= values.size(); g += 8) {
    int bits = 0;
    bool small_values = true;
    for (size_t i = g; i < g + 8; ++i) {
      bits += static_cast<int>(code.Entry(std::min<uint32_t>(values[i], value_symbols::kEscape)) >> 16);
      small_values &= values[i] < 128;
    }
    long_groups += small_values && bits > 64, barely_long_groups += small_values && bits > 56 && bits <= 64;
  }
  ASSERT_GT(long_groups, 100);
  ASSERT_GT(barely_long_groups, 20);
  std::vector<uint8_t> bytes(values.size() * 2 + 1);
  for (size_t skew : {0, 1}) {
    std::memcpy(bytes.data() + skew, values.data(), values.size() * 2);
    for (uint64_t n : {uint64_t{0}, uint64_t{5}, uint64_t{8}, uint64_t{61}, uint64_t{values.size()}}) {
      std::vector<uint8_t> bits[2], escaped[2];
      for (int scalar = 0; scalar < 2; ++scalar) {
        value_symbols::ForceScalarPutSymbols(scalar == 1);
        bits[scalar] = {0x5a};  // appending after other bytes
        BitWriter w(bits[scalar]);
        value_symbols::PutSymbols(bytes.data() + skew, n, 2, code, small, w, &escaped[scalar]);
        w.Flush();
      }
      value_symbols::ForceScalarPutSymbols(false);
      const std::string what = "skew " + std::to_string(skew) + ", " + std::to_string(n) + " values";
      EXPECT_EQ(bits[0], bits[1]) << what;
      EXPECT_EQ(escaped[0], escaped[1]) << what;
    }
  }
}

}  // namespace
}  // namespace dcr
