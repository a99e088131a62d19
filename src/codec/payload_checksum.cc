#include "codec/payload_checksum.h"

#include <hwy/targets.h>
#include <xxhash.h>

#include <atomic>

namespace dcr {

#if defined(__x86_64__)
uint64_t PayloadChecksumAvx2(const uint8_t* p, size_t n);  // payload_checksum_avx2.cc
#endif

namespace {
std::atomic<bool> g_force_library{false};

#if defined(__x86_64__)
// Whether Highway's AVX2 target runs here: the CPU and the OS support AVX2 (and BMI2, FMA, F16C).
// Asked once: SupportedTargets runs CPUID, which a virtual machine may trap.
bool HasAvx2() {
  static const bool has = (hwy::SupportedTargets() & HWY_AVX2) != 0;
  return has;
}
#endif
}  // namespace

void ForceLibraryChecksum(bool library) { g_force_library.store(library); }

uint64_t PayloadChecksum(std::span<const uint8_t> bytes) {
#if defined(__x86_64__)
  if (HasAvx2() && !g_force_library.load(std::memory_order_relaxed))
    return PayloadChecksumAvx2(bytes.data(), bytes.size());
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace dcr
