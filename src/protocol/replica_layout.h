// The serving layout of a receiver replica: ReplicaState's layout mode (replica_state.h; bytes in
// docs/state-dirs.md §Receiver state directory). The replica's weights are the shards of every
// rank of a layout set (DESIGN.md §5 placement):
//
//   DIR/layout/rank-NNNNN.json          the layout, copied byte for byte from the seeding directory
//   DIR/shards/rank-NNNNN.safetensors   every rank's local tensors (WriteShards), mapped read-write
//
// Payloads stay canonical: each changed canonical element is resolved to every local element
// that holds it (Placer) and written there; its undo entries are those local elements with their
// old local bits. Undo entries name a local tensor by its global local-tensor ordinal: ranks in
// order, within a rank its local tensors in layout (name) order, so the ordinal of (rank r,
// tensor i) is i plus the local-tensor counts of ranks 0 .. r-1. The entry's width is the local
// dtype's.
//
// The canonical state digest of the shards (each canonical element counted once, from its owner
// piece: DigestThroughLayout) is what the replica's digests describe, so every owner piece must
// hold its canonical bits exactly: layouts whose owners convert with rounding are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "layout/layout.h"
#include "layout/shard.h"
#include "protocol/placer.h"
#include "protocol/replica_journal.h"
#include "protocol/state_digest.h"

namespace dcr {

// DIR/layout and DIR/shards are named by kReplicaLayoutDir and kReplicaShardsDir (replica_state.h).

// One decoded payload resolved to the local elements it changes; read-only until Store.
struct PlacedPayload {
  struct Segment {
    uint32_t tensor = 0;             // canonical tensor
    std::vector<Slot> slots;         // the copies of every change, change after change
    std::vector<size_t> ends;        // ends[k]: end of change k's copies in `slots`
    std::vector<uint64_t> new_bits;  // per change: the element's new canonical bits
    Digest128 digest_delta;          // sum of h(new) - h(old) over the segment's changes
  };
  std::vector<Segment> segments;  // the payload's segments, in order
  uint64_t local_elements = 0;    // copies over all segments = undo entries
};

class ReplicaLayout {
 public:
  // Seeds DIR/layout and DIR/shards (DIR exists) from layout directory `layout_dir` (ReadLayoutDir
  // validates it) and canonical checkpoint `canonical`, whose digest is `digest`. Refused before
  // anything is written: a layout catalog other than the checkpoint's (kMismatch naming the first
  // difference), an owner piece that converts with rounding (kUnsupported naming the canonical
  // tensor). After writing, the shards' canonical digest must equal `digest` (errors of
  // DigestThroughLayout propagate). A failure may leave partial files under DIR.
  static Status Create(const std::string& dir, const std::string& layout_dir, const Checkpoint& canonical,
                       const CheckpointDigest& digest, int threads);
  // Reads DIR/layout and opens DIR/shards read-write (kNotFound / kMismatch / kInvalidArgument
  // from ReadLayoutDir and ShardSet::Open, naming the file); deletes DurableFileWriter temp files
  // in both.
  static Result<std::unique_ptr<ReplicaLayout>> Open(const std::string& dir);

  ReplicaLayout(const ReplicaLayout&) = delete;  // the Placer refers to members: never moved
  ReplicaLayout& operator=(const ReplicaLayout&) = delete;

  const LayoutSet& set() const { return set_; }
  const ShardSet& shards() const { return shards_; }
  const Catalog& catalog() const { return set_.at(0).canonical; }
  // Every local tensor, indexed by global local-tensor ordinal, with its local dtype's width.
  const std::vector<UndoTensor>& undo_tensors() const { return undo_tensors_; }

  // Resolves every change of `payload` (plain mode; its segments fit the canonical catalog):
  // copies, old canonical bits (Placer::OldBits), new bits and digest deltas, segments in
  // parallel. Reads only. An element whose old bits no copy holds exactly is kUnsupported naming
  // it (`what` prefixes the message).
  Status Resolve(const DecodedPayload& payload, int threads, const std::string& what, PlacedPayload* out) const;
  // Adds one undo entry per copy, in order: (ordinal, local element, current local bits).
  Status AddUndo(const PlacedPayload& placed, UndoWriter& undo) const;
  // Writes segment `i`'s new bits into every copy: the absolute new canonical bits (converted
  // where the copy converts), so every copy ends at the target whatever it held.
  void Store(const PlacedPayload& placed, size_t i) const;
  // msync + fsync of every shard.
  Status Sync() { return shards_.Sync(); }

 private:
  ReplicaLayout() = default;

  LayoutSet set_;
  ShardSet shards_;
  std::unique_ptr<Placer> placer_;
  std::vector<uint32_t> first_ordinal_;  // per rank: ordinal of its local tensor 0
  std::vector<UndoTensor> undo_tensors_;
};

}  // namespace dcr
