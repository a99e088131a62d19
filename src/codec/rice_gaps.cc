// The gap streams of rice_gaps.h, compiled once per Highway target (foreach_target.h) for the
// target's scalar instructions (on x86-64 the AVX2 and AVX-512 targets have BMI1/BMI2: one-micro-op
// register-count shifts and trailing-zero counts) and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/rice_gaps.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "codec/rice_gaps.h"

#include "base/status.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void PutRiceGapsImpl(BitWriter& w, std::span<const uint64_t> gaps, int r) {
  BitWriter::Local out(w);
  size_t i = 0;
  for (; i + 4 <= gaps.size(); i += 4) out.PutRice4(gaps[i], gaps[i + 1], gaps[i + 2], gaps[i + 3], r);
  for (; i + 2 <= gaps.size(); i += 2) out.PutRice2(gaps[i], gaps[i + 1], r);
  if (i < gaps.size()) out.PutRice(gaps[i], r);
}

// QuotientSums of rice_gaps.h: a vector of gaps per step, each shifted three ways (the scalar
// loop's register-count shifts and adds took ~1.4 ns a gap on a Zen 5, 9-10 % of a context-mode
// part's coding).
void QuotientSumsImpl(const uint64_t* gaps, size_t n, int lo, uint64_t* sums) {
  const hn::ScalableTag<uint64_t> d;
  const size_t lanes = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::LoadU(d, gaps + i);
    s0 = hn::Add(s0, hn::ShiftRightSame(g, lo));
    s1 = hn::Add(s1, hn::ShiftRightSame(g, lo + 1));
    s2 = hn::Add(s2, hn::ShiftRightSame(g, lo + 2));
  }
  uint64_t q0 = hn::GetLane(hn::SumOfLanes(d, s0)), q1 = hn::GetLane(hn::SumOfLanes(d, s1)),
           q2 = hn::GetLane(hn::SumOfLanes(d, s2));
  for (; i < n; ++i) q0 += gaps[i] >> lo, q1 += gaps[i] >> (lo + 1), q2 += gaps[i] >> (lo + 2);
  sums[0] = q0, sums[1] = q1, sums[2] = q2;
}

template <typename T>
bool GetRiceOrdinalsT(BitReader& bits, uint64_t n, int r, uint64_t limit, T* out) {
  uint64_t next = 0;  // <= limit
  return bits.GetRiceRun(n, r, limit >> r, [&](uint64_t g) {
    if (g >= limit - next) return false;
    *out++ = static_cast<T>(next + g);
    next += g + 1;
    return true;
  });
}

bool GetRiceOrdinalsImpl(BitReader& bits, uint64_t n, int r, uint64_t limit, uint64_t* out) {
  return GetRiceOrdinalsT(bits, n, r, limit, out);
}

bool GetRiceOrdinals32Impl(BitReader& bits, uint64_t n, int r, uint64_t limit, uint32_t* out) {
  return GetRiceOrdinalsT(bits, n, r, limit, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(PutRiceGapsImpl);
HWY_EXPORT(GetRiceOrdinalsImpl);
HWY_EXPORT(GetRiceOrdinals32Impl);
HWY_EXPORT(QuotientSumsImpl);

std::array<uint64_t, 3> QuotientSums(std::span<const uint64_t> gaps, int lo) {
  std::array<uint64_t, 3> sums;
  HWY_DYNAMIC_DISPATCH(QuotientSumsImpl)(gaps.data(), gaps.size(), lo, sums.data());
  return sums;
}

void PutRiceGaps(BitWriter& w, std::span<const uint64_t> gaps, int r) { HWY_DYNAMIC_DISPATCH(PutRiceGapsImpl)(w, gaps, r); }

bool GetRiceOrdinals(BitReader& bits, uint64_t n, int r, uint64_t limit, uint64_t* out) {
  return HWY_DYNAMIC_DISPATCH(GetRiceOrdinalsImpl)(bits, n, r, limit, out);
}

bool GetRiceOrdinals(BitReader& bits, uint64_t n, int r, uint64_t limit, uint32_t* out) {
  DCR_CHECK(limit <= (uint64_t{1} << 32));
  return HWY_DYNAMIC_DISPATCH(GetRiceOrdinals32Impl)(bits, n, r, limit, out);
}

}  // namespace dcr
#endif  // HWY_ONCE
