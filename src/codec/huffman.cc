#include "codec/huffman.h"

#include <algorithm>

namespace dcr {
namespace {

// Code lengths of an optimal prefix code; deterministic (ties broken by node index: leaves in
// symbol order, then internal nodes in creation order). Two queues: the leaves sorted by
// (weight, index), and the internal nodes, which are created in that order already; each merge
// takes the smaller front twice, as a priority queue of (weight, index) would.
std::vector<uint8_t> HuffmanLengths(std::span<const uint64_t> freq) {
  const size_t n = freq.size();
  std::vector<uint8_t> len(n, 0);
  std::vector<size_t> used;
  for (size_t s = 0; s < n; ++s)
    if (freq[s] > 0) used.push_back(s);
  if (used.size() == 1) {
    len[used[0]] = 1;
    return len;
  }
  const size_t u = used.size();
  // Nodes: leaves 0..u-1 (in symbol order), then internal ones; parent links give depths.
  std::vector<uint64_t> weight(2 * u - 1);
  std::vector<size_t> parent(2 * u - 1, SIZE_MAX);
  for (size_t i = 0; i < u; ++i) weight[i] = freq[used[i]];
  std::vector<size_t> leaves(u);
  for (size_t i = 0; i < u; ++i) leaves[i] = i;
  std::stable_sort(leaves.begin(), leaves.end(), [&](size_t a, size_t b) { return weight[a] < weight[b]; });
  size_t next_leaf = 0, next_internal = u, created = u;
  auto pop = [&] {
    const bool leaf = next_leaf < u && (next_internal == created || weight[leaves[next_leaf]] <= weight[next_internal]);
    return leaf ? leaves[next_leaf++] : next_internal++;
  };
  while (created < 2 * u - 1) {
    const size_t a = pop(), b = pop();
    weight[created] = weight[a] + weight[b];
    parent[a] = parent[b] = created;
    ++created;
  }
  // Depths from the root down: a parent is created after its children.
  std::vector<uint32_t> depth(2 * u - 1, 0);
  for (size_t i = 2 * u - 1; i-- > 0;)
    if (parent[i] != SIZE_MAX) depth[i] = depth[parent[i]] + 1;
  for (size_t i = 0; i < u; ++i) len[used[i]] = static_cast<uint8_t>(std::min<uint32_t>(depth[i], 255));
  return len;
}

uint32_t ReverseBits(uint32_t code, int len) {
  uint32_t r = 0;
  for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
  return r;
}

// Per code length: how many codes have it and the first canonical code of that length
// (MSB-first; shorter codes first, then by symbol).
struct CodeRanges {
  uint32_t count[kHuffmanMaxBits + 1] = {};
  uint32_t first[kHuffmanMaxBits + 1] = {};
  bool fits = true;  // false if the lengths over-subscribe the code space
};

CodeRanges CanonicalRanges(const std::vector<uint8_t>& len) {
  CodeRanges r;
  for (uint8_t l : len)
    if (l) ++r.count[l];
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

// Each symbol's canonical code, bit-reversed for LSB-first writing (ranges.fits required).
std::vector<uint32_t> CanonicalCodes(const std::vector<uint8_t>& len, const CodeRanges& ranges) {
  uint32_t next[kHuffmanMaxBits + 1];
  std::copy(std::begin(ranges.first), std::end(ranges.first), next);
  std::vector<uint32_t> codes(len.size(), 0);
  for (size_t s = 0; s < len.size(); ++s)
    if (len[s]) codes[s] = ReverseBits(next[len[s]]++, len[s]);
  return codes;
}

}  // namespace

HuffmanEncoder::HuffmanEncoder(std::span<const uint64_t> freq) {
  DCR_CHECK(freq.size() <= kHuffmanMaxSymbols);
  std::vector<uint64_t> f(freq.begin(), freq.end());
  for (;;) {
    len_ = HuffmanLengths(f);
    if (*std::max_element(len_.begin(), len_.end()) <= kHuffmanMaxBits) break;
    // Too deep: flatten the distribution and rebuild (keeps every used symbol codable).
    for (auto& x : f)
      if (x) x = (x >> 1) | 1;
  }
  const CodeRanges ranges = CanonicalRanges(len_);
  DCR_CHECK(ranges.fits);
  code_ = CanonicalCodes(len_, ranges);
  packed_.resize(len_.size());
  for (size_t i = 0; i < len_.size(); ++i) packed_[i] = uint32_t{len_[i]} << 16 | code_[i];
}

void HuffmanEncoder::WriteTable(std::vector<uint8_t>* out) const {
  uint64_t m = 0;
  for (uint8_t l : len_) m += l != 0;
  PutVarint(*out, m);
  uint64_t prev = 0;
  bool first = true;
  for (size_t s = 0; s < len_.size(); ++s) {
    if (!len_[s]) continue;
    PutVarint(*out, (first ? s : s - prev - 1) << 4 | len_[s]);
    prev = s;
    first = false;
  }
}

uint64_t HuffmanEncoder::CostBits(std::span<const uint64_t> freq) const {
  uint64_t bits = 0;
  for (size_t s = 0; s < freq.size(); ++s) bits += freq[s] * len_[s];
  return bits;
}

Status HuffmanDecoder::ReadTable(ByteReader& r, uint32_t alphabet) {
  uint64_t m = 0;
  if (!r.ReadVarint(&m) || m == 0 || m > alphabet) return Corrupt("Huffman table: bad symbol count");
  std::vector<uint8_t> len(alphabet, 0);
  uint64_t s = 0;
  for (uint64_t i = 0; i < m; ++i) {
    uint64_t entry = 0;
    if (!r.ReadVarint(&entry)) return Corrupt("Huffman table: truncated");
    const uint64_t gap = entry >> 4;
    const uint8_t l = static_cast<uint8_t>(entry & 15);
    s = i == 0 ? gap : s + gap + 1;
    if (gap >= alphabet || s >= alphabet) return Corrupt("Huffman table: symbol out of range");
    if (l == 0 || l > kHuffmanMaxBits) return Corrupt("Huffman table: code length " + std::to_string(l));
    len[s] = l;
  }
  const CodeRanges ranges = CanonicalRanges(len);
  if (!ranges.fits) return Corrupt("Huffman table: over-subscribed code");
  const std::vector<uint32_t> codes = CanonicalCodes(len, ranges);
  fast_.assign(1u << kFastBits, 0);
  for (uint32_t sym = 0; sym < alphabet; ++sym) {
    if (!len[sym] || len[sym] > kFastBits) continue;
    const uint32_t step = 1u << len[sym];
    for (uint32_t i = codes[sym]; i < fast_.size(); i += step) fast_[i] = sym << 4 | len[sym];
  }
  // Longer codes: canonical order is by length, then symbol.
  std::copy(std::begin(ranges.count), std::end(ranges.count), count_);
  std::copy(std::begin(ranges.first), std::end(ranges.first), first_);
  uint32_t at = 0;
  for (int l = 1; l <= kHuffmanMaxBits; ++l) offset_[l] = at, at += count_[l];
  sorted_.assign(at, 0);
  uint32_t fill[kHuffmanMaxBits + 1];
  std::copy(std::begin(offset_), std::end(offset_), fill);
  for (uint32_t sym = 0; sym < alphabet; ++sym)
    if (len[sym]) sorted_[fill[len[sym]]++] = sym;
  return Status::Ok();
}

void HuffmanDecoder::BuildMultiTable(uint32_t stop) {
  static_assert(kFastBits <= 15 && kHuffmanMaxSymbols <= (1u << 12));
  multi_.assign(fast_.size(), 0);
  for (uint32_t w = 0; w < fast_.size(); ++w) {
    uint64_t e = 0;
    int used = 0, count = 0;
    for (; count < kMultiSymbols; ++count) {
      // The next code's entry; it is valid only if its length fits in the bits not yet used.
      const uint32_t f = fast_[(w >> used) & ((1u << kFastBits) - 1)];
      const int l = static_cast<int>(f & 15);
      if (l == 0 || used + l > kFastBits || (f >> 4) >= stop) break;
      e |= static_cast<uint64_t>(f >> 4) << (12 * count);
      used += l;
    }
    multi_[w] = e | static_cast<uint64_t>(used) << 36 | static_cast<uint64_t>(count) << 40;
  }
}

uint32_t HuffmanDecoder::GetLong(BitReader& r) const {
  const uint32_t bits = static_cast<uint32_t>(r.Peek(kHuffmanMaxBits));
  uint32_t code = 0;  // the next l bits, MSB-first (codes are stored bit-reversed)
  for (int l = 1; l <= kHuffmanMaxBits; ++l) {
    code = code << 1 | ((bits >> (l - 1)) & 1);
    if (l > kFastBits && code - first_[l] < count_[l]) {
      r.Skip(l);
      return sorted_[offset_[l] + code - first_[l]];
    }
  }
  r.Fail();
  return 0;
}

}  // namespace dcr
