#include "base/cache_evict.h"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

namespace dcr {

bool EvictFromCaches(std::span<const uint8_t> bytes) {
  // 64 bytes is the smallest line of the CPUs we run on; a larger line is flushed several times.
  constexpr uintptr_t kLine = 64;
  if (bytes.empty()) return true;
  const uintptr_t end = reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size();
#if defined(__x86_64__) || defined(__i386__)
  for (uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data()) & ~(kLine - 1); p < end; p += kLine)
    _mm_clflush(reinterpret_cast<const void*>(p));
  _mm_mfence();
  return true;
#elif defined(__aarch64__)
  for (uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data()) & ~(kLine - 1); p < end; p += kLine)
    asm volatile("dc civac, %0" : : "r"(p) : "memory");
  asm volatile("dsb ish" : : : "memory");
  return true;
#else
  (void)end;
  return false;
#endif
}

}  // namespace dcr
