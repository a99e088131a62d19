// Internal to the value section coder (value_coding.cc encodes, value_decode.cc decodes): the
// symbol alphabet of the Huffman forms and the loops over values' symbols (value_symbols.cc).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "base/int_math.h"
#include "base/status.h"
#include "codec/bit_stream.h"
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

// Stream i of n values cut into s streams holds values [n i / s, n (i + 1) / s) (floor).
inline uint64_t StreamStart(uint64_t n, uint64_t s, uint64_t i) { return FloorShare(n, i, s); }

// The streams [first, second) of share 0 or 1 of a section's s streams, as the encoder's and the
// decoder's two threads divide them: share 0 the first half (rounded up), share 1 the rest (none
// of one stream).
inline std::pair<size_t, size_t> ShareStreams(size_t s, int share) {
  const size_t half = (s + 1) / 2;
  return share == 0 ? std::pair{size_t{0}, half} : std::pair{half, s};
}

// Symbols below this (0x1, 0x3, 0x7 ... : nearly all of a BF16 payload's) are counted in four
// interleaved histograms, the rest in one: 40 KiB of counters to clear and sum per count, where
// four whole histograms of the alphabet took 128 KiB.
inline constexpr uint32_t kSmallSymbols = 256;

// The loops over values, compiled once per Highway target in value_symbols.cc (`width` 1, 2, 4 or
// 8 bytes per value):
// Adds the symbols of n values at p to the histograms (a small symbol to one of the four,
// small4[t * kSmallSymbols + symbol] for some t < 4: only their sum is defined; a larger one,
// kEscape included, to large[symbol]), and sets bit g of *large_groups for every
// large[64 g .. 64 g + 63] it added to.
void CountSymbols(const uint8_t* p, uint64_t n, uint32_t width, uint64_t* small4, uint64_t* large,
                  uint64_t* large_groups);
// The codes of symbols below kSymbols (nearly all of a BF16 payload's values), as byte tables of
// 128 entries that vector byte permutes look up: each code's length and the low and high bytes
// of its bits. Built once per code and stream, not per run: a payload's runs can be short.
struct SmallSymbolCodes {
  static constexpr uint32_t kSymbols = 128;
  explicit SmallSymbolCodes(const HuffmanEncoder& code);
  alignas(64) uint8_t length[kSymbols];
  alignas(64) uint8_t low[kSymbols];
  alignas(64) uint8_t high[kSymbols];
};
// Writes the symbols of n values at p with `code` (`small`: its SmallSymbolCodes), and appends
// the bytes of escaped values to `escaped`.
void PutSymbols(const uint8_t* p, uint64_t n, uint32_t width, const HuffmanEncoder& code, const SmallSymbolCodes& small,
                BitWriter& w, std::vector<uint8_t>* escaped);
// For tests: PutSymbols with its scalar loops even where the vector one runs, or not.
void ForceScalarPutSymbols(bool scalar);
// Decodes n values into dst: symbols below kEscape are the value, kEscape takes the next `width`
// bytes of `escapes` from *e on. kCorrupt on invalid or truncated codes and misused escapes.
Status DecodeSymbols(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e, uint64_t n,
                     uint32_t width, uint8_t* dst);

// One stream of DecodeSymbolPair: its reader, escape area and next escape byte, where its next
// values go (advanced past the values decoded), and its first error (set once; the lane stops).
struct SymbolLane {
  BitReader* bits;
  std::span<const uint8_t> escapes;
  size_t* e;
  uint8_t* dst;
  Status status;
};
// n values of each of two streams of one code, as DecodeSymbols on each would decode them (the
// same values, escapes and errors), faster: the two streams' table lookups are independent
// chains, interleaved. Both lanes' status must be ok on entry.
void DecodeSymbolPair(const HuffmanDecoder& code, SymbolLane* a, SymbolLane* b, uint64_t n, uint32_t width);
// The same for four streams (lanes[0..3]): four interleaved chains of lookups.
void DecodeSymbolQuad(const HuffmanDecoder& code, SymbolLane* const* lanes, uint64_t n, uint32_t width);

}  // namespace dcr::value_symbols
