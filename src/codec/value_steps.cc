// Compiled once per Highway target (foreach_target.h): ValuesToSteps runs in the encoder's diff
// and StepsToDifferences in the decoder on every change; the HWY_ONCE part dispatches them and
// holds the conversion to values of a kind (decoding without applying).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/value_steps.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstring>

#include "base/status.h"
#include "codec/value_steps.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <typename U>
void ValuesToStepsT(const uint8_t* old, bool is_xor, size_t n, uint8_t* values) {
  const hn::ScalableTag<U> d;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t lanes = hn::Lanes(d);
  constexpr int kSignShift = static_cast<int>(sizeof(U) * 8 - 1);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto o = hn::LoadU(d, reinterpret_cast<const U*>(old + i * sizeof(U)));
    const auto v = hn::LoadU(d, reinterpret_cast<const U*>(values + i * sizeof(U)));
    const auto step = hn::Sub(is_xor ? hn::Xor(o, v) : v, o);
    const auto sign = hn::BitCast(d, hn::ShiftRight<kSignShift>(hn::BitCast(di, step)));
    hn::StoreU(hn::Xor(hn::ShiftLeft<1>(step), sign), d, reinterpret_cast<U*>(values + i * sizeof(U)));
  }
  for (; i < n; ++i) {
    U o, v;
    std::memcpy(&o, old + i * sizeof(U), sizeof(U));
    std::memcpy(&v, values + i * sizeof(U), sizeof(U));
    const U z = ZigzagStep<U>(static_cast<U>((is_xor ? static_cast<U>(o ^ v) : v) - o));
    std::memcpy(values + i * sizeof(U), &z, sizeof(U));
  }
}

template <typename U>
void StepsToDifferencesT(size_t n, uint8_t* steps) {
  const hn::ScalableTag<U> d;
  const size_t lanes = hn::Lanes(d);
  const auto one = hn::Set(d, U{1});
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto z = hn::LoadU(d, reinterpret_cast<const U*>(steps + i * sizeof(U)));
    const auto sign = hn::Sub(hn::Zero(d), hn::And(z, one));
    hn::StoreU(hn::Xor(hn::ShiftRight<1>(z), sign), d, reinterpret_cast<U*>(steps + i * sizeof(U)));
  }
  for (; i < n; ++i) {
    U z;
    std::memcpy(&z, steps + i * sizeof(U), sizeof(U));
    z = UnzigzagStep<U>(z);
    std::memcpy(steps + i * sizeof(U), &z, sizeof(U));
  }
}

void StepsToDifferencesImpl(uint32_t width, size_t n, uint8_t* steps) {
  switch (width) {
    case 1: return StepsToDifferencesT<uint8_t>(n, steps);
    case 2: return StepsToDifferencesT<uint16_t>(n, steps);
    case 4: return StepsToDifferencesT<uint32_t>(n, steps);
    default: return StepsToDifferencesT<uint64_t>(n, steps);
  }
}

void ValuesToStepsImpl(const uint8_t* old, bool is_xor, uint32_t width, size_t n, uint8_t* values) {
  switch (width) {
    case 1: return ValuesToStepsT<uint8_t>(old, is_xor, n, values);
    case 2: return ValuesToStepsT<uint16_t>(old, is_xor, n, values);
    case 4: return ValuesToStepsT<uint32_t>(old, is_xor, n, values);
    default: return ValuesToStepsT<uint64_t>(old, is_xor, n, values);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(ValuesToStepsImpl);
HWY_EXPORT(StepsToDifferencesImpl);

namespace {

template <typename U>
void DifferencesToValuesT(const uint8_t* base, std::span<const uint32_t> positions, bool is_xor, uint8_t* differences) {
  for (size_t i = 0; i < positions.size(); ++i) {
    U old, d;
    std::memcpy(&old, base + size_t{positions[i]} * sizeof(U), sizeof(U));
    std::memcpy(&d, differences + i * sizeof(U), sizeof(U));
    const U next = static_cast<U>(old + d);
    const U value = is_xor ? static_cast<U>(old ^ next) : next;
    std::memcpy(differences + i * sizeof(U), &value, sizeof(U));
  }
}

}  // namespace

void ValuesToSteps(std::span<const uint8_t> old, ValueKind kind, uint32_t width, std::span<uint8_t> values) {
  DCR_CHECK(old.size() == values.size() && values.size() % width == 0);
  HWY_DYNAMIC_DISPATCH(ValuesToStepsImpl)(old.data(), kind == ValueKind::kXor, width, values.size() / width,
                                          values.data());
}

void StepsToDifferences(uint32_t width, std::span<uint8_t> steps) {
  DCR_CHECK(steps.size() % width == 0);
  HWY_DYNAMIC_DISPATCH(StepsToDifferencesImpl)(width, steps.size() / width, steps.data());
}

void DifferencesToValues(std::span<const uint8_t> base, std::span<const uint32_t> positions, ValueKind kind,
                         uint32_t width, std::span<uint8_t> differences) {
  DCR_CHECK(differences.size() == positions.size() * width);
  const bool is_xor = kind == ValueKind::kXor;
  switch (width) {
    case 1: return DifferencesToValuesT<uint8_t>(base.data(), positions, is_xor, differences.data());
    case 2: return DifferencesToValuesT<uint16_t>(base.data(), positions, is_xor, differences.data());
    case 4: return DifferencesToValuesT<uint32_t>(base.data(), positions, is_xor, differences.data());
    default: return DifferencesToValuesT<uint64_t>(base.data(), positions, is_xor, differences.data());
  }
}

}  // namespace dcr
#endif  // HWY_ONCE
