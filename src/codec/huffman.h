// Canonical, length-limited Huffman coding of small-alphabet symbols (at most 2^12 symbols,
// codes at most 15 bits). Codes are written LSB-first, bit-reversed, so that a 15-bit lookup
// table decodes one symbol per step. The code table travels with the data (docs/format.md §2.5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "codec/bit_stream.h"

namespace dcr {

inline constexpr int kHuffmanMaxBits = 15;
inline constexpr uint32_t kHuffmanMaxSymbols = 1u << 12;

class HuffmanEncoder {
 public:
  // Builds the code from symbol frequencies (index = symbol); at least one must be non-zero.
  explicit HuffmanEncoder(std::span<const uint64_t> freq);
  // Appends the code table: varint m, then m × varint (symbol gap << 4 | code length).
  void WriteTable(std::vector<uint8_t>* out) const;
  void Put(BitWriter& w, uint32_t symbol) const { w.Put(code_[symbol], len_[symbol]); }
  // Total size in bits of coding the given frequencies (table excluded).
  uint64_t CostBits(std::span<const uint64_t> freq) const;

 private:
  std::vector<uint8_t> len_;
  std::vector<uint32_t> code_;
};

class HuffmanDecoder {
 public:
  // Reads a table written by WriteTable for an alphabet of `alphabet` symbols; kCorrupt if it
  // is malformed (lengths over 15, symbols out of range, an over-subscribed code).
  Status ReadTable(ByteReader& r, uint32_t alphabet);
  // Decodes one symbol; sets the reader's overrun flag on truncated or invalid input.
  uint32_t Get(BitReader& r) const;

 private:
  std::vector<uint32_t> table_;  // 2^15 entries: symbol << 4 | length (length 0 = invalid)
};

}  // namespace dcr
