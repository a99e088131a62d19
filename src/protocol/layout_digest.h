// Canonical state digests of a model held in shards (docs/format.md §4): each canonical element
// is hashed once, from its owner piece, as (canonical index, canonical bits), so the result equals
// DigestCheckpoint of the canonical checkpoint the shards hold. O(model), in parallel.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "base/status.h"
#include "layout/layout.h"
#include "layout/shard.h"
#include "protocol/state_digest.h"

namespace dcr {

// `shards` must match `set` (CheckShardBytesShape). Owner pieces that convert must convert exactly
// (widening); a lossy owner is kUnsupported (its canonical bits cannot be recovered), and local
// bits that no canonical value converts to are kWrongBase naming the rank, tensor and element.
Result<CheckpointDigest> DigestThroughLayout(const LayoutSet& set, const ShardBytes& shards, int threads);

// Reads the canonical bits held at local element `local_index` of a piece (inverting an exact
// conversion); nullopt when the piece converts lossily or the local bits are no conversion.
std::optional<uint64_t> CanonicalBitsAt(const Piece& piece, DType canonical_dtype, DType local_dtype,
                                        std::span<const uint8_t> local_tensor, uint64_t local_index);

}  // namespace dcr
