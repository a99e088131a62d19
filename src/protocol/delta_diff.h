// Offline diff: two checkpoints with equal catalogs -> a delta file. The tensors, in catalog
// order, are cut into payloads of bounded dense size (small tensors share one, large ones are
// split); payloads are diffed and encoded in parallel and written in plan order, so the file is
// byte-identical for every thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "protocol/payload_plan.h"
#include "protocol/state_digest.h"

namespace dcr {

// Called from the calling thread as work completes: (bytes done, bytes total).
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

inline constexpr uint64_t kDefaultChunkBytes = 32ull << 20;

struct DiffOptions {
  int threads = 0;  // 0 = all hardware threads
  ValueKind kind = ValueKind::kXor;
  uint64_t chunk_bytes = kDefaultChunkBytes;  // dense bytes covered by one payload at most
  EncodeOptions encode;
  uint64_t transfer_id = 0;  // 0: DefaultTransferId(base digest)
  ProgressFn progress;
};

struct DiffStats {
  uint64_t changed_elements = 0, total_elements = 0;
  uint64_t dense_bytes = 0;  // tensor bytes of the new checkpoint
  uint64_t wire_bytes = 0;   // size of the delta file
  uint64_t payloads = 0;
  double digest_seconds = 0;  // full digest of the base (O(model))
  double encode_seconds = 0;  // diff + encode (+ O(changes) target digest), excluding writes
  double write_seconds = 0;
  Digest128 base_digest, target_digest;
};

Result<DiffStats> DiffCheckpoints(const Checkpoint& base, const Checkpoint& next, const std::string& out_path,
                                  const DiffOptions& options);

// DiffCheckpoints' encode step alone, for callers that time it (`dcr bench codec`): diffs and
// encodes every payload of base -> next (equal catalogs, checked as DiffCheckpoints checks) with
// the same plan, waves, threads and identities as DiffCheckpoints given the same options and
// transfer_id, wave by wave into *wave: on return it holds the last wave's payloads, in plan
// order, then cleared slots (the buffers of every slot are reused from wave to wave and call to
// call). Writes nothing. Returns the changed elements.
Result<uint64_t> EncodeDiffPayloads(const Checkpoint& base, const Checkpoint& next, const DiffOptions& options,
                                    uint64_t transfer_id, std::vector<EncodedPayload>* wave);

}  // namespace dcr
