#include "codec/huffman.h"

#include <algorithm>
#include <queue>

namespace dcr {
namespace {

// Code lengths of an optimal prefix code; deterministic (ties broken by node index).
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
  // Nodes: leaves then internal; parent links give each leaf's depth.
  std::vector<uint64_t> weight;
  std::vector<size_t> parent;
  using Item = std::pair<uint64_t, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
  for (size_t s : used) {
    q.push({freq[s], weight.size()});
    weight.push_back(freq[s]);
    parent.push_back(SIZE_MAX);
  }
  while (q.size() > 1) {
    auto [wa, a] = q.top();
    q.pop();
    auto [wb, b] = q.top();
    q.pop();
    size_t node = weight.size();
    weight.push_back(wa + wb);
    parent.push_back(SIZE_MAX);
    parent[a] = parent[b] = node;
    q.push({wa + wb, node});
  }
  for (size_t i = 0; i < used.size(); ++i) {
    int depth = 0;
    for (size_t p = i; parent[p] != SIZE_MAX; p = parent[p]) ++depth;
    len[used[i]] = static_cast<uint8_t>(std::min(depth, 255));
  }
  return len;
}

uint32_t ReverseBits(uint32_t code, int len) {
  uint32_t r = 0;
  for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
  return r;
}

// Canonical codes from lengths: shorter codes first, then by symbol. Returns false if the
// lengths over-subscribe the code space.
bool CanonicalCodes(const std::vector<uint8_t>& len, std::vector<uint32_t>* codes) {
  uint32_t count[kHuffmanMaxBits + 1] = {};
  for (uint8_t l : len)
    if (l) ++count[l];
  uint32_t next[kHuffmanMaxBits + 2] = {};
  uint32_t code = 0;
  int64_t kraft = 1 << kHuffmanMaxBits;
  for (int l = 1; l <= kHuffmanMaxBits; ++l) {
    code = (code + count[l - 1]) << 1;
    next[l] = code;
    kraft -= static_cast<int64_t>(count[l]) << (kHuffmanMaxBits - l);
  }
  if (kraft < 0) return false;
  codes->assign(len.size(), 0);
  for (size_t s = 0; s < len.size(); ++s)
    if (len[s]) (*codes)[s] = ReverseBits(next[len[s]]++, len[s]);
  return true;
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
  DCR_CHECK(CanonicalCodes(len_, &code_));
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
  std::vector<uint32_t> codes;
  if (!CanonicalCodes(len, &codes)) return Corrupt("Huffman table: over-subscribed code");
  table_.assign(1u << kHuffmanMaxBits, 0);
  for (uint32_t sym = 0; sym < alphabet; ++sym) {
    if (!len[sym]) continue;
    const uint32_t step = 1u << len[sym];
    for (uint32_t i = codes[sym]; i < table_.size(); i += step) table_[i] = sym << 4 | len[sym];
  }
  return Status::Ok();
}

uint32_t HuffmanDecoder::Get(BitReader& r) const {
  uint32_t e = table_[r.Peek(kHuffmanMaxBits)];
  if ((e & 15) == 0) {
    r.Fail();
    return 0;
  }
  r.Skip(static_cast<int>(e & 15));
  return e >> 4;
}

}  // namespace dcr
