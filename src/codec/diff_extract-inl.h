// Per-target kernel of the diff (simd_masks.h, ExtractChanges): the positions and values of the
// elements a DifferMasks call marked. Included by simd_masks.cc, compiled once per Highway
// target; the include-guard toggling is Highway's convention for such headers.
#if defined(DCR_CODEC_DIFF_EXTRACT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DCR_CODEC_DIFF_EXTRACT_INL_H_
#undef DCR_CODEC_DIFF_EXTRACT_INL_H_
#else
#define DCR_CODEC_DIFF_EXTRACT_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Visits only the words holding changes (a test per word would mispredict often at the usual
// 0.5-5 % change: a word of 64 elements holds one a quarter to all of the time), and within a
// word the set bits four per step: a loop whose exit is predictable where a loop per set bit would
// mispredict once per word. Steps past the last set bit write up to kExtractSlack spare slots.
// kOld: also each change's old bits, to `old` (laid out as `val`).
template <typename U, bool kOld>
size_t ExtractWordsScalar(const uint8_t* base, const uint8_t* next, const uint64_t* masks, size_t from_word,
                          size_t count, bool is_xor, uint32_t first, uint32_t* pos, uint8_t* val, uint8_t* old) {
  const uint32_t* const pos0 = pos;
  const size_t words = (count + 63) / 64;
  for (size_t group = from_word; group < words; group += 64) {
    uint64_t nonzero = 0;  // bit k: word group + k holds changes
    const size_t in_group = std::min<size_t>(64, words - group);
    for (size_t k = 0; k < in_group; ++k) nonzero |= static_cast<uint64_t>(masks[group + k] != 0) << k;
    for (; nonzero != 0; nonzero &= nonzero - 1) {
      const size_t w = group + static_cast<size_t>(__builtin_ctzll(nonzero));
      for (uint64_t m = masks[w]; m != 0;) {
        size_t step = 0;
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          // Past the last set bit ctz(0) would be undefined: bit 63 stands in (clamped to the
          // run for the loads; the slot is not kept).
          const size_t i = 64 * w + static_cast<size_t>(__builtin_ctzll(m | (uint64_t{1} << 63)));
          U ob, nb;
          std::memcpy(&ob, base + std::min(i, count - 1) * sizeof(U), sizeof(U));
          std::memcpy(&nb, next + std::min(i, count - 1) * sizeof(U), sizeof(U));
          const U v = is_xor ? static_cast<U>(ob ^ nb) : nb;
          pos[u] = first + static_cast<uint32_t>(i);
          std::memcpy(val + u * sizeof(U), &v, sizeof(U));
          if constexpr (kOld) std::memcpy(old + u * sizeof(U), &ob, sizeof(U));
          step += m != 0;
          m &= m - 1;
        }
        pos += step;
        val += step * sizeof(U);
        if constexpr (kOld) old += step * sizeof(U);
      }
    }
  }
  return static_cast<size_t>(pos - pos0);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The changes among one vector of 2-byte elements (old ov, new nv) that mask m marks, in order:
// their values (XOR of old and new, or new) to v16, their old bits to o16 (kOld), their indices
// (index0 + lane) to idx, each as a whole vector. Returns how many.
template <bool kOld, class D, class V, class M>
HWY_INLINE size_t CompressChanges16(D d16, V ov, V nv, M m, bool is_xor, uint16_t index0, uint16_t* v16, uint16_t* o16,
                                    uint16_t* idx) {
  hn::StoreU(hn::Compress(is_xor ? hn::Xor(ov, nv) : nv, m), d16, v16);
  if constexpr (kOld) hn::StoreU(hn::Compress(ov, m), d16, o16);
  hn::StoreU(hn::Compress(hn::Iota(d16, index0), m), d16, idx);
  return hn::CountTrue(d16, m);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// The changes among 64 2-byte elements (old o0 and o1, new n0 and n1, 32 lanes each) that m
// marks (bit i: element i), in order: their values (XOR of old and new, or new) to v16, their
// old bits to o16 (kOld), their positions at + index to pos. Returns how many. One byte compress
// of the indices 0..63 under m; two-source word permutes by those indices gather the values and
// old bits (32 per permute), and the indices widened are the positions (StoreIndexPositions,
// groups of 16). A word of at most 16 changes (nearly all at the usual change rates) stores half
// vectors of values and old bits (16 slots each), else whole ones (up to 31 slots after the last
// change). Against two word compresses each for the values and the old bits and whole-vector
// stores always, with the caller skipping words without changes: the real 4.5 % pair's tiles
// through DiffExtractTile in 0.6-0.7 of the time (the 1.4 % pair's alike).
template <bool kOld>
HWY_INLINE size_t CompressChanges64(__m512i o0, __m512i n0, __m512i o1, __m512i n1, uint64_t m, bool is_xor,
                                    uint32_t at, uint16_t* v16, uint16_t* o16, uint32_t* pos) {
  const size_t n = static_cast<size_t>(PopCount64(m));
  const __m512i index = CompressBytes(m, ByteIota());
  const __m512i x0 = is_xor ? _mm512_xor_si512(o0, n0) : n0, x1 = is_xor ? _mm512_xor_si512(o1, n1) : n1;
  const __m512i first32 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(index));
  const __m512i values = _mm512_permutex2var_epi16(x0, first32, x1);
  StoreIndexPositions(index, n, at, pos);
  if (n <= 16) [[likely]] {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v16), _mm512_castsi512_si256(values));
    if constexpr (kOld)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o16), _mm512_castsi512_si256(_mm512_permutex2var_epi16(o0, first32, o1)));
    return n;
  }
  _mm512_storeu_si512(v16, values);
  if constexpr (kOld) _mm512_storeu_si512(o16, _mm512_permutex2var_epi16(o0, first32, o1));
  if (n > 32) {
    const __m512i last32 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(index, 1));
    _mm512_storeu_si512(v16 + 32, _mm512_permutex2var_epi16(x0, last32, x1));
    if constexpr (kOld) _mm512_storeu_si512(o16 + 32, _mm512_permutex2var_epi16(o0, last32, o1));
  }
  return n;
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512, 2-byte elements: every whole word is compressed in registers, 32 values and their
// 16-bit positions per instruction, at a fixed cost per word and without a branch on its bits;
// the positions are then widened 16 at a time (compressing them as 32-bit lanes took twice the
// compress instructions, which all run on one port); with AVX-512 VBMI2, CompressChanges64 per
// word. Below about one change per word the scalar walk, which skips empty words, does less
// work, so the run picks by its change count.
template <bool kOld>
HWY_INLINE size_t ExtractWords16(const uint8_t* base, const uint8_t* next, const uint64_t* masks, size_t count,
                                 size_t differ, bool is_xor, uint32_t first, uint32_t* pos, uint8_t* val,
                                 uint8_t* old) {
  // The 16-bit positions and buffer of the path without VBMI2 bound a run; a longer one takes
  // the scalar walk (the diff's runs are tiles, which never are longer).
  constexpr size_t kMaxCount = 4096;
  const size_t full = count / 64;
  if (differ < full || count > kMaxCount)
    return ExtractWordsScalar<uint16_t, kOld>(base, next, masks, 0, count, is_xor, first, pos, val, old);
  const uint16_t* a = reinterpret_cast<const uint16_t*>(base);
  const uint16_t* b = reinterpret_cast<const uint16_t*>(next);
  uint16_t* v16 = reinterpret_cast<uint16_t*>(val);
  uint16_t* o16 = reinterpret_cast<uint16_t*>(old);
  size_t done = 0;
#if HWY_TARGET <= HWY_AVX3_DL
  for (size_t w = 0; w < full; ++w) {
    if (masks[w] == 0) continue;
    const uint16_t* e = a + 64 * w;
    const uint16_t* f = b + 64 * w;
    done += CompressChanges64<kOld>(_mm512_loadu_si512(e), _mm512_loadu_si512(f), _mm512_loadu_si512(e + 32),
                                    _mm512_loadu_si512(f + 32), masks[w], is_xor, first + static_cast<uint32_t>(64 * w),
                                    v16 + done, kOld ? o16 + done : nullptr, pos + done);
  }
  v16 += done;
  if constexpr (kOld) o16 += done;
#else
  const hn::Full512<uint16_t> d16;
  HWY_ALIGN uint16_t local[kMaxCount + 64];  // 16-bit positions, and room for a whole vector past them
  for (size_t w = 0; w < full; ++w) {
    const uint8_t* bits = reinterpret_cast<const uint8_t*>(masks + w);  // lane i: bit i, little-endian
    for (size_t j = 0; j < 64; j += 32) {
      const size_t n = CompressChanges16<kOld>(d16, hn::LoadU(d16, a + 64 * w + j), hn::LoadU(d16, b + 64 * w + j),
                                               hn::LoadMaskBits(d16, bits + j / 8), is_xor,
                                               static_cast<uint16_t>(64 * w + j), v16, o16, local + done);
      v16 += n, done += n;
      if constexpr (kOld) o16 += n;
    }
  }
  // The widening reads up to 15 unwritten entries of `local`; what it makes of them lands in the
  // caller's spare slots, or is overwritten by the tail below.
  WidenIndices(local, done, first, pos);
#endif
  // The tail below is a call, after which this returns: GCC left the upper vector state dirty
  // across it (simd_state_test), which slows every later legacy-SSE instruction.
  _mm256_zeroupper();
  return done + ExtractWordsScalar<uint16_t, kOld>(base, next, masks, full, count, is_xor, first, pos + done,
                                                   reinterpret_cast<uint8_t*>(v16), reinterpret_cast<uint8_t*>(o16));
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Prefetches both 64-byte lines of the 64 elements kDiffPrefetchBytes past `p`.
HWY_INLINE void PrefetchAhead(const uint16_t* p) { PrefetchDiffInput(p), PrefetchDiffInput(p + 32); }

// AVX-512, 2-byte elements, one tile (count <= kMaskTileElements) with about a change per word
// or more: DifferMasks and ExtractWords16 in one pass, each vector of 32 elements loaded and
// compared once, its changes' values (and old bits), 16-bit indices compressed as they are found
// (with AVX-512 VBMI2, 64 elements at a time by CompressChanges64).
// Writes up to kExtractSlack spare slots.
template <bool kOld>
HWY_INLINE size_t DiffExtract16(const uint8_t* base, const uint8_t* next, size_t count, bool is_xor, uint32_t first,
                                uint32_t* pos, uint8_t* val, uint8_t* old) {
  const uint16_t* a = reinterpret_cast<const uint16_t*>(base);
  const uint16_t* b = reinterpret_cast<const uint16_t*>(next);
  uint16_t* v16 = reinterpret_cast<uint16_t*>(val);
  uint16_t* o16 = reinterpret_cast<uint16_t*>(old);
  size_t done = 0;
#if HWY_TARGET <= HWY_AVX3_DL
  const size_t whole = count / 64 * 64;
  for (size_t i = 0; i < whole; i += 64) {
    PrefetchAhead(a + i), PrefetchAhead(b + i);
    const __m512i o0 = _mm512_loadu_si512(a + i), n0 = _mm512_loadu_si512(b + i);
    const __m512i o1 = _mm512_loadu_si512(a + i + 32), n1 = _mm512_loadu_si512(b + i + 32);
    const uint64_t m = uint64_t{_mm512_cmpneq_epi16_mask(o1, n1)} << 32 | _mm512_cmpneq_epi16_mask(o0, n0);
    if (m == 0) continue;
    done += CompressChanges64<kOld>(o0, n0, o1, n1, m, is_xor, first + static_cast<uint32_t>(i), v16 + done,
                                    kOld ? o16 + done : nullptr, pos + done);
  }
#else
  constexpr size_t kMaxCount = 4096;  // the 16-bit indices and their buffer; count never exceeds it (a tile)
  const hn::Full512<uint16_t> d16;
  const size_t lanes = hn::Lanes(d16);
  HWY_ALIGN uint16_t local[kMaxCount + 64];  // the indices, and room for a whole vector past them
  const size_t whole = std::min(count, kMaxCount) / lanes * lanes;
  for (size_t i = 0; i < whole; i += lanes) {
    if (i % 64 == 0) PrefetchAhead(a + i), PrefetchAhead(b + i);
    const auto ov = hn::LoadU(d16, a + i), nv = hn::LoadU(d16, b + i);
    done += CompressChanges16<kOld>(d16, ov, nv, hn::Ne(ov, nv), is_xor, static_cast<uint16_t>(i), v16 + done,
                                    o16 + done, local + done);
  }
  WidenIndices(local, done, first, pos);  // writes up to 15 slots past `done`, rewritten below
#endif
  for (size_t i = whole; i < count; ++i) {
    if (a[i] == b[i]) continue;
    pos[done] = first + static_cast<uint32_t>(i);
    v16[done] = is_xor ? static_cast<uint16_t>(a[i] ^ b[i]) : b[i];
    if constexpr (kOld) o16[done] = a[i];
    ++done;
  }
  return done;
}
#endif

// Returns the number of marked elements, whose positions (first + index) and values (XOR of old and
// new bits, or the new bits) it wrote in ascending order, plus up to kExtractSlack spare slots;
// and, kOld, their old bits to `old`, laid out as the values.
template <bool kOld>
HWY_INLINE size_t ExtractChangesAnyWidthT(const uint8_t* base, const uint8_t* next, uint32_t width, size_t count,
                                          const uint64_t* masks, size_t differ, bool is_xor, uint32_t first,
                                          uint32_t* pos, uint8_t* val, uint8_t* old) {
  if (count == 0) return 0;
  switch (width) {
    case 1: return ExtractWordsScalar<uint8_t, kOld>(base, next, masks, 0, count, is_xor, first, pos, val, old);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    case 2: return ExtractWords16<kOld>(base, next, masks, count, differ, is_xor, first, pos, val, old);
#else
    case 2:
      return (void)differ, ExtractWordsScalar<uint16_t, kOld>(base, next, masks, 0, count, is_xor, first, pos, val, old);
#endif
    case 4: return ExtractWordsScalar<uint32_t, kOld>(base, next, masks, 0, count, is_xor, first, pos, val, old);
    default: return ExtractWordsScalar<uint64_t, kOld>(base, next, masks, 0, count, is_xor, first, pos, val, old);
  }
}

// `old`: nullptr, or where the old bits go.
HWY_INLINE size_t ExtractChangesAnyWidth(const uint8_t* base, const uint8_t* next, uint32_t width, size_t count,
                                         const uint64_t* masks, size_t differ, bool is_xor, uint32_t first,
                                         uint32_t* pos, uint8_t* val, uint8_t* old) {
  return old != nullptr ? ExtractChangesAnyWidthT<true>(base, next, width, count, masks, differ, is_xor, first, pos, val, old)
                        : ExtractChangesAnyWidthT<false>(base, next, width, count, masks, differ, is_xor, first, pos, val, old);
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
