// Projection (local element -> canonical tensor and element) and placement (canonical element ->
// every local element holding it). Both are index structures built from a layout in time and
// memory proportional to the number of pieces; each lookup costs a few divisions per dimension
// plus a binary search over row bands and a check of the pieces in the band, independent of
// tensor sizes (DESIGN.md §5: O(changed elements) after the producer's scan).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "layout/layout.h"

namespace dcr {

// Boxes of one "source" tensor, each mapped affinely onto a flat index of some destination tensor,
// looked up by source flat index.
class BoxIndex {
 public:
  struct Entry {
    std::vector<uint64_t> start, extent;  // source box (source rank)
    uint64_t dst_base = 0;                // destination flat index of the box's first element
    std::vector<uint64_t> dst_step;       // destination flat step per source dimension
    uint32_t tag = 0;                     // caller's reference (which piece)
  };

  BoxIndex() = default;
  BoxIndex(const std::vector<uint64_t>& source_shape, std::vector<Entry> entries);

  // Calls fn(entry, destination flat index) for every box holding source element `index`.
  template <typename Fn>
  void ForEach(uint64_t index, Fn&& fn) const {
    uint64_t coords[kMaxRank];
    const size_t rank = strides_.size();
    for (size_t d = 0; d < rank; ++d) {
      coords[d] = index / strides_[d];
      index -= coords[d] * strides_[d];
    }
    const uint64_t row = rank ? coords[0] : 0;
    const size_t band = Band(row);
    if (band == kNoBand) return;
    for (uint32_t k = band_offsets_[band]; k < band_offsets_[band + 1]; ++k) {
      const Entry& e = entries_[band_entries_[k]];
      uint64_t dst = e.dst_base;
      bool inside = true;
      for (size_t d = 0; d < rank && inside; ++d) {
        const uint64_t off = coords[d] - e.start[d];
        inside = coords[d] >= e.start[d] && off < e.extent[d];
        dst += off * e.dst_step[d];
      }
      if (inside) fn(e, dst);
    }
  }

  static constexpr size_t kMaxRank = 8;

 private:
  static constexpr size_t kNoBand = SIZE_MAX;
  size_t Band(uint64_t row) const;

  std::vector<uint64_t> strides_;
  std::vector<Entry> entries_;
  std::vector<uint64_t> band_starts_;     // band k covers rows [band_starts_[k], band_starts_[k+1])
  std::vector<uint32_t> band_offsets_;    // entries of band k: band_entries_[band_offsets_[k] .. [k+1])
  std::vector<uint32_t> band_entries_;
};

// Projection for one rank: local element -> (piece, canonical tensor, canonical element).
class ProjectionIndex {
 public:
  struct Target {
    const Piece* piece = nullptr;
    uint32_t canonical = 0;  // index in the layout's canonical catalog
    uint64_t index = 0;      // canonical flat element index
  };

  // `layout` must be valid (ValidateRankLayout) and outlive the index.
  explicit ProjectionIndex(const RankLayout& layout);
  // nullopt when the element is padding. Each local element lies in at most one piece.
  std::optional<Target> Project(uint32_t local_tensor, uint64_t local_index) const;

 private:
  const RankLayout* layout_;
  std::vector<BoxIndex> tensors_;
  std::vector<std::vector<uint32_t>> canonical_of_piece_;
};

// Placement for a whole layout set: canonical element -> every (rank, local tensor, element).
class PlacementIndex {
 public:
  struct Placement {
    uint32_t rank = 0, local_tensor = 0;
    const Piece* piece = nullptr;
  };

  // `set` must be valid (ValidateLayoutSet) and outlive the index.
  explicit PlacementIndex(const LayoutSet& set);

  // Calls fn(placement, local flat index) for every local copy of canonical element `index` of
  // canonical tensor `canonical` (zero or more; exactly one has piece->owner).
  template <typename Fn>
  void ForEach(uint32_t canonical, uint64_t index, Fn&& fn) const {
    tensors_[canonical].ForEach(index, [&](const BoxIndex::Entry& e, uint64_t local) { fn(placements_[e.tag], local); });
  }
  const Placement& placement(uint32_t tag) const { return placements_[tag]; }

 private:
  std::vector<BoxIndex> tensors_;  // per canonical tensor
  std::vector<Placement> placements_;
};

}  // namespace dcr
