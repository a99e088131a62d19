// Codec tests, part 4: the canonical Huffman code (huffman.h). Round trips for single-symbol,
// skewed, uniform and pathologically deep distributions; codes never longer than 15 bits; several
// symbols per write; code lengths those of the textbook construction. The decoder's tables and
// hostile input: huffman_decoder_test.cc; value coding on top of it: value_coding_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <random>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/huffman_table_test_support.h"

namespace dcr {
namespace {

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

TEST(Huffman, EncodingIsDeterministic) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> freq(kHuffmanMaxSymbols, 0);
  for (int i = 0; i < 300; ++i) freq[rng() % kHuffmanMaxSymbols] = 1 + rng() % 4;  // many ties
  std::vector<uint8_t> a, b;
  HuffmanEncoder(freq).WriteTable(&a);
  HuffmanEncoder(freq).WriteTable(&b);
  EXPECT_EQ(a, b);
}

// The constructor from the used symbols and their weights builds the code the dense frequencies
// give: the same table, the same entry for every symbol of the alphabet (0 for unused ones), the
// same cost. Random distributions with many ties, one symbol, every symbol, and Fibonacci
// weights (whose code is too deep and is flattened and rebuilt), over three alphabet sizes.
TEST(Huffman, CodeFromUsedSymbolsIsTheCodeFromDenseFrequencies) {
  std::mt19937_64 rng(5);
  int cases = 0;
  for (uint32_t alphabet : {kHuffmanMaxSymbols, 256u, 1000u})
    for (int shape = 0; shape < 40; ++shape) {
      std::vector<uint64_t> freq(alphabet, 0);
      if (shape == 0) {
        freq[rng() % alphabet] = 7;
      } else if (shape == 1) {
        for (auto& f : freq) f = 1 + rng() % 3;
      } else if (shape == 2) {
        uint64_t a = 1, b = 1;
        for (uint32_t s = 0; s < std::min(alphabet, 40u); ++s) freq[s * 5 % alphabet] = a, b = a + b, a = b - a;
      } else {
        const int used = 1 + static_cast<int>(rng() % std::min<uint32_t>(alphabet, 400));
        for (int i = 0; i < used; ++i) freq[rng() % alphabet] = shape % 2 ? 1 + rng() % 4 : 1 + (rng() >> (13 + rng() % 51));  // weights below 2^52
      }
      std::vector<uint32_t> symbols;
      std::vector<uint64_t> weights;
      for (uint32_t s = 0; s < alphabet; ++s)
        if (freq[s] > 0) symbols.push_back(s), weights.push_back(freq[s]);
      const HuffmanEncoder dense(freq), sparse(alphabet, symbols, weights);
      std::vector<uint8_t> dense_table, sparse_table;
      dense.WriteTable(&dense_table);
      sparse.WriteTable(&sparse_table);
      ASSERT_EQ(sparse_table, dense_table) << "alphabet " << alphabet << ", shape " << shape;
      for (uint32_t s = 0; s < alphabet; ++s) ASSERT_EQ(sparse.Entry(s), dense.Entry(s)) << "symbol " << s;
      EXPECT_EQ(sparse.CostBitsOfUsed(weights), dense.CostBits(freq));
      ++cases;
    }
  EXPECT_EQ(cases, 120);
}

// The code lengths the format's encoder defines (docs/format.md §2.5), by the textbook
// construction: a priority queue of (weight, node index), leaves numbered in symbol order before
// the internal nodes in creation order, the two smallest merged until one is left; a code deeper
// than 15 bits has its weights flattened (w -> w / 2 | 1) and is built again.
std::vector<uint32_t> ReferenceLengths(std::vector<uint64_t> weight) {
  const size_t u = weight.size();
  if (u == 1) return {1};
  for (;;) {
    using Node = std::pair<uint64_t, size_t>;  // (weight, index)
    std::priority_queue<Node, std::vector<Node>, std::greater<Node>> queue;
    for (size_t i = 0; i < u; ++i) queue.push({weight[i], i});
    std::vector<size_t> parent(2 * u - 1, 0);
    for (size_t created = u; created < 2 * u - 1; ++created) {
      const Node a = queue.top();
      queue.pop();
      const Node b = queue.top();
      queue.pop();
      parent[a.second] = parent[b.second] = created;
      queue.push({a.first + b.first, created});
    }
    std::vector<uint32_t> depth(2 * u - 1, 0);
    for (size_t i = 2 * u - 2; i-- > 0;) depth[i] = depth[parent[i]] + 1;
    depth.resize(u);
    if (*std::max_element(depth.begin(), depth.end()) <= static_cast<uint32_t>(kHuffmanMaxBits)) return depth;
    for (uint64_t& w : weight) w = w >> 1 | 1;
  }
}

// Every code length is the reference construction's, whatever the weights: ties (many equal
// small weights), weights on both sides of the encoder's counting-sort bound (256), large ones,
// and Fibonacci-like ones that need flattening.
TEST(Huffman, CodeLengthsAreThoseOfThePriorityQueueConstruction) {
  std::mt19937_64 rng(11);
  int flattened = 0;
  for (int round = 0; round < 400; ++round) {
    const size_t used = 1 + rng() % (round % 4 == 0 ? 4096 : 400);
    std::vector<uint32_t> symbols;
    for (uint32_t s = 0; s < kHuffmanMaxSymbols && symbols.size() < used; ++s)
      if (rng() % (kHuffmanMaxSymbols / used + 1) == 0) symbols.push_back(s);
    if (symbols.empty()) symbols.push_back(static_cast<uint32_t>(rng() % kHuffmanMaxSymbols));
    std::vector<uint64_t> weights(symbols.size());
    for (size_t i = 0; i < weights.size(); ++i) {
      switch (round % 5) {
        case 0: weights[i] = 1 + rng() % 4; break;                          // ties
        case 1: weights[i] = 200 + rng() % 120; break;                      // straddling 256
        case 2: weights[i] = 1 + (rng() >> (12 + rng() % 52)); break;       // up to 2^52
        case 3: weights[i] = i < 2 ? 1 : weights[i - 1] + weights[i - 2]; break;  // Fibonacci: deep
        default: weights[i] = rng() % 3 == 0 ? 1 + rng() % 300 : 1 + rng() % 40000;
      }
      weights[i] = std::min<uint64_t>(weights[i], (uint64_t{1} << 52) - 1);
    }
    const std::vector<uint32_t> want = ReferenceLengths(weights);
    flattened += *std::max_element(want.begin(), want.end()) == kHuffmanMaxBits;
    const HuffmanEncoder code(kHuffmanMaxSymbols, symbols, weights);
    for (size_t i = 0; i < symbols.size(); ++i)
      ASSERT_EQ(code.Entry(symbols[i]) >> 16, want[i]) << "round " << round << ", symbol " << symbols[i];
  }
  EXPECT_GT(flattened, 20);
}

}  // namespace
}  // namespace dcr
