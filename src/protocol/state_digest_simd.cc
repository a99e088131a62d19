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
HWY_INLINE Digest128 Sums(V64 lo, V64 hi) {
  const D64 d;
  return {hn::GetLane(hn::SumOfLanes(d, lo)), hn::GetLane(hn::SumOfLanes(d, hi))};
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

template <typename U>
Digest128 ChangesT(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* base,
                   const uint8_t* next) {
  const D64 d;
  const size_t lanes = hn::Lanes(d);
  V64 lo = hn::Zero(d), hi = hn::Zero(d);
  alignas(64) uint64_t index[kLanes], old_bits[kLanes], new_bits[kLanes];
  size_t k = 0;
  Digest128 head;  // position 0 of 2-byte elements
  if constexpr (sizeof(U) == 2) {
    // BF16/F16: gathers of 4 bytes ending at each element (elements p - 1 and p), so no load
    // reaches past the last element; position 0 alone is taken one by one.
    const hn::Rebind<uint32_t, D64> d32;
    const hn::Rebind<int32_t, D64> di32;
    if (!positions.empty() && positions[0] == 0) DigestUpdate(&head, key, first, LoadElem<U>(base, 0), LoadElem<U>(next, 0)), k = 1;
    for (; k + lanes <= positions.size(); k += lanes) {
      const auto p32 = hn::LoadU(d32, positions.data() + k);
      const auto offset = hn::BitCast(di32, hn::ShiftLeft<1>(hn::Sub(p32, hn::Set(d32, 1u))));
      const V64 ob = hn::ShiftRight<16>(hn::PromoteTo(d, hn::GatherOffset(d32, reinterpret_cast<const uint32_t*>(base), offset)));
      const V64 nb = hn::ShiftRight<16>(hn::PromoteTo(d, hn::GatherOffset(d32, reinterpret_cast<const uint32_t*>(next), offset)));
      const V64 x = KeyedIndex(key, hn::Add(hn::Set(d, first), hn::PromoteTo(d, p32)));
      V64 l, h;
      HashChange(x, nb, ob, &l, &h);
      lo = hn::Add(lo, l), hi = hn::Add(hi, h);
    }
  }
  for (; k + lanes <= positions.size(); k += lanes) {
    for (size_t j = 0; j < lanes; ++j) {
      const uint32_t p = positions[k + j];
      index[j] = first + p;
      old_bits[j] = LoadElem<U>(base, p);
      new_bits[j] = LoadElem<U>(next, p);
    }
    const V64 x = KeyedIndex(key, hn::Load(d, index));
    V64 l, h;
    HashChange(x, hn::Load(d, new_bits), hn::Load(d, old_bits), &l, &h);
    lo = hn::Add(lo, l), hi = hn::Add(hi, h);
  }
  Digest128 sum = Sums(lo, hi);
  sum += head;
  for (; k < positions.size(); ++k) {
    const uint32_t p = positions[k];
    DigestUpdate(&sum, key, first + p, LoadElem<U>(base, p), LoadElem<U>(next, p));
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
Digest128 ChangesT(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* base,
                   const uint8_t* next) {
  Digest128 d0, d1;
  auto one = [&](Digest128* d, uint32_t p) { DigestUpdate(d, key, first + p, LoadElem<U>(base, p), LoadElem<U>(next, p)); };
  size_t k = 0;
  for (; k + 2 <= positions.size(); k += 2) one(&d0, positions[k]), one(&d1, positions[k + 1]);
  if (k < positions.size()) one(&d0, positions[k]);
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

Digest128 DigestChangesImpl(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* base,
                            const uint8_t* next, uint32_t width) {
  switch (width) {
    case 1: return ChangesT<uint8_t>(key, first, positions, base, next);
    case 2: return ChangesT<uint16_t>(key, first, positions, base, next);
    case 4: return ChangesT<uint32_t>(key, first, positions, base, next);
    default: return ChangesT<uint64_t>(key, first, positions, base, next);
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

Digest128 DigestChangesDispatch(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* base,
                                const uint8_t* next, uint32_t width) {
  return HWY_DYNAMIC_DISPATCH(DigestChangesImpl)(key, first, positions, base, next, width);
}

}  // namespace dcr
#endif  // HWY_ONCE
