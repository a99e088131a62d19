// Integer arithmetic shared by the codec's splits of a count into shares.
#pragma once

#include <cstdint>

namespace dcr {

// floor(n * i / d) for i <= d and 0 < d < 2^32, without forming n * i (which may overflow): with
// n = q d + r it is q i + floor(r i / d), and r i < d^2. Where share i of n things cut into d
// shares starts (band parts, value streams).
inline uint64_t FloorShare(uint64_t n, uint64_t i, uint64_t d) { return n / d * i + n % d * i / d; }

}  // namespace dcr
