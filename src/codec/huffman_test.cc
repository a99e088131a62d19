// Codec tests, part 4: the canonical Huffman code (huffman.h) and value coding (value_coding.h).
// Round trips for single-symbol, skewed, uniform and pathologically deep distributions; codes
// never longer than 15 bits; every value width with and without escapes, and runs of mixed widths;
// hostile tables and stored forms are kCorrupt and never read outside their bytes.
#include <gtest/gtest.h>

#include <array>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

// ---------------------------------------------------------------------------------------------
// Huffman

// One table entry (docs/format.md §2.5): varint (symbol gap << 4 | code length).
void PutEntry(std::vector<uint8_t>& out, uint64_t gap, uint64_t len) { PutVarint(out, gap << 4 | len); }

// A table: varint m, then m entries.
std::vector<uint8_t> Table(uint64_t m, const std::vector<std::pair<uint64_t, uint64_t>>& gap_len) {
  std::vector<uint8_t> out;
  PutVarint(out, m);
  for (auto [g, l] : gap_len) PutEntry(out, g, l);
  return out;
}

// The code lengths a table written by WriteTable declares (index = symbol), parsed by the format's
// rules (docs/format.md §2.5): varint m, then m × varint (symbol gap << 4 | code length).
std::vector<uint8_t> TableLengths(const std::vector<uint8_t>& table, uint32_t alphabet, size_t* table_bytes = nullptr) {
  ByteReader r(table);
  uint64_t m = 0;
  EXPECT_TRUE(r.ReadVarint(&m));
  std::vector<uint8_t> len(alphabet, 0);
  uint64_t s = 0;
  for (uint64_t i = 0; i < m; ++i) {
    uint64_t entry = 0;
    EXPECT_TRUE(r.ReadVarint(&entry));
    const uint64_t gap = entry >> 4;
    const uint8_t l = static_cast<uint8_t>(entry & 15);
    EXPECT_NE(l, 0);
    s = i == 0 ? gap : s + gap + 1;
    EXPECT_LT(s, alphabet);
    if (s < alphabet) len[s] = l;
  }
  if (table_bytes) *table_bytes = r.pos();
  return len;
}

// Kraft sum scaled by 2^15: 2^15 for a complete code, less for an incomplete one.
uint64_t KraftScaled(const std::vector<uint8_t>& len) {
  uint64_t k = 0;
  for (uint8_t l : len)
    if (l) k += 1ull << (kHuffmanMaxBits - l);
  return k;
}

struct Coded {
  std::vector<uint8_t> table, bits;
  std::vector<uint8_t> lengths;
  uint64_t cost_bits = 0;
};

// Codes `symbols` with a code built from their own frequencies.
Coded Encode(const std::vector<uint32_t>& symbols, uint32_t alphabet = kHuffmanMaxSymbols) {
  std::vector<uint64_t> freq(alphabet, 0);
  for (uint32_t s : symbols) ++freq[s];
  HuffmanEncoder enc(freq);
  Coded c;
  enc.WriteTable(&c.table);
  c.lengths = TableLengths(c.table, alphabet);
  c.cost_bits = enc.CostBits(freq);
  BitWriter w(c.bits);
  for (uint32_t s : symbols) enc.Put(w, s);
  w.Flush();
  return c;
}

// Decodes c back and expects exactly `symbols`, every bit of the stream used.
void ExpectDecodes(const Coded& c, const std::vector<uint32_t>& symbols, uint32_t alphabet = kHuffmanMaxSymbols) {
  ByteReader r(c.table);
  HuffmanDecoder dec;
  Status s = dec.ReadTable(r, alphabet);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(r.remaining(), 0u);
  BitReader bits(c.bits);
  for (size_t i = 0; i < symbols.size(); ++i) {
    uint32_t got = dec.Get(bits);
    ASSERT_FALSE(bits.overrun()) << "symbol " << i;
    ASSERT_EQ(got, symbols[i]) << "symbol " << i;
  }
  EXPECT_EQ(bits.bytes_consumed(), c.bits.size());
  EXPECT_EQ(c.bits.size(), (c.cost_bits + 7) / 8);
  // Reading on decodes at most the zero padding of the last byte (under 8 bits), then overruns.
  for (int i = 0; i < 8 && !bits.overrun(); ++i) dec.Get(bits);
  EXPECT_TRUE(bits.overrun());
}

double EntropyBits(const std::vector<uint32_t>& symbols, uint32_t alphabet = kHuffmanMaxSymbols) {
  std::vector<uint64_t> freq(alphabet, 0);
  for (uint32_t s : symbols) ++freq[s];
  double h = 0;
  for (uint64_t f : freq)
    if (f) h -= static_cast<double>(f) * std::log2(static_cast<double>(f) / static_cast<double>(symbols.size()));
  return h;
}

TEST(Huffman, SingleSymbolCostsOneBitPerSymbol) {
  for (uint32_t sym : {0u, 1u, 255u, 4094u, 4095u}) {
    std::vector<uint32_t> symbols(1000, sym);
    Coded c = Encode(symbols);
    EXPECT_EQ(c.lengths[sym], 1) << sym;
    EXPECT_EQ(std::count_if(c.lengths.begin(), c.lengths.end(), [](uint8_t l) { return l != 0; }), 1);
    EXPECT_EQ(c.cost_bits, 1000u);
    ExpectDecodes(c, symbols);
  }
  // One occurrence of one symbol.
  ExpectDecodes(Encode({7}), {7});
}

TEST(Huffman, SkewedDistributionRoundTripsWithinOneBitOfTheEntropy) {
  std::mt19937_64 rng(1);
  std::geometric_distribution<uint32_t> geo(0.3);
  std::vector<uint32_t> symbols(50000);
  for (auto& s : symbols) s = std::min<uint32_t>(geo(rng), kHuffmanMaxSymbols - 1);
  symbols.push_back(kHuffmanMaxSymbols - 1);  // the escape symbol, once
  Coded c = Encode(symbols);
  EXPECT_EQ(KraftScaled(c.lengths), 1ull << kHuffmanMaxBits);  // an optimal code is complete
  EXPECT_LT(static_cast<double>(c.cost_bits), EntropyBits(symbols) + static_cast<double>(symbols.size()));
  EXPECT_GE(static_cast<double>(c.cost_bits), EntropyBits(symbols) - 1e-6);
  // More frequent symbols never get longer codes.
  EXPECT_LE(c.lengths[0], c.lengths[1]);
  EXPECT_LE(c.lengths[1], c.lengths[2]);
  ExpectDecodes(c, symbols);
}

TEST(Huffman, UniformOverAll4096SymbolsGivesTwelveBitCodes) {
  std::vector<uint32_t> symbols;
  for (int rep = 0; rep < 3; ++rep)
    for (uint32_t s = 0; s < kHuffmanMaxSymbols; ++s) symbols.push_back((s * 2654435761u + rep) % kHuffmanMaxSymbols);
  Coded c = Encode(symbols);
  for (uint32_t s = 0; s < kHuffmanMaxSymbols; ++s) ASSERT_EQ(c.lengths[s], 12) << s;
  EXPECT_EQ(c.cost_bits, symbols.size() * 12);
  ExpectDecodes(c, symbols);
}

TEST(Huffman, FibonacciFrequenciesAreLimitedTo15BitCodes) {
  // Fibonacci frequencies make an unlimited Huffman tree as deep as the alphabet is large.
  for (uint32_t n : {20u, 40u, 60u}) {
    std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
    uint64_t a = 1, b = 1;
    for (uint32_t i = 0; i < n; ++i) {
      freq[i * 37 % kHuffmanMaxSymbols] = a;
      uint64_t c = a + b;
      a = b;
      b = std::min<uint64_t>(c, uint64_t{1} << 60);
    }
    HuffmanEncoder enc(freq);
    std::vector<uint8_t> table;
    enc.WriteTable(&table);
    auto len = TableLengths(table, kHuffmanMaxSymbols);
    uint32_t used = 0;
    for (uint32_t s = 0; s < kHuffmanMaxSymbols; ++s) {
      ASSERT_EQ(len[s] != 0, freq[s] != 0) << "symbol " << s;
      ASSERT_LE(len[s], kHuffmanMaxBits) << "symbol " << s;
      used += len[s] != 0;
    }
    EXPECT_EQ(used, n);
    EXPECT_LE(KraftScaled(len), 1ull << kHuffmanMaxBits);
    // Round trip a sequence using every symbol, the rarest ones included.
    std::vector<uint32_t> symbols;
    std::mt19937_64 rng(n);
    for (uint32_t s = 0; s < kHuffmanMaxSymbols; ++s)
      if (freq[s]) symbols.push_back(s);
    for (int i = 0; i < 5000; ++i) symbols.push_back(symbols[rng() % n]);
    std::shuffle(symbols.begin(), symbols.end(), rng);
    Coded c;
    c.table = table;
    c.lengths = len;
    BitWriter w(c.bits);
    for (uint32_t s : symbols) enc.Put(w, s), c.cost_bits += len[s];
    w.Flush();
    ExpectDecodes(c, symbols);
  }
}

TEST(Huffman, EveryLengthFrom1To15RoundTripsAtEveryBitAlignment) {
  // Frequencies 2^14, 2^13, ..., 1, 1 give lengths 1, 2, ..., 15, 15.
  std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
  for (int i = 0; i < 15; ++i) freq[100 + i] = 1ull << (14 - i);
  freq[4095] = 1;
  HuffmanEncoder enc(freq);
  std::vector<uint8_t> table;
  enc.WriteTable(&table);
  auto len = TableLengths(table, kHuffmanMaxSymbols);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(len[100 + i], i + 1);
  EXPECT_EQ(len[4095], 15);
  std::vector<uint32_t> symbols;
  for (int pad = 0; pad < 8; ++pad)
    for (uint32_t s : {4095u, 114u, 100u, 113u, 101u, 4095u}) symbols.push_back(pad % 2 ? s : 100 + (s % 15));
  Coded c;
  c.table = table;
  c.lengths = len;
  BitWriter w(c.bits);
  for (uint32_t s : symbols) enc.Put(w, s), c.cost_bits += len[s];
  w.Flush();
  ExpectDecodes(c, symbols);
}

// Put3 and Put6 write the bits of three and six Puts, six codes short enough for one write or
// not (lengths 1 to 15), from every bit alignment.
TEST(Huffman, SeveralSymbolsPerWriteAreTheBitsOfOnePerWrite) {
  std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
  for (int i = 0; i < 15; ++i) freq[100 + i] = 1ull << (14 - i);  // lengths 1, 2, ..., 15
  freq[4095] = 1;
  HuffmanEncoder enc(freq);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    uint32_t s[7];
    for (uint32_t& x : s) x = 100 + static_cast<uint32_t>(trial < 1000 ? rng() % 4 : rng() % 15);
    auto written = [](auto&& puts) {
      std::vector<uint8_t> out;
      BitWriter w(out);
      {
        BitWriter::Local bits(w);
        puts(bits);
      }
      w.Flush();
      return out;
    };
    const std::vector<uint8_t> one = written([&](BitWriter::Local& bits) {
      for (uint32_t x : s) enc.Put(bits, x);
    });
    const std::vector<uint8_t> many = written([&](BitWriter::Local& bits) {
      enc.Put(bits, s[0]);  // the next writes start at another bit
      if (trial % 2 == 0) {
        enc.Put6(bits, s[1], s[2], s[3], s[4], s[5], s[6]);
      } else {
        enc.Put3(bits, s[1], s[2], s[3]);
        enc.Put3(bits, s[4], s[5], s[6]);
      }
    });
    ASSERT_EQ(many, one) << "trial " << trial;
  }
}

// The multi-symbol entry of window w (kFastBits = 10 bits), code by code through Get: codes
// read from w's low bits on while each fits in the 10 bits with those before it, decodes, and is
// below `stop`, at most kMultiSymbols of them.
struct MultiEntry {
  std::vector<uint32_t> symbols;
  int bits = 0;
};
MultiEntry ExpectedMultiEntry(const HuffmanDecoder& dec, const std::vector<uint8_t>& len, uint32_t w, uint32_t stop) {
  MultiEntry e;
  while (e.symbols.size() < static_cast<size_t>(HuffmanDecoder::kMultiSymbols)) {
    const uint32_t rest = w >> e.bits;  // zeros above the window's bits
    const std::vector<uint8_t> bytes = {static_cast<uint8_t>(rest), static_cast<uint8_t>(rest >> 8), 0, 0, 0, 0, 0, 0};
    BitReader r(bytes);
    const uint32_t sym = dec.Get(r);
    if (r.overrun() || len[sym] == 0 || e.bits + len[sym] > 10 || sym >= stop) break;
    e.symbols.push_back(sym);
    e.bits += len[sym];
  }
  return e;
}

TEST(Huffman, MultiSymbolTableHoldsTheCodesOfEachWindow) {
  std::mt19937_64 rng(21);
  // Codes from frequencies (complete), and incomplete codes with lengths from 1 to 15.
  std::vector<std::vector<uint8_t>> tables;
  for (int t = 0; t < 30; ++t) {
    std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
    const int used = 1 + static_cast<int>(rng() % (t < 10 ? 6 : 200));
    for (int i = 0; i < used; ++i) freq[rng() % 64 + (rng() % 4 == 0 ? rng() % 4000 : 0)] = 1 + (rng() % (1u << (rng() % 16)));
    tables.emplace_back();
    HuffmanEncoder(freq).WriteTable(&tables.back());
  }
  tables.push_back(Table(1, {{5, 3}}));                     // one 3-bit code
  tables.push_back(Table(3, {{0, 1}, {1, 4}, {0, 12}}));    // 1, 4 and 12 bits, incomplete
  tables.push_back(Table(2, {{7, 2}, {2000, 15}}));         // a 2-bit and a 15-bit code
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::vector<uint8_t> len = TableLengths(tables[t], kHuffmanMaxSymbols);
    for (uint32_t stop : {kHuffmanMaxSymbols, 40u, 5u, 0u}) {
      ByteReader r(tables[t]);
      HuffmanDecoder dec;
      ASSERT_TRUE(dec.ReadTable(r, kHuffmanMaxSymbols).ok()) << "table " << t;
      dec.BuildMultiTable(stop);
      for (uint32_t w = 0; w < 1024; ++w) {
        const MultiEntry want = ExpectedMultiEntry(dec, len, w, stop);
        const uint64_t got = HuffmanDecoder::PeekMulti(dec.multi_table(), w);
        ASSERT_EQ(HuffmanDecoder::MultiCount(got), static_cast<int>(want.symbols.size()))
            << "table " << t << " stop " << stop << " window " << w;
        EXPECT_EQ(HuffmanDecoder::MultiBits(got), want.bits) << "table " << t << " stop " << stop << " window " << w;
        for (size_t i = 0; i < want.symbols.size(); ++i)
          EXPECT_EQ(HuffmanDecoder::MultiSymbol(got, static_cast<int>(i)), want.symbols[i])
              << "table " << t << " stop " << stop << " window " << w << " symbol " << i;
      }
    }
  }
}

// PeekLong, for every 15-bit window whose multi entry is empty: the code Get reads there when it
// is longer than the table's 10 bits, valid and below `stop`; else 0.
TEST(Huffman, LongCodeTableHoldsTheLongerCodeOfEachWindow) {
  std::mt19937_64 rng(22);
  std::vector<std::vector<uint8_t>> tables;
  for (int t = 0; t < 20; ++t) {  // skewed frequencies over many symbols: lengths up to 15
    std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
    for (int i = 0; i < 50 + t * 40; ++i) freq[rng() % kHuffmanMaxSymbols] = 1 + (rng() % (1u << (rng() % 20)));
    tables.emplace_back();
    HuffmanEncoder(freq).WriteTable(&tables.back());
  }
  tables.push_back(Table(3, {{0, 1}, {1, 4}, {0, 12}}));  // incomplete: most 12-bit windows invalid
  tables.push_back(Table(2, {{7, 2}, {2000, 15}}));
  int long_windows = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::vector<uint8_t> len = TableLengths(tables[t], kHuffmanMaxSymbols);
    for (uint32_t stop : {kHuffmanMaxSymbols, 2000u, 40u}) {
      ByteReader r(tables[t]);
      HuffmanDecoder dec;
      ASSERT_TRUE(dec.ReadTable(r, kHuffmanMaxSymbols).ok()) << "table " << t;
      dec.BuildMultiTable(stop);
      for (uint32_t w = 0; w < (1u << 15); ++w) {
        const uint64_t e = HuffmanDecoder::PeekMulti(dec.multi_table(), w);
        if (HuffmanDecoder::MultiCount(e) != 0) continue;
        const std::vector<uint8_t> bytes = {static_cast<uint8_t>(w), static_cast<uint8_t>(w >> 8), 0, 0, 0, 0, 0, 0};
        BitReader br(bytes);
        const uint32_t sym = dec.Get(br);
        const bool want = !br.overrun() && len[sym] > 10 && sym < stop;
        const uint32_t got = HuffmanDecoder::PeekLong(dec.long_table(), e, w);
        ASSERT_EQ(got != 0, want) << "table " << t << " stop " << stop << " window " << w;
        if (!want) continue;
        ++long_windows;
        EXPECT_EQ(HuffmanDecoder::LongSymbol(got), sym) << "table " << t << " window " << w;
        EXPECT_EQ(HuffmanDecoder::LongBits(got), len[sym]) << "table " << t << " window " << w;
      }
    }
  }
  EXPECT_GT(long_windows, 1000);  // the tables do have longer codes
}

TEST(Huffman, EncodingIsDeterministic) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
  for (int i = 0; i < 300; ++i) freq[rng() % kHuffmanMaxSymbols] = 1 + rng() % 4;  // many ties
  std::vector<uint8_t> a, b;
  HuffmanEncoder(freq).WriteTable(&a);
  HuffmanEncoder(freq).WriteTable(&b);
  EXPECT_EQ(a, b);
}

Status ReadTable(const std::vector<uint8_t>& t, uint32_t alphabet = kHuffmanMaxSymbols) {
  ByteReader r(t);
  HuffmanDecoder d;
  return d.ReadTable(r, alphabet);
}

TEST(Huffman, MalformedTablesAreCorrupt) {
  const auto kC = StatusCode::kCorrupt;
  EXPECT_TRUE(ReadTable(Table(1, {{0x42, 1}})).ok());
  EXPECT_TRUE(ReadTable(Table(2, {{0, 1}, {0, 1}})).ok());                   // symbols 0 and 1, length 1
  EXPECT_TRUE(ReadTable(Table(2, {{0, 2}, {0, 3}})).ok());                   // incomplete codes are allowed
  EXPECT_TRUE(ReadTable(Table(1, {{4095, 15}})).ok());                       // symbol 4095, longest code
  EXPECT_EQ(ReadTable({}).code(), kC);                                       // empty
  EXPECT_EQ(ReadTable({0}).code(), kC);                                      // no symbols
  EXPECT_EQ(ReadTable(Table(4097, {})).code(), kC);                          // more symbols than the alphabet
  EXPECT_EQ(ReadTable({0x80}).code(), kC);                                   // truncated count
  EXPECT_EQ(ReadTable(Table(2, {{0, 1}})).code(), kC);                       // an entry missing
  EXPECT_EQ(ReadTable({1, 0x81}).code(), kC);                                // truncated entry varint
  EXPECT_EQ(ReadTable(Table(1, {{4096, 1}})).code(), kC);                    // symbol 4096
  EXPECT_TRUE(ReadTable(Table(2, {{4094, 1}, {0, 1}})).ok());                // 4094, then 4095
  EXPECT_EQ(ReadTable(Table(2, {{4094, 1}, {1, 1}})).code(), kC);            // 4094, then 4096
  EXPECT_EQ(ReadTable(Table(2, {{4095, 1}, {0, 1}})).code(), kC);            // 4095, then 4096
  EXPECT_EQ(ReadTable({2, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}).code(), kC);  // gap 2^60-1
  EXPECT_EQ(ReadTable({1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}).code(), kC);  // entry overflows 64 bits
  EXPECT_EQ(ReadTable(Table(1, {{0x42, 0}})).code(), kC);                    // length 0
  EXPECT_EQ(ReadTable(Table(2, {{0x42, 1}, {0, 0}})).code(), kC);
  EXPECT_EQ(ReadTable(Table(3, {{0, 1}, {0, 1}, {0, 1}})).code(), kC);       // over-subscribed: three 1-bit codes
  EXPECT_EQ(ReadTable(Table(3, {{0, 1}, {0, 2}, {0, 1}})).code(), kC);       // 1/2 + 1/4 + 1/2
  // 4096 codes of 12 bits fill the code space exactly; one of 11 bits over-subscribes it.
  std::vector<std::pair<uint64_t, uint64_t>> full(kHuffmanMaxSymbols, {0, 12});
  EXPECT_TRUE(ReadTable(Table(kHuffmanMaxSymbols, full)).ok());
  full[0].second = 11;
  EXPECT_EQ(ReadTable(Table(kHuffmanMaxSymbols, full)).code(), kC);
  // A smaller alphabet bounds the symbols.
  EXPECT_TRUE(ReadTable(Table(1, {{255, 1}}), 256).ok());
  EXPECT_EQ(ReadTable(Table(1, {{256, 1}}), 256).code(), kC);
  EXPECT_EQ(ReadTable(Table(257, {}), 256).code(), kC);
}

TEST(Huffman, CodeWordsOutsideAnIncompleteCodeAndTruncatedStreamsSetOverrun) {
  // Symbols 5 (length 1: code 0) and 9 (length 2: code 10); code 11 is unused.
  const std::vector<uint8_t> table = Table(2, {{5, 1}, {3, 2}});
  ByteReader r(table);
  HuffmanDecoder d;
  ASSERT_TRUE(d.ReadTable(r, kHuffmanMaxSymbols).ok());
  {
    const std::vector<uint8_t> bits = {0b00000010};  // 0, then 1 0 (LSB-first: bit0=0, bit1=1, bit2=0)
    BitReader b(bits);
    EXPECT_EQ(d.Get(b), 5u);
    EXPECT_EQ(d.Get(b), 9u);
    EXPECT_FALSE(b.overrun());
  }
  {
    const std::vector<uint8_t> bits = {0b00000110};  // 0, then 1 1: unused
    BitReader b(bits);
    EXPECT_EQ(d.Get(b), 5u);
    d.Get(b);
    EXPECT_TRUE(b.overrun());
  }
  {
    const std::vector<uint8_t> none;
    BitReader b(none);
    d.Get(b);
    EXPECT_TRUE(b.overrun());
  }
}

TEST(Huffman, ArbitraryTablesAndStreamsNeverReadOutOfBounds) {
  std::mt19937_64 rng(4);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> t;
    if (i % 2) {
      // Plausible: a few entries with small gaps and any 4-bit length.
      const uint64_t m = 1 + rng() % 8;
      PutVarint(t, rng() % 4 == 0 ? m + 1 : m);
      for (uint64_t k = 0; k < m; ++k) PutEntry(t, rng() % 3 == 0 ? rng() % 5000 : rng() % 8, rng() % 16);
      if (rng() % 4 == 0) t.resize(rng() % (t.size() + 1));
    } else {
      t.resize(1 + rng() % 24);
      for (auto& b : t) b = static_cast<uint8_t>(rng());
    }
    ByteReader r(t);
    HuffmanDecoder d;
    if (!d.ReadTable(r, kHuffmanMaxSymbols).ok()) continue;
    ++accepted;
    std::vector<uint8_t> bits(rng() % 6);
    for (auto& b : bits) b = static_cast<uint8_t>(rng());
    BitReader br(bits);
    for (int k = 0; k < 64 && !br.overrun(); ++k) ASSERT_LT(d.Get(br), kHuffmanMaxSymbols);
    EXPECT_TRUE(br.overrun());
  }
  EXPECT_GT(accepted, 50);
}

// ---------------------------------------------------------------------------------------------
// Value coding

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
