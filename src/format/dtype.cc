#include "format/dtype.h"

#include <array>

namespace dcr {
namespace {

struct DTypeRow {
  DType type;
  std::string_view name;
  uint32_t width;
};

constexpr std::array<DTypeRow, kNumDTypes> kRows = {{
    {DType::kBool, "BOOL", 1},   {DType::kU8, "U8", 1},        {DType::kI8, "I8", 1},
    {DType::kU16, "U16", 2},     {DType::kI16, "I16", 2},      {DType::kU32, "U32", 4},
    {DType::kI32, "I32", 4},     {DType::kU64, "U64", 8},      {DType::kI64, "I64", 8},
    {DType::kF16, "F16", 2},     {DType::kBF16, "BF16", 2},    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},     {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
}};

}  // namespace

uint32_t DTypeWidth(DType t) { return kRows[static_cast<size_t>(t)].width; }
std::string_view DTypeName(DType t) { return kRows[static_cast<size_t>(t)].name; }

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& r : kRows)
    if (r.name == name) return r.type;
  return std::nullopt;
}

std::optional<DType> DTypeFromCode(uint8_t code) {
  if (code >= kNumDTypes) return std::nullopt;
  return static_cast<DType>(code);
}

}  // namespace dcr
