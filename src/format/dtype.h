// Element types of safetensors checkpoints. dcr never interprets values arithmetically when
// diffing or applying: elements are compared and coded as unsigned integers of their width.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dcr {

enum class DType : uint8_t {
  kBool = 0,
  kU8 = 1,
  kI8 = 2,
  kU16 = 3,
  kI16 = 4,
  kU32 = 5,
  kI32 = 6,
  kU64 = 7,
  kI64 = 8,
  kF16 = 9,
  kBF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kF8E4M3 = 13,
  kF8E5M2 = 14,
};
inline constexpr int kNumDTypes = 15;

// Bytes per element: 1, 2, 4 or 8.
uint32_t DTypeWidth(DType t);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType t);
std::optional<DType> ParseDType(std::string_view name);
// The numeric code stored in dcr's binary formats (docs/format.md); equal to the enum value.
inline uint8_t DTypeCode(DType t) { return static_cast<uint8_t>(t); }
std::optional<DType> DTypeFromCode(uint8_t code);

}  // namespace dcr
