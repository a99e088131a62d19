// Dtype conversions on bits: widening is exact and invertible, narrowing rounds to nearest even
// exactly as the compiler's IEEE conversions do (checked exhaustively where the domain is small),
// NaNs stay NaNs of the same sign, and nothing is ever compared as a float.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "layout/dtype_convert.h"

namespace dcr {
namespace {

bool IsNanF32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
bool IsNanF16(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

uint16_t HostF32ToF16(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  _Float16 h = static_cast<_Float16>(f);
  uint16_t out;
  std::memcpy(&out, &h, 2);
  return out;
}

uint32_t HostF16ToF32(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  float f = static_cast<float>(x);
  uint32_t out;
  std::memcpy(&out, &f, 4);
  return out;
}

TEST(DtypeConvert, Bf16ToF16RoundsToNearestEvenForEveryBf16Value) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint32_t f32 = b << 16;
    const uint64_t got = ConvertBits(DType::kBF16, DType::kF16, b);
    if (IsNanF32(f32)) {
      EXPECT_TRUE(IsNanF16(static_cast<uint16_t>(got))) << std::hex << b;
      EXPECT_EQ(got & 0x8000u, (b & 0x8000u)) << std::hex << b;
      EXPECT_TRUE(got & 0x0200u) << "quiet bit set for " << std::hex << b;
      continue;
    }
    ASSERT_EQ(got, HostF32ToF16(f32)) << std::hex << "bf16 0x" << b;
  }
}

TEST(DtypeConvert, F16ToF32IsExactForEveryF16Value) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint64_t got = ConvertBits(DType::kF16, DType::kF32, h);
    if (IsNanF16(static_cast<uint16_t>(h))) {
      EXPECT_EQ(got, ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13)) << "payload kept for " << std::hex << h;
      continue;
    }
    ASSERT_EQ(got, HostF16ToF32(static_cast<uint16_t>(h))) << std::hex << h;
    EXPECT_EQ(InvertExactConversion(DType::kF16, DType::kF32, got), h);
  }
}

TEST(DtypeConvert, F32ToF16MatchesTheHostOnBoundariesAndRandomValues) {
  std::vector<uint32_t> values = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x477fe000, 0x477fefff, 0x477ff000,
                                  0x477ff001, 0x38800000, 0x387fffff, 0x33000000, 0x33000001, 0x32ffffff, 0x33800000,
                                  0x33c00000, 0x00000001, 0x3f800000, 0xbf801000, 0x3f801000, 0x3f803000};
  std::mt19937 rng(5);
  for (int i = 0; i < 2000000; ++i) values.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t u : values) {
    if (IsNanF32(u)) continue;
    ASSERT_EQ(ConvertBits(DType::kF32, DType::kF16, u), HostF32ToF16(u)) << std::hex << u;
  }
}

TEST(DtypeConvert, F32ToBf16RoundsToNearestEvenAndQuietsNans) {
  EXPECT_EQ(F32BitsToBf16Bits(0x3f808000u), 0x3f80u);  // tie, even stays
  EXPECT_EQ(F32BitsToBf16Bits(0x3f818000u), 0x3f82u);  // tie, odd rounds up
  EXPECT_EQ(F32BitsToBf16Bits(0x3f808001u), 0x3f81u);
  EXPECT_EQ(F32BitsToBf16Bits(0x7f7fffffu), 0x7f80u);  // overflow to inf
  EXPECT_EQ(F32BitsToBf16Bits(0xff800001u), 0xffc0u);  // signalling NaN -> quiet, sign kept
  EXPECT_EQ(ConvertBits(DType::kF16, DType::kBF16, 0x3c00), 0x3f80u);
  EXPECT_EQ(ConvertBits(DType::kF16, DType::kBF16, 0x0001), 0x3380u);  // smallest F16 subnormal = 2^-24
}

TEST(DtypeConvert, Bf16ToF32IsAShiftAndItsInverseRefusesNonConversions) {
  for (uint32_t b : {0x0000u, 0x8000u, 0x7f81u, 0xffffu, 0x0001u, 0x3f80u}) {
    EXPECT_EQ(ConvertBits(DType::kBF16, DType::kF32, b), static_cast<uint64_t>(b) << 16);
    EXPECT_EQ(InvertExactConversion(DType::kBF16, DType::kF32, static_cast<uint64_t>(b) << 16), b);
  }
  EXPECT_EQ(InvertExactConversion(DType::kBF16, DType::kF32, 0x3f800001u), std::nullopt);
  EXPECT_EQ(InvertExactConversion(DType::kF16, DType::kF32, 0x3f800001u), std::nullopt);  // not an F16 value
  EXPECT_EQ(InvertExactConversion(DType::kF16, DType::kF32, 0x7f800001u), std::nullopt);  // NaN payload below F16's
}

TEST(DtypeConvert, OnlyWideningIsExact) {
  EXPECT_TRUE(ConversionExact(DType::kBF16, DType::kF32));
  EXPECT_TRUE(ConversionExact(DType::kF16, DType::kF32));
  EXPECT_FALSE(ConversionExact(DType::kBF16, DType::kF16));
  EXPECT_FALSE(ConversionExact(DType::kF32, DType::kBF16));
  EXPECT_FALSE(ConversionSupported(DType::kBF16, DType::kBF16));
  EXPECT_FALSE(ConversionSupported(DType::kBF16, DType::kF8E4M3));
}

}  // namespace
}  // namespace dcr
