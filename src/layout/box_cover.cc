#include "layout/box_cover.h"

#include <algorithm>
#include <string>

namespace dcr {
namespace {

// Sweeps dimension `dim` over the boxes in `active` (all of which contain element[0..dim) when
// dim > 0): the breakpoints of their ranges cut the dimension into bands that each box covers
// wholly or not at all, so checking one element per band is exact.
std::optional<CoverFault> Sweep(const std::vector<uint64_t>& shape, const std::vector<Box>& boxes,
                                const std::vector<size_t>& active, size_t dim, std::vector<uint64_t>* element) {
  if (dim == shape.size()) {
    if (active.size() == 1) return std::nullopt;
    return CoverFault{*element, active};
  }
  std::vector<uint64_t> cuts{0, shape[dim]};
  for (size_t b : active) {
    cuts.push_back(boxes[b].start[dim]);
    cuts.push_back(boxes[b].start[dim] + boxes[b].extent[dim]);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<size_t> inside;
  for (size_t k = 0; k + 1 < cuts.size() && cuts[k] < shape[dim]; ++k) {
    const uint64_t at = cuts[k];
    inside.clear();
    for (size_t b : active)
      if (boxes[b].start[dim] <= at && at < boxes[b].start[dim] + boxes[b].extent[dim]) inside.push_back(b);
    (*element)[dim] = at;
    if (inside.empty()) {
      for (size_t d = dim + 1; d < shape.size(); ++d) (*element)[d] = 0;
      return CoverFault{*element, {}};
    }
    if (auto fault = Sweep(shape, boxes, inside, dim + 1, element)) return fault;
  }
  return std::nullopt;
}

}  // namespace

std::optional<CoverFault> FindCoverFault(const std::vector<uint64_t>& shape, const std::vector<Box>& boxes) {
  for (uint64_t d : shape)
    if (d == 0) {
      if (boxes.empty()) return std::nullopt;
      return CoverFault{std::vector<uint64_t>(shape.size(), 0), {0}};
    }
  std::vector<size_t> all(boxes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<uint64_t> element(shape.size(), 0);
  return Sweep(shape, boxes, all, 0, &element);
}

std::string CoordinatesString(const std::vector<uint64_t>& coords) {
  std::string s = "[";
  for (size_t i = 0; i < coords.size(); ++i) s += (i ? ", " : "") + std::to_string(coords[i]);
  return s + "]";
}

}  // namespace dcr
