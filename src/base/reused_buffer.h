// Scratch storage reused from call to call without zero-filling.
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

#include "base/uninit_vector.h"

namespace dcr {

// Grows to the largest request and is never zero-filled: for buffers whose every slot the
// user overwrites before reading it (a std::vector would zero-fill each growth, and a fresh one
// per call maps and faults in its pages each time). Large rooms come in huge pages, through
// UninitVector's allocator (AllocateLarge).
template <typename T>
class ReusedBuffer {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>,
                "the room's contents are left as they were");

 public:
  // Room for n values, valid until the next Take; the contents are unspecified.
  std::span<T> Take(size_t n) {
    if (n > room_.size()) {
      UninitVector<T>().swap(room_);  // the old room goes before the new one is mapped (no copy)
      room_.resize(n);
    }
    return {room_.data(), n};
  }

 private:
  UninitVector<T> room_;
};

}  // namespace dcr
