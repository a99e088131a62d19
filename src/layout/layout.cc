#include "layout/layout.h"

#include <algorithm>

#include "layout/box_cover.h"
#include "layout/dtype_convert.h"

namespace dcr {
namespace {

uint64_t Volume(const std::vector<uint64_t>& extent) {
  uint64_t n = 1;
  for (uint64_t e : extent) n *= e;
  return n;
}

// start + extent <= shape in every dimension, without overflow; every extent >= 1.
bool BoxInside(const std::vector<uint64_t>& start, const std::vector<uint64_t>& extent,
               const std::vector<uint64_t>& shape) {
  if (start.size() != shape.size() || extent.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (extent[d] == 0 || start[d] > shape[d] || extent[d] > shape[d] - start[d]) return false;
  return true;
}

std::string RankTensor(const RankLayout& l, const LocalTensor& t) {
  return "rank " + std::to_string(l.rank) + " tensor '" + t.name + "'";
}

Status CheckPiece(const RankLayout& l, const LocalTensor& t, size_t i, const Piece& p) {
  const std::string where = RankTensor(l, t) + " piece " + std::to_string(i) + " (canonical '" + p.canonical + "')";
  const int64_t c = l.FindCanonical(p.canonical);
  if (c < 0) return InvalidArgument(where + ": no such canonical tensor");
  const CatalogEntry& ce = l.canonical[static_cast<size_t>(c)];
  if (p.extent.size() != ce.shape.size() || p.canonical_start.size() != ce.shape.size())
    return InvalidArgument(where + ": extent and canonical_start need rank " + std::to_string(ce.shape.size()));
  if (p.local_start.size() != t.shape.size() || t.shape.size() < ce.shape.size())
    return InvalidArgument(where + ": local_start needs the local rank " + std::to_string(t.shape.size()) +
                           ", which must be at least the canonical rank " + std::to_string(ce.shape.size()));
  if (!BoxInside(p.canonical_start, p.extent, ce.shape))
    return InvalidArgument(where + ": canonical box " + BoxString(p.canonical_start, p.extent) + " is empty or outside " +
                           ShapeString(ce.shape));
  std::vector<uint64_t> local_extent(t.shape.size() - ce.shape.size(), 1);
  local_extent.insert(local_extent.end(), p.extent.begin(), p.extent.end());
  if (!BoxInside(p.local_start, local_extent, t.shape))
    return InvalidArgument(where + ": local box " + BoxString(p.local_start, local_extent) + " is outside " +
                           ShapeString(t.shape));
  if (p.transform == PieceTransform::kNone && t.dtype != ce.dtype)
    return InvalidArgument(where + ": transform \"none\" but the local dtype " + std::string(DTypeName(t.dtype)) +
                           " differs from the canonical " + std::string(DTypeName(ce.dtype)));
  if (p.transform == PieceTransform::kConvert && !ConversionSupported(ce.dtype, t.dtype))
    return InvalidArgument(where + ": cannot convert " + std::string(DTypeName(ce.dtype)) + " to " +
                           std::string(DTypeName(t.dtype)) + " (supported: between BF16, F16 and F32)");
  return Status::Ok();
}

Status CheckPadding(const RankLayout& l, const LocalTensor& t, size_t i, const PaddingRegion& r) {
  const std::string where = RankTensor(l, t) + " padding " + std::to_string(i);
  if (!BoxInside(r.start, r.extent, t.shape))
    return InvalidArgument(where + ": box " + BoxString(r.start, r.extent) + " is empty or outside " + ShapeString(t.shape));
  if (r.fill == PaddingFill::kZero) {
    if (!r.source.empty()) return InvalidArgument(where + ": a zero fill has no source");
    return Status::Ok();
  }
  const int64_t c = l.FindCanonical(r.source);
  if (c < 0) return InvalidArgument(where + ": fill source '" + r.source + "' is not a canonical tensor");
  const CatalogEntry& src = l.canonical[static_cast<size_t>(c)];
  bool rows_match = !t.shape.empty() && !src.shape.empty() && src.shape[0] > 0 && t.shape.size() == src.shape.size();
  for (size_t d = 1; rows_match && d < t.shape.size(); ++d)
    rows_match = r.start[d] == 0 && r.extent[d] == t.shape[d] && t.shape[d] == src.shape[d];
  if (!rows_match)
    return InvalidArgument(where + ": repeat_last_row needs whole rows shaped like the rows of '" + r.source + "' " +
                           ShapeString(src.shape));
  if (t.dtype != src.dtype && !ConversionSupported(src.dtype, t.dtype))
    return InvalidArgument(where + ": cannot convert the fill source's " + std::string(DTypeName(src.dtype)) + " to " +
                           std::string(DTypeName(t.dtype)));
  return Status::Ok();
}

Status CheckLocalCover(const RankLayout& l, const LocalTensor& t) {
  std::vector<Box> boxes;
  for (const Piece& p : t.pieces) {
    std::vector<uint64_t> extent(t.shape.size() - p.extent.size(), 1);
    extent.insert(extent.end(), p.extent.begin(), p.extent.end());
    boxes.push_back({p.local_start, extent});
  }
  for (const PaddingRegion& r : t.padding) boxes.push_back({r.start, r.extent});
  auto fault = FindCoverFault(t.shape, boxes);
  if (!fault) return Status::Ok();
  auto name = [&](size_t b) {
    return b < t.pieces.size() ? "piece " + std::to_string(b) + " (canonical '" + t.pieces[b].canonical + "')"
                               : "padding " + std::to_string(b - t.pieces.size());
  };
  if (fault->boxes.empty())
    return InvalidArgument(RankTensor(l, t) + ": element " + CoordinatesString(fault->element) +
                           " is covered by no piece and no padding region");
  return InvalidArgument(RankTensor(l, t) + ": element " + CoordinatesString(fault->element) + " is covered by both " +
                         name(fault->boxes[0]) + " and " + name(fault->boxes[1]));
}

}  // namespace

const char* LayoutRoleName(LayoutRole role) { return role == LayoutRole::kTrain ? "train" : "serve"; }

uint64_t Piece::num_elements() const { return Volume(extent); }

uint64_t LocalTensor::num_elements() const { return Volume(shape); }

int64_t RankLayout::FindCanonical(const std::string& name) const {
  auto it = std::lower_bound(canonical.begin(), canonical.end(), name,
                             [](const CatalogEntry& e, const std::string& n) { return e.name < n; });
  if (it == canonical.end() || it->name != name) return -1;
  return it - canonical.begin();
}

std::vector<uint64_t> RowMajorStrides(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

std::string BoxString(const std::vector<uint64_t>& start, const std::vector<uint64_t>& extent) {
  if (start.empty()) return "[scalar]";
  std::string s;
  for (size_t d = 0; d < start.size(); ++d) {
    if (d) s += " x ";
    s += "[" + std::to_string(start[d]) + ", " + std::to_string(start[d] + (d < extent.size() ? extent[d] : 0)) + ")";
  }
  return s;
}

Status ValidateRankLayout(const RankLayout& l) {
  const std::string who = "rank " + std::to_string(l.rank);
  if (l.world_size == 0 || l.rank >= l.world_size)
    return InvalidArgument(who + ": rank must be below world_size " + std::to_string(l.world_size));
  for (size_t i = 0; i < l.canonical.size(); ++i) {
    const CatalogEntry& c = l.canonical[i];
    if (c.name.empty()) return InvalidArgument(who + ": a canonical tensor has an empty name");
    if (i > 0 && !(l.canonical[i - 1].name < c.name))
      return InvalidArgument(who + ": canonical tensors must be sorted by name without repeats ('" + c.name + "')");
    if (!ShapeElements(c.shape)) return InvalidArgument(who + ": canonical tensor '" + c.name + "' is too large");
  }
  for (size_t i = 0; i < l.tensors.size(); ++i) {
    const LocalTensor& t = l.tensors[i];
    if (t.name.empty()) return InvalidArgument(who + ": a local tensor has an empty name");
    if (i > 0 && !(l.tensors[i - 1].name < t.name))
      return InvalidArgument(who + ": local tensors must be sorted by name without repeats ('" + t.name + "')");
    if (!ShapeElements(t.shape)) return InvalidArgument(RankTensor(l, t) + ": shape " + ShapeString(t.shape) + " is too large");
    for (size_t k = 0; k < t.pieces.size(); ++k) DCR_RETURN_IF_ERROR(CheckPiece(l, t, k, t.pieces[k]));
    for (size_t k = 0; k < t.padding.size(); ++k) DCR_RETURN_IF_ERROR(CheckPadding(l, t, k, t.padding[k]));
    DCR_RETURN_IF_ERROR(CheckLocalCover(l, t));
  }
  return Status::Ok();
}

Status ValidateLayoutSet(const LayoutSet& set) {
  if (set.empty()) return InvalidArgument("a layout needs at least one rank");
  const RankLayout& first = set[0];
  for (size_t r = 0; r < set.size(); ++r) {
    const RankLayout& l = set[r];
    if (l.rank != r) return InvalidArgument("layout for rank " + std::to_string(r) + " says it is rank " + std::to_string(l.rank));
    if (l.world_size != set.size())
      return InvalidArgument("rank " + std::to_string(r) + " has world_size " + std::to_string(l.world_size) + " but " +
                             std::to_string(set.size()) + " ranks were given");
    if (l.role != first.role) return InvalidArgument("rank " + std::to_string(r) + " has a different role than rank 0");
    if (r > 0) DCR_RETURN_IF_ERROR(CompareCatalogs(first.canonical, "rank 0's canonical catalog", l.canonical,
                                                   "rank " + std::to_string(r) + "'s canonical catalog")
                                       .WithContext("ranks disagree on the model"));
    DCR_RETURN_IF_ERROR(ValidateRankLayout(l));
  }
  // Owner boxes per canonical tensor, with where they come from for messages.
  struct Source {
    uint32_t rank;
    const LocalTensor* tensor;
  };
  std::vector<std::vector<Box>> owned(first.canonical.size());
  std::vector<std::vector<Source>> sources(first.canonical.size());
  for (const RankLayout& l : set)
    for (const LocalTensor& t : l.tensors)
      for (const Piece& p : t.pieces) {
        if (!p.owner) continue;
        const size_t c = static_cast<size_t>(l.FindCanonical(p.canonical));
        owned[c].push_back({p.canonical_start, p.extent});
        sources[c].push_back({l.rank, &t});
      }
  for (size_t c = 0; c < first.canonical.size(); ++c) {
    const CatalogEntry& ce = first.canonical[c];
    auto fault = FindCoverFault(ce.shape, owned[c]);
    if (!fault) continue;
    const std::string at = "canonical tensor '" + ce.name + "' " + ShapeString(ce.shape) + " element " +
                           CoordinatesString(fault->element);
    if (fault->boxes.empty()) return InvalidArgument(at + " has no owner piece on any rank");
    auto name = [&](size_t b) {
      return "rank " + std::to_string(sources[c][b].rank) + " tensor '" + sources[c][b].tensor->name + "' (box " +
             BoxString(owned[c][b].start, owned[c][b].extent) + ")";
    };
    return InvalidArgument(at + " has more than one owner: " + name(fault->boxes[0]) + " and " + name(fault->boxes[1]));
  }
  return Status::Ok();
}

}  // namespace dcr
