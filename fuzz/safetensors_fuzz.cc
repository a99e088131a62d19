// libFuzzer target: the safetensors header parser on arbitrary bytes. Every tensor it accepts
// must lie inside the data region with a byte size that matches its dtype and shape.
#include <cstdint>
#include <span>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = dcr::ParseSafetensorsHeader(std::span<const uint8_t>(data, size), "fuzz");
  if (!h.ok()) return 0;
  for (const auto& t : h->tensors) {
    if (t.data_end > size - h->data_start || t.data_begin > t.data_end) __builtin_trap();
    if (t.num_elements * dcr::DTypeWidth(t.dtype) != t.byte_size()) __builtin_trap();
  }
  return 0;
}
