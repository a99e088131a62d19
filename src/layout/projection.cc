#include "layout/projection.h"

#include <algorithm>

namespace dcr {

BoxIndex::BoxIndex(const std::vector<uint64_t>& source_shape, std::vector<Entry> entries)
    : strides_(RowMajorStrides(source_shape)), entries_(std::move(entries)) {
  DCR_CHECK(source_shape.size() <= kMaxRank);
  auto lo = [&](const Entry& e) { return strides_.empty() ? 0 : e.start[0]; };
  auto hi = [&](const Entry& e) { return strides_.empty() ? 1 : e.start[0] + e.extent[0]; };
  for (const Entry& e : entries_) {
    band_starts_.push_back(lo(e));
    band_starts_.push_back(hi(e));
  }
  std::sort(band_starts_.begin(), band_starts_.end());
  band_starts_.erase(std::unique(band_starts_.begin(), band_starts_.end()), band_starts_.end());
  band_offsets_.assign(1, 0);
  for (size_t k = 0; k + 1 < band_starts_.size(); ++k) {
    for (uint32_t i = 0; i < entries_.size(); ++i)
      if (lo(entries_[i]) <= band_starts_[k] && band_starts_[k] < hi(entries_[i])) band_entries_.push_back(i);
    band_offsets_.push_back(static_cast<uint32_t>(band_entries_.size()));
  }
}

size_t BoxIndex::Band(uint64_t row) const {
  auto it = std::upper_bound(band_starts_.begin(), band_starts_.end(), row);
  if (it == band_starts_.begin() || it == band_starts_.end()) return kNoBand;
  return static_cast<size_t>(it - band_starts_.begin()) - 1;
}

namespace {

// Flat destination steps for a source box of rank `source_rank` whose trailing dimensions map
// onto the trailing dimensions of a destination with strides `dst_strides` (leading source
// dimensions beyond the destination's rank have extent 1 and step 0).
std::vector<uint64_t> Steps(size_t source_rank, const std::vector<uint64_t>& dst_strides) {
  std::vector<uint64_t> steps(source_rank, 0);
  const size_t dr = dst_strides.size();
  for (size_t k = 0; k < std::min(source_rank, dr); ++k) steps[source_rank - 1 - k] = dst_strides[dr - 1 - k];
  return steps;
}

uint64_t Flat(const std::vector<uint64_t>& coords, const std::vector<uint64_t>& strides) {
  uint64_t f = 0;
  for (size_t d = 0; d < coords.size(); ++d) f += coords[d] * strides[d];
  return f;
}

std::vector<uint64_t> LocalExtent(const LocalTensor& t, const Piece& p) {
  std::vector<uint64_t> e(t.shape.size() - p.extent.size(), 1);
  e.insert(e.end(), p.extent.begin(), p.extent.end());
  return e;
}

}  // namespace

ProjectionIndex::ProjectionIndex(const RankLayout& layout) : layout_(&layout) {
  for (const LocalTensor& t : layout.tensors) {
    std::vector<BoxIndex::Entry> entries;
    std::vector<uint32_t> canonical;
    for (uint32_t k = 0; k < t.pieces.size(); ++k) {
      const Piece& p = t.pieces[k];
      const uint32_t c = static_cast<uint32_t>(layout.FindCanonical(p.canonical));
      const auto cs = RowMajorStrides(layout.canonical[c].shape);
      entries.push_back({p.local_start, LocalExtent(t, p), Flat(p.canonical_start, cs), Steps(t.shape.size(), cs), k});
      canonical.push_back(c);
    }
    tensors_.emplace_back(t.shape, std::move(entries));
    canonical_of_piece_.push_back(std::move(canonical));
  }
}

std::optional<ProjectionIndex::Target> ProjectionIndex::Project(uint32_t local_tensor, uint64_t local_index) const {
  std::optional<Target> out;
  tensors_[local_tensor].ForEach(local_index, [&](const BoxIndex::Entry& e, uint64_t canonical_index) {
    out = Target{&layout_->tensors[local_tensor].pieces[e.tag], canonical_of_piece_[local_tensor][e.tag], canonical_index};
  });
  return out;
}

PlacementIndex::PlacementIndex(const LayoutSet& set) {
  const Catalog& catalog = set.at(0).canonical;
  std::vector<std::vector<BoxIndex::Entry>> entries(catalog.size());
  for (const RankLayout& l : set)
    for (uint32_t ti = 0; ti < l.tensors.size(); ++ti) {
      const LocalTensor& t = l.tensors[ti];
      const auto ls = RowMajorStrides(t.shape);
      for (const Piece& p : t.pieces) {
        const uint32_t c = static_cast<uint32_t>(l.FindCanonical(p.canonical));
        const uint32_t tag = static_cast<uint32_t>(placements_.size());
        placements_.push_back({l.rank, ti, &p});
        entries[c].push_back({p.canonical_start, p.extent, Flat(p.local_start, ls), Steps(p.extent.size(), ls), tag});
      }
    }
  for (size_t c = 0; c < catalog.size(); ++c) tensors_.emplace_back(catalog[c].shape, std::move(entries[c]));
}

}  // namespace dcr
