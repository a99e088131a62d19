// Internal to the value section coder (value_coding.cc encodes, value_decode.cc decodes): the
// symbol alphabet of the Huffman forms and per-width dispatch.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/int_math.h"
#include "codec/huffman.h"

namespace dcr::value_symbols {

// Values below kEscape are their own symbol; larger ones are coded as kEscape and their bytes
// follow raw. 12 bits cover every BF16/F16 XOR mask that stays within mantissa and exponent LSBs.
inline constexpr uint32_t kAlphabet = kHuffmanMaxSymbols;
inline constexpr uint32_t kEscape = kAlphabet - 1;

inline uint64_t LoadValue(const uint8_t* p, uint32_t w) {
  uint64_t v = 0;
  std::memcpy(&v, p, w);
  return v;
}

// Calls fn(U{}) with U the unsigned integer type of `width` bytes (1, 2, 4 or 8).
template <typename Fn>
auto WithWidth(uint32_t width, Fn&& fn) {
  switch (width) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    default: return fn(uint64_t{});
  }
}

// Stream i of n values cut into s streams holds values [n i / s, n (i + 1) / s) (floor).
inline uint64_t StreamStart(uint64_t n, uint64_t s, uint64_t i) { return FloorShare(n, i, s); }

}  // namespace dcr::value_symbols
