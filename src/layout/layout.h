// Layouts (DESIGN.md §5): how the local tensors of one process (a rank) map onto the canonical
// tensors of the model. A local tensor is cut into pieces, each a hyper-rectangle of the local
// tensor that holds a copy of an equally shaped hyper-rectangle of one canonical tensor, element
// for element in row-major order, and padding regions with no canonical source. The JSON form is
// docs/layout.md.
//
// Invariants of a valid layout set (ValidateLayoutSet):
//   - in every local tensor, the pieces and padding regions cover each element exactly once;
//   - every canonical element is covered by exactly one owner piece over all ranks (the one that
//     emits it when diffing and whose bits count in the canonical digest); other pieces covering it
//     are copies (replicated norms, replicated key/value heads, tied output layers);
//   - a piece with transform kNone has the canonical dtype; kConvert converts between two
//     different dtypes of {BF16, F16, F32} (layout/dtype_convert.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "format/dtype.h"

namespace dcr {

inline constexpr uint32_t kLayoutFormatVersion = 1;

enum class LayoutRole : uint8_t { kTrain = 0, kServe = 1 };
const char* LayoutRoleName(LayoutRole role);  // "train" / "serve"

enum class PieceTransform : uint8_t {
  kNone = 0,     // the local bits are the canonical bits
  kConvert = 1,  // the local bits are the canonical value converted to the local dtype
};

// Box ranks: `extent` and `canonical_start` have the canonical tensor's rank; `local_start` has the
// local tensor's rank, which is at least the canonical rank. The local box is `extent` preceded by
// extents of 1 for the leading local dimensions (e.g. one expert slice of a fused [E, 2I, H]
// tensor copies a [2I, H]-shaped part of the canonical experts). Every extent is at least 1.
struct Piece {
  std::string canonical;
  std::vector<uint64_t> local_start, canonical_start, extent;
  PieceTransform transform = PieceTransform::kNone;
  bool owner = true;

  uint64_t num_elements() const;
  bool operator==(const Piece&) const = default;
};

enum class PaddingFill : uint8_t {
  kZero = 0,           // all bits zero
  kRepeatLastRow = 1,  // each padding row holds the last row of canonical tensor `source`
};

// A local region with no canonical source. `start` and `extent` have the local tensor's rank.
// Its contents are set when shards are made (`dcr shard`) and never diffed or written by apply.
// kRepeatLastRow requires the region to span whole rows (start 0 and full extent in every
// dimension after the first) whose shape equals the source's row shape.
struct PaddingRegion {
  std::vector<uint64_t> start, extent;
  PaddingFill fill = PaddingFill::kZero;
  std::string source;  // kRepeatLastRow only

  bool operator==(const PaddingRegion&) const = default;
};

struct LocalTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<uint64_t> shape;
  std::vector<Piece> pieces;
  std::vector<PaddingRegion> padding;

  uint64_t num_elements() const;
  bool operator==(const LocalTensor&) const = default;
};

struct RankLayout {
  LayoutRole role = LayoutRole::kTrain;
  std::string framework;                    // informational: "megatron-core", "vllm", ...
  uint32_t rank = 0, world_size = 1;
  std::map<std::string, uint32_t> parallel;  // informational: tp, pp, ep sizes and this rank's coordinates
  Catalog canonical;                        // the canonical tensors, sorted by name
  std::vector<LocalTensor> tensors;         // sorted by name

  // Index of a canonical tensor in `canonical`, or -1.
  int64_t FindCanonical(const std::string& name) const;
  bool operator==(const RankLayout&) const = default;
};

// All ranks of one job, indexed by rank.
using LayoutSet = std::vector<RankLayout>;

// Row-major strides of `shape` (element units).
std::vector<uint64_t> RowMajorStrides(const std::vector<uint64_t>& shape);

// "[a, b) x [c, d)" for a box.
std::string BoxString(const std::vector<uint64_t>& start, const std::vector<uint64_t>& extent);

// Checks one rank's layout on its own: catalog sorted and unique, local tensors sorted and unique,
// every piece and padding region in bounds with consistent ranks, transforms consistent with the
// dtypes, and every local element covered exactly once. Errors (kInvalidArgument) name the rank,
// tensor, piece and range.
Status ValidateRankLayout(const RankLayout& layout);

// ValidateRankLayout for every rank, plus: ranks are 0..N-1 in order, every rank agrees on the
// role, world size and canonical catalog, and every canonical element has exactly one owner.
Status ValidateLayoutSet(const LayoutSet& set);

}  // namespace dcr
