// The gap streams of rice_gaps.h, compiled once per Highway target (foreach_target.h) for the
// target's scalar instructions (on x86-64 the AVX2 and AVX-512 targets have BMI1/BMI2: one-micro-op
// register-count shifts and trailing-zero counts) and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/rice_gaps.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "codec/rice_gaps.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

void PutRiceGapsImpl(BitWriter& w, std::span<const uint64_t> gaps, int r) {
  BitWriter::Local out(w);
  size_t i = 0;
  for (; i + 4 <= gaps.size(); i += 4) out.PutRice4(gaps[i], gaps[i + 1], gaps[i + 2], gaps[i + 3], r);
  for (; i + 2 <= gaps.size(); i += 2) out.PutRice2(gaps[i], gaps[i + 1], r);
  if (i < gaps.size()) out.PutRice(gaps[i], r);
}

bool GetRiceOrdinalsImpl(BitReader& bits, uint64_t n, int r, uint64_t limit, uint64_t* out) {
  uint64_t next = 0;  // <= limit
  return bits.GetRiceRun(n, r, limit >> r, [&](uint64_t g) {
    if (g >= limit - next) return false;
    *out++ = next + g;
    next += g + 1;
    return true;
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(PutRiceGapsImpl);
HWY_EXPORT(GetRiceOrdinalsImpl);

void PutRiceGaps(BitWriter& w, std::span<const uint64_t> gaps, int r) { HWY_DYNAMIC_DISPATCH(PutRiceGapsImpl)(w, gaps, r); }

bool GetRiceOrdinals(BitReader& bits, uint64_t n, int r, uint64_t limit, uint64_t* out) {
  return HWY_DYNAMIC_DISPATCH(GetRiceOrdinalsImpl)(bits, n, r, limit, out);
}

}  // namespace dcr
#endif  // HWY_ONCE
