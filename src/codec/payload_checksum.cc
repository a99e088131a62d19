#include "codec/payload_checksum.h"

#include <xxhash.h>

#include <atomic>

namespace dcr {

#if defined(__x86_64__)
uint64_t PayloadChecksumAvx2(const uint8_t* p, size_t n);  // payload_checksum_avx2.cc
#endif

namespace {
std::atomic<bool> g_force_library{false};

#if defined(__x86_64__)
const bool kHasAvx2 = __builtin_cpu_supports("avx2");
#endif
}  // namespace

void ForceLibraryChecksum(bool library) { g_force_library.store(library); }

uint64_t PayloadChecksum(std::span<const uint8_t> bytes) {
#if defined(__x86_64__)
  if (kHasAvx2 && !g_force_library.load(std::memory_order_relaxed)) return PayloadChecksumAvx2(bytes.data(), bytes.size());
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace dcr
