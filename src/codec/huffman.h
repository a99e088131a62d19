// Canonical, length-limited Huffman coding of small-alphabet symbols (at most 2^12 symbols,
// codes at most 15 bits). Codes are written LSB-first, bit-reversed, so that a lookup table
// indexed by the next bits decodes a symbol per step. The code table travels with the data (docs/format.md §2.5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/uninit_vector.h"
#include "codec/bit_stream.h"

namespace dcr {

inline constexpr int kHuffmanMaxBits = 15;
inline constexpr uint32_t kHuffmanMaxSymbols = 1u << 12;

class HuffmanEncoder {
 public:
  // Builds the code from symbol frequencies (index = symbol); at least one must be non-zero.
  explicit HuffmanEncoder(std::span<const uint64_t> freq);
  // The same code from the used symbols alone: `symbols` strictly ascending and below
  // `alphabet`, `weight[i]` (> 0) the frequency of symbols[i]; at least one symbol. Equal to the
  // code from the dense frequencies (symbols[i] -> weight[i], zero elsewhere, `alphabet` long),
  // without an alphabet-sized array to fill and scan: what payloads use.
  HuffmanEncoder(uint32_t alphabet, std::span<const uint32_t> symbols, std::span<const uint64_t> weight);
  // Appends the code table: varint m, then m × varint (symbol gap << 4 | code length).
  void WriteTable(std::vector<uint8_t>* out) const;
  void Put(BitWriter& w, uint32_t symbol) const { w.Put(packed_[symbol] & 0xffff, static_cast<int>(packed_[symbol] >> 16)); }
  void Put(BitWriter::Local& w, uint32_t symbol) const {
    w.Put(packed_[symbol] & 0xffff, static_cast<int>(packed_[symbol] >> 16));
  }
  // Three symbols in one write (3 × 15 bits fit one Put): each symbol's code and length packed
  // in one word, so that a symbol costs one load.
  void Put3(BitWriter::Local& w, uint32_t a, uint32_t b, uint32_t c) const {
    const uint32_t ea = packed_[a], eb = packed_[b], ec = packed_[c];
    const int la = static_cast<int>(ea >> 16), lb = static_cast<int>(eb >> 16), lc = static_cast<int>(ec >> 16);
    w.Put(uint64_t{ea & 0xffff} | uint64_t{eb & 0xffff} << la | uint64_t{ec & 0xffff} << (la + lb), la + lb + lc);
  }
  // Put3(a, b, c) then Put3(d, e, f), in one write where the six codes total at most 56 bits (the
  // common short codes), which halves the chain of dependent writes.
  void Put6(BitWriter::Local& w, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e, uint32_t f) const {
    const uint32_t ea = packed_[a], eb = packed_[b], ec = packed_[c];
    const uint32_t ed = packed_[d], ee = packed_[e], ef = packed_[f];
    const int la = static_cast<int>(ea >> 16), lb = static_cast<int>(eb >> 16), lc = static_cast<int>(ec >> 16);
    const int ld = static_cast<int>(ed >> 16), le = static_cast<int>(ee >> 16), lf = static_cast<int>(ef >> 16);
    const uint64_t lo = uint64_t{ea & 0xffff} | uint64_t{eb & 0xffff} << la | uint64_t{ec & 0xffff} << (la + lb);
    const uint64_t hi = uint64_t{ed & 0xffff} | uint64_t{ee & 0xffff} << ld | uint64_t{ef & 0xffff} << (ld + le);
    const int lo_bits = la + lb + lc, hi_bits = ld + le + lf;
    if (lo_bits + hi_bits <= 56) [[likely]]
      return w.Put(lo | hi << lo_bits, lo_bits + hi_bits);
    w.Put(lo, lo_bits);
    w.Put(hi, hi_bits);
  }
  // Symbol s's code as Put writes it: its length << 16 | its bits (0: s has no code).
  uint32_t Entry(uint32_t symbol) const { return packed_[symbol]; }
  // Total size in bits of coding the given frequencies (table excluded).
  uint64_t CostBits(std::span<const uint64_t> freq) const;
  // The same for frequencies given per used symbol: weight[i] of the i-th (ascending) symbol
  // with a code, as the sparse constructor takes them.
  uint64_t CostBitsOfUsed(std::span<const uint64_t> weight) const;

 private:
  void Build(uint32_t alphabet, std::span<const uint32_t> symbols, std::span<const uint64_t> weight);

  std::vector<uint32_t> used_;   // the symbols with a code, ascending
  std::vector<uint8_t> lens_;    // [i]: the code length of used_[i]
  std::vector<uint32_t> packed_;  // per symbol of the alphabet: len << 16 | code (0: unused)
};

class HuffmanDecoder {
 public:
  // Reads a table written by WriteTable for an alphabet of `alphabet` symbols; kCorrupt if it
  // is malformed (lengths over 15, symbols out of range, an over-subscribed code). O(used
  // symbols + 2^kFastBits), whatever the alphabet.
  Status ReadTable(ByteReader& r, uint32_t alphabet);
  // Decodes one symbol; sets the reader's overrun flag on truncated or invalid input.
  uint32_t Get(BitReader& r) const {
    const uint32_t e = fast_[r.Peek(kFastBits)];
    if ((e & 15) == 0) return GetLong(r);
    r.Skip(static_cast<int>(e & 15));
    return e >> 4;
  }
  // Get, right after r.RefillWindow() (so at least 56 bits are in the window).
  uint32_t GetInWindow(BitReader& r) const {
    const uint32_t e = fast_[r.window() & ((1u << kFastBits) - 1)];
    if ((e & 15) == 0) return GetLong(r);
    r.SkipInWindow(static_cast<int>(e & 15));
    return e >> 4;
  }

  // Several symbols from one lookup: the codes that lie wholly within the next kFastBits bits,
  // up to kMultiSymbols of them, stopping before any symbol >= the `stop` given to
  // BuildMultiTable. With e = PeekMulti(multi_table(), window) (at least kFastBits bits in the
  // window), the symbols are MultiSymbol(e, 0..MultiCount(e)-1), and SkipInWindow(MultiBits(e))
  // consumes them. MultiCount(e) is 0 when the first code is longer or stops: decode it with Get.
  // The table is passed in so that a decode loop holds its address in a register: read through
  // the decoder, it would be loaded again after every byte store (which may alias it).
  static constexpr int kMultiSymbols = 3;
  void BuildMultiTable(uint32_t stop);
  const uint64_t* multi_table() const { return multi_; }
  static uint64_t PeekMulti(const uint64_t* table, uint64_t window) { return table[window & ((1u << kFastBits) - 1)]; }
  // The symbols are 16-bit lanes 0..2 of an entry (so that a loop writing 2-byte values stores
  // all three with one 8-byte store; lane 3, the bit count and symbol count, lands in a slot that
  // the next store overwrites).
  static uint32_t MultiSymbol(uint64_t e, int i) { return static_cast<uint32_t>(e >> (16 * i)) & 0xffff; }
  // The bit count is alone in bits 48..53 (the count sits above kLongBit): `x >> MultiBits(e)`
  // compiles to one shift of x by e >> 48, whose count the x86 shift instructions take mod 64
  // themselves, so a decode loop's chain of lookups has no AND on it.
  static int MultiBits(uint64_t e) { return static_cast<int>(e >> 48) & 63; }
  static int MultiCount(uint64_t e) { return static_cast<int>(e >> kCountShift) & 3; }
  // For an entry with no symbols (MultiCount 0) and the same window (at least kHuffmanMaxBits
  // bits in it): the code there if it is longer than the table's window and below `stop`, as
  // symbol | length << 16; 0 otherwise (an escape or an invalid code: decode it with Get). An
  // entry that starts no longer code reads entry 0 of the long-code table, which is always 0.
  const uint32_t* long_table() const { return long_; }
  static uint32_t PeekLong(const uint32_t* table, uint64_t e, uint64_t window) {
    const uint64_t at = (e & 0xffffffff) + ((window >> kFastBits) & ((1u << (kHuffmanMaxBits - kFastBits)) - 1));
    return table[(e >> kLongBit & 1) != 0 ? at : 0];
  }
  // Brings the lookup tables into this thread's cache with independent prefetches. They are
  // built per payload by one thread and read by two: on the other thread each first lookup of a
  // line would miss in the chain of dependent lookups, one miss at a time (two threads decoding
  // the 4.8 % pair's value shares at once: ~60 us each without, ~40 with; 37 with a table built
  // by each thread itself).
  void PrefetchTables() const {
    for (size_t i = 0; i < kFastSize; i += 8) __builtin_prefetch(multi_ + i);
    for (size_t i = 0; i < long_size_; i += 16) __builtin_prefetch(long_ + i);
  }
  static uint32_t LongSymbol(uint32_t t) { return t & 0xffff; }
  static int LongBits(uint32_t t) { return static_cast<int>(t >> 16); }

  HuffmanDecoder() = default;
  HuffmanDecoder(HuffmanDecoder&&) = default;  // the tables stay where they are
  HuffmanDecoder& operator=(HuffmanDecoder&&) = default;
  HuffmanDecoder(const HuffmanDecoder&) = delete;  // would point into the other's tables
  HuffmanDecoder& operator=(const HuffmanDecoder&) = delete;

 private:
  // Codes of up to kFastBits bits decode with one lookup in a table that stays in L1; longer ones
  // (rare: they are the least frequent symbols) by canonical code ranges per length.
  static constexpr int kFastBits = 10;
  static constexpr size_t kFastSize = size_t{1} << kFastBits;
  static constexpr int kLongBit = 54, kCountShift = 56;
  // Entries of long_ per kFastBits-bit prefix of longer codes.
  static constexpr uint32_t kLongBlock = 1u << (kHuffmanMaxBits - kFastBits);
  uint32_t GetLong(BitReader& r) const;
  // The code of canonical place p, of length l <= kFastBits, as read (first bit lowest).
  uint32_t ShortCodeAt(int l, uint32_t p) const;
  // The tables, in one allocation by ReadTable: decoders are made per payload, and a vector per
  // table (with the build's own vectors) took ~15 allocations and frees per table. Pointers into
  // arena_, whose heap block a move keeps. The set-up of the real 4.8 % pair's table (335
  // symbols, 303 of them longer than kFastBits) took 0.65 of the time of the vector-based one
  // (5.0 -> 3.25 us in a loop; in the decode+apply of the pair, 6.5 -> 4.0-4.4 us per value
  // decoder, one per thread, and the decode 0.99 of the time).
  UninitVector<uint64_t> arena_;
  // 2^kFastBits entries: symbols at bits 0, 16, 32; bits at 48; count at kCountShift; or, for
  // the prefix of a longer code, bit kLongBit and its block of long_ at bits 0..31.
  uint64_t* multi_ = nullptr;
  uint32_t* fast_ = nullptr;  // 2^kFastBits entries: symbol << 4 | length (0: a longer code or invalid)
  uint32_t* long_ = nullptr;  // entry 0 (always 0), then a kLongBlock block per prefix of longer codes
  size_t long_size_ = 0;
  uint32_t* sorted_ = nullptr;  // the used symbols by code length, then value: canonical order
  // Per length l: the first canonical code (MSB-first), the number of codes, and where their
  // symbols start in sorted_.
  uint32_t first_[kHuffmanMaxBits + 1] = {}, count_[kHuffmanMaxBits + 1] = {}, offset_[kHuffmanMaxBits + 1] = {};
};

}  // namespace dcr
