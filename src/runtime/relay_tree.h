// The relay tree (DESIGN.md §6): receivers form a k-ary tree per producer. Producer p's root
// is receiver p mod n, so different producers enter the rollout cluster at different
// receivers and forwarding load spreads. Positions are counted from the root around the
// receiver list: position j is receiver (root + j) mod n, and its children are positions
// k·j+1 … k·j+k. Every payload therefore crosses producer → rollout once and reaches every
// receiver exactly once.
#pragma once

#include <cstddef>
#include <vector>

namespace dcr {

inline size_t TreeRoot(size_t producer, size_t receivers) { return producer % receivers; }

// Receiver indices of `me`'s children in the tree rooted at receiver `root`.
inline std::vector<size_t> TreeChildren(size_t receivers, size_t arity, size_t root, size_t me) {
  std::vector<size_t> out;
  const size_t j = (me + receivers - root) % receivers;
  for (size_t c = arity * j + 1; c <= arity * j + arity && c < receivers; ++c) out.push_back((root + c) % receivers);
  return out;
}

}  // namespace dcr
