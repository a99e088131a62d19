#include "layout/dtype_convert.h"

#include "base/status.h"

namespace dcr {
namespace {

bool IsFloat3(DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; }

// Any value to F32 bits, exactly.
uint32_t ToF32Bits(DType from, uint64_t bits) {
  switch (from) {
    case DType::kBF16: return static_cast<uint32_t>(bits) << 16;
    case DType::kF16: return F16BitsToF32Bits(static_cast<uint16_t>(bits));
    case DType::kF32: return static_cast<uint32_t>(bits);
    default: Fatal(__FILE__, __LINE__, "unsupported conversion source");
  }
}

}  // namespace

uint16_t F32BitsToBf16Bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN: quiet
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

uint16_t F32BitsToF16Bits(uint32_t u) {
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN: quiet
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (incl. inf) -> inf
  if (a < 0x38800000u) {  // below 2^-14: an F16 subnormal or zero
    const uint32_t e = a >> 23;
    if (e < 102) return sign;  // below 2^-25: rounds to zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24: value / 2^-24 = m >> shift
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t r = a - (112u << 23);  // rebias the exponent from 127 to 15
  uint32_t q = r >> 13;
  const uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

uint32_t F16BitsToF32Bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return sign | 0x7f800000u | (m << 13);  // inf / NaN, payload kept
  if (e == 0) {
    if (m == 0) return sign;
    e = 1;
    while (!(m & 0x400u)) m <<= 1, --e;  // normalize the subnormal
    m &= 0x3ffu;
    return sign | ((e + 112) << 23) | (m << 13);
  }
  return sign | ((e + 112) << 23) | (m << 13);
}

bool ConversionSupported(DType from, DType to) { return from != to && IsFloat3(from) && IsFloat3(to); }

bool ConversionExact(DType from, DType to) {
  return to == DType::kF32 && (from == DType::kBF16 || from == DType::kF16);
}

uint64_t ConvertBits(DType from, DType to, uint64_t bits) {
  DCR_CHECK(ConversionSupported(from, to));
  const uint32_t f32 = ToF32Bits(from, bits);
  switch (to) {
    case DType::kF32: return f32;
    case DType::kBF16: return F32BitsToBf16Bits(f32);
    case DType::kF16: return F32BitsToF16Bits(f32);
    default: Fatal(__FILE__, __LINE__, "unsupported conversion target");
  }
}

std::optional<uint64_t> InvertExactConversion(DType from, DType to, uint64_t local_bits) {
  DCR_CHECK(ConversionExact(from, to));
  const uint32_t u = static_cast<uint32_t>(local_bits);
  uint64_t candidate = 0;
  if (from == DType::kBF16) {
    candidate = u >> 16;
  } else if ((u & 0x7fffffffu) > 0x7f800000u) {
    candidate = ((u >> 16) & 0x8000u) | 0x7c00u | ((u >> 13) & 0x3ffu);  // NaN: payload truncated
  } else {
    candidate = F32BitsToF16Bits(u);
  }
  if (ConvertBits(from, to, candidate) != local_bits) return std::nullopt;
  return candidate;
}

}  // namespace dcr
