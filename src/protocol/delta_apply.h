// Offline apply: a delta file -> a checkpoint, in place.
//
// Contract: nothing is written to the target unless (1) its catalog equals the delta's,
// (2) its full state digest equals the delta's base digest, (3) every payload passes its
// checksum and structural checks and agrees with the payload table, and (4) the base digest
// updated with every decoded change equals the delta's target digest. Any failure returns an
// error with the target unchanged. Writes are then made durable (msync + fsync).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "format/checkpoint.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"

namespace dcr {

struct ApplyOptions {
  int threads = 0;
  ProgressFn progress;  // reports payload bytes verified and applied
  // Prefault the target's pages for writing before each payload's stores where its segments are
  // dense (write_prefault.h): one call per segment instead of a write fault per page.
  bool prefault_writes = true;
};

struct ApplyStats {
  uint64_t changed_elements = 0, payloads = 0, wire_bytes = 0;
  double base_check_seconds = 0;  // full digest of the target before writing (O(model))
  double verify_seconds = 0;      // checksum + decode + digest of every payload (O(changes))
  double apply_seconds = 0;       // decode + in-place writes + sync
  uint64_t prefaulted_bytes = 0;  // target bytes prefaulted for writing (ApplyOptions::prefault_writes)
  Digest128 target_digest;
};

// `target` must be opened read-write.
Result<ApplyStats> ApplyDelta(const DeltaReader& delta, Checkpoint& target, const ApplyOptions& options);

}  // namespace dcr
