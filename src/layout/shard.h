// Shards: the local tensors of every rank of a layout, one safetensors file per rank
// (rank-00000.safetensors, ...), holding exactly the rank's local tensors in layout order.
// Making shards from a canonical checkpoint (`dcr shard`) is the reference that layout-aware diff
// and apply are tested against: applying a canonical delta to shards of the base must give the
// shards of the new checkpoint, bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"
#include "layout/layout.h"

namespace dcr {

// "rank-00003.safetensors"
std::string ShardFileName(uint32_t rank);

// Element bytes per rank and local tensor, in layout order: bytes[rank][local tensor].
using ShardBytes = std::vector<std::vector<std::span<const uint8_t>>>;
using MutableShardBytes = std::vector<std::vector<std::span<uint8_t>>>;

// Fills `out` (the local tensor's num_elements * width bytes) from the canonical tensors:
// pieces copy (or convert) their canonical boxes, padding regions get their fill.
// `canonical[i]` holds the bytes of `layout.canonical[i]`.
void FillLocalTensor(const RankLayout& layout, const LocalTensor& tensor,
                     const std::vector<std::span<const uint8_t>>& canonical, std::span<uint8_t> out);

// Writes the shard of every rank of `set` into `out_dir` from the canonical checkpoint, whose
// catalog must equal the layout's (kMismatch otherwise). Ranks are written in parallel.
Status WriteShards(const LayoutSet& set, const Checkpoint& canonical, const std::string& out_dir, int threads);

// The shards of a layout set, opened (read-only or read-write) and checked against the layout:
// every rank's file exists and holds exactly the rank's local tensors with their dtypes and
// shapes (kNotFound / kMismatch naming the rank and tensor otherwise).
class ShardSet {
 public:
  static Result<ShardSet> Open(const LayoutSet& set, const std::string& dir, MappedFile::Mode mode);

  const ShardBytes& bytes() const { return bytes_; }
  const MutableShardBytes& mutable_bytes() const { return mutable_bytes_; }  // empty spans unless read-write
  Status Sync();

 private:
  std::vector<Checkpoint> ranks_;
  ShardBytes bytes_;
  MutableShardBytes mutable_bytes_;
};

// Checks that `bytes` has, for every rank, exactly its local tensors' byte sizes (kInternal:
// in-memory callers must size buffers from the layout).
Status CheckShardBytesShape(const LayoutSet& set, const ShardBytes& bytes);

}  // namespace dcr
