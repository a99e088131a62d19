#include "codec/huffman.h"

#include <algorithm>
#include <array>
#include <cstring>

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

// The low `len` (1..10) bits of `code` (< 2^len) in reverse order, by a table: the decoder's
// table set-up reverses a code per used symbol, in every payload's critical path.
constexpr auto kReverse10 = [] {
  std::array<uint16_t, 1024> t{};
  for (uint32_t v = 0; v < 1024; ++v)
    for (int b = 0; b < 10; ++b) t[v] = static_cast<uint16_t>(t[v] | ((v >> b & 1) << (9 - b)));
  return t;
}();
inline uint32_t ReverseShortBits(uint32_t code, int len) { return kReverse10[code] >> (10 - len); }

// f(q, i) for i in [0, n), where quarter q is [q * per, (q + 1) * per) (per = ceil(n / 4); the
// last quarters may be shorter or empty), the quarters interleaved: four chains through memory
// side by side where consecutive indices update the same counter (OrderByWeight's reason). Each
// quarter's indices come in ascending order.
template <typename F>
void InQuarters(size_t n, size_t per, F&& f) {
  size_t i = 0;
  for (; 3 * per + i < n; ++i) f(0, i), f(1, per + i), f(2, 2 * per + i), f(3, 3 * per + i);
  for (; i < per; ++i)
    for (size_t q = 0; q < 3 && q * per + i < n; ++q) f(q, q * per + i);
}

// The canonical code of the used symbols, from their lengths (len[i], 1..15, of the i-th used
// symbol, symbols ascending): per code length, how many codes have it and the first canonical code of
// that length (MSB-first; shorter codes first, then by symbol). O(used symbols), as is all of
// the encoder's and decoder's code building: a payload's values use a few hundred of the 4096.
struct CodeRanges {
  uint32_t count[kHuffmanMaxBits + 1] = {};
  uint32_t first[kHuffmanMaxBits + 1] = {};
  bool fits = true;  // false if the lengths over-subscribe the code space
  // The counts per length in each quarter of the symbols (quarter q: [q * per, (q + 1) * per)
  // and less for the last ones).
  size_t per = 0;
  uint32_t quarter[4][kHuffmanMaxBits + 1] = {};
};

CodeRanges CanonicalRanges(std::span<const uint8_t> len) {
  CodeRanges r;
  // Four histograms, one per quarter, counted interleaved: runs of equal lengths made one
  // histogram's increments a chain through memory (OrderByWeight's reason).
  r.per = (len.size() + 3) / 4;
  auto& counted = r.quarter;
  InQuarters(len.size(), r.per, [&](size_t q, size_t i) { ++counted[q][len[i]]; });
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
  // The used symbols, strictly ascending by the table's construction, and their lengths, in this
  // thread's reused room. Entries of one byte (gap < 8) are read without the general varint read.
  thread_local ReusedBuffer<uint32_t> sym_room;
  thread_local ReusedBuffer<uint8_t> len_room;
  uint32_t* const sym = sym_room.Take(m).data();
  uint8_t* const len = len_room.Take(m).data();
  const std::span<const uint8_t> in = r.Rest();
  size_t at = 0;
  uint64_t s = 0;
  for (uint64_t i = 0; i < m; ++i) {
    uint64_t entry = 0;
    if (at < in.size() && in[at] < 0x80) {
      entry = in[at++];
    } else {
      ByteReader rest(in.subspan(at));
      if (!rest.ReadVarint(&entry)) return Corrupt("Huffman table: truncated");
      at += rest.pos();
    }
    const uint64_t gap = entry >> 4;
    const auto l = static_cast<uint8_t>(entry & 15);
    s = i == 0 ? gap : s + gap + 1;
    if (gap >= alphabet || s >= alphabet) return Corrupt("Huffman table: symbol out of range");
    if (l == 0 || l > kHuffmanMaxBits) return Corrupt("Huffman table: code length " + std::to_string(l));
    sym[i] = static_cast<uint32_t>(s);
    len[i] = l;
  }
  r.Skip(at);
  const CodeRanges ranges = CanonicalRanges(std::span<const uint8_t>(len, m));
  if (!ranges.fits) return Corrupt("Huffman table: over-subscribed code");
  std::copy(std::begin(ranges.count), std::end(ranges.count), count_);
  std::copy(std::begin(ranges.first), std::end(ranges.first), first_);
  uint32_t place = 0;
  for (int l = 1; l <= kHuffmanMaxBits; ++l) offset_[l] = place, place += count_[l];
  // Longer codes follow the shorter ones in canonical order from a kFastBits-bit boundary on,
  // so their prefixes are consecutive: as many as their code space needs (rounded up).
  uint32_t long_space = 0;  // in units of the longest code
  for (int l = kFastBits + 1; l <= kHuffmanMaxBits; ++l) long_space += count_[l] << (kHuffmanMaxBits - l);
  long_size_ = 1 + size_t{kLongBlock} * ((long_space + kLongBlock - 1) / kLongBlock);
  arena_.resize(kFastSize + kFastSize / 2 + (long_size_ + m + 1) / 2);
  multi_ = arena_.data();
  fast_ = reinterpret_cast<uint32_t*>(multi_ + kFastSize);
  long_ = fast_ + kFastSize;
  sorted_ = long_ + long_size_;
  // Canonical order is by length, then symbol: each symbol's place is the next of its length,
  // counted in each quarter of the symbols from where its length's places of the quarter start
  // (four chains through memory, interleaved, where consecutive symbols share a length).
  uint32_t next[4][kHuffmanMaxBits + 1];
  for (int l = 0; l <= kHuffmanMaxBits; ++l)
    for (size_t q = 0; q < 4; ++q) next[q][l] = q == 0 ? offset_[l] : next[q - 1][l] + ranges.quarter[q - 1][l];
  InQuarters(m, ranges.per, [&](size_t q, size_t i) { sorted_[next[q][len[i]]++] = sym[i]; });
  // The fast table from the codes of up to kFastBits bits (in canonical order, the first ones);
  // entries that start a longer code or none stay 0.
  std::memset(fast_, 0, kFastSize * sizeof(uint32_t));
  for (int l = 1; l <= kFastBits; ++l)
    for (uint32_t p = offset_[l]; p < offset_[l] + count_[l]; ++p) {
      const uint32_t e = sorted_[p] << 4 | static_cast<uint32_t>(l);
      for (uint32_t w = ShortCodeAt(l, p); w < kFastSize; w += 1u << l) fast_[w] = e;
    }
  return Status::Ok();
}

uint32_t HuffmanDecoder::ShortCodeAt(int l, uint32_t p) const { return ReverseShortBits(first_[l] + p - offset_[l], l); }

void HuffmanDecoder::BuildMultiTable(uint32_t stop) {
  static_assert(kFastBits <= 15 && kHuffmanMaxSymbols <= (1u << 12));
  // Entry w holds the codes read from w's low bits on while each is in the fast table, fits in
  // the kFastBits bits with the ones before it, and is below `stop`, up to kMultiSymbols: that
  // sequence of codes, whose entries are those whose low bits are its codes (every 2^used-th
  // entry from its prefix on), except, for fewer than kMultiSymbols codes, those where one more
  // code fits and extends it. Each entry is written once, by its sequence: where a sequence
  // leaves r bits, the entries it keeps are those whose next r bits start with no code that
  // fits (`open` below). (Writing every sequence's entries and letting its extensions overwrite
  // them stored each entry ~2.6 times, in strided runs whose varying trip counts mispredicted;
  // decoding each entry code by code, a chain of dependent lookups per entry, took twice as
  // long still.)
  struct Sequence {
    uint32_t prefix;  // its codes as read, first bit lowest
    uint64_t symbols;
  };
  // Sequences of c + 1 codes using u bits: seq[c][from[c][u], from[c][u + 1]). At most
  // 2^kFastBits per count of codes (each owns an entry).
  thread_local std::array<std::array<Sequence, kFastSize>, kMultiSymbols> seq;
  std::array<std::array<uint32_t, kFastBits + 2>, kMultiSymbols> from = {};
  // One code: those of at most kFastBits bits below `stop`, in canonical order (by length).
  uint32_t n = 0;
  for (int l = 1; l <= kFastBits; ++l) {
    from[0][static_cast<size_t>(l)] = n;
    for (uint32_t p = offset_[l]; p < offset_[l] + count_[l]; ++p)
      if (sorted_[p] < stop) seq[0][n++] = {ShortCodeAt(l, p), sorted_[p]};
  }
  from[0][kFastBits + 1] = n;
  const Sequence* const codes = seq[0].data();
  const auto& codes_from = from[0];
  // open[open_from[r], open_from[r + 1]): the r-bit strings (first bit lowest) that start with
  // no code of at most r bits below `stop`. Those of r bits extend those of r - 1 by a bit, less
  // the codes of exactly r bits (the fast table names the code each string starts with).
  std::array<uint16_t, 2 * kFastSize> open;
  std::array<uint32_t, kFastBits + 2> open_from{};
  open[0] = 0;
  open_from[1] = 1;
  for (uint32_t r = 1, m = 1; r <= kFastBits; ++r) {
    for (uint32_t i = open_from[r - 1]; i < open_from[r]; ++i)
      for (uint32_t bit = 0; bit < 2; ++bit) {
        const uint32_t x = open[i] | bit << (r - 1), e = fast_[x];
        open[m] = static_cast<uint16_t>(x);
        m += (e & 15) != r || (e >> 4) >= stop ? 1 : 0;
      }
    open_from[r + 1] = m;
  }
  std::memset(multi_, 0, kFastSize * sizeof(uint64_t));  // no codes: no symbols, no bits
  for (size_t c = 0; c < kMultiSymbols; ++c) {  // sequences of c + 1 codes
    const Sequence* const now = seq[c].data();
    const auto& at = from[c];
    const bool last = c + 1 == kMultiSymbols;
    for (size_t used = 1; used <= kFastBits; ++used) {
      const uint64_t bits = uint64_t{used} << 48 | uint64_t{c + 1} << kCountShift;
      const size_t left = kFastBits - used;
      for (uint32_t i = at[used]; i < at[used + 1]; ++i) {
        const uint64_t e = now[i].symbols | bits;
        uint64_t* const to = multi_ + now[i].prefix;
        if (last) {  // every entry of the sequence
          for (size_t r = 0; r < (kFastSize >> used); ++r) to[r << used] = e;
        } else {
          for (uint32_t j = open_from[left]; j < open_from[left + 1]; ++j) to[size_t{open[j]} << used] = e;
        }
      }
    }
    if (last) break;
    // Sequences of c + 2 codes: each of c + 1 codes followed by each code that still fits,
    // grouped by the bits they use together.
    Sequence* const next = seq[c + 1].data();
    auto& next_from = from[c + 1];
    uint32_t m = 0;
    for (size_t used = 1; used <= kFastBits; ++used) {
      next_from[used] = m;
      for (size_t l = 1; l < used; ++l)  // the added code's length
        for (uint32_t i = at[used - l]; i < at[used - l + 1]; ++i)
          for (uint32_t j = codes_from[l]; j < codes_from[l + 1]; ++j)
            next[m++] = {now[i].prefix | codes[j].prefix << (used - l), now[i].symbols | codes[j].symbols << (16 * (c + 1))};
    }
    next_from[kFastBits + 1] = m;
  }
  // Codes longer than kFastBits, below `stop`: per kFastBits-bit prefix (whose multi entry is
  // empty: no shorter code starts it) a block of kLongBlock entries indexed by the window's next
  // bits, the blocks in canonical order. Empty entries (invalid codes, `stop` and above) stay 0;
  // entry 0 is what PeekLong reads for entries that start no longer code.
  std::memset(long_, 0, long_size_ * sizeof(uint32_t));
  const uint32_t first_unit = first_[kFastBits + 1] >> 1;  // the first longer code's prefix, MSB-first
  for (int l = kFastBits + 1; l <= kHuffmanMaxBits; ++l) {
    // Each code of length l fills `fills` entries of its block (one at length kHuffmanMaxBits,
    // the most common): a trip count per length, which the branch predictor learns, where a
    // loop per code to the block's end mispredicted its exit at most codes.
    const int rest = l - kFastBits;
    const uint32_t fills = kLongBlock >> rest, low = (1u << rest) - 1;
    const uint32_t* const symbol = sorted_ + offset_[l];
    for (uint32_t i = 0, canonical = first_[l]; i < count_[l]; ++i, ++canonical) {
      const uint32_t unit = canonical >> rest;
      const size_t block = 1 + size_t{kLongBlock} * (unit - first_unit);
      multi_[ReverseShortBits(unit, kFastBits)] = uint64_t{1} << kLongBit | block;
      const uint32_t t = symbol[i] < stop ? symbol[i] | static_cast<uint32_t>(l) << 16 : 0;  // 0: as never filled
      uint32_t* const to = long_ + block + ReverseShortBits(canonical & low, rest);
      if (fills == 1) {
        *to = t;
      } else {
        for (uint32_t f = 0; f < fills; ++f) to[f << rest] = t;
      }
    }
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
