// For tests: a span's (or vector's) elements as a std::vector, which gtest compares and prints.
#pragma once

#include <span>
#include <type_traits>
#include <vector>

namespace dcr {

template <typename T>
std::vector<std::remove_const_t<T>> AsVector(std::span<T> s) {
  return {s.begin(), s.end()};
}
// And a vector of another allocator's (ChangeSet's UninitVector) as a plain one.
template <typename T, typename A>
std::vector<T> AsVector(const std::vector<T, A>& v) {
  return {v.begin(), v.end()};
}

}  // namespace dcr
