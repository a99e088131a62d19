#include "codec/huffman.h"

#include <algorithm>

#include "base/reused_buffer.h"

namespace dcr {
namespace {

// Weights below this are sorted by counting (a payload's value symbols: most counts are small).
constexpr uint64_t kCountedWeights = 256;

// The indices of `weight` (u entries, each below 2^52) ordered by (weight, index) into `order`:
// those of weights below kCountedWeights by a counting sort (stable: ascending index within a
// weight), the rest (which come after them all) by a sort of weight << 12 | index keys. Counted
// into four histograms by index mod 4: runs of equal weights (most symbols occur once or twice)
// made one histogram's increments a chain through memory. The real 4.5 % pair's 335 value
// symbols, 321 below 256, twice (its code is flattened once): the whole code construction
// 6.1-6.2 -> 5.0-5.1 us (a sort of every key, with branches on the weights in the merge, before).
void OrderByWeight(const uint64_t* weight, size_t u, uint32_t* order) {
  static_assert(kHuffmanMaxSymbols <= (1u << 12));
  thread_local ReusedBuffer<uint64_t> key_room;
  uint64_t* const keys = key_room.Take(u).data();
  uint32_t counted[4][kCountedWeights] = {};
  size_t large = 0;
  for (size_t i = 0; i < u; ++i) {
    DCR_CHECK(weight[i] < (uint64_t{1} << 52));
    if (weight[i] < kCountedWeights)
      ++counted[i % 4][weight[i]];
    else
      keys[large++] = weight[i] << 12 | i;
  }
  uint32_t at[kCountedWeights];
  uint32_t small = 0;
  for (uint64_t w = 0; w < kCountedWeights; ++w) {
    at[w] = small;
    small += counted[0][w] + counted[1][w] + counted[2][w] + counted[3][w];
  }
  for (size_t i = 0; i < u; ++i)
    if (weight[i] < kCountedWeights) order[at[weight[i]]++] = static_cast<uint32_t>(i);
  std::sort(keys, keys + large);
  for (size_t j = 0; j < large; ++j) order[small + j] = static_cast<uint32_t>(keys[j] & 0xfff);
}

// Depths of the leaves of an optimal prefix code for `weight` (all > 0, one per used symbol in
// symbol order; 1 for a single leaf); deterministic (ties broken by node index: leaves in symbol
// order, then internal nodes in creation order). Two queues: the leaves sorted by (weight,
// index), and the internal nodes, which are created in that order already; each merge takes the
// smaller front twice, as a priority queue of (weight, index) would. O(u) in the u used symbols
// below kCountedWeights, O(u log u) above, whatever the alphabet.
std::vector<uint32_t> LeafDepths(std::span<const uint64_t> leaf_weight) {
  const size_t u = leaf_weight.size();
  if (u == 1) return {1};
  // Nodes: leaves 0..u-1, then internal ones; parent links give depths. The work arrays are this
  // thread's, reused (the constructor calls this once or twice per code).
  thread_local ReusedBuffer<uint64_t> weight_room;
  thread_local ReusedBuffer<uint32_t> parent_room, leaf_room;
  // Node 2u - 1 is a sentinel after the last leaf, and internal nodes not yet created weigh as
  // much as it: a pop compares the two fronts' weights and nothing else. (Taken without a branch,
  // by conditional moves, each pop waited on the loads of the one before: the code construction
  // of the real 4.5 % pair took 9.0 us against 5.3 with the branch.)
  constexpr uint64_t kNever = ~uint64_t{0};  // above any sum of u < 2^12 weights below 2^52
  const size_t sentinel = 2 * u - 1;
  uint64_t* const weight = weight_room.Take(2 * u).data();
  uint32_t* const parent = parent_room.Take(2 * u - 1).data();
  std::copy(leaf_weight.begin(), leaf_weight.end(), weight);
  std::fill(weight + u, weight + 2 * u, kNever);
  uint32_t* const leaves = leaf_room.Take(u + 1).data();
  OrderByWeight(weight, u, leaves);
  leaves[u] = static_cast<uint32_t>(sentinel);
  size_t next_leaf = 0, next_internal = u;
  // Every pop finds a real node at one front or the other (each merge takes two of the nodes not
  // yet taken and adds one, and u - 1 merges leave the root); the sentinel and a node not yet
  // created never meet.
  auto pop = [&]() -> size_t {
    const size_t leaf = leaves[next_leaf];
    if (weight[leaf] <= weight[next_internal]) {
      ++next_leaf;
      return leaf;
    }
    return next_internal++;
  };
  for (size_t created = u; created < sentinel; ++created) {
    const size_t a = pop(), b = pop();
    weight[created] = weight[a] + weight[b];
    parent[a] = parent[b] = static_cast<uint32_t>(created);
  }
  // Depths from the root (node 2u - 2, the only one without a parent) down: a parent is created
  // after its children.
  std::vector<uint32_t> depth(2 * u - 1, 0);
  for (size_t i = 2 * u - 2; i-- > 0;) depth[i] = depth[parent[i]] + 1;
  depth.resize(u);
  return depth;
}

// The low `len` (1..16) bits of `code` (< 2^16) in reverse order: the 16 bits reversed by swaps,
// with no loop over bits (a per-bit loop took most of a decoder's table set-up).
uint32_t ReverseBits(uint32_t code, int len) {
  uint32_t v = code;
  v = ((v >> 1) & 0x5555u) | ((v & 0x5555u) << 1);
  v = ((v >> 2) & 0x3333u) | ((v & 0x3333u) << 2);
  v = ((v >> 4) & 0x0f0fu) | ((v & 0x0f0fu) << 4);
  v = ((v >> 8) & 0x00ffu) | ((v & 0x00ffu) << 8);
  return v >> (16 - len);
}

// The canonical code of the used symbols, from their lengths (len[i], 1..15, of the i-th used
// symbol, symbols ascending): per code length, how many codes have it and the first canonical code of
// that length (MSB-first; shorter codes first, then by symbol). O(used symbols), as is all of
// the encoder's and decoder's code building: a payload's values use a few hundred of the 4096.
struct CodeRanges {
  uint32_t count[kHuffmanMaxBits + 1] = {};
  uint32_t first[kHuffmanMaxBits + 1] = {};
  bool fits = true;  // false if the lengths over-subscribe the code space
};

CodeRanges CanonicalRanges(std::span<const uint8_t> len) {
  CodeRanges r;
  uint32_t counted[4][kHuffmanMaxBits + 1] = {};  // four histograms (OrderByWeight's reason)
  for (size_t i = 0; i < len.size(); ++i) ++counted[i % 4][len[i]];
  for (int l = 0; l <= kHuffmanMaxBits; ++l) r.count[l] = counted[0][l] + counted[1][l] + counted[2][l] + counted[3][l];
  uint32_t code = 0;
  int64_t kraft = 1 << kHuffmanMaxBits;
  for (int l = 1; l <= kHuffmanMaxBits; ++l) {
    code = (code + r.count[l - 1]) << 1;
    r.first[l] = code;
    kraft -= static_cast<int64_t>(r.count[l]) << (kHuffmanMaxBits - l);
  }
  r.fits = kraft >= 0;
  return r;
}

// Each used symbol's canonical code, bit-reversed for LSB-first writing (ranges.fits required).
void CanonicalCodes(std::span<const uint8_t> len, const CodeRanges& ranges, uint32_t* codes) {
  uint32_t next[kHuffmanMaxBits + 1];
  std::copy(std::begin(ranges.first), std::end(ranges.first), next);
  for (size_t i = 0; i < len.size(); ++i) codes[i] = ReverseBits(next[len[i]]++, len[i]);
}

}  // namespace

HuffmanEncoder::HuffmanEncoder(std::span<const uint64_t> freq) {
  DCR_CHECK(freq.size() <= kHuffmanMaxSymbols);
  // For callers holding dense frequencies (tests); payloads build their codes from the used
  // symbols their tallies list (ValueTally::SumUsed), without an alphabet-sized scan.
  std::vector<uint32_t> symbols;
  std::vector<uint64_t> weight;
  for (size_t s = 0; s < freq.size(); ++s)
    if (freq[s] > 0) symbols.push_back(static_cast<uint32_t>(s)), weight.push_back(freq[s]);
  Build(static_cast<uint32_t>(freq.size()), symbols, weight);
}

HuffmanEncoder::HuffmanEncoder(uint32_t alphabet, std::span<const uint32_t> symbols, std::span<const uint64_t> weight) {
  DCR_CHECK(alphabet <= kHuffmanMaxSymbols && symbols.size() == weight.size());
  for (size_t i = 0; i < symbols.size(); ++i)
    DCR_CHECK(symbols[i] < alphabet && (i == 0 || symbols[i] > symbols[i - 1]) && weight[i] > 0);
  Build(alphabet, symbols, weight);
}

void HuffmanEncoder::Build(uint32_t alphabet, std::span<const uint32_t> symbols, std::span<const uint64_t> leaf_weight) {
  const size_t u = symbols.size();
  DCR_CHECK(u > 0);
  used_.assign(symbols.begin(), symbols.end());
  std::vector<uint64_t> weight(leaf_weight.begin(), leaf_weight.end());
  std::vector<uint32_t> depth;
  for (;;) {
    depth = LeafDepths(weight);
    if (*std::max_element(depth.begin(), depth.end()) <= static_cast<uint32_t>(kHuffmanMaxBits)) break;
    // Too deep: flatten the distribution and rebuild (keeps every used symbol codable).
    for (auto& x : weight) x = (x >> 1) | 1;
  }
  lens_.assign(depth.begin(), depth.end());
  const CodeRanges ranges = CanonicalRanges(lens_);
  DCR_CHECK(ranges.fits);
  std::vector<uint32_t> codes(u);
  CanonicalCodes(lens_, ranges, codes.data());
  packed_.assign(alphabet, 0);
  for (size_t i = 0; i < u; ++i) packed_[used_[i]] = uint32_t{lens_[i]} << 16 | codes[i];
}

void HuffmanEncoder::WriteTable(std::vector<uint8_t>* out) const {
  PutVarint(*out, used_.size());
  for (size_t i = 0; i < used_.size(); ++i) {
    const uint32_t s = used_[i];
    PutVarint(*out, static_cast<uint64_t>(i == 0 ? s : s - used_[i - 1] - 1) << 4 | lens_[i]);
  }
}

uint64_t HuffmanEncoder::CostBitsOfUsed(std::span<const uint64_t> weight) const {
  DCR_CHECK(weight.size() == used_.size());
  uint64_t bits = 0;
  for (size_t i = 0; i < used_.size(); ++i) bits += weight[i] * lens_[i];
  return bits;
}

uint64_t HuffmanEncoder::CostBits(std::span<const uint64_t> freq) const {
  uint64_t bits = 0;  // symbols outside the code have length 0
  for (size_t i = 0; i < used_.size(); ++i)
    if (used_[i] < freq.size()) bits += freq[used_[i]] * lens_[i];
  return bits;
}

Status HuffmanDecoder::ReadTable(ByteReader& r, uint32_t alphabet) {
  uint64_t m = 0;
  if (!r.ReadVarint(&m) || m == 0 || m > alphabet) return Corrupt("Huffman table: bad symbol count");
  // The used symbols, strictly ascending by the table's construction, and their lengths.
  std::vector<uint32_t> sym(m);
  std::vector<uint8_t> len(m);
  uint64_t s = 0;
  for (uint64_t i = 0; i < m; ++i) {
    uint64_t entry = 0;
    if (!r.ReadVarint(&entry)) return Corrupt("Huffman table: truncated");
    const uint64_t gap = entry >> 4;
    const uint8_t l = static_cast<uint8_t>(entry & 15);
    s = i == 0 ? gap : s + gap + 1;
    if (gap >= alphabet || s >= alphabet) return Corrupt("Huffman table: symbol out of range");
    if (l == 0 || l > kHuffmanMaxBits) return Corrupt("Huffman table: code length " + std::to_string(l));
    sym[i] = static_cast<uint32_t>(s);
    len[i] = l;
  }
  const CodeRanges ranges = CanonicalRanges(len);
  if (!ranges.fits) return Corrupt("Huffman table: over-subscribed code");
  // Canonical order is by length, then symbol: each code's place in it (`sorted_`) and its bits
  // come from one count per length (CanonicalCodes' count, and the place's, in one loop: each is
  // a chain through memory where consecutive symbols share a length).
  std::copy(std::begin(ranges.count), std::end(ranges.count), count_);
  std::copy(std::begin(ranges.first), std::end(ranges.first), first_);
  uint32_t at = 0;
  for (int l = 1; l <= kHuffmanMaxBits; ++l) offset_[l] = at, at += count_[l];
  sorted_.assign(at, 0);
  const uint32_t short_codes = offset_[kFastBits] + count_[kFastBits];  // those of up to kFastBits bits come first
  short_codes_.resize(short_codes);
  long_codes_.clear();
  uint32_t next[kHuffmanMaxBits + 1];
  std::copy(std::begin(first_), std::end(first_), next);
  fast_.assign(1u << kFastBits, 0);
  for (size_t i = 0; i < m; ++i) {
    const uint32_t canonical = next[len[i]]++, place = offset_[len[i]] + canonical - first_[len[i]];
    const uint32_t code = ReverseBits(canonical, len[i]);
    sorted_[place] = sym[i];
    if (len[i] > kFastBits) {
      long_codes_.push_back({code, sym[i], len[i]});
      continue;
    }
    short_codes_[place] = {code, sym[i], len[i]};
    const uint32_t step = 1u << len[i];
    for (uint32_t w = code; w < fast_.size(); w += step) fast_[w] = sym[i] << 4 | len[i];
  }
  return Status::Ok();
}

void HuffmanDecoder::BuildMultiTable(uint32_t stop) {
  static_assert(kFastBits <= 15 && kHuffmanMaxSymbols <= (1u << 12));
  // Entry w holds the codes read from w's low bits on while each is in the fast table, fits in
  // the kFastBits bits with the ones before it, and is below `stop`, up to kMultiSymbols. Built
  // code sequence by code sequence: a sequence's entries are those whose low bits are its codes
  // (every 2^used-th entry from its prefix on), and its extensions by one more code overwrite
  // some of them. Each length of sequence writes at most 2^kFastBits entries (Kraft), in
  // strided runs. Decoding each entry code by code (a chain of dependent lookups per entry)
  // took twice as long: ~9 us per value section on a Zen 5, in every payload's critical path.
  // Each code of at most kFastBits bits below `stop`, shortest first (ReadTable's canonical
  // order; found by a scan of the fast table and a sort instead, they took ~1/4 of this build).
  thread_local std::vector<CodeBits> codes;
  codes.clear();
  for (const CodeBits& c : short_codes_)
    if (c.symbol < stop) codes.push_back(c);
  multi_.resize(fast_.size());  // every entry is written: the empty sequence's fill covers all
  auto fill = [&](auto&& self, uint32_t prefix, int used, int count, uint64_t symbols) -> void {
    const uint64_t e = symbols | static_cast<uint64_t>(used) << 48 | static_cast<uint64_t>(count) << kCountShift;
    for (size_t w = prefix; w < multi_.size(); w += size_t{1} << used) multi_[w] = e;
    if (count == kMultiSymbols) return;
    for (const CodeBits& c : codes) {
      if (used + c.length > kFastBits) break;  // and every code after it
      self(self, prefix | c.bits << used, used + c.length, count + 1, symbols | uint64_t{c.symbol} << (16 * count));
    }
  };
  fill(fill, 0, 0, 0, 0);
  // Codes longer than kFastBits, below `stop`: per kFastBits-bit prefix (whose multi entry is
  // empty: no shorter code starts it) a block of 2^(kHuffmanMaxBits - kFastBits) entries indexed
  // by the window's next bits. Empty entries (invalid codes, `stop` and above) stay 0.
  constexpr uint32_t kBlock = 1u << (kHuffmanMaxBits - kFastBits);
  long_.assign(1, 0);  // entry 0: what PeekLong reads for entries that start no longer code
  for (const CodeBits& c : long_codes_) {
    uint64_t& e = multi_[c.bits & ((1u << kFastBits) - 1)];
    if ((e >> kLongBit & 1) == 0) {
      e = uint64_t{1} << kLongBit | long_.size();
      long_.resize(long_.size() + kBlock, 0);
    }
    if (c.symbol >= stop) continue;
    const size_t block = static_cast<size_t>(e & 0xffffffff);
    for (uint32_t j = c.bits >> kFastBits; j < kBlock; j += 1u << (c.length - kFastBits))
      long_[block + j] = c.symbol | static_cast<uint32_t>(c.length) << 16;
  }
}

uint32_t HuffmanDecoder::GetLong(BitReader& r) const {
  static_assert(kHuffmanMaxBits <= 16);
  // The next kHuffmanMaxBits bits MSB-first (codes are stored bit-reversed): their first l bits
  // are the l-bit code, tried from the shortest length the fast table leaves out.
  const uint32_t msb_first = ReverseBits(static_cast<uint32_t>(r.Peek(kHuffmanMaxBits)), kHuffmanMaxBits);
  for (int l = kFastBits + 1; l <= kHuffmanMaxBits; ++l) {
    const uint32_t code = msb_first >> (kHuffmanMaxBits - l);
    if (code - first_[l] < count_[l]) {
      r.Skip(l);
      return sorted_[offset_[l] + code - first_[l]];
    }
  }
  r.Fail();
  return 0;
}

}  // namespace dcr
