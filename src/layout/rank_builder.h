// Building blocks for layout generators: local tensors assembled from row blocks, column blocks
// and concatenations of canonical row ranges. Every piece gets transform kConvert exactly when the
// local dtype differs from the canonical one.
#pragma once

#include <string>
#include <vector>

#include "layout/layout.h"

namespace dcr {

// A run of rows of one canonical tensor inside a fused local tensor.
struct RowSegment {
  std::string canonical;
  uint64_t row = 0, rows = 0;
  bool owner = true;
};

class RankBuilder {
 public:
  // `canonical` must outlive the builder.
  RankBuilder(const Catalog& canonical, DType local_dtype) : canonical_(canonical), dtype_(local_dtype) {}

  // Starts a local tensor; the pieces below add to the most recently started one.
  void Tensor(std::string name, std::vector<uint64_t> shape);
  // The whole canonical tensor at the origin (after `prefix` leading local coordinates).
  void Full(const std::string& canonical, bool owner, std::vector<uint64_t> prefix = {});
  // Canonical rows [row, row + rows) (all of every later dimension) at local row `local_row`.
  void Rows(const std::string& canonical, uint64_t row, uint64_t rows, uint64_t local_row, bool owner,
            std::vector<uint64_t> prefix = {});
  // Canonical columns [col, col + cols) of a 2-D tensor (all rows) at local column `local_col`.
  void Cols(const std::string& canonical, uint64_t col, uint64_t cols, uint64_t local_col, bool owner,
            std::vector<uint64_t> prefix = {});
  // The rows [window, window + window_rows) of the concatenation of `segments`, at local row 0.
  void ConcatRows(const std::vector<RowSegment>& segments, uint64_t window, uint64_t window_rows,
                  std::vector<uint64_t> prefix = {});
  // Rows [first_row, first_row + rows) of a vocabulary-parallel tensor padded past `canonical`'s
  // rows: real rows become a piece, the rest one padding region.
  void VocabRows(const std::string& canonical, uint64_t first_row, uint64_t rows, bool owner, PaddingFill fill);

  RankLayout Finish(LayoutRole role, std::string framework, uint32_t rank, uint32_t world_size,
                    std::map<std::string, uint32_t> parallel);

 private:
  const CatalogEntry& Canonical(const std::string& name) const;
  void Add(Piece p);

  const Catalog& canonical_;
  DType dtype_;
  std::vector<LocalTensor> tensors_;
};

}  // namespace dcr
