// The O(elements) and O(changes) digest sums of state_digest.h, compiled once per Highway target
// (foreach_target.h) and dispatched at run time. On AVX-512 (64-bit lane multiplies, AVX-512DQ)
// eight element hashes are computed per step; other targets run the scalar ElementHash. The sums
// are mod 2^64 and order-free, so every target gives the same digest (protocol_test checks each
// compiled target against the scalar definition).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "protocol/state_digest_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstring>

#include "protocol/state_digest.h"
#include "protocol/state_digest_simd.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <typename U>
U LoadElem(const uint8_t* p, uint64_t i) {
  U v;
  std::memcpy(&v, p + i * sizeof(U), sizeof(U));
  return v;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
using D64 = hn::ScalableTag<uint64_t>;
using V64 = hn::Vec<D64>;
constexpr size_t kLanes = hn::MaxLanes(D64());

HWY_INLINE V64 Mix(V64 x) {  // DigestMix64, lane-wise
  const D64 d;
  x = hn::Xor(x, hn::ShiftRight<33>(x));
  x = x * hn::Set(d, 0xff51afd7ed558ccdull);
  x = hn::Xor(x, hn::ShiftRight<33>(x));
  x = x * hn::Set(d, 0xc4ceb9fe1a85ec53ull);
  return hn::Xor(x, hn::ShiftRight<33>(x));
}

// ElementHash's two mixer inputs, lane-wise, from x1 = x + 1 and x2 = x ^ 0x8cb9... where
// x = key ^ (index * 0x9e37...): shared by the hashes of one index's old and new bits. The
// rotation left by 29 is one instruction (vprorq by 35).
HWY_INLINE V64 LoInput(V64 x1, V64 bits) { return hn::Add(x1, bits * hn::Set(D64(), 0xd6e8feb86659fd93ull)); }
HWY_INLINE V64 HiInput(V64 x2, V64 bits) { return hn::Add(x2, hn::RotateRight<35>(bits) * hn::Set(D64(), 0xa0761d6478bd642full)); }
HWY_INLINE V64 PlusOne(V64 x) { return hn::Add(x, hn::Set(D64(), 1)); }
HWY_INLINE V64 HiKey(V64 x) { return hn::Xor(x, hn::Set(D64(), 0x8cb92ba72f3d8dd7ull)); }

// Lane-wise ElementHash(key, index, bits) given x: its lo and hi.
HWY_INLINE void Hash(V64 x, V64 bits, V64* lo, V64* hi) {
  *lo = Mix(LoInput(PlusOne(x), bits));
  *hi = Mix(HiInput(HiKey(x), bits));
}

// Lane-wise ElementHash(new) - ElementHash(old) at one index given x: the difference of lo and hi.
HWY_INLINE void HashChange(V64 x, V64 new_bits, V64 old_bits, V64* lo, V64* hi) {
  const V64 x1 = PlusOne(x), x2 = HiKey(x);
  *lo = hn::Sub(Mix(LoInput(x1, new_bits)), Mix(LoInput(x1, old_bits)));
  *hi = hn::Sub(Mix(HiInput(x2, new_bits)), Mix(HiInput(x2, old_bits)));
}

HWY_INLINE V64 KeyedIndex(uint64_t key, V64 index) {
  const D64 d;
  return hn::Xor(hn::Set(d, key), index * hn::Set(d, 0x9e3779b97f4a7c15ull));
}

// Inline: a call that passes vectors returns with the upper register state dirty (GCC emits no
// vzeroupper there), and the caller then returned without one too, which slowed every later
// legacy-SSE instruction in the process (simd_state_test).
// The sums are taken from the stored lanes in uint64_t: Highway's SumOfLanes ends, on AVX-512 with
// GCC, in _mm512_reduce_add_epi64, whose last step adds two signed long longs, and the hashes'
// sums overflow there (undefined behaviour that UBSan reports; these sums wrap by definition).
HWY_INLINE Digest128 Sums(V64 lo, V64 hi) {
  const D64 d;
  HWY_ALIGN uint64_t l[hn::MaxLanes(d)], h[hn::MaxLanes(d)];
  hn::Store(lo, d, l);
  hn::Store(hi, d, h);
  Digest128 sum{0, 0};
  for (size_t i = 0; i < hn::Lanes(d); ++i) sum.lo += l[i], sum.hi += h[i];
  return sum;
}

template <typename U>
Digest128 ElementsT(uint64_t key, const uint8_t* p, uint64_t n, uint64_t first) {
  const D64 d;
  const size_t lanes = hn::Lanes(d);
  V64 lo = hn::Zero(d), hi = hn::Zero(d);
  alignas(64) uint64_t bits[kLanes];
  uint64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    V64 v;
    if constexpr (sizeof(U) == 2) {  // BF16/F16: widened in registers, u16 -> u32 -> u64
      const hn::Rebind<uint32_t, D64> d32;
      const hn::Rebind<uint16_t, D64> d16;
      v = hn::PromoteTo(d, hn::PromoteTo(d32, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p) + i)));
    } else {
      for (size_t j = 0; j < lanes; ++j) bits[j] = LoadElem<U>(p, i + j);
      v = hn::Load(d, bits);
    }
    V64 l, h;
    Hash(KeyedIndex(key, hn::Iota(d, first + i)), v, &l, &h);
    lo = hn::Add(lo, l), hi = hn::Add(hi, h);
  }
  Digest128 sum = Sums(lo, hi);
  for (; i < n; ++i) sum += ElementHash(key, first + i, LoadElem<U>(p, i));
  return sum;
}

// Lanes k..k+lanes of back-to-back `U` elements at p, widened to 64 bits.
template <typename U>
HWY_INLINE V64 LoadWide(const uint8_t* p, size_t k) {
  const D64 d;
  const U* e = reinterpret_cast<const U*>(p) + k;
  if constexpr (sizeof(U) == 8) {
    return hn::LoadU(d, e);
  } else if constexpr (sizeof(U) == 4) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<uint32_t, D64>(), e));
  } else {
    const hn::Rebind<uint32_t, D64> d32;
    return hn::PromoteTo(d, hn::PromoteTo(d32, hn::LoadU(hn::Rebind<U, D64>(), e)));
  }
}

// The old bits and values arrive back to back, one per change: loads of whole vectors. (Reading
// them from the tensors at the positions took two gathers per eight changes, which made the
// sum 3.4x as slow on a Zen 5.)
template <typename U>
Digest128 ChangesT(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                   const uint8_t* values, bool values_are_xor) {
  const D64 d;
  const size_t lanes = hn::Lanes(d);
  const hn::Rebind<uint32_t, D64> d32;
  V64 lo = hn::Zero(d), hi = hn::Zero(d);
  const V64 keep_old = values_are_xor ? hn::Set(d, ~uint64_t{0}) : hn::Zero(d);  // new = value ^ (old & keep_old)
  size_t k = 0;
  for (; k + lanes <= positions.size(); k += lanes) {
    const V64 ob = LoadWide<U>(old_bits, k);
    const V64 nb = hn::Xor(LoadWide<U>(values, k), hn::And(ob, keep_old));
    const V64 x = KeyedIndex(key, hn::Add(hn::Set(d, first), hn::PromoteTo(d, hn::LoadU(d32, positions.data() + k))));
    V64 l, h;
    HashChange(x, nb, ob, &l, &h);
    lo = hn::Add(lo, l), hi = hn::Add(hi, h);
  }
  Digest128 sum = Sums(lo, hi);
  for (; k < positions.size(); ++k) {
    const U ob = LoadElem<U>(old_bits, k), v = LoadElem<U>(values, k);
    DigestUpdate(&sum, key, first + positions[k], ob, values_are_xor ? static_cast<U>(ob ^ v) : v);
  }
  return sum;
}

#else  // no 64-bit lane multiply: the scalar definition

template <typename U>
Digest128 ElementsT(uint64_t key, const uint8_t* p, uint64_t n, uint64_t first) {
  uint64_t lo = 0, hi = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const Digest128 h = ElementHash(key, first + i, LoadElem<U>(p, i));
    lo += h.lo, hi += h.hi;
  }
  return {lo, hi};
}

// Two changes per step with separate sums: the multiply chains of neighbouring elements overlap.
template <typename U>
Digest128 ChangesT(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                   const uint8_t* values, bool values_are_xor) {
  Digest128 d0, d1;
  auto one = [&](Digest128* d, size_t k) {
    const U ob = LoadElem<U>(old_bits, k), v = LoadElem<U>(values, k);
    DigestUpdate(d, key, first + positions[k], ob, values_are_xor ? static_cast<U>(ob ^ v) : v);
  };
  size_t k = 0;
  for (; k + 2 <= positions.size(); k += 2) one(&d0, k), one(&d1, k + 1);
  if (k < positions.size()) one(&d0, k);
  return d0 += d1;
}

#endif

Digest128 DigestElementsImpl(uint64_t key, const uint8_t* p, uint64_t n, uint32_t width, uint64_t first) {
  switch (width) {
    case 1: return ElementsT<uint8_t>(key, p, n, first);
    case 2: return ElementsT<uint16_t>(key, p, n, first);
    case 4: return ElementsT<uint32_t>(key, p, n, first);
    default: return ElementsT<uint64_t>(key, p, n, first);
  }
}

Digest128 DigestChangesImpl(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                            const uint8_t* values, bool values_are_xor, uint32_t width) {
  switch (width) {
    case 1: return ChangesT<uint8_t>(key, first, positions, old_bits, values, values_are_xor);
    case 2: return ChangesT<uint16_t>(key, first, positions, old_bits, values, values_are_xor);
    case 4: return ChangesT<uint32_t>(key, first, positions, old_bits, values, values_are_xor);
    default: return ChangesT<uint64_t>(key, first, positions, old_bits, values, values_are_xor);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(DigestElementsImpl);
HWY_EXPORT(DigestChangesImpl);

Digest128 DigestElementsDispatch(uint64_t key, const uint8_t* p, uint64_t n, uint32_t width, uint64_t first) {
  return HWY_DYNAMIC_DISPATCH(DigestElementsImpl)(key, p, n, width, first);
}

Digest128 DigestChangesDispatch(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                                const uint8_t* values, bool values_are_xor, uint32_t width) {
  return HWY_DYNAMIC_DISPATCH(DigestChangesImpl)(key, first, positions, old_bits, values, values_are_xor, width);
}

}  // namespace dcr
#endif  // HWY_ONCE
