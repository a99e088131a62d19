// Exact-cover checks for hyper-rectangles ("boxes") inside a tensor: used to validate that the
// pieces and padding of a local tensor cover it exactly once, and that the owner pieces of all
// ranks cover every canonical tensor exactly once. Cost depends on the number of boxes, never on
// the number of elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dcr {

struct Box {
  std::vector<uint64_t> start, extent;  // rank of the tensor; boxes lie inside it (caller checks)
};

// The first element (row-major) not covered exactly once, with the indices of the boxes that cover
// it (empty: uncovered; two or more: overlap).
struct CoverFault {
  std::vector<uint64_t> element;
  std::vector<size_t> boxes;
};

// nullopt iff `boxes` cover every element of `shape` exactly once. Every box must have the rank of
// `shape` and lie inside it. A tensor with no elements is covered by no boxes.
std::optional<CoverFault> FindCoverFault(const std::vector<uint64_t>& shape, const std::vector<Box>& boxes);

// "[i, j, k]"
std::string CoordinatesString(const std::vector<uint64_t>& coords);

}  // namespace dcr
