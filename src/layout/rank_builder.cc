#include "layout/rank_builder.h"

#include <algorithm>

namespace dcr {

const CatalogEntry& RankBuilder::Canonical(const std::string& name) const {
  auto it = std::lower_bound(canonical_.begin(), canonical_.end(), name,
                             [](const CatalogEntry& e, const std::string& n) { return e.name < n; });
  if (it == canonical_.end() || it->name != name) Fatal(__FILE__, __LINE__, "generator names unknown tensor " + name);
  return *it;
}

void RankBuilder::Tensor(std::string name, std::vector<uint64_t> shape) {
  tensors_.push_back({std::move(name), dtype_, std::move(shape), {}, {}});
}

void RankBuilder::Add(Piece p) {
  DCR_CHECK(!tensors_.empty());
  p.transform = Canonical(p.canonical).dtype == dtype_ ? PieceTransform::kNone : PieceTransform::kConvert;
  tensors_.back().pieces.push_back(std::move(p));
}

void RankBuilder::Full(const std::string& canonical, bool owner, std::vector<uint64_t> prefix) {
  const CatalogEntry& c = Canonical(canonical);
  std::vector<uint64_t> local = std::move(prefix);
  local.resize(local.size() + c.shape.size(), 0);
  Add({canonical, local, std::vector<uint64_t>(c.shape.size(), 0), c.shape, PieceTransform::kNone, owner});
}

void RankBuilder::Rows(const std::string& canonical, uint64_t row, uint64_t rows, uint64_t local_row, bool owner,
                       std::vector<uint64_t> prefix) {
  const CatalogEntry& c = Canonical(canonical);
  DCR_CHECK(!c.shape.empty());
  std::vector<uint64_t> extent = c.shape, start(c.shape.size(), 0), local = std::move(prefix);
  extent[0] = rows;
  start[0] = row;
  local.push_back(local_row);
  local.resize(local.size() + c.shape.size() - 1, 0);
  Add({canonical, local, start, extent, PieceTransform::kNone, owner});
}

void RankBuilder::Cols(const std::string& canonical, uint64_t col, uint64_t cols, uint64_t local_col, bool owner,
                       std::vector<uint64_t> prefix) {
  const CatalogEntry& c = Canonical(canonical);
  DCR_CHECK(c.shape.size() == 2);
  std::vector<uint64_t> local = std::move(prefix);
  local.push_back(0);
  local.push_back(local_col);
  Add({canonical, local, {0, col}, {c.shape[0], cols}, PieceTransform::kNone, owner});
}

void RankBuilder::ConcatRows(const std::vector<RowSegment>& segments, uint64_t window, uint64_t window_rows,
                             std::vector<uint64_t> prefix) {
  uint64_t at = 0;  // first row of the segment in the concatenation
  const uint64_t end = window + window_rows;
  for (const RowSegment& s : segments) {
    const uint64_t lo = std::max(at, window), hi = std::min(at + s.rows, end);
    if (lo < hi) Rows(s.canonical, s.row + (lo - at), hi - lo, lo - window, s.owner, prefix);
    at += s.rows;
  }
}

void RankBuilder::VocabRows(const std::string& canonical, uint64_t first_row, uint64_t rows, bool owner,
                            PaddingFill fill) {
  const CatalogEntry& c = Canonical(canonical);
  const uint64_t real_end = std::min(first_row + rows, c.shape[0]);
  const uint64_t real = real_end > first_row ? real_end - first_row : 0;
  if (real > 0) Rows(canonical, first_row, real, 0, owner);
  if (real < rows) {
    std::vector<uint64_t> start(c.shape.size(), 0), extent = c.shape;
    start[0] = real;
    extent[0] = rows - real;
    tensors_.back().padding.push_back({start, extent, fill, fill == PaddingFill::kRepeatLastRow ? canonical : ""});
  }
}

RankLayout RankBuilder::Finish(LayoutRole role, std::string framework, uint32_t rank, uint32_t world_size,
                               std::map<std::string, uint32_t> parallel) {
  std::sort(tensors_.begin(), tensors_.end(), [](const LocalTensor& a, const LocalTensor& b) { return a.name < b.name; });
  RankLayout l;
  l.role = role;
  l.framework = std::move(framework);
  l.rank = rank;
  l.world_size = world_size;
  l.parallel = std::move(parallel);
  l.canonical = canonical_;
  l.tensors = std::move(tensors_);
  tensors_.clear();
  return l;
}

}  // namespace dcr
