// Values as steps (docs/format.md §2.3, value form 1): where every decoder holds the old bits
// (context mode allowed), each change's value is coded as the zigzagged wrapping difference of
// its new and old bits, z = zigzag((new - old) mod 2^(8 width)). Neighbouring floats differ by a
// few units in the last place, so z is mostly 1 or 2 (-1 or +1 ulp): on the real BF16 pairs its
// order-0 entropy is 1.7-2.0 bits per change against 2.6-2.9 for the XOR masks, whose carry
// length the old bits would predict. The symbol coders code z as they code any value; decoders
// turn z back into the difference and add it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codec/diff.h"

namespace dcr {

// In place: `values` (n × width bytes, XOR masks or new bits as `kind` says) of n changes whose
// old bits are `old` (n × width bytes, in the same order) become their steps.
void ValuesToSteps(std::span<const uint8_t> old, ValueKind kind, uint32_t width, std::span<uint8_t> values);

// In place: `steps` (n × width bytes) become their wrapping differences new - old, which
// ApplyOp::kAdd applies.
void StepsToDifferences(uint32_t width, std::span<uint8_t> steps);

// In place: the wrapping `differences` of the changes at `positions` (relative to `base`, the
// segment's old bits, elements of `width` bytes) become their values of `kind`.
void DifferencesToValues(std::span<const uint8_t> base, std::span<const uint32_t> positions, ValueKind kind,
                         uint32_t width, std::span<uint8_t> differences);

// A step's wrapping difference and back, for elements of type U (unsigned).
template <typename U>
constexpr U ZigzagStep(U d) {
  return static_cast<U>(static_cast<U>(d << 1) ^ static_cast<U>(U{0} - (d >> (sizeof(U) * 8 - 1))));
}
template <typename U>
constexpr U UnzigzagStep(U z) {
  return static_cast<U>((z >> 1) ^ static_cast<U>(U{0} - (z & 1)));
}

}  // namespace dcr
