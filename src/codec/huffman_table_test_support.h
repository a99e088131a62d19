// For tests: Huffman tables (docs/format.md §2.5) written and read by the format's rules, apart
// from the codec's own reader and writer.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "codec/bit_stream.h"

namespace dcr {

// One table entry (docs/format.md §2.5): varint (symbol gap << 4 | code length).
inline void PutEntry(std::vector<uint8_t>& out, uint64_t gap, uint64_t len) { PutVarint(out, gap << 4 | len); }

// A table of `m` entries (each a symbol gap and a code length, as given: they may break the rules).
inline std::vector<uint8_t> TableOf(uint64_t m, const std::vector<std::pair<uint64_t, uint64_t>>& gap_len) {
  std::vector<uint8_t> out;
  PutVarint(out, m);
  for (auto [g, l] : gap_len) PutEntry(out, g, l);
  return out;
}

// The code lengths a table written by WriteTable declares (index = symbol), parsed by the format's
// rules (docs/format.md §2.5): varint m, then m × varint (symbol gap << 4 | code length).
inline std::vector<uint8_t> TableLengths(const std::vector<uint8_t>& table, uint32_t alphabet, size_t* table_bytes = nullptr) {
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

}  // namespace dcr
