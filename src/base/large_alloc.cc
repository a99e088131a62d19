#include "base/large_alloc.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace dcr {

void* AllocateLarge(size_t bytes) {
  if (bytes < kLargeAllocBytes) return ::operator new(bytes);
  // Whole huge pages: the last one would otherwise be shared with other allocations and
  // could not be a huge page (aligned_alloc also wants a multiple of the alignment).
  const size_t rounded = (bytes + kLargeAllocBytes - 1) / kLargeAllocBytes * kLargeAllocBytes;
  void* p = std::aligned_alloc(kLargeAllocBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP the pages stay small
#endif
  return p;
}

void FreeLarge(void* p, size_t bytes) noexcept {
  if (bytes < kLargeAllocBytes) {
    ::operator delete(p);
  } else {
    std::free(p);
  }
}

}  // namespace dcr
