// Evicting bytes from every cache level, so that a benchmark can time a pass over data as a
// model-sized input meets it (from memory) even when the input would fit in cache.
#pragma once

#include <cstdint>
#include <span>

namespace dcr {

// Writes back and invalidates every cache line of `bytes` in all cache levels (x86-64 clflush,
// aarch64 dc civac; elsewhere a no-op that returns false). Returns once the evictions are
// complete. Contents are unchanged; read-only mappings may be passed.
bool EvictFromCaches(std::span<const uint8_t> bytes);

}  // namespace dcr
