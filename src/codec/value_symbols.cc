// The loops over value symbols of value_symbols.h, compiled once per Highway target
// (foreach_target.h) for the target's scalar instructions (on x86-64 the AVX2 and AVX-512 targets
// have BMI1/BMI2: one-micro-op register-count shifts) and, for counting and (with AVX-512 VBMI)
// writing 2-byte values, its vectors; dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/value_symbols.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <tuple>
#include <utility>

#include "codec/simd_masks-inl.h"  // CompressWords
#include "codec/value_symbols.h"

HWY_BEFORE_NAMESPACE();
namespace dcr::value_symbols {
namespace HWY_NAMESPACE {
namespace {

// Counts value v's symbol: in `small` (one of the four small histograms) below kSmallSymbols,
// else in `large` (values from kEscape on as kEscape), and then sets the bit of its group of 64
// counters in *groups (a caller's local).
HWY_INLINE void CountValue(uint64_t v, uint64_t* small, uint64_t* large, uint64_t* groups) {
  const uint64_t symbol = std::min<uint64_t>(v, kEscape);
  ++*(symbol < kSmallSymbols ? small + symbol : large + symbol);
  *groups |= static_cast<uint64_t>(symbol >= kSmallSymbols) << (symbol >> 6);
}

// CountSymbols of value_symbols.h, for values of type U.
template <typename U>
void CountSymbolsT(const uint8_t* p, uint64_t n, uint64_t* small4, uint64_t* large, uint64_t* large_groups) {
  uint64_t groups = 0;
  auto count = [&](uint64_t i, uint64_t* small) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    CountValue(v, small, large, &groups);
  };
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4)
    count(i, small4), count(i + 1, small4 + kSmallSymbols), count(i + 2, small4 + 2 * kSmallSymbols),
        count(i + 3, small4 + 3 * kSmallSymbols);
  for (; i < n; ++i) count(i, small4 + (i & 3) * kSmallSymbols);
  *large_groups |= groups;
}

namespace hn = hwy::HWY_NAMESPACE;

// CountSymbolsT<uint16_t>, a vector at a time: the commonest symbols of BF16 and F16 values are
// counted by compares, the others one by one: of XOR masks 0x1, 0x3, 0x7, 0xf (one to four
// mantissa LSBs, 83-90 % of a real payload's values), of steps (value_steps.h) 1 to 4 (-1, +1,
// -2, +2 units in the last place, 92-95 %). The histograms' increments were a chain through
// memory wherever neighbouring values share a symbol (~3.6 cycles a value on Zen 5; steps
// counted by the XOR masks' compares alone made a two-thread context encode of the real 4.8 %
// pair 1.04x as long).
void CountSymbols16(const uint8_t* p, uint64_t n, uint64_t* small4, uint64_t* large, uint64_t* large_groups) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
  // With AVX-512 VBMI2 the other values of each vector are packed by one word compress into
  // `rest` and counted once a batch has gathered, by CountSymbolsT's loop of four histograms: the
  // loop over each vector's mask bits here mispredicted its exit about once a vector (one thread,
  // the real 4.8 % pair's 69.7 K values, 17 % of them none of the four: 0.28 ns a value, 0.19-0.20
  // so; choosing CountValue's histogram without a branch made it 0.28 again).
  constexpr size_t kBatch = 1024;
  alignas(64) uint16_t rest[kBatch + 32];
  size_t in_rest = 0;
  const __m512i s1 = _mm512_set1_epi16(1), s2 = _mm512_set1_epi16(2), s3 = _mm512_set1_epi16(3),
                s4 = _mm512_set1_epi16(4), s7 = _mm512_set1_epi16(7), s15 = _mm512_set1_epi16(15);
  uint64_t c1 = 0, c2 = 0, c3 = 0, c4 = 0, c7 = 0, c15 = 0;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512(p + i * 2);
    const __mmask32 e1 = _mm512_cmpeq_epi16_mask(v, s1), e2 = _mm512_cmpeq_epi16_mask(v, s2),
                    e3 = _mm512_cmpeq_epi16_mask(v, s3), e4 = _mm512_cmpeq_epi16_mask(v, s4),
                    e7 = _mm512_cmpeq_epi16_mask(v, s7), e15 = _mm512_cmpeq_epi16_mask(v, s15);
    c1 += __builtin_popcount(e1), c2 += __builtin_popcount(e2), c3 += __builtin_popcount(e3);
    c4 += __builtin_popcount(e4), c7 += __builtin_popcount(e7), c15 += __builtin_popcount(e15);
    const __mmask32 others = ~(e1 | e2 | e3 | e4 | e7 | e15);
    _mm512_storeu_si512(rest + in_rest, ::dcr::HWY_NAMESPACE::CompressWords(others, v));
    in_rest += static_cast<size_t>(__builtin_popcount(others));
    if (in_rest >= kBatch) {
      CountSymbolsT<uint16_t>(reinterpret_cast<const uint8_t*>(rest), in_rest, small4, large, large_groups);
      in_rest = 0;
    }
  }
  small4[1] += c1, small4[2] += c2, small4[3] += c3, small4[4] += c4, small4[7] += c7, small4[15] += c15;
  CountSymbolsT<uint16_t>(reinterpret_cast<const uint8_t*>(rest), in_rest, small4, large, large_groups);
  CountSymbolsT<uint16_t>(p + i * 2, n - i, small4, large, large_groups);
#else
  const hn::ScalableTag<uint16_t> d;
  const size_t lanes = hn::Lanes(d);
  uint64_t i = 0;
  uint64_t groups = 0;
  if (lanes >= 8 && lanes <= 64) {
    const auto s1 = hn::Set(d, 1), s2 = hn::Set(d, 2), s3 = hn::Set(d, 3), s4 = hn::Set(d, 4), s7 = hn::Set(d, 7),
               s15 = hn::Set(d, 15);
    uint64_t c1 = 0, c2 = 0, c3 = 0, c4 = 0, c7 = 0, c15 = 0;
    for (; i + lanes <= n; i += lanes) {
      const uint8_t* at = p + i * 2;
      const auto v = hn::LoadU(d, reinterpret_cast<const uint16_t*>(at));
      const auto e1 = hn::Eq(v, s1), e2 = hn::Eq(v, s2), e3 = hn::Eq(v, s3), e4 = hn::Eq(v, s4), e7 = hn::Eq(v, s7),
                 e15 = hn::Eq(v, s15);
      c1 += hn::CountTrue(d, e1), c2 += hn::CountTrue(d, e2), c3 += hn::CountTrue(d, e3);
      c4 += hn::CountTrue(d, e4), c7 += hn::CountTrue(d, e7), c15 += hn::CountTrue(d, e15);
      const auto rest = hn::Not(hn::Or(hn::Or(hn::Or(e1, e2), hn::Or(e3, e4)), hn::Or(e7, e15)));
      if (hn::AllFalse(d, rest)) continue;
      uint8_t mask_bytes[8] = {};
      hn::StoreMaskBits(d, rest, mask_bytes);
      uint64_t bits;
      std::memcpy(&bits, mask_bytes, 8);
      for (; bits != 0; bits &= bits - 1) {
        uint16_t v16;
        std::memcpy(&v16, at + 2 * static_cast<size_t>(__builtin_ctzll(bits)), 2);
        CountValue(v16, small4, large, &groups);
      }
    }
    small4[1] += c1, small4[2] += c2, small4[3] += c3, small4[4] += c4, small4[7] += c7, small4[15] += c15;
  }
  *large_groups |= groups;
  CountSymbolsT<uint16_t>(p + i * 2, n - i, small4, large, large_groups);
#endif
}

// PutSymbols of value_symbols.h, for values of type U: six or three symbols per write.
template <typename U>
void PutSymbolsT(const uint8_t* p, uint64_t n, const HuffmanEncoder& code, BitWriter::Local& w,
                 std::vector<uint8_t>* escaped) {
  auto symbol = [&](uint64_t i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    if (v >= kEscape) [[unlikely]]
      escaped->insert(escaped->end(), p + i * sizeof(U), p + (i + 1) * sizeof(U));
    return static_cast<uint32_t>(std::min<uint64_t>(v, kEscape));
  };
  uint64_t i = 0;
  for (; i + 6 <= n; i += 6) {
    // In order: each may append an escape (a call's arguments are evaluated in no fixed order).
    const uint32_t a = symbol(i), b = symbol(i + 1), c = symbol(i + 2);
    const uint32_t d = symbol(i + 3), e = symbol(i + 4), f = symbol(i + 5);
    code.Put6(w, a, b, c, d, e, f);
  }
  for (; i + 3 <= n; i += 3) {
    const uint32_t a = symbol(i), b = symbol(i + 1), c = symbol(i + 2);
    code.Put3(w, a, b, c);
  }
  for (; i < n; ++i) code.Put(w, symbol(i));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// The eights of 32 codes: code j in 16-bit lane j, `bits` (LSB-first, nothing at or above its
// length) with its length in `len` (at most 16). Neighbouring codes are joined in three rounds
// of widening lanes (pairs in 32 bits, fours in 64, eights in the even 64-bit lanes: lane 2 j
// holds codes 8 j .. 8 j + 7 and their total length). An eight longer than 64 bits loses bits:
// the caller checks the lengths before writing (at most 56 per write).
HWY_INLINE void JoinEights(__m512i bits, __m512i len, __m512i* bits8, __m512i* len8) {
  const __m512i low16 = _mm512_set1_epi32(0xffff), low32 = _mm512_set1_epi64(0xffffffff);
  const __m512i len1 = _mm512_and_si512(len, low16);  // of the first code of each pair
  const __m512i bits2 =
      _mm512_or_si512(_mm512_and_si512(bits, low16), _mm512_sllv_epi32(_mm512_srli_epi32(bits, 16), len1));
  const __m512i len2 = _mm512_add_epi32(len1, _mm512_srli_epi32(len, 16));
  const __m512i len21 = _mm512_and_si512(len2, low32);
  const __m512i bits4 =
      _mm512_or_si512(_mm512_and_si512(bits2, low32), _mm512_sllv_epi64(_mm512_srli_epi64(bits2, 32), len21));
  const __m512i len4 = _mm512_add_epi64(len21, _mm512_srli_epi64(len2, 32));
  // unpackhi brings lane 2 j + 1 down to lane 2 j.
  *bits8 = _mm512_or_si512(bits4, _mm512_sllv_epi64(_mm512_unpackhi_epi64(bits4, bits4), len4));
  *len8 = _mm512_add_epi64(len4, _mm512_unpackhi_epi64(len4, len4));
}

// Whether every eight of JoinEights fits one write (at most 56 bits).
HWY_INLINE bool EightsFitWrites(__m512i len8) {
  return _mm512_mask_cmpgt_epu64_mask(0x55, len8, _mm512_set1_epi64(56)) == 0;
}

// Values [from, to) of 2-byte values at p, one code per write, escapes' bytes appended.
HWY_INLINE void PutOneByOne16(const uint8_t* p, uint64_t from, uint64_t to, const HuffmanEncoder& code,
                              BitWriter::Local& w, std::vector<uint8_t>* escaped) {
  for (uint64_t i = from; i < to; ++i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    if (v >= kEscape) [[unlikely]]
      escaped->insert(escaped->end(), p + 2 * i, p + 2 * i + 2);
    const uint32_t e = code.Entry(std::min<uint32_t>(v, kEscape));
    w.Put(e & 0xffff, static_cast<int>(e >> 16));
  }
}

// PutSymbolsT<uint16_t> with AVX-512 VBMI. Codes of values below SmallSymbolCodes::kSymbols
// (nearly all: BF16 XOR masks take codes of a few bits) come from byte permutes of its 128-entry
// tables, and the few from 128 up to the escape (an exponent's bit changed: 1.5 % of the real
// 4.5 % pair's values, but in 39 % of its groups of 32) from the whole table, one lane patched
// each: for 32 values at once where none is escaped and each eight's codes total at most 56 bits,
// joined in registers into four writes; else eight at a time, placed by a prefix sum of their
// lengths, where the eight allow it; else one code per value (an escape, long codes). Every use
// of the writer is inlined, so its state stays in registers; a writer passed by reference to a
// call lived in memory, and each write went through a store and a reload. The real 4.5 % pair's
// 65 Ki values, one thread, best of 2000: 72 us with the scalar loop, 62 with eight values per
// step alone, 43 with this taking only groups below 128, 34 (another run) against 22.6 with the
// patched lanes (19 were every value below 128).
void PutSymbols16(const uint8_t* p, uint64_t n, const HuffmanEncoder& code, const SmallSymbolCodes& small,
                  BitWriter& writer, std::vector<uint8_t>* escaped) {
  BitWriter::Local w(writer);
  const __m512i len_lo = _mm512_load_si512(small.length), len_hi = _mm512_load_si512(small.length + 64);
  const __m512i low_lo = _mm512_load_si512(small.low), low_hi = _mm512_load_si512(small.low + 64);
  const __m512i high_lo = _mm512_load_si512(small.high), high_hi = _mm512_load_si512(small.high + 64);
  const __m512i limit = _mm512_set1_epi64(SmallSymbolCodes::kSymbols), zero = _mm512_setzero_si512();
  constexpr __mmask64 kByte0 = 0x0101010101010101ull, kByte1 = kByte0 << 1;
  // Values [at, at + 8): one write where none is escaped and their codes total at most 56 bits,
  // else one per value.
  const __m512i escape64 = _mm512_set1_epi64(kEscape);
  auto put8 = [&](uint64_t at) __attribute__((always_inline)) {
    const __m512i v = _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * at)));
    const __mmask8 large = _mm512_cmpge_epu64_mask(v, limit);
    if (_mm512_mask_cmpge_epu64_mask(large, v, escape64) == 0) [[likely]] {
      // Byte 0 of each lane indexes the length and low-byte tables, byte 1 (v again) the high;
      // a value from 128 on takes its code from the whole table instead.
      const __m512i index = _mm512_or_si512(v, _mm512_slli_epi64(v, 8));
      __m512i len = _mm512_maskz_permutex2var_epi8(kByte0, len_lo, index, len_hi);
      __m512i bits = _mm512_or_si512(_mm512_maskz_permutex2var_epi8(kByte0, low_lo, index, low_hi),
                                     _mm512_maskz_permutex2var_epi8(kByte1, high_lo, index, high_hi));
      for (uint32_t m = large; m != 0; m &= m - 1) {
        const uint32_t j = static_cast<uint32_t>(__builtin_ctz(m));
        uint16_t big;
        std::memcpy(&big, p + 2 * (at + j), 2);
        const uint32_t e = code.Entry(big);
        len = _mm512_mask_set1_epi64(len, static_cast<__mmask8>(1u << j), e >> 16);
        bits = _mm512_mask_set1_epi64(bits, static_cast<__mmask8>(1u << j), e & 0xffff);
      }
      __m512i end = _mm512_add_epi64(len, _mm512_alignr_epi64(len, zero, 7));  // inclusive prefix sums
      end = _mm512_add_epi64(end, _mm512_alignr_epi64(end, zero, 6));
      end = _mm512_add_epi64(end, _mm512_alignr_epi64(end, zero, 4));
      const int total = static_cast<int>(_mm_extract_epi64(_mm512_extracti64x2_epi64(end, 3), 1));
      if (total <= 56) [[likely]] {
        // The codes do not overlap, so their sum is their union.
        const __m512i placed = _mm512_sllv_epi64(bits, _mm512_sub_epi64(end, len));
        w.Put(static_cast<uint64_t>(_mm512_reduce_add_epi64(placed)), total);
        return;
      }
    }
    PutOneByOne16(p, at, at + 8, code, w, escaped);
  };
  // 32 values per step where all are below 128 and each eight's codes total at most 56 bits: the
  // lookups in 16-bit lanes, the codes joined into eights (JoinEights), four writes.
  const __m512i limit16 = _mm512_set1_epi16(static_cast<int16_t>(SmallSymbolCodes::kSymbols));
  constexpr __mmask64 kEvenBytes = 0x5555555555555555ull, kOddBytes = kEvenBytes << 1;
  uint64_t i = 0;
  const __m512i escape16 = _mm512_set1_epi16(static_cast<int16_t>(kEscape));
  for (; i + 32 <= n; i += 32) {
    const __m512i v = _mm512_loadu_si512(p + 2 * i);
    const __mmask32 large = _mm512_cmpge_epu16_mask(v, limit16);
    if (_mm512_mask_cmpge_epu16_mask(large, v, escape16) == 0) {
      const __m512i index = _mm512_or_si512(v, _mm512_slli_epi16(v, 8));
      __m512i len = _mm512_maskz_permutex2var_epi8(kEvenBytes, len_lo, index, len_hi);
      __m512i bits = _mm512_or_si512(_mm512_maskz_permutex2var_epi8(kEvenBytes, low_lo, index, low_hi),
                                     _mm512_maskz_permutex2var_epi8(kOddBytes, high_lo, index, high_hi));
      for (uint32_t m = large; m != 0; m &= m - 1) {  // values from 128 on: codes from the whole table
        const uint32_t j = static_cast<uint32_t>(__builtin_ctz(m));
        uint16_t big;
        std::memcpy(&big, p + 2 * (i + j), 2);
        const uint32_t e = code.Entry(big);
        len = _mm512_mask_set1_epi16(len, 1u << j, static_cast<int16_t>(e >> 16));
        bits = _mm512_mask_set1_epi16(bits, 1u << j, static_cast<int16_t>(e & 0xffff));
      }
      __m512i bits8, len8;
      JoinEights(bits, len, &bits8, &len8);
      if (EightsFitWrites(len8)) [[likely]] {
        alignas(64) uint64_t b8[8], l8[8];
        _mm512_store_si512(b8, bits8);
        _mm512_store_si512(l8, len8);
        for (int j = 0; j < 8; j += 2) w.Put(b8[j], static_cast<int>(l8[j]));
        continue;
      }
    }
    for (uint64_t at = i; at < i + 32; at += 8) put8(at);
  }
  for (; i + 8 <= n; i += 8) put8(i);
  PutOneByOne16(p, i, n, code, w, escaped);
}
#endif

// The slots one step of four multi-symbol lookups may write from its first value on:
// kMultiSymbols per lookup, and for 2-byte values one more (StoreMultiSymbols).
template <typename U>
constexpr uint64_t kStepSlots = 4 * HuffmanDecoder::kMultiSymbols + (sizeof(U) == 2 ? 1 : 0);

// Writes the symbols of multi-symbol entry m as values at dst: kMultiSymbols slots, of which the
// next lookup's store overwrites those past the entry's symbols. 2-byte values take the entry's
// four 16-bit lanes in one store (lane 3, its counts, lands in a slot the next store overwrites).
template <typename U>
HWY_INLINE void StoreMultiSymbols(uint8_t* dst, uint64_t m) {
  if constexpr (sizeof(U) == 2) {
    std::memcpy(dst, &m, sizeof(m));
  } else {
    for (int j = 0; j < HuffmanDecoder::kMultiSymbols; ++j) {
      const U v = static_cast<U>(HuffmanDecoder::MultiSymbol(m, j));
      std::memcpy(dst + j * sizeof(U), &v, sizeof(U));
    }
  }
}

// The code at the window's start when it is longer than the lookup window (its multi-symbol
// entry m has no symbols), from the long-code table: its value goes to dst and its bits are
// consumed. False for an escape or an invalid code, which the general path decodes. The window
// must hold kHuffmanMaxBits bits.
template <typename U>
HWY_INLINE bool TakeLongerCode(const uint32_t* longer, uint64_t m, BitReader::Window& window, uint8_t* dst) {
  const uint32_t t = HuffmanDecoder::PeekLong(longer, m, window.acc);
  if (t == 0) return false;
  const U v = static_cast<U>(HuffmanDecoder::LongSymbol(t));
  std::memcpy(dst, &v, sizeof(U));
  window.Skip(HuffmanDecoder::LongBits(t));
  return true;
}

// DecodeSymbols of value_symbols.h, for values of type U.
template <typename U>
Status DecodeSymbolsT(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e, uint64_t n,
                      uint8_t* dst) {
  for (uint64_t i = 0; i < n; ++i, dst += sizeof(U)) {
    // Common codes, several per lookup (values of at least two bytes, where every symbol below
    // the escape is a valid value): four lookups of at most kFastBits bits each fit in one
    // refilled window, and each writes kMultiSymbols slots, of which the next step overwrites
    // the unused ones.
    // The loop reads a local copy of the reader's window (BitReader::Window), put back after it.
    if constexpr (sizeof(U) >= 2) {
      static_assert(4 * 10 <= 56, "four lookups per refill");
      const uint64_t* multi = code.multi_table();
      const uint32_t* longer = code.long_table();
      BitReader::Window window = bits.TakeWindow();
      while (n - i >= kStepSlots<U> && window.Has()) {
        window.Refill();
        int k = 0;
        for (; k < 4; ++k) {
          const uint64_t m = HuffmanDecoder::PeekMulti(multi, window.acc);
          const int c = HuffmanDecoder::MultiCount(m);
          if (c == 0) {
            // A longer code ends the step (at most 3 lookups of 10 bits and 15 bits before a
            // refill); an escape or invalid code leaves the loop.
            if (!TakeLongerCode<U>(longer, m, window, dst)) break;
            dst += sizeof(U);
            ++i;
            k = 4;
            break;
          }
          StoreMultiSymbols<U>(dst, m);
          window.Skip(HuffmanDecoder::MultiBits(m));
          dst += c * sizeof(U);
          i += static_cast<uint64_t>(c);
        }
        if (k < 4) break;  // a long code or an escape: one symbol the general way
      }
      bits.PutWindow(window);
      if (i == n) break;
    }
    uint32_t sym;
    if (bits.HasWindow()) {  // the common case: no refill branch, no per-symbol length check
      bits.RefillWindow();
      sym = code.GetInWindow(bits);
    } else {
      sym = code.Get(bits);
      if (bits.overrun()) return Corrupt("value symbols truncated or invalid");
    }
    if (sym < kEscape) [[likely]] {
      if (sizeof(U) == 1 && sym > 0xff) return Corrupt("value symbol wider than its 1-byte dtype");
      const U v = static_cast<U>(sym);
      std::memcpy(dst, &v, sizeof(U));
      continue;
    }
    if (bits.overrun()) return Corrupt("value symbols truncated or invalid");  // GetLong failed
    if (escapes.size() - *e < sizeof(U)) return Corrupt("value escapes exhausted");
    std::memcpy(dst, escapes.data() + *e, sizeof(U));
    *e += sizeof(U);
    if (LoadValue(dst, sizeof(U)) < kEscape) return Corrupt("escaped value below the escape threshold");
  }
  // GetLong signals an invalid code only through the overrun flag, with symbol 0.
  if (bits.overrun()) return Corrupt("value symbols truncated or invalid");
  return Status::Ok();
}

// Four multi-symbol lookups of each lane per refill, interleaved, while both lanes have at least
// kStepSlots values left and a full window. A lane whose next code is longer than the lookup
// window, an escape or invalid stalls (its entry has no symbols and no bits, so its later
// lookups of the step repeat it without effect); after the step a longer code is read from the
// long-code table in the loop, an escape or invalid code one symbol through DecodeSymbolsT. The
// 70 k values of the 4.8 % real pair on one thread (Zen 5): 88 us in
// one stream through DecodeSymbols, 65 us in four streams two at a time.
// The lane's next n values one symbol at a time (DecodeSymbolsT), its output pointer advanced
// past them: where a lane leaves the interleaved loops (and every lane of 1-byte values).
template <typename U>
void DecodeLaneAlone(const HuffmanDecoder& code, SymbolLane* lane, uint64_t n) {
  lane->status = DecodeSymbolsT<U>(code, *lane->bits, lane->escapes, lane->e, n, lane->dst);
  lane->dst += n * sizeof(U);
}

// One lane of DecodeSymbolPairT's step loop, in as few registers as the loop can keep: the
// input as a pointer and the last one a full refill may load from, the window, where values go
// and the last place a step may start from. (With two BitReader::Windows, value counters and a
// flag per lane per lookup, the loop kept more live values than there are registers, and its
// spills and reloads took ~13 % of the section's decode.)
struct PairLane {
  const uint8_t* in;
  const uint8_t* in_last;  // a refill loads 8 bytes from `in` while in <= in_last
  uint64_t acc;
  int fill;
  uint8_t* dst;
  uint8_t* dst_last;  // a step (kStepSlots values) may start while dst <= dst_last

  void Refill() {
    uint64_t next;
    std::memcpy(&next, in, 8);
    acc |= next << fill;  // bits already in acc above fill are the same input bits, or zero
    in += static_cast<size_t>((63 - fill) >> 3);
    fill |= 56;
  }
};

template <typename U>
void DecodeSymbolPairT(const HuffmanDecoder& code, SymbolLane* a, SymbolLane* b, uint64_t n) {
  static_assert(sizeof(U) >= 2, "every symbol below the escape is a value");
  const uint64_t* multi = code.multi_table();
  uint64_t ia = 0, ib = 0;
  for (;;) {
    // Locals whose addresses are never taken: the stores through the byte pointers may alias
    // the lanes and readers, whose members would be reloaded after every store.
    BitReader::Window wa = a->bits->TakeWindow(), wb = b->bits->TakeWindow();
    bool stall_a = false, stall_b = false;
    if (n - ia >= kStepSlots<U> && n - ib >= kStepSlots<U> && wa.Has() && wb.Has()) {
      PairLane la{wa.data + wa.pos, wa.data + wa.size - 8, wa.acc, wa.fill,
                  a->dst, a->dst + (n - ia - kStepSlots<U>) * sizeof(U)};
      PairLane lb{wb.data + wb.pos, wb.data + wb.size - 8, wb.acc, wb.fill,
                  b->dst, b->dst + (n - ib - kStepSlots<U>) * sizeof(U)};
      for (;;) {
        la.Refill();
        lb.Refill();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const uint64_t ma = HuffmanDecoder::PeekMulti(multi, la.acc), mb = HuffmanDecoder::PeekMulti(multi, lb.acc);
          StoreMultiSymbols<U>(la.dst, ma);
          StoreMultiSymbols<U>(lb.dst, mb);
          const int bits_a = HuffmanDecoder::MultiBits(ma), bits_b = HuffmanDecoder::MultiBits(mb);
          la.acc >>= bits_a, la.fill -= bits_a;
          lb.acc >>= bits_b, lb.fill -= bits_b;
          la.dst += HuffmanDecoder::MultiCount(ma) * sizeof(U);
          lb.dst += HuffmanDecoder::MultiCount(mb) * sizeof(U);
        }
        // A lane stalls at a code its lookups cannot take (an entry without symbols, which
        // takes no bits either): the step's later lookups repeat it without effect. Checked
        // once per step, at the entry the next lookup would read, not at every lookup.
        stall_a = HuffmanDecoder::MultiCount(HuffmanDecoder::PeekMulti(multi, la.acc)) == 0;
        stall_b = HuffmanDecoder::MultiCount(HuffmanDecoder::PeekMulti(multi, lb.acc)) == 0;
        if (stall_a || stall_b) [[unlikely]] {
          // A longer code (at most 15 bits; the step took at most 40 of 56) is read here, without
          // leaving the loop; an escape or invalid code leaves it.
          BitReader::Window ta{nullptr, 0, 0, la.acc, la.fill}, tb{nullptr, 0, 0, lb.acc, lb.fill};
          if (stall_a && TakeLongerCode<U>(code.long_table(), HuffmanDecoder::PeekMulti(multi, la.acc), ta, la.dst))
            la.dst += sizeof(U), la.acc = ta.acc, la.fill = ta.fill, stall_a = false;
          if (stall_b && TakeLongerCode<U>(code.long_table(), HuffmanDecoder::PeekMulti(multi, lb.acc), tb, lb.dst))
            lb.dst += sizeof(U), lb.acc = tb.acc, lb.fill = tb.fill, stall_b = false;
          if (stall_a || stall_b) break;
        }
        if (la.dst > la.dst_last || lb.dst > lb.dst_last || la.in > la.in_last || lb.in > lb.in_last) break;
      }
      ia += static_cast<uint64_t>(la.dst - a->dst) / sizeof(U);
      ib += static_cast<uint64_t>(lb.dst - b->dst) / sizeof(U);
      a->dst = la.dst, b->dst = lb.dst;
      wa.pos = static_cast<size_t>(la.in - wa.data), wa.acc = la.acc, wa.fill = la.fill;
      wb.pos = static_cast<size_t>(lb.in - wb.data), wb.acc = lb.acc, wb.fill = lb.fill;
    }
    a->bits->PutWindow(wa);
    b->bits->PutWindow(wb);
    if (!stall_a && !stall_b) break;  // near the end of the values or of an input: one by one below
    for (auto [lane, i, stalled] : {std::tuple{a, &ia, stall_a}, std::tuple{b, &ib, stall_b}}) {
      if (!stalled || *i == n) continue;
      lane->status = DecodeSymbolsT<U>(code, *lane->bits, lane->escapes, lane->e, 1, lane->dst);
      if (!lane->status.ok()) break;
      lane->dst += sizeof(U), ++*i;
    }
    if (!a->status.ok() || !b->status.ok()) break;
  }
  // The rest (or, after one lane's error, the other lane's rest) one stream at a time.
  for (auto [lane, i] : {std::pair{a, ia}, std::pair{b, ib}})
    if (lane->status.ok()) DecodeLaneAlone<U>(code, lane, n - i);
}

// The slots one step of DecodeSymbolQuadT may write in a lane from its first value on: four
// lookups' (kStepSlots) and the longer code read after them.
template <typename U>
constexpr uint64_t kQuadStepSlots = kStepSlots<U> + 1;

// DecodeSymbolPairT's loop for four streams, whose four chains of table lookups (each lookup
// waits on the one before it in its stream) overlap where two left the core idle between them.
// A lane's state is its bit position (as an address times 8 plus the bit) and where its next
// value goes; each step reloads its window from the position, and a code longer than the lookup
// window at the step's end is taken from the long-code table in the loop (one per lane and step;
// lookups after a longer code in the step repeat it without effect). Each step is
// bounded beforehand for all lanes (input bytes and values left), not checked per lane. A lane
// at an escape or an invalid code stalls: the step loop ends and that code is read one symbol
// through DecodeSymbolsT. The rest, one lane after the other through DecodeSymbolsT.
template <typename U>
void DecodeSymbolQuadT(const HuffmanDecoder& code, SymbolLane* const* lanes, uint64_t n) {
  static_assert(sizeof(U) >= 2, "every symbol below the escape is a value");
  constexpr int kLanes = 4;
  const uint64_t* const multi = code.multi_table();
  const uint32_t* const longer = code.long_table();
  uint64_t done[kLanes] = {};
  for (bool any_error = false; !any_error;) {
    BitReader::Window w[kLanes];
    uint64_t steps = ~uint64_t{0};
    uint64_t p[kLanes];
    uint8_t* dst[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      w[l] = lanes[l]->bits->TakeWindow();
      const uint64_t bit = w[l].Consumed(), byte = bit >> 3;
      // A step loads 8 bytes from its position's byte and takes at most 4 x 10 + 15 bits (< 7 bytes).
      const uint64_t in_steps = w[l].size >= byte + 8 ? (w[l].size - byte - 8) / 7 + 1 : 0;
      steps = std::min({steps, in_steps, (n - done[l]) / kQuadStepSlots<U>});
      p[l] = reinterpret_cast<uintptr_t>(w[l].data) * 8 + bit;
      dst[l] = lanes[l]->dst;
    }
    if (steps == 0) break;
    bool stalled = false, lane_stalled[kLanes] = {};
    for (uint64_t s = 0; s < steps && !stalled; ++s) {
      uint64_t acc[kLanes];
#pragma GCC unroll 4
      for (int l = 0; l < kLanes; ++l) {
        uint64_t word;
        std::memcpy(&word, reinterpret_cast<const uint8_t*>(p[l] >> 3), 8);
        acc[l] = word >> (p[l] & 7);
      }
      // Lookup by lookup across the lanes (lane after lane, out-of-order execution overlapped
      // the chains less: 1.6x the time).
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 4
        for (int l = 0; l < kLanes; ++l) {
          const uint64_t m = HuffmanDecoder::PeekMulti(multi, acc[l]);
          StoreMultiSymbols<U>(dst[l], m);
          const int bits = HuffmanDecoder::MultiBits(m);
          acc[l] >>= bits;
          p[l] += static_cast<uint64_t>(bits);
          dst[l] += HuffmanDecoder::MultiCount(m) * sizeof(U);
        }
      }
      // A longer code next: taken here (branches the compiler keeps; with masks instead, which
      // add a dependent load to every lane's step, the section took 1.15x as long).
#pragma GCC unroll 4
      for (int l = 0; l < kLanes; ++l) {
        const uint64_t m = HuffmanDecoder::PeekMulti(multi, acc[l]);
        const uint32_t t = HuffmanDecoder::PeekLong(longer, m, acc[l]);
        const bool none = HuffmanDecoder::MultiCount(m) == 0, take = none && t != 0;
        const U v = static_cast<U>(HuffmanDecoder::LongSymbol(t));
        std::memcpy(dst[l], &v, sizeof(U));  // a slot of the step's: kept only if taken
        dst[l] += take ? sizeof(U) : 0;
        p[l] += take ? static_cast<uint64_t>(HuffmanDecoder::LongBits(t)) : 0;
        lane_stalled[l] = none && !take;
        stalled |= lane_stalled[l];
      }
    }
    for (int l = 0; l < kLanes; ++l) {
      done[l] += static_cast<uint64_t>(dst[l] - lanes[l]->dst) / sizeof(U);
      lanes[l]->dst = dst[l];
      w[l].SeekTo(p[l] - reinterpret_cast<uintptr_t>(w[l].data) * 8);
      lanes[l]->bits->PutWindow(w[l]);
    }
    if (!stalled) continue;
    // Each lane whose next code the last step's lookups could not take: that code the general way.
    for (int l = 0; l < kLanes && !any_error; ++l) {
      if (!lane_stalled[l]) continue;
      DecodeLaneAlone<U>(code, lanes[l], 1);
      any_error = !lanes[l]->status.ok();
      ++done[l];
    }
  }
  for (int l = 0; l < kLanes; ++l)  // after one lane's error, the others' rests as before
    if (lanes[l]->status.ok()) DecodeLaneAlone<U>(code, lanes[l], n - done[l]);
}

}  // namespace

void DecodeSymbolPairImpl(const HuffmanDecoder& code, SymbolLane* a, SymbolLane* b, uint64_t n, uint32_t width) {
  switch (width) {
    case 1:  // a one-byte lane checks every symbol: the lanes one after the other
      for (SymbolLane* lane : {a, b}) DecodeLaneAlone<uint8_t>(code, lane, n);
      return;
    case 2: return DecodeSymbolPairT<uint16_t>(code, a, b, n);
    case 4: return DecodeSymbolPairT<uint32_t>(code, a, b, n);
    default: return DecodeSymbolPairT<uint64_t>(code, a, b, n);
  }
}

void DecodeSymbolQuadImpl(const HuffmanDecoder& code, SymbolLane* const* lanes, uint64_t n, uint32_t width) {
  switch (width) {
    case 1:  // a one-byte lane checks every symbol: the lanes one after the other
      for (int l = 0; l < 4; ++l) DecodeLaneAlone<uint8_t>(code, lanes[l], n);
      return;
    case 2: return DecodeSymbolQuadT<uint16_t>(code, lanes, n);
    case 4: return DecodeSymbolQuadT<uint32_t>(code, lanes, n);
    default: return DecodeSymbolQuadT<uint64_t>(code, lanes, n);
  }
}

void CountSymbolsImpl(const uint8_t* p, uint64_t n, uint32_t width, uint64_t* small4, uint64_t* large,
                      uint64_t* large_groups) {
  switch (width) {
    case 1: return CountSymbolsT<uint8_t>(p, n, small4, large, large_groups);
    case 2: return CountSymbols16(p, n, small4, large, large_groups);
    case 4: return CountSymbolsT<uint32_t>(p, n, small4, large, large_groups);
    default: return CountSymbolsT<uint64_t>(p, n, small4, large, large_groups);
  }
}

void PutSymbolsImpl(const uint8_t* p, uint64_t n, uint32_t width, const HuffmanEncoder& code,
                    const SmallSymbolCodes& small, bool scalar, BitWriter& writer, std::vector<uint8_t>* escaped) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
  if (width == 2 && !scalar) return PutSymbols16(p, n, code, small, writer, escaped);
#endif
  (void)small, (void)scalar;
  BitWriter::Local w(writer);
  switch (width) {
    case 1: return PutSymbolsT<uint8_t>(p, n, code, w, escaped);
    case 2: return PutSymbolsT<uint16_t>(p, n, code, w, escaped);
    case 4: return PutSymbolsT<uint32_t>(p, n, code, w, escaped);
    default: return PutSymbolsT<uint64_t>(p, n, code, w, escaped);
  }
}

Status DecodeSymbolsImpl(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e,
                         uint64_t n, uint32_t width, uint8_t* dst) {
  switch (width) {
    case 1: return DecodeSymbolsT<uint8_t>(code, bits, escapes, e, n, dst);
    case 2: return DecodeSymbolsT<uint16_t>(code, bits, escapes, e, n, dst);
    case 4: return DecodeSymbolsT<uint32_t>(code, bits, escapes, e, n, dst);
    default: return DecodeSymbolsT<uint64_t>(code, bits, escapes, e, n, dst);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr::value_symbols
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr::value_symbols {

HWY_EXPORT(CountSymbolsImpl);
HWY_EXPORT(PutSymbolsImpl);
HWY_EXPORT(DecodeSymbolsImpl);
HWY_EXPORT(DecodeSymbolPairImpl);
HWY_EXPORT(DecodeSymbolQuadImpl);

void CountSymbols(const uint8_t* p, uint64_t n, uint32_t width, uint64_t* small4, uint64_t* large,
                  uint64_t* large_groups) {
  HWY_DYNAMIC_DISPATCH(CountSymbolsImpl)(p, n, width, small4, large, large_groups);
}

namespace {
std::atomic<bool> g_force_scalar_put{false};
}  // namespace

SmallSymbolCodes::SmallSymbolCodes(const HuffmanEncoder& code) {
  for (uint32_t s = 0; s < kSymbols; ++s) {
    const uint32_t e = code.Entry(s);
    length[s] = static_cast<uint8_t>(e >> 16), low[s] = static_cast<uint8_t>(e), high[s] = static_cast<uint8_t>(e >> 8);
  }
}

void ForceScalarPutSymbols(bool scalar) { g_force_scalar_put.store(scalar); }

void PutSymbols(const uint8_t* p, uint64_t n, uint32_t width, const HuffmanEncoder& code, const SmallSymbolCodes& small,
                BitWriter& w, std::vector<uint8_t>* escaped) {
  HWY_DYNAMIC_DISPATCH(PutSymbolsImpl)(p, n, width, code, small, g_force_scalar_put.load(std::memory_order_relaxed), w,
                                       escaped);
}

Status DecodeSymbols(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e, uint64_t n,
                     uint32_t width, uint8_t* dst) {
  return HWY_DYNAMIC_DISPATCH(DecodeSymbolsImpl)(code, bits, escapes, e, n, width, dst);
}

void DecodeSymbolPair(const HuffmanDecoder& code, SymbolLane* a, SymbolLane* b, uint64_t n, uint32_t width) {
  HWY_DYNAMIC_DISPATCH(DecodeSymbolPairImpl)(code, a, b, n, width);
}

void DecodeSymbolQuad(const HuffmanDecoder& code, SymbolLane* const* lanes, uint64_t n, uint32_t width) {
  HWY_DYNAMIC_DISPATCH(DecodeSymbolQuadImpl)(code, lanes, n, width);
}

}  // namespace dcr::value_symbols
#endif  // HWY_ONCE
