// Layout-aware diff (DESIGN.md §5, producer side): every training rank's shard is diffed against
// its base shard, each changed local element is projected to (canonical tensor, element), only the
// owner of a replicated region emits it, and the changes, collected per canonical tensor and
// sorted, are written as an ordinary delta file over the canonical catalog (docs/format.md §1).
// Its base and target digests are the canonical checkpoint digests, computed from the shards, so
// the delta applies to a canonical checkpoint (`dcr apply`) as well as to any serving layout.
//
// Payloads are planned and numbered exactly as DiffCheckpoints plans them over the canonical
// catalog, and always use the plain codec mode (receivers of other layouts hold no canonical
// ranges to decode context-mode payloads against).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "layout/layout.h"
#include "layout/shard.h"
#include "protocol/delta_diff.h"
#include "protocol/state_digest.h"

namespace dcr {

struct LayoutDiffOptions {
  int threads = 0;  // 0 = all hardware threads
  ValueKind kind = ValueKind::kXor;
  uint64_t chunk_bytes = kDefaultChunkBytes;  // canonical dense bytes covered by one payload at most
  EncodeOptions encode;                       // its context setting is ignored: payloads are plain
  uint64_t transfer_id = 0;                   // 0: DefaultTransferId(base digest)
  ProgressFn progress;                        // local bytes scanned, of all ranks
};

struct LayoutDiffStats {
  uint64_t changed_elements = 0, total_elements = 0;  // canonical
  uint64_t dense_bytes = 0;                           // canonical bytes of the model
  uint64_t wire_bytes = 0, payloads = 0;
  uint64_t scanned_bytes = 0;    // local bytes of the new shards, all ranks
  uint64_t replica_changes = 0;  // changed local elements in non-owner pieces (their owner emits them)
  uint64_t padding_changes = 0;  // changed local elements in padding (never sent)
  double digest_seconds = 0;     // canonical digest of the base shards (O(model))
  double scan_seconds = 0;       // diff scan + projection
  double encode_seconds = 0;     // sort + encode (+ O(changes) target digest)
  double write_seconds = 0;
  Digest128 base_digest, target_digest;
};

// `train` must be valid (ValidateLayoutSet; ReadLayoutDir and the generators return valid sets).
// `base` and `next` hold every rank's local tensors (CheckShardBytesShape) of `train`.
Result<LayoutDiffStats> DiffLayoutShards(const LayoutSet& train, const ShardBytes& base, const ShardBytes& next,
                                         const std::string& out_path, const LayoutDiffOptions& options);

// Opens the shard directories (rank-00000.safetensors, ...) of `train` and diffs them.
Result<LayoutDiffStats> DiffLayoutShardDirs(const LayoutSet& train, const std::string& base_dir,
                                            const std::string& next_dir, const std::string& out_path,
                                            const LayoutDiffOptions& options);

}  // namespace dcr
