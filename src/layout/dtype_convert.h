// Element conversions between BF16, F16 and F32, on bits (never through the host's float
// conversions, whose NaN handling varies). Used for layout pieces whose local dtype differs from
// the canonical one: the local bits are always exactly ConvertBits(canonical bits).
//
// Widening (BF16 -> F32, F16 -> F32) is exact and injective: every value, NaN payloads and the
// signalling bit included, is kept. Narrowing (F32 -> BF16, F32 -> F16, BF16 -> F16, F16 -> BF16)
// rounds to nearest, ties to even, in one rounding step; F16 results overflow to infinity and
// underflow to subnormals and signed zero; a NaN stays a NaN of the same sign with its payload's
// high bits kept and the quiet bit set.
#pragma once

#include <cstdint>
#include <optional>

#include "format/dtype.h"

namespace dcr {

// True for two different dtypes of {BF16, F16, F32}.
bool ConversionSupported(DType from, DType to);
// True when the conversion is injective (widening), so the source bits can be recovered.
bool ConversionExact(DType from, DType to);
// The bits of `bits` (a `from` value, zero-extended) converted to `to`. Requires ConversionSupported.
uint64_t ConvertBits(DType from, DType to, uint64_t bits);
// For an exact conversion: the `from` bits that convert to `local_bits`, or nullopt when no `from`
// value converts to them. Requires ConversionExact.
std::optional<uint64_t> InvertExactConversion(DType from, DType to, uint64_t local_bits);

uint16_t F32BitsToBf16Bits(uint32_t f32);
uint16_t F32BitsToF16Bits(uint32_t f32);
uint32_t F16BitsToF32Bits(uint16_t f16);

}  // namespace dcr
