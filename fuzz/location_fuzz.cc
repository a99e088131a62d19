// libFuzzer target: location decoding of arbitrary codes for arbitrary chunk sizes must yield
// exactly the declared number of strictly ascending in-range positions, or an error.
#include <cstdint>
#include <vector>

#include "codec/location_coding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  const uint64_t count = 1 + (uint64_t{data[0]} | uint64_t{data[1]} << 8 | uint64_t{data[2]} << 16);
  const int block_log2 = 3 + data[3] % 14;
  const uint64_t expected = (uint64_t{data[4]} | uint64_t{data[5]} << 8) % (count + 1);
  std::vector<uint32_t> pos;
  if (!dcr::DecodeLocations({data + 6, size - 6}, count, block_log2, expected, &pos).ok()) return 0;
  if (pos.size() != expected) __builtin_trap();
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] >= count || (i > 0 && pos[i] <= pos[i - 1])) __builtin_trap();
  return 0;
}
