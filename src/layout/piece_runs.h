// Walking a piece's box run by run: the innermost dimension of a box is contiguous both in the
// local and in the canonical tensor, so copies and digests work on whole runs.
#pragma once

#include <cstdint>
#include <vector>

#include "layout/layout.h"

namespace dcr {

// Calls fn(local flat index, canonical flat index) for the first element of every innermost run
// of the box, in row-major order; each run is `extent.back()` elements long (1 for a scalar).
// `local_shape`/`local_start` have the local rank, `canonical_shape`/`canonical_start`/`extent`
// the canonical rank (at most the local rank; trailing dimensions correspond).
template <typename Fn>
void ForEachBoxRun(const std::vector<uint64_t>& local_shape, const std::vector<uint64_t>& local_start,
                   const std::vector<uint64_t>& canonical_shape, const std::vector<uint64_t>& canonical_start,
                   const std::vector<uint64_t>& extent, Fn&& fn) {
  const size_t rc = extent.size(), rl = local_shape.size();
  const auto ls = RowMajorStrides(local_shape), cs = RowMajorStrides(canonical_shape);
  uint64_t lbase = 0, cbase = 0;
  for (size_t d = 0; d < rl; ++d) lbase += local_start[d] * ls[d];
  for (size_t d = 0; d < rc; ++d) cbase += canonical_start[d] * cs[d];
  if (rc <= 1) {
    fn(lbase, cbase);
    return;
  }
  std::vector<uint64_t> at(rc - 1, 0);  // odometer over all but the innermost dimension
  for (;;) {
    uint64_t l = lbase, c = cbase;
    for (size_t d = 0; d + 1 < rc; ++d) l += at[d] * ls[rl - rc + d], c += at[d] * cs[d];
    fn(l, c);
    size_t d = rc - 1;
    while (d-- > 0) {
      if (++at[d] < extent[d]) break;
      at[d] = 0;
    }
    if (d == SIZE_MAX) return;
  }
}

// The runs of piece `p` of local tensor `t` whose canonical tensor has shape `canonical_shape`.
template <typename Fn>
void ForEachPieceRun(const LocalTensor& t, const Piece& p, const std::vector<uint64_t>& canonical_shape, Fn&& fn) {
  ForEachBoxRun(t.shape, p.local_start, canonical_shape, p.canonical_start, p.extent, fn);
}

inline uint64_t RunLength(const std::vector<uint64_t>& extent) { return extent.empty() ? 1 : extent.back(); }

}  // namespace dcr
