// Per-target SIMD mask kernels (simd_masks.h). Included by files compiled once per Highway target
// (foreach_target.h), so that the kernels inline into their per-target callers; the include-guard
// toggling is Highway's convention for such headers.
#if defined(DCR_CODEC_SIMD_MASKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DCR_CODEC_SIMD_MASKS_INL_H_
#undef DCR_CODEC_SIMD_MASKS_INL_H_
#else
#define DCR_CODEC_SIMD_MASKS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <array>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Compiled with this target's flags (POPCNT on x86 targets from SSE4 up; a portable fallback on
// the baseline target), unlike std::popcount in code built for baseline x86-64.
HWY_INLINE int PopCount64(uint64_t x) { return __builtin_popcountll(x); }

// The mask of one vector as the low Lanes(d) bits of a word. On AVX-512 the mask is a mask
// register, moved into the word with one instruction. Elsewhere the word is read back with the
// size StoreMaskBits wrote, so the load is forwarded from the store (a wider load would stall).
// (That round trip through memory was also what GCC 12 at -O3, or -O2 -fpeel-loops, miscompiled
// on the AVX-512 targets, for 16 lanes of 4-byte elements in ClassAtLeastMasksK: garbage in one
// row's high bits; simd_masks_test and band_walk_test caught it.)
template <class D, class M>
HWY_INLINE uint64_t MaskWord(D d, M m) {
  const size_t n = hn::Lanes(d);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const uint64_t w = static_cast<uint64_t>(m.raw);  // Highway's AVX-512 masks hold an __mmask
#else
  constexpr size_t kBytes = (hn::MaxLanes(D()) + 7) / 8;  // <= 8: at most 64 lanes (Tag64)
  uint8_t bytes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  hn::StoreMaskBits(d, m, bytes);
  uint64_t w = 0;
  std::memcpy(&w, bytes, kBytes);
#endif
  return n >= 64 ? w : w & ((uint64_t{1} << n) - 1);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// On AVX3 (without VBMI2), positions of set mask bits are compressed as 16-bit indices
// (diff_extract-inl.h) and widened here: a fixed cost per word and no branch on its bits.
// out[k] = at + in[k] for k < n, 16 per step: reads up to 15 entries past in[n) and writes as
// many past out[n).
HWY_INLINE void WidenIndices(const uint16_t* in, size_t n, uint32_t at, uint32_t* out) {
  const hn::Full512<uint32_t> d32;
  const hn::Full256<uint16_t> dh16;
  const auto a = hn::Set(d32, at);
  for (size_t k = 0; k < n; k += 16) hn::StoreU(hn::Add(hn::PromoteTo(d32, hn::LoadU(dh16, in + k)), a), d32, out + k);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// The bytes of v that m selects, packed into the low lanes; the rest zero. A zero-masked
// vpcompressb (_mm512_maskz_compress_epi8) waits for the last write of its destination register
// on a Zen 5 (a false dependency, as if it merged), and GCC reuses one register from step to
// step, so a loop of compresses ran as one chain through that register: a word's positions
// (StoreMaskPositions) took 4.4x as long as in this form, where the destination is first a copy
// of a zero the compiler cannot see is zero (so the merge stays a merge) and the copy, renamed,
// ends the chain.
HWY_INLINE __m512i CompressBytes(uint64_t m, __m512i v) {
  __m512i zero = _mm512_setzero_si512();
  asm("" : "+v"(zero));  // opaque: otherwise the merge into zero becomes the zero-masked form
  return _mm512_mask_compress_epi8(zero, m, v);
}

// CompressBytes for the 16-bit lanes of v (vpcompressw, the same false dependency).
HWY_INLINE __m512i CompressWords(uint32_t m, __m512i v) {
  __m512i zero = _mm512_setzero_si512();
  asm("" : "+v"(zero));
  return _mm512_mask_compress_epi16(zero, m, v);
}

// The bytes 0..63, for StoreMaskPositions.
HWY_INLINE __m512i ByteIota() {
  static constexpr auto kIota = [] {
    std::array<uint8_t, 64> a{};
    for (size_t i = 0; i < 64; ++i) a[i] = static_cast<uint8_t>(i);
    return a;
  }();
  return _mm512_loadu_si512(kIota.data());
}

// out[k] = at + index byte k, for k < n, where `index` holds a byte compress's n indices: a
// widening add and store of the first 16 (more, rarely, from a copy). Writes whole groups of 16
// slots: up to 16 past out[n).
HWY_INLINE void StoreIndexPositions(__m512i index, size_t n, uint32_t at, uint32_t* out) {
  const __m512i base = _mm512_set1_epi32(static_cast<int>(at));
  _mm512_storeu_si512(out, _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(index)), base));
  if (n > 16) [[unlikely]] {
    HWY_ALIGN uint8_t bytes[64];
    _mm512_store_si512(bytes, index);
    for (size_t k = 16; k < n; k += 16) {
      const __m128i sixteen = _mm_load_si128(reinterpret_cast<const __m128i*>(bytes + k));
      _mm512_storeu_si512(out + k, _mm512_add_epi32(_mm512_cvtepu8_epi32(sixteen), base));
    }
  }
}

// out[k] = at + the index of m's k-th set bit, ascending, for k < popcount(m), which it returns:
// one byte compress of `iota` (ByteIota(), passed in so that a loop loads it once) under m, then
// StoreIndexPositions (up to 16 slots past out[popcount(m)) written).
HWY_INLINE size_t StoreMaskPositions(__m512i iota, uint64_t m, uint32_t at, uint32_t* out) {
  const size_t n = static_cast<size_t>(PopCount64(m));
  StoreIndexPositions(CompressBytes(m, iota), n, at, out);
  return n;
}
#endif

// At most 64 lanes, so that whole vectors tile a 64-element word on every target (SVE included).
template <typename T>
using Tag64 = hn::CappedTag<T, 64>;

// The diffs read both inputs this many bytes ahead (DifferMasksT, DiffExtract16): they waited on
// the inputs' loads from L2 or L3 even where the hardware prefetches the streams. With it (1 to
// 4 KiB were alike), two-thread plain encodes of the real pairs took 0.90 of the time at 0.4 %
// change, 0.97-0.99 at 1.4 % and 0.92 at 4.5 % (Zen 5, three interleaved rounds; the 32 MiB
// tensor from memory, 0.89; at 4.5 % with the AVX3 and the AVX2 target's code forced, 0.92-0.93
// and 0.91-0.93). Prefetches never fault.
constexpr size_t kDiffPrefetchBytes = 2048;

// Prefetches the line kDiffPrefetchBytes past `p`: an address formed as an integer, since it may
// lie past the end of the input (where the prefetch does nothing).
HWY_INLINE void PrefetchDiffInput(const void* p) {
  hwy::Prefetch(reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) + kDiffPrefetchBytes));
}

template <typename T>
size_t DifferMasksT(const uint8_t* a_bytes, const uint8_t* b_bytes, size_t count, uint64_t* masks) {
  const Tag64<T> d;
  const size_t n = hn::Lanes(d);
  const T* a = reinterpret_cast<const T*>(a_bytes);
  const T* b = reinterpret_cast<const T*>(b_bytes);
  const size_t words = count / 64;
  size_t differ = 0;
  for (size_t w = 0; w < words; ++w) {
    for (size_t line = 0; line < sizeof(T); ++line)  // the word's lines
      PrefetchDiffInput(a + 64 * w + line * 64 / sizeof(T)), PrefetchDiffInput(b + 64 * w + line * 64 / sizeof(T));
    uint64_t word = 0;
    for (size_t i = 0; i < 64; i += n)
      word |= MaskWord(d, hn::Ne(hn::LoadU(d, a + 64 * w + i), hn::LoadU(d, b + 64 * w + i))) << i;
    masks[w] = word;
    differ += static_cast<size_t>(PopCount64(word));
  }
  if (count % 64 != 0) {
    uint64_t word = 0;
    for (size_t i = 64 * words; i < count; ++i) {
      T x, y;
      std::memcpy(&x, a_bytes + i * sizeof(T), sizeof(T));
      std::memcpy(&y, b_bytes + i * sizeof(T), sizeof(T));
      word |= static_cast<uint64_t>(x != y) << (i % 64);
    }
    masks[words] = word;
    differ += static_cast<size_t>(PopCount64(word));
  }
  return differ;
}

HWY_INLINE size_t DifferMasksAnyWidth(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, uint64_t* masks) {
  switch (width) {
    case 1: return DifferMasksT<uint8_t>(a, b, count, masks);
    case 2: return DifferMasksT<uint16_t>(a, b, count, masks);
    case 4: return DifferMasksT<uint32_t>(a, b, count, masks);
    default: return DifferMasksT<uint64_t>(a, b, count, masks);
  }
}

// Scalar class masks: the tail of a run, and 1- and 8-byte elements (FP8, F64, integers), which
// are rare in weights.
// Where class masks go: row i's word w at at[i * row_stride + w * word_stride]. Row-major
// (row_stride = words, word_stride = 1) for ClassAtLeastMasks; interleaved, a word's rows
// together, for the class rows the band walks' compare kernels make (tile_bands-inl.h).
struct MaskOut {
  uint64_t* at = nullptr;
  size_t row_stride = 0, word_stride = 1;
  uint64_t& operator()(size_t i, size_t w) const { return at[i * row_stride + w * word_stride]; }
};

template <typename T>
void ClassAtLeastMasksScalar(const uint8_t* bytes, size_t from, size_t count, int shift, uint32_t class_mask,
                             const uint8_t* t, int k, MaskOut out) {
  for (size_t j = from; j < count; ++j) {
    if (j % 64 == 0 || j == from)
      for (int i = 0; i < k; ++i) out(static_cast<size_t>(i), j / 64) = 0;
    T v;
    std::memcpy(&v, bytes + j * sizeof(T), sizeof(T));
    const uint32_t c = static_cast<uint32_t>(v >> shift) & class_mask;
    for (int i = 0; i < k; ++i) out(static_cast<size_t>(i), j / 64) |= static_cast<uint64_t>(c >= t[i]) << (j % 64);
  }
}

// Classes are at most 8 bits, so comparing them as signed lanes of the element's width is exact.
// K (the threshold count) is a template parameter so that the K words being built stay in
// registers.
// Row prefix counts, optional beside the class masks of a tile: for each threshold i and each
// whole word w the kernel handled, at[i * stride + w] = set bits of row i in words before w.
// Taken while each mask word is still in a register, where a later pass would reload every word.
struct RowPrefixOut {
  int16_t* at = nullptr;  // null: not wanted
  size_t stride = 0;
};

// Stores the K mask words of whole word w and, where prefix counts are wanted, each row's set
// bits before w (before[i]: row i's running total, advanced past w).
template <int K>
HWY_INLINE void StoreClassWords(const uint64_t (&word)[K], size_t w, MaskOut out, RowPrefixOut prefix,
                                int32_t (&before)[K]) {
  HWY_UNROLL(7)
  for (int i = 0; i < K; ++i) out(static_cast<size_t>(i), w) = word[i];
  if (prefix.at == nullptr) return;
  HWY_UNROLL(7)
  for (int i = 0; i < K; ++i) {
    prefix.at[static_cast<size_t>(i) * prefix.stride + w] = static_cast<int16_t>(before[i]);
    before[i] += PopCount64(word[i]);
  }
}

template <typename T, int K>
size_t ClassAtLeastMasksK(const uint8_t* bytes, size_t count, int shift, uint32_t class_mask, const uint8_t* t,
                          MaskOut out, RowPrefixOut prefix) {
  using TI = hwy::MakeSigned<T>;
  const Tag64<T> d;
  const hn::Rebind<TI, Tag64<T>> di;
  const size_t n = hn::Lanes(d);
  const T* e = reinterpret_cast<const T*>(bytes);
  const size_t full = count / 64;
  const auto cmask = hn::Set(d, static_cast<T>(class_mask));
  // class >= t  <=>  class > t - 1. Scalars, broadcast at the compare: SVE vectors are sizeless
  // and cannot be array elements.
  TI below[K];
  for (int i = 0; i < K; ++i) below[i] = static_cast<TI>(t[i] - 1);
  int32_t before[K] = {};
  for (size_t w = 0; w < full; ++w) {
    uint64_t word[K] = {};
    for (size_t j = 0; j < 64; j += n) {
      const auto c = hn::BitCast(di, hn::And(hn::ShiftRightSame(hn::LoadU(d, e + 64 * w + j), shift), cmask));
      HWY_UNROLL(7)
      for (int i = 0; i < K; ++i) word[i] |= MaskWord(di, hn::Gt(c, hn::Set(di, below[i]))) << j;
    }
    StoreClassWords<K>(word, w, out, prefix, before);
  }
  ClassAtLeastMasksScalar<T>(bytes, 64 * full, count, shift, class_mask, t, K, out);
  return prefix.at != nullptr ? full : 0;
}

#if HWY_TARGET != HWY_SCALAR
// 2-byte elements (BF16, F16): the classes of two vectors are narrowed into one vector of bytes,
// so each threshold costs one compare per twice the elements. Classes fit 8 bits; the bytes are
// compared as signed after flipping their top bit, which keeps unsigned order.
template <int K>
size_t ClassAtLeastMasks16(const uint8_t* bytes, size_t count, int shift, uint32_t class_mask, const uint8_t* t,
                           MaskOut out, RowPrefixOut prefix) {
  const Tag64<uint8_t> d8;
  const hn::Repartition<int8_t, decltype(d8)> di8;
  const hn::RepartitionToWide<decltype(d8)> d16;
  const hn::Rebind<int16_t, decltype(d16)> di16;
  const hn::Half<decltype(d8)> dh8;
  const size_t n8 = hn::Lanes(d8), n16 = hn::Lanes(d16);
  const uint16_t* e = reinterpret_cast<const uint16_t*>(bytes);
  const size_t full = count / 64;
  const auto cmask = hn::Set(d16, static_cast<uint16_t>(class_mask));
  const auto flip = hn::Set(d8, uint8_t{0x80});
  int8_t below[K];
  for (int i = 0; i < K; ++i) below[i] = static_cast<int8_t>(static_cast<uint8_t>((t[i] - 1) ^ 0x80));
  int32_t before[K] = {};
  for (size_t w = 0; w < full; ++w) {
    uint64_t word[K] = {};
    for (size_t j = 0; j < 64; j += n8) {
      const auto lo = hn::And(hn::ShiftRightSame(hn::LoadU(d16, e + 64 * w + j), shift), cmask);
      const auto hi = hn::And(hn::ShiftRightSame(hn::LoadU(d16, e + 64 * w + j + n16), shift), cmask);
      const auto c8 = hn::Combine(d8, hn::DemoteTo(dh8, hn::BitCast(di16, hi)), hn::DemoteTo(dh8, hn::BitCast(di16, lo)));
      const auto c = hn::BitCast(di8, hn::Xor(c8, flip));
      HWY_UNROLL(7)
      for (int i = 0; i < K; ++i) word[i] |= MaskWord(di8, hn::Gt(c, hn::Set(di8, below[i]))) << j;
    }
    StoreClassWords<K>(word, w, out, prefix, before);
  }
  ClassAtLeastMasksScalar<uint16_t>(bytes, 64 * full, count, shift, class_mask, t, K, out);
  return prefix.at != nullptr ? full : 0;
}
#endif

template <typename T, int K>
size_t ClassAtLeastMasksAnyK(const uint8_t* bytes, size_t count, int shift, uint32_t class_mask, const uint8_t* t,
                             MaskOut out, RowPrefixOut prefix) {
#if HWY_TARGET != HWY_SCALAR
  if constexpr (sizeof(T) == 2) return ClassAtLeastMasks16<K>(bytes, count, shift, class_mask, t, out, prefix);
#endif
  return ClassAtLeastMasksK<T, K>(bytes, count, shift, class_mask, t, out, prefix);
}

template <typename T>
size_t ClassAtLeastMasksT(const uint8_t* bytes, size_t count, int shift, uint32_t class_mask, const uint8_t* t, int k,
                          MaskOut out, RowPrefixOut prefix) {
  switch (k) {
    case 0: return 0;
    case 1: return ClassAtLeastMasksAnyK<T, 1>(bytes, count, shift, class_mask, t, out, prefix);
    case 2: return ClassAtLeastMasksAnyK<T, 2>(bytes, count, shift, class_mask, t, out, prefix);
    case 3: return ClassAtLeastMasksAnyK<T, 3>(bytes, count, shift, class_mask, t, out, prefix);
    case 4: return ClassAtLeastMasksAnyK<T, 4>(bytes, count, shift, class_mask, t, out, prefix);
    case 5: return ClassAtLeastMasksAnyK<T, 5>(bytes, count, shift, class_mask, t, out, prefix);
    case 6: return ClassAtLeastMasksAnyK<T, 6>(bytes, count, shift, class_mask, t, out, prefix);
    default: return ClassAtLeastMasksAnyK<T, 7>(bytes, count, shift, class_mask, t, out, prefix);
  }
}

// Returns the words w whose row prefixes were written: [0, returned); 0 where `prefix` is null
// or the kernel is scalar.
HWY_INLINE size_t ClassAtLeastMasksAnyWidth(const uint8_t* e, uint32_t width, size_t count, int shift, uint32_t cm,
                                            const uint8_t* t, int k, MaskOut out, RowPrefixOut prefix = {}) {
  switch (width) {
    case 1: return ClassAtLeastMasksScalar<uint8_t>(e, 0, count, shift, cm, t, k, out), 0;
    case 2: return ClassAtLeastMasksT<uint16_t>(e, count, shift, cm, t, k, out, prefix);
    case 4: return ClassAtLeastMasksT<uint32_t>(e, count, shift, cm, t, k, out, prefix);
    default: return ClassAtLeastMasksScalar<uint64_t>(e, 0, count, shift, cm, t, k, out), 0;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
