// Split Rice streams (split_rice.h): the encoder, compiled once per Highway target
// (foreach_target.h), with eight codes per write on AVX-512 targets and scalar loops elsewhere;
// the HWY_ONCE part has the dispatch.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/split_rice_encode.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstring>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/split_rice.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Eight codes' remainders (r <= 7: at most 56 bits), packed for one Put: each gap's low byte
// (vpmovqb), whose r low bits one pext keeps (`byte_masks`: the r-bit mask in every byte).
// (AVX-512 targets have BMI2, whose pext is fast on every CPU with AVX-512.)
HWY_INLINE uint64_t Fields8(const uint64_t* g, uint64_t byte_masks) {
  const __m128i low_bytes = _mm512_cvtepi64_epi8(_mm512_loadu_si512(g));
  return _pext_u64(static_cast<uint64_t>(_mm_cvtsi128_si64(low_bytes)), byte_masks);
}

// Eight codes' quotients (each below 7: at most 56 bits) in unary, for one Put: in byte i the
// field (2 << q_i) - 1 (a byte lookup), whose top bit is the terminator; one pext packs the
// terminators' fields, q_i zeros and a one each. Returns the bits and sets *nbits; false
// (nothing set) if a quotient is 7 or more.
HWY_INLINE bool Terminated8(const uint64_t* g, int r, uint64_t* bits, int* nbits) {
  const __m512i quot = _mm512_srl_epi64(_mm512_loadu_si512(g), _mm_cvtsi32_si128(r));
  if (_mm512_cmpge_epu64_mask(quot, _mm512_set1_epi64(7)) != 0) return false;
  // Lane i < 7: (2 << i) - 1; the quotients are below 7, so the other lanes are never read.
  const __m128i field_of = _mm_setr_epi8(1, 3, 7, 15, 31, 63, 127, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i fields = _mm_shuffle_epi8(field_of, _mm512_cvtepi64_epi8(quot));
  const uint64_t f = static_cast<uint64_t>(_mm_cvtsi128_si64(fields));
  // A field's top bit is the one whose next-higher bit is clear (bit 7 of each byte is clear).
  *bits = _pext_u64(f & ~(f >> 1), f);
  *nbits = __builtin_popcountll(f);
  return true;
}
#endif

// PutSplitRice of split_rice.h. The quotients go to a buffer of their own, then are appended
// after the remainders' last byte. The scalar steps write both areas in one loop (each writer's
// Put is a chain of dependent steps; two side by side overlap); the AVX-512 targets (unless
// `scalar`) write eight codes per Put where they fit, else four, each area in a loop of its own
// (with both writers live in one loop, an accumulator was kept on the stack, in the chain of
// every Put). The real 4.5 % pair's 65 Ki codes, one thread on a Zen 5: 79 us with four codes
// per write and one area after the other, 72 with the two areas side by side, 47 with eight
// codes per write by shifts and sums; eight packed by pext, each area in its own loop, took that
// pair's whole location coding (plain mode) from 72 to 54 us.
void PutSplitRiceImpl(std::span<const RiceRun> runs, bool scalar, std::vector<uint8_t>* out) {
  uint64_t codes = 0, remainder_bits = 0;
  for (const RiceRun& run : runs)
    codes += run.gaps.size(), remainder_bits += run.gaps.size() * static_cast<uint64_t>(run.r);
  if (codes == 0) return;
  thread_local std::vector<uint8_t> quotients;
  quotients.clear();
  BitWriter w(*out, static_cast<size_t>((remainder_bits + 7) / 8)), wq(quotients, static_cast<size_t>(codes / 4 + 64));
  {
    BitWriter::Local bits(w), qbits(wq);
    for (const RiceRun& run : runs) {
      const int r = run.r;
      const uint64_t mask = (uint64_t{1} << r) - 1;
      const uint64_t* g = run.gaps.data();
      const size_t n = run.gaps.size();
      size_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
      if (!scalar) {
        const uint64_t byte_masks = 0x0101010101010101ull * (mask & 0xff);
        // The remainders, then the quotients.
        const size_t eights = n / 8 * 8;
        if (r > 0 && r <= 7) {
          for (size_t k = 0; k < eights; k += 8) bits.Put(Fields8(g + k, byte_masks), 8 * r);
        } else if (r > 0) {
          for (size_t k = 0; k < eights; k += 8)
            bits.PutFields4(g[k] & mask, g[k + 1] & mask, g[k + 2] & mask, g[k + 3] & mask, r),
                bits.PutFields4(g[k + 4] & mask, g[k + 5] & mask, g[k + 6] & mask, g[k + 7] & mask, r);
        }
        for (; i < eights; i += 8) {
          uint64_t t;
          int t_bits;
          if (Terminated8(g + i, r, &t, &t_bits))
            qbits.Put(t, t_bits);
          else
            qbits.PutTerminated4(g[i] >> r, g[i + 1] >> r, g[i + 2] >> r, g[i + 3] >> r),
                qbits.PutTerminated4(g[i + 4] >> r, g[i + 5] >> r, g[i + 6] >> r, g[i + 7] >> r);
        }
      }
#else
      (void)scalar;
#endif
      for (; i + 4 <= n; i += 4) {
        if (r > 0) bits.PutFields4(g[i] & mask, g[i + 1] & mask, g[i + 2] & mask, g[i + 3] & mask, r);
        qbits.PutTerminated4(g[i] >> r, g[i + 1] >> r, g[i + 2] >> r, g[i + 3] >> r);
      }
      for (; i < n; ++i) {
        if (r > 0) bits.Put(g[i] & mask, r);
        qbits.PutTerminated(g[i] >> r);
      }
    }
  }
  w.Flush();  // the remainders, zero-padded to a byte
  wq.Flush();
  out->insert(out->end(), quotients.begin(), quotients.end());
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(PutSplitRiceImpl);

void PutSplitRice(std::span<const RiceRun> runs, std::vector<uint8_t>* out) {
  HWY_DYNAMIC_DISPATCH(PutSplitRiceImpl)(runs, ScalarSplitRiceForced(), out);
}

}  // namespace dcr
#endif  // HWY_ONCE
