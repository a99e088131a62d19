// Scratch storage reused from call to call without zero-filling.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace dcr {

// Grows to the largest request and is never zero-filled: for buffers whose every slot the
// user overwrites before reading it (a std::vector would zero-fill each growth, and a fresh one
// per call maps and faults in its pages each time).
template <typename T>
class ReusedBuffer {
 public:
  // Room for n values, valid until the next Take; the contents are unspecified.
  std::span<T> Take(size_t n) {
    if (n > capacity_) {
      data_.reset();  // the old room goes before the new one is mapped
      data_ = std::make_unique_for_overwrite<T[]>(n);
      capacity_ = n;
    }
    return {data_.get(), n};
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

}  // namespace dcr
