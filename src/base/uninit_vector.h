// A std::vector whose growth leaves new elements uninitialized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/large_alloc.h"

namespace dcr {

// std::allocator, except that value-initialization (what resize(n) asks for) default-initializes:
// for trivial types the new elements keep whatever the memory held. Construction with arguments
// (push_back, insert, assign) is unchanged. Large blocks come in huge pages (AllocateLarge).
template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;

  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "AllocateLarge aligns for the default only");
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(AllocateLarge(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { FreeLarge(p, n * sizeof(T)); }

  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    std::construct_at(p, std::forward<Args>(args)...);
  }
};

// For output buffers that grow by a bound and are written before they are read (a diff's
// changes: room for a whole tile, trimmed to what it found), where zero-filling each growth
// would cost as much as writing it.
template <typename T>
using UninitVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace dcr
