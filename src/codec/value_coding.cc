#include "codec/value_coding.h"

#include <cstring>

#include "base/status.h"

namespace dcr {

void ToBytePlanes(std::span<const uint8_t> values, uint32_t width, std::vector<uint8_t>* planes) {
  DCR_CHECK(width > 0 && values.size() % width == 0);
  const size_t n = values.size() / width;
  size_t at = planes->size();
  planes->resize(at + values.size());
  uint8_t* out = planes->data() + at;
  if (width == 1) {
    std::memcpy(out, values.data(), n);
    return;
  }
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < width; ++b) out[b * n + i] = values[i * width + b];
}

void FromBytePlanes(std::span<const uint8_t> planes, uint32_t width, std::vector<uint8_t>* values) {
  DCR_CHECK(width > 0 && planes.size() % width == 0);
  const size_t n = planes.size() / width;
  values->resize(planes.size());
  uint8_t* out = values->data();
  if (width == 1) {
    std::memcpy(out, planes.data(), n);
    return;
  }
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < width; ++b) out[i * width + b] = planes[b * n + i];
}

}  // namespace dcr
