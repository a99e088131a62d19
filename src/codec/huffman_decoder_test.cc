// Codec tests, part 4b: the Huffman decoder (huffman.h): its multi-symbol and long-code tables
// hold exactly the codes of every window; malformed tables are kCorrupt; code words outside an
// incomplete code and truncated streams set the overrun flag; arbitrary tables and streams are
// never read outside their bytes. The code's construction and round trips: huffman_test.cc.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/huffman_table_test_support.h"

namespace dcr {
namespace {

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
  tables.push_back(TableOf(1, {{5, 3}}));                   // one 3-bit code
  tables.push_back(TableOf(3, {{0, 1}, {1, 4}, {0, 12}}));  // 1, 4 and 12 bits, incomplete
  tables.push_back(TableOf(2, {{7, 2}, {2000, 15}}));       // a 2-bit and a 15-bit code
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
  tables.push_back(TableOf(3, {{0, 1}, {1, 4}, {0, 12}}));  // incomplete: most 12-bit windows invalid
  tables.push_back(TableOf(2, {{7, 2}, {2000, 15}}));
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

Status ReadTable(const std::vector<uint8_t>& t, uint32_t alphabet = kHuffmanMaxSymbols) {
  ByteReader r(t);
  HuffmanDecoder d;
  return d.ReadTable(r, alphabet);
}

TEST(Huffman, MalformedTablesAreCorrupt) {
  const auto kC = StatusCode::kCorrupt;
  EXPECT_TRUE(ReadTable(TableOf(1, {{0x42, 1}})).ok());
  EXPECT_TRUE(ReadTable(TableOf(2, {{0, 1}, {0, 1}})).ok());              // symbols 0 and 1, length 1
  EXPECT_TRUE(ReadTable(TableOf(2, {{0, 2}, {0, 3}})).ok());              // incomplete codes are allowed
  EXPECT_TRUE(ReadTable(TableOf(1, {{4095, 15}})).ok());                  // symbol 4095, longest code
  EXPECT_EQ(ReadTable({}).code(), kC);                                    // empty
  EXPECT_EQ(ReadTable({0}).code(), kC);                                   // no symbols
  EXPECT_EQ(ReadTable(TableOf(4097, {})).code(), kC);                     // more symbols than the alphabet
  EXPECT_EQ(ReadTable({0x80}).code(), kC);                                // truncated count
  EXPECT_EQ(ReadTable(TableOf(2, {{0, 1}})).code(), kC);                  // an entry missing
  EXPECT_EQ(ReadTable({1, 0x81}).code(), kC);                             // truncated entry varint
  EXPECT_EQ(ReadTable(TableOf(1, {{4096, 1}})).code(), kC);               // symbol 4096
  EXPECT_TRUE(ReadTable(TableOf(2, {{4094, 1}, {0, 1}})).ok());           // 4094, then 4095
  EXPECT_EQ(ReadTable(TableOf(2, {{4094, 1}, {1, 1}})).code(), kC);       // 4094, then 4096
  EXPECT_EQ(ReadTable(TableOf(2, {{4095, 1}, {0, 1}})).code(), kC);       // 4095, then 4096
  EXPECT_EQ(ReadTable({2, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}).code(), kC);  // gap 2^60-1
  EXPECT_EQ(ReadTable({1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}).code(), kC);  // entry overflows 64 bits
  EXPECT_EQ(ReadTable(TableOf(1, {{0x42, 0}})).code(), kC);               // length 0
  EXPECT_EQ(ReadTable(TableOf(2, {{0x42, 1}, {0, 0}})).code(), kC);
  EXPECT_EQ(ReadTable(TableOf(3, {{0, 1}, {0, 1}, {0, 1}})).code(), kC);  // over-subscribed: three 1-bit codes
  EXPECT_EQ(ReadTable(TableOf(3, {{0, 1}, {0, 2}, {0, 1}})).code(), kC);  // 1/2 + 1/4 + 1/2
  // 4096 codes of 12 bits fill the code space exactly; one of 11 bits over-subscribes it.
  std::vector<std::pair<uint64_t, uint64_t>> full(kHuffmanMaxSymbols, {0, 12});
  EXPECT_TRUE(ReadTable(TableOf(kHuffmanMaxSymbols, full)).ok());
  full[0].second = 11;
  EXPECT_EQ(ReadTable(TableOf(kHuffmanMaxSymbols, full)).code(), kC);
  // A smaller alphabet bounds the symbols.
  EXPECT_TRUE(ReadTable(TableOf(1, {{255, 1}}), 256).ok());
  EXPECT_EQ(ReadTable(TableOf(1, {{256, 1}}), 256).code(), kC);
  EXPECT_EQ(ReadTable(TableOf(257, {}), 256).code(), kC);
}

TEST(Huffman, CodeWordsOutsideAnIncompleteCodeAndTruncatedStreamsSetOverrun) {
  // Symbols 5 (length 1: code 0) and 9 (length 2: code 10); code 11 is unused.
  const std::vector<uint8_t> table = TableOf(2, {{5, 1}, {3, 2}});
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

}  // namespace
}  // namespace dcr
