// Split Rice streams (split_rice.h): the decoder, compiled once per Highway target
// (foreach_target.h), with 32- and 8-code steps on AVX-512 VBMI2 targets and scalar loops
// elsewhere; the HWY_ONCE part has the dispatch. The encoder: split_rice_encode.cc.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/split_rice.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "codec/bit_stream.h"
#include "codec/simd_masks-inl.h"
#include "codec/split_rice.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

// The 8 bytes of `p` from `at` on as a word, zeros past `size`.
HWY_INLINE uint64_t WordAt(const uint8_t* p, size_t size, size_t at) {
  uint64_t v = 0;
  if (at + 8 <= size)
    std::memcpy(&v, p + at, 8);
  else if (at < size)
    std::memcpy(&v, p + at, size - at);
  return v;
}

// The bits of `area` from bit `from` on: the word at byte from / 8 with the bits before `from`
// cleared.
HWY_INLINE uint64_t FirstWordFrom(std::span<const uint8_t> area, uint64_t from) {
  return WordAt(area.data(), area.size(), static_cast<size_t>(from >> 3)) & (~uint64_t{0} << (from & 7));
}

// The bit indices (from the area's start) of the first n set bits of `area` at or after bit
// `from`, at out[0, n). Returns how many it found (fewer than n if the area has fewer).
// T: the ordinals' type, uint64_t or uint32_t (then the area is below 2^29 bytes).
template <typename T>
uint64_t FindTerminatorsScalar(std::span<const uint8_t> area, uint64_t from, uint64_t n, T* out) {
  uint64_t j = 0;
  for (size_t at = static_cast<size_t>(from >> 3); at < area.size() && j < n; at += 8) {
    uint64_t w = at == (from >> 3) ? FirstWordFrom(area, from) : WordAt(area.data(), area.size(), at);
    for (; w != 0 && j < n; w &= w - 1) out[j++] = static_cast<T>(8 * uint64_t{at} + static_cast<uint64_t>(__builtin_ctzll(w)));
  }
  return j;
}

// The bit index of set bit number j (from 0) of `area`; false if it has no more than j.
bool FindSetBit(std::span<const uint8_t> area, uint64_t j, uint64_t* index) {
  for (size_t at = 0; at < area.size(); at += 8) {
    uint64_t w = WordAt(area.data(), area.size(), at);
    const auto c = static_cast<uint64_t>(__builtin_popcountll(w));
    if (j >= c) {
      j -= c;
      continue;
    }
    for (; j > 0; --j) w &= w - 1;
    *index = 8 * uint64_t{at} + static_cast<uint64_t>(__builtin_ctzll(w));
    return true;
  }
  return false;
}

// Ordinals of one run in place: out[j] holds its code j's terminator index on entry. `s`: the
// index just after the previous run's last terminator; `rb`: the run's first remainder bit.
// Returns the sum of the run's remainders. Ordinals of type T are formed modulo 2^(bits of T).
template <typename T>
uint64_t CombineScalar(const uint8_t* rem, size_t size, uint64_t rb, int r, uint64_t s, uint64_t n, T* out) {
  const uint64_t mask = (uint64_t{1} << r) - 1;
  uint64_t prefix = 0;  // remainders summed through code j
  for (uint64_t j = 0; j < n; ++j, rb += static_cast<uint64_t>(r)) {
    prefix += (WordAt(rem, size, rb >> 3) >> (rb & 7)) & mask;
    out[j] = static_cast<T>(j + prefix + ((uint64_t{out[j]} - s - j) << r));
  }
  return prefix;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
constexpr bool kHaveSimd = true;

// FindTerminatorsScalar, 8 bytes per step: one byte compress of the indices 0..63 under the
// word, then per vector of lanes of T (8 vectors of 64-bit lanes, 4 of 32-bit ones) a byte
// permute that widens its indices and a masked store (no branch on the word's count; nothing
// written past out[n)). 32-bit ordinals: half the permutes and stores, and half the bytes for
// Combine to read back: 35 K codes in 8 runs (geometric gaps, r of 2-5, like a band part's)
// decoded in 0.71 of the time in a loop, Combine's 32-bit steps included.
template <typename T>
uint64_t FindTerminators(std::span<const uint8_t> area, uint64_t from, uint64_t n, T* out) {
  // Lanes of T per vector, and the vectors an 8-byte word's 64 indices fill.
  constexpr size_t kLanes = 64 / sizeof(T), kGroups = 64 / kLanes;
  static constexpr auto kWiden = [] {
    std::array<std::array<uint8_t, 64>, kGroups> x{};
    for (size_t g = 0; g < kGroups; ++g)
      for (size_t i = 0; i < 64; ++i) x[g][i] = static_cast<uint8_t>(kLanes * g + i / sizeof(T));  // byte 0 of a lane counts
    return x;
  }();
  const __m512i iota = ByteIota();
  __m512i widen[kGroups];
  for (size_t g = 0; g < kGroups; ++g) widen[g] = _mm512_loadu_si512(kWiden[g].data());
  constexpr __mmask64 kLowBytes = sizeof(T) == 8 ? 0x0101010101010101ull : 0x1111111111111111ull;
  uint64_t j = 0;
  for (size_t at = static_cast<size_t>(from >> 3); at < area.size() && j < n; at += 8) {
    const uint64_t m = at == (from >> 3) ? FirstWordFrom(area, from) : WordAt(area.data(), area.size(), at);
    const uint64_t take = std::min<uint64_t>(static_cast<uint64_t>(__builtin_popcountll(m)), n - j);
    const uint64_t lanes = take == 64 ? ~uint64_t{0} : (uint64_t{1} << take) - 1;
    const __m512i idx = CompressBytes(m, iota);
    for (size_t g = 0; g < kGroups; ++g) {
      const __m512i v = _mm512_maskz_permutexvar_epi8(kLowBytes, widen[g], idx);
      if constexpr (sizeof(T) == 8) {
        _mm512_mask_storeu_epi64(out + j + kLanes * g, static_cast<__mmask8>(lanes >> (kLanes * g)),
                                 _mm512_add_epi64(v, _mm512_set1_epi64(static_cast<int64_t>(8 * uint64_t{at}))));
      } else {
        _mm512_mask_storeu_epi32(out + j + kLanes * g, static_cast<__mmask16>(lanes >> (kLanes * g)),
                                 _mm512_add_epi32(v, _mm512_set1_epi32(static_cast<int32_t>(8 * uint64_t{at}))));
      }
    }
    j += take;
  }
  return j;
}

// Remainders of at most this many bits take Combine32's steps: 32 codes' remainders in 16-bit
// lanes, each read from the two bytes holding it ((bit & 7) + r <= 16), and a step's sum of
// them below 2^16 (32 (2^9 - 1)).
constexpr int kCombine32MaxRice = 9;

// CombineScalar's codes [0, j) for the j it returns (a multiple of 32 where whole steps' 64
// bytes lie in the area), 32 codes per step, their remainders' sum at *carried. A step's
// remainders are prefix-summed in 16-bit lanes: within each 64-bit lane by one multiply (each
// 16-bit lane gets the sum of the lanes at and below it), then across the 64-bit lanes by three
// shifts and adds of their totals; the ordinals are formed eight at a time as in Combine.
// Combine's 8-code steps spend ~20 vector operations on 8 codes, half of them the prefix sum in
// 64-bit lanes: with these steps the real 4.8 % pair's decode+apply (r of 3-6) took 0.975 of
// the time on one thread and 0.975-0.98 on two (alternating with the 8-code steps alone in one
// process).
// For 32-bit ordinals, codes 16g..16g+15 of a step are formed in 32-bit lanes, modulo 2^32.
template <typename T>
uint64_t Combine32(const uint8_t* rem, size_t size, uint64_t rb, int r, uint64_t s, uint64_t n, T* out,
                   uint64_t* carried) {
  const __m512i iota16 = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                          12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i lane_bits = _mm512_mullo_epi16(iota16, _mm512_set1_epi16(static_cast<int16_t>(r)));
  const __m512i low = _mm512_set1_epi16(static_cast<int16_t>((1 << r) - 1));
  const __m512i seven = _mm512_set1_epi16(7);
  const __m512i spread = _mm512_set1_epi64(0x0001000100010001ll);  // x * spread: prefix sums of x's 16-bit lanes
  const __m512i zero = _mm512_setzero_si512();
  const __m128i rc = _mm_cvtsi32_si128(r);
  // c_j = j - ((s + j) << r) for the group's lanes, and its growth per group.
  __m512i c, c_step;
  if constexpr (sizeof(T) == 8) {
    const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    c = _mm512_sub_epi64(lane, _mm512_sll_epi64(_mm512_add_epi64(lane, _mm512_set1_epi64(static_cast<int64_t>(s))), rc));
    c_step = _mm512_set1_epi64(static_cast<int64_t>(8 * (uint64_t{1} - (uint64_t{1} << r))));
  } else {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    c = _mm512_sub_epi32(lane, _mm512_sll_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(s))), rc));
    c_step = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(16 * (uint64_t{1} - (uint64_t{1} << r)))));
  }
  __m512i carry = zero;  // remainders summed through the previous step, in every lane
  uint64_t j = 0;
  for (; j + 32 <= n && size - static_cast<size_t>((rb + j * static_cast<uint64_t>(r)) >> 3) >= 64; j += 32) {
    const uint64_t bit0 = rb + j * static_cast<uint64_t>(r);
    const __m512i src = _mm512_loadu_si512(rem + (bit0 >> 3));
    const __m512i bit = _mm512_add_epi16(lane_bits, _mm512_set1_epi16(static_cast<int16_t>(bit0 & 7)));
    // Lane i's bytes: (bit_i / 8) and the one after it.
    const __m512i idx = _mm512_add_epi16(_mm512_mullo_epi16(_mm512_srli_epi16(bit, 3), _mm512_set1_epi16(0x101)),
                                         _mm512_set1_epi16(0x100));
    const __m512i v = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi8(idx, src), _mm512_and_si512(bit, seven)), low);
    __m512i p = _mm512_mullo_epi64(v, spread);
    const __m512i total = _mm512_srli_epi64(p, 48);  // each 64-bit lane's four remainders
    __m512i through = _mm512_add_epi64(total, _mm512_alignr_epi64(total, zero, 7));
    through = _mm512_add_epi64(through, _mm512_alignr_epi64(through, zero, 6));
    through = _mm512_add_epi64(through, _mm512_alignr_epi64(through, zero, 4));  // lanes 0..q's totals
    p = _mm512_add_epi16(p, _mm512_mullo_epi64(_mm512_sub_epi64(through, total), spread));
    if constexpr (sizeof(T) == 8) {
      // Each group of eight codes' sums from the step's first (extract indices are immediates).
      const __m128i groups[4] = {_mm512_castsi512_si128(p), _mm512_extracti32x4_epi32(p, 1),
                                 _mm512_extracti32x4_epi32(p, 2), _mm512_extracti32x4_epi32(p, 3)};
      for (int g = 0; g < 4; ++g) {  // codes 8g..8g+7 of the step
        const __m512i sums = _mm512_cvtepu16_epi64(groups[g]);
        T* o = out + j + 8 * g;
        const __m512i ordinal = _mm512_add_epi64(_mm512_add_epi64(_mm512_sll_epi64(_mm512_loadu_si512(o), rc), sums),
                                                 _mm512_add_epi64(c, carry));
        _mm512_storeu_si512(o, ordinal);
        c = _mm512_add_epi64(c, c_step);
      }
    } else {
      const __m256i groups[2] = {_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1)};
      const __m512i carry32 = _mm512_permutexvar_epi32(_mm512_setzero_si512(), carry);  // its low 32 bits
      for (int g = 0; g < 2; ++g) {  // codes 16g..16g+15 of the step
        const __m512i sums = _mm512_cvtepu16_epi32(groups[g]);
        T* o = out + j + 16 * g;
        const __m512i ordinal = _mm512_add_epi32(_mm512_add_epi32(_mm512_sll_epi32(_mm512_loadu_si512(o), rc), sums),
                                                 _mm512_add_epi32(c, carry32));
        _mm512_storeu_si512(o, ordinal);
        c = _mm512_add_epi32(c, c_step);
      }
    }
    carry = _mm512_add_epi64(carry, _mm512_permutexvar_epi64(_mm512_set1_epi64(7), through));
  }
  *carried = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm512_castsi512_si128(carry)));
  return j;
}

// CombineScalar, 8 codes per step (after Combine32's steps where r allows them): each lane's
// remainder gathered from the step's bytes by a byte permute and a shift, an in-register prefix
// sum, the step's sum carried to the next. Code j's ordinal is j + (remainders through j) +
// ((t_j - s - j) << r) for its terminator index t_j, formed as (t_j << r) + (remainders through
// j) + c_j with c_j = j - ((s + j) << r) kept as a vector that grows by 8 (1 - 2^r) a step (all
// mod 2^64, as the scalar loop's terms are). Whole steps whose 64 remainder bytes lie in the
// area load and store without masks; the last step masks both. (With a mask on every step and
// the index, quotient and bit offsets rebuilt from j, a step was ~52 instructions and the real
// 4.8 % pair's ordinals decoded at ~0.83 ns a code.)
// Returns the sum of the run's remainders (CombineScalar's). For 32-bit ordinals the steps
// work in 64-bit lanes as for 64-bit ones and store the low halves.
template <typename T>
uint64_t Combine(const uint8_t* rem, size_t size, uint64_t rb, int r, uint64_t s, uint64_t n, T* out) {
  uint64_t j = 0, carried = 0;  // codes [0, j) done, their remainders' sum
  if (r <= kCombine32MaxRice) j = Combine32(rem, size, rb, r, s, n, out, &carried);
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i lane_bits = _mm512_mullo_epi64(lane, _mm512_set1_epi64(r));
  const __m512i byte_pattern = _mm512_set1_epi64(0x0706050403020100ll);
  // Byte 0 of each 64-bit lane into all 8 of its bytes (bytes 0 and 8 of each 128-bit block).
  const __m512i low_byte = _mm512_broadcast_i32x4(_mm_set_epi64x(0x0808080808080808ll, 0));
  const uint64_t low_mask = (uint64_t{1} << r) - 1;
  const __m512i low = _mm512_set1_epi64(static_cast<int64_t>(low_mask));
  const __m512i seven = _mm512_set1_epi64(7);
  const __m512i shift1 = _mm512_set_epi64(6, 5, 4, 3, 2, 1, 0, 0), shift2 = _mm512_set_epi64(5, 4, 3, 2, 1, 0, 0, 0);
  const __m512i shift4 = _mm512_set_epi64(3, 2, 1, 0, 0, 0, 0, 0);
  const __m128i rc = _mm_cvtsi32_si128(r);
  // c_j for the step's lanes (j = lane at the first step), and its growth per step.
  const __m512i first = _mm512_add_epi64(lane, _mm512_set1_epi64(static_cast<int64_t>(j)));
  __m512i c = _mm512_sub_epi64(first, _mm512_sll_epi64(_mm512_add_epi64(first, _mm512_set1_epi64(static_cast<int64_t>(s))), rc));
  const __m512i c_step = _mm512_set1_epi64(static_cast<int64_t>(8 * (uint64_t{1} - (uint64_t{1} << r))));
  __m512i carry = _mm512_set1_epi64(static_cast<int64_t>(carried));  // remainders summed through the previous step
  auto step = [&](uint64_t j, __mmask8 valid, __mmask64 readable, bool masked) HWY_ATTR {
    const uint64_t bit0 = rb + j * static_cast<uint64_t>(r);
    const size_t byte0 = static_cast<size_t>(bit0 >> 3);
    const __m512i src = masked ? _mm512_maskz_loadu_epi8(readable, rem + byte0) : _mm512_loadu_si512(rem + byte0);
    const __m512i bit = _mm512_add_epi64(lane_bits, _mm512_set1_epi64(static_cast<int64_t>(bit0 & 7)));
    const __m512i gather = _mm512_add_epi8(_mm512_shuffle_epi8(_mm512_srli_epi64(bit, 3), low_byte), byte_pattern);
    __m512i v = _mm512_permutexvar_epi8(gather, src);
    v = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_and_si512(bit, seven)), low);
    if (masked) v = _mm512_maskz_mov_epi64(valid, v);  // no codes past the run in the sum returned
    v = _mm512_add_epi64(v, _mm512_maskz_permutexvar_epi64(0xfe, shift1, v));
    v = _mm512_add_epi64(v, _mm512_maskz_permutexvar_epi64(0xfc, shift2, v));
    v = _mm512_add_epi64(v, _mm512_maskz_permutexvar_epi64(0xf0, shift4, v));
    v = _mm512_add_epi64(v, carry);
    carry = _mm512_permutexvar_epi64(seven, v);
    if constexpr (sizeof(T) == 8) {
      const __m512i t = masked ? _mm512_maskz_loadu_epi64(valid, out + j) : _mm512_loadu_si512(out + j);
      const __m512i ordinal = _mm512_add_epi64(_mm512_add_epi64(_mm512_sll_epi64(t, rc), v), c);
      if (masked)
        _mm512_mask_storeu_epi64(out + j, valid, ordinal);
      else
        _mm512_storeu_si512(out + j, ordinal);
    } else {
      const __m256i t32 = masked ? _mm256_maskz_loadu_epi32(valid, out + j)
                                 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out + j));
      const __m512i t = _mm512_cvtepu32_epi64(t32);
      const __m256i ordinal = _mm512_cvtepi64_epi32(_mm512_add_epi64(_mm512_add_epi64(_mm512_sll_epi64(t, rc), v), c));
      if (masked)
        _mm256_mask_storeu_epi32(out + j, valid, ordinal);
      else
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), ordinal);
    }
    c = _mm512_add_epi64(c, c_step);
  };
  // A step's remainders start in byte (rb + j r) / 8 and it loads 64 bytes from there.
  for (; j + 8 <= n && size - static_cast<size_t>((rb + j * static_cast<uint64_t>(r)) >> 3) >= 64; j += 8)
    step(j, 0xff, ~__mmask64{0}, false);
  for (; j < n; j += 8) {
    const __mmask8 valid = static_cast<__mmask8>(n - j >= 8 ? 0xff : (1u << (n - j)) - 1);
    const size_t avail = size - static_cast<size_t>((rb + j * static_cast<uint64_t>(r)) >> 3);  // > 0
    step(j, valid, avail >= 64 ? ~__mmask64{0} : (__mmask64{1} << avail) - 1, true);
  }
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm512_castsi512_si128(carry)));
}
#else
constexpr bool kHaveSimd = false;
template <typename T>
uint64_t FindTerminators(std::span<const uint8_t> area, uint64_t from, uint64_t n, T* out) {
  return FindTerminatorsScalar(area, from, n, out);
}
template <typename T>
uint64_t Combine(const uint8_t* rem, size_t size, uint64_t rb, int r, uint64_t s, uint64_t n, T* out) {
  return CombineScalar(rem, size, rb, r, s, n, out);
}
#endif

// GetSplitRiceOrdinals of split_rice.h for runs [from, to) of the code (all of them:
// GetSplitRiceOrdinals; a prefix or a suffix: GetSplitRiceRuns), for this target. The checks of
// the whole code's layout (counts, the remainders' size and padding) are made by every call;
// a call without the first run first finds the terminator before its own (a popcount per word
// up to it); only a call with the last run checks what follows the last terminator.
// T: the ordinals' type. 32-bit ordinals need limit <= 2^32 and a stream below 2^29 bytes (its
// terminators' bit indices are kept in T), else kOutOfRange; they are formed modulo 2^32, and
// each run's last is checked against the limit exactly, from its quotients' and remainders'
// sums.
template <typename T>
SplitRiceError GetSplitRiceOrdinalsT(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                     std::span<const uint8_t> rice, uint64_t limit, bool scalar, size_t from,
                                     size_t to, T* out, size_t* consumed) {
  using Kind = SplitRiceError::Kind;
  if constexpr (sizeof(T) == 4) {
    if (limit > (uint64_t{1} << 32) || stream.size() >= kMaxSplitRiceStream32Bytes) return {Kind::kOutOfRange, from};
  }
  const bool simd = kHaveSimd && !scalar;
  uint64_t total = 0, remainder_bits = 0, before = 0, in_range = 0, rb = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    // Ordinals are distinct and below the limit, so a run has at most `limit` codes; this also
    // keeps every sum below from overflowing.
    if (counts[b] > limit) return {Kind::kOutOfRange, b};
    total += counts[b];
    remainder_bits += counts[b] * rice[b];
    if ((remainder_bits + 7) / 8 > stream.size()) return {Kind::kRemaindersTruncated, b};
    if (b < from)
      before += counts[b], rb += counts[b] * rice[b];
    else if (b < to)
      in_range += counts[b];
  }
  const bool last_run = to == counts.size();
  if (total == 0) {
    if (consumed != nullptr) *consumed = 0;
    return consumed != nullptr || stream.empty() || !last_run ? SplitRiceError{} : SplitRiceError{Kind::kTrailingBytes, 0};
  }
  const size_t remainder_bytes = static_cast<size_t>((remainder_bits + 7) / 8);
  if (remainder_bits % 8 != 0 && (stream[remainder_bytes - 1] >> (remainder_bits % 8)) != 0)
    return {Kind::kPaddingNotZero, counts.size() - 1};
  const std::span<const uint8_t> unary = stream.subspan(remainder_bytes);
  // The terminator index after the runs before `from`, and the last terminator before the range.
  uint64_t after_previous = 0;
  if (before > 0) {
    uint64_t previous = 0;
    if (!FindSetBit(unary, before - 1, &previous)) return {Kind::kTerminatorsMissing, from};
    after_previous = previous + 1;
  }
  const uint64_t found = simd ? FindTerminators(unary, after_previous, in_range, out)
                              : FindTerminatorsScalar(unary, after_previous, in_range, out);
  if (found < in_range) {
    size_t b = from;  // the run of the range's code number `found`, the first without its terminator
    for (uint64_t seen = counts[b]; seen <= found; seen += counts[b]) ++b;
    return {Kind::kTerminatorsMissing, b};
  }
  if (last_run) {
    // Nothing follows the last terminator in its byte, the code's last (the stream's, unless a
    // prefix is asked for): the range's last, or without codes in the range the one before it.
    const uint64_t last = in_range > 0 ? out[in_range - 1] : after_previous - 1;
    const size_t end = static_cast<size_t>(last / 8 + 1);
    if ((consumed == nullptr && end != unary.size()) || (unary[end - 1] >> (last % 8 + 1)) != 0)
      return {Kind::kTrailingBytes, counts.size() - 1};
    if (consumed != nullptr) *consumed = remainder_bytes + end;
  }
  uint64_t first = 0;  // the run's first code in `out`
  for (size_t b = from; b < to; ++b) {
    const uint64_t n = counts[b];
    if (n == 0) continue;
    const int r = rice[b];
    T* o = out + first;
    const uint64_t end_terminator = o[n - 1];
    // The run's quotients sum to end_terminator - after_previous - (n - 1); bounded first, so
    // that no shift or sum below wraps.
    const uint64_t quotients = end_terminator - after_previous - (n - 1);
    if (quotients > (limit - 1) >> r) return {Kind::kOutOfRange, b};
    const uint64_t remainders = simd ? Combine(stream.data(), stream.size(), rb, r, after_previous, n, o)
                                     : CombineScalar(stream.data(), stream.size(), rb, r, after_previous, n, o);
    if constexpr (sizeof(T) == 8) {
      if (o[n - 1] >= limit) return {Kind::kOutOfRange, b};
    } else {  // the last ordinal, exactly (below 2^63: n <= limit <= 2^32, r <= 30)
      if ((n - 1) + remainders + (quotients << r) >= limit) return {Kind::kOutOfRange, b};
    }
    first += n;
    after_previous = end_terminator + 1;
    rb += n * static_cast<uint64_t>(r);
  }
  return {};
}

SplitRiceError GetSplitRiceOrdinalsImpl(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                        std::span<const uint8_t> rice, uint64_t limit, bool scalar, size_t from,
                                        size_t to, uint64_t* out, size_t* consumed) {
  return GetSplitRiceOrdinalsT(stream, counts, rice, limit, scalar, from, to, out, consumed);
}

SplitRiceError GetSplitRiceOrdinals32Impl(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                          std::span<const uint8_t> rice, uint64_t limit, bool scalar, size_t from,
                                          size_t to, uint32_t* out, size_t* consumed) {
  return GetSplitRiceOrdinalsT(stream, counts, rice, limit, scalar, from, to, out, consumed);
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(GetSplitRiceOrdinalsImpl);
HWY_EXPORT(GetSplitRiceOrdinals32Impl);

namespace {
std::atomic<bool> g_force_scalar{false};
}  // namespace

void ForceScalarSplitRice(bool scalar) { g_force_scalar.store(scalar); }
bool ScalarSplitRiceForced() { return g_force_scalar.load(std::memory_order_relaxed); }

std::string SplitRiceError::Message() const {
  switch (kind) {
    case Kind::kNone: return "ok";
    case Kind::kRemaindersTruncated: return "split Rice remainders run past the code";
    case Kind::kPaddingNotZero: return "nonzero padding after the split Rice remainders";
    case Kind::kTerminatorsMissing: return "truncated split Rice quotients";
    case Kind::kOutOfRange: return "out-of-range gap";
    case Kind::kTrailingBytes: return "trailing bits after the last split Rice code";
  }
  return "unknown";
}

namespace {

// Runs [from, to) of the code on this CPU's target, into 64- or 32-bit ordinals.
SplitRiceError DecodeRuns(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                          std::span<const uint8_t> rice, uint64_t limit, size_t from, size_t to, uint64_t* out,
                          size_t* consumed) {
  return HWY_DYNAMIC_DISPATCH(GetSplitRiceOrdinalsImpl)(stream, counts, rice, limit, ScalarSplitRiceForced(), from, to,
                                                        out, consumed);
}
SplitRiceError DecodeRuns(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                          std::span<const uint8_t> rice, uint64_t limit, size_t from, size_t to, uint32_t* out,
                          size_t* consumed) {
  return HWY_DYNAMIC_DISPATCH(GetSplitRiceOrdinals32Impl)(stream, counts, rice, limit, ScalarSplitRiceForced(), from,
                                                          to, out, consumed);
}

}  // namespace

SplitRiceError GetSplitRiceOrdinals(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                    std::span<const uint8_t> rice, uint64_t limit, uint64_t* out, size_t* consumed) {
  return DecodeRuns(stream, counts, rice, limit, 0, counts.size(), out, consumed);
}

bool GetSplitRiceRuns(std::span<const uint8_t> stream, std::span<const uint64_t> counts, std::span<const uint8_t> rice,
                      uint64_t limit, size_t from, size_t to, uint64_t* out) {
  return DecodeRuns(stream, counts, rice, limit, from, to, out, nullptr).ok();
}

SplitRiceError GetSplitRiceOrdinals(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                    std::span<const uint8_t> rice, uint64_t limit, uint32_t* out) {
  return DecodeRuns(stream, counts, rice, limit, 0, counts.size(), out, nullptr);
}

bool GetSplitRiceRuns(std::span<const uint8_t> stream, std::span<const uint64_t> counts, std::span<const uint8_t> rice,
                      uint64_t limit, size_t from, size_t to, uint32_t* out) {
  return DecodeRuns(stream, counts, rice, limit, from, to, out, nullptr).ok();
}

}  // namespace dcr
#endif  // HWY_ONCE
