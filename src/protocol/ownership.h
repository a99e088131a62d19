// Tensor ownership among producers (DESIGN.md §2, §5): which producer diffs, encodes and keeps
// the baseline of which canonical tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"

namespace dcr {

// The catalog indices (ascending) of the tensors producer `producer` of `producers` owns.
// Ownership is by whole tensor and round-robin over the catalog order (sorted by name): the
// tensor at catalog index t belongs to producer t % producers. It depends only on the catalog
// and `producers`, so every producer computes the same assignment without talking to the others,
// and every tensor has exactly one owner (the producers' sets partition the catalog; a producer
// may own none when producers > tensors). Requires producers >= 1 and producer < producers
// (checked: callers validate user input first).
inline std::vector<uint32_t> OwnedTensors(const Catalog& catalog, uint32_t producer, uint32_t producers) {
  DCR_CHECK(producers >= 1 && producer < producers);
  std::vector<uint32_t> owned;
  for (uint64_t t = producer; t < catalog.size(); t += producers) owned.push_back(static_cast<uint32_t>(t));
  return owned;
}

}  // namespace dcr
