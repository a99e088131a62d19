// For tests: a span's elements as a vector, which gtest compares and prints.
#pragma once

#include <span>
#include <type_traits>
#include <vector>

namespace dcr {

template <typename T>
std::vector<std::remove_const_t<T>> AsVector(std::span<T> s) {
  return {s.begin(), s.end()};
}

}  // namespace dcr
