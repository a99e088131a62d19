// Scratch storage reused from call to call without zero-filling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "base/large_alloc.h"

namespace dcr {

// Grows to the largest request and is never zero-filled: for buffers whose every slot the
// user overwrites before reading it (a std::vector would zero-fill each growth, and a fresh one
// per call maps and faults in its pages each time).
// Large rooms come in huge pages (AllocateLarge). T: trivially constructible and destructible.
template <typename T>
class ReusedBuffer {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

 public:
  ReusedBuffer() = default;
  ReusedBuffer(ReusedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}
  ReusedBuffer& operator=(ReusedBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = std::exchange(o.data_, nullptr);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  ~ReusedBuffer() { Release(); }

  // Room for n values, valid until the next Take; the contents are unspecified.
  std::span<T> Take(size_t n) {
    if (n > capacity_) {
      Release();  // the old room goes before the new one is mapped
      if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
      data_ = static_cast<T*>(AllocateLarge(n * sizeof(T)));
      capacity_ = n;
    }
    return {data_, n};
  }

 private:
  void Release() noexcept {
    if (data_ != nullptr) FreeLarge(data_, capacity_ * sizeof(T));
    data_ = nullptr;
    capacity_ = 0;
  }
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace dcr
