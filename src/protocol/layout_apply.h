// Layout-aware apply (DESIGN.md §5, receiver side): a canonical delta file is applied to the
// shards of a serving layout in place, each changed canonical element written straight into every
// local element that holds it (placement): XOR for plain copies (new bits for an overwrite delta),
// the converted new value for pieces with a dtype transform. No full-size scratch tensor is built;
// after the base check the work is O(changed elements).
//
// Contract: nothing is written unless (1) the delta's catalog equals the layout's canonical
// catalog, (2) the canonical digest of the shards (each canonical element counted once, from its
// owner) equals the delta's base digest, (3) every payload passes its checksum and structural
// checks, agrees with the payload table and is in plain codec mode, (4) every change can be
// placed (an XOR change for an element held only as lossy conversions cannot), and (5) the base
// digest updated with every change equals the delta's target digest. With `verify` off, (2) and
// (5) are skipped: the only way to apply to a layout whose pieces all round (e.g. BF16 served as
// F16), which cannot reproduce canonical bits; the delta must then carry overwrite values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "layout/layout.h"
#include "layout/shard.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"

namespace dcr {

struct LayoutApplyOptions {
  int threads = 0;
  bool verify = true;
  // Per-tensor canonical digests of the state the shards hold, vouched for by the caller (a
  // receiver that keeps its digests current while applying): replaces the O(model) base
  // recomputation of (2) by an O(tensors) comparison.
  const std::vector<Digest128>* known_base = nullptr;
  ProgressFn progress;  // payload bytes verified and applied
};

struct LayoutApplyStats {
  uint64_t changed_elements = 0;  // canonical
  uint64_t placed_elements = 0;   // local elements written, all ranks
  uint64_t payloads = 0, wire_bytes = 0;
  double base_check_seconds = 0;  // canonical digest of the shards (O(model); 0 with known_base)
  double verify_seconds = 0;      // decode + digest of every change (O(changes))
  double apply_seconds = 0;       // decode + placement + writes (O(changes))
  uint64_t prefaulted_bytes = 0;  // shard bytes prefaulted for writing (write_prefault.h)
  Digest128 target_digest;
  std::vector<Digest128> target_tensor_digests;  // empty when not verified
};

// `serve` must be valid (ValidateLayoutSet; ReadLayoutDir and the generators return valid sets).
// `shards` hold every rank's local tensors of `serve` (CheckShardBytesShape), writable.
Result<LayoutApplyStats> ApplyLayoutDelta(const DeltaReader& delta, const LayoutSet& serve, const MutableShardBytes& shards,
                                          const LayoutApplyOptions& options);

// Opens the shard directory of `serve` read-write, applies, and makes the writes durable.
Result<LayoutApplyStats> ApplyLayoutDeltaToDir(const DeltaReader& delta, const LayoutSet& serve, const std::string& dir,
                                               const LayoutApplyOptions& options);

}  // namespace dcr
