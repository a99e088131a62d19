// A receiver's durable replica state (DESIGN.md §7 "Recovery without reload"): one replica's
// weights, updated in place, with its committed version and an undo journal for the pending
// transfer. Every on-disk byte is in docs/state-dirs.md §Receiver state directory.
//
//   DIR/weights.safetensors   all tensors, sorted by name, mmapped read-write
//   DIR/state.json            committed version, state digest, per-tensor digests, last transfer
//   DIR/journal/              only while a transfer is pending: transfer.json, <p>-<s>.undo,
//                             <p>-<s>.done, voted
//
// Layout mode (state.json "layout": true; replica_layout.h): the weights are held in a serving
// layout instead of weights.safetensors: DIR/layout/ (the layout's JSON files) and DIR/shards/
// (every rank's shard, mmapped read-write). Payloads, digests, versions and done records stay
// canonical; each change is placed into every local element that holds it, and undo records
// hold those local elements (tensor index = global local-tensor ordinal). Everything below holds
// in both modes, with "the weights" meaning the shards and "sync" every shard file.
//
// Write contract (every "durable" file is published by temp file + fsync + rename + directory
// fsync, so it exists complete or not at all):
//  W1 state.json is the commit point. It is only ever replaced atomically, and it names the
//     version whose bits the weights hold wherever the journal does not say otherwise.
//  W2 A payload's undo record (absolute old bits of every element it changes) is durable before
//     the first byte of the payload is stored: stores into the shared mapping may reach the disk
//     at any moment, so an element that differs from the committed bits is always covered by an
//     undo record. Restoring writes absolute bits, so restoring twice is harmless.
//  W3 A payload's done record is published only after its stores were synced (msync + fsync):
//     a done record means the payload is entirely on disk. Dedup is by done record.
//  W4 "voted" is published only when every payload that has an undo record also has a done
//     record. Once voted, the coordinator may decide commit: done payloads must be kept.
//  W5 Commit rewrites state.json (new version, running digests, last_transfer) and only then
//     removes the journal. Abort restores every undo record, syncs, and only then removes the
//     journal. Removal order (RemoveJournal): voted, undo records newest first, the rest,
//     transfer.json, the directory; so transfer.json outlives every record it governs.
//
// Recovery (Open; idempotent, so a crash during recovery is recovered by the next Open):
//  - journal without transfer.json: Begin or removal was cut short; it must hold no records
//    (else kCorrupt) and is deleted.
//  - transfer.json's base is not the committed version: the transfer must be last_transfer
//    (commit done, removal cut short) and the journal is deleted; otherwise kCorrupt.
//  - not voted: rolled back (every undo record, newest first), journal deleted: a receiver that
//    has not voted may abort unilaterally. The weights are then exactly the committed bits.
//  - voted: only payloads with an undo but no done record (a partial apply) are rolled back and
//    their undo records deleted; the rest stays applied and pending() is {voted = true}: the
//    replica waits for the coordinator's decision (Commit or Abort).
//  - DurableFileWriter temp files in DIR and journal/ are deleted. Bad records are kCorrupt
//    naming the file (the weights may be inconsistent then; nothing is guessed).
//
// Not thread-safe: one caller at a time. One process per DIR.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"
#include "layout/layout.h"
#include "layout/shard.h"
#include "protocol/replica_journal.h"
#include "protocol/state_digest.h"
#include "protocol/version.h"

namespace dcr {

class ReplicaLayout;

inline constexpr const char* kReplicaWeightsFile = "weights.safetensors";
inline constexpr const char* kReplicaStateFile = "state.json";
inline constexpr const char* kReplicaJournalDir = "journal";
inline constexpr const char* kReplicaLayoutDir = "layout";  // layout mode
inline constexpr const char* kReplicaShardsDir = "shards";  // layout mode

struct PendingTransfer {
  uint64_t transfer_id = 0;
  Version base;
  bool voted = false;
  size_t applied_payloads = 0;  // payloads with a done record
};

// A replica seeded at a version other than 0 (ReplicaState::Init).
struct ReplicaSeed {
  Version version;
  Digest128 digest;            // the state digest of the bits of `version`
  uint64_t last_transfer = 0;  // the transfer that produced `version`
};

struct ApplyOutcome {
  bool duplicate = false;  // already applied with identical bytes; nothing was written
  uint64_t changed = 0;    // elements changed by this payload (0 for a duplicate)
  double seconds = 0;      // decode + journal + write + sync
};

class ReplicaState {
 public:
  // Seeds `dir` (absent or empty; kInvalidArgument otherwise) from a checkpoint (file or
  // sharded directory): weights.safetensors with every tensor bit-identical, sorted by name, and
  // state.json at version 0 = InitialVersion(checkpoint digest).
  // With `layout_dir` (a layout directory as `dcr layout generate` writes it; ReadLayoutDir
  // validates it): layout mode. Its layout files are copied durably into DIR/layout/ and the
  // shards of every rank are written into DIR/shards/ (WriteShards); state.json gets
  // "layout": true. Version 0 is still the checkpoint's canonical digest, and the shards must
  // digest to it (DigestThroughLayout). Refused before anything is written: a layout catalog
  // other than the checkpoint's (kMismatch naming the first difference), and a layout whose owner
  // pieces convert with rounding (kUnsupported naming the canonical tensor: the replica could not
  // vote on canonical digests). A later failure may leave partial files in `dir`, but no
  // state.json: remove `dir` and seed again.
  //
  // With `seed` (catch-up from a store anchor, runtime/store_follower.h): the checkpoint holds
  // the bits of seed->version rather than version 0; its state digest must be seed->digest
  // (else kCorrupt, nothing written) and state.json records seed->version and last_transfer.
  static Status Init(const std::string& dir, const std::string& checkpoint, int threads,
                     const std::string& layout_dir = "", const std::optional<ReplicaSeed>& seed = std::nullopt);
  // Opens `dir` read-write and recovers (see above). kNotFound naming `dir` without state.json.
  // Checks that state.json's digest is CombineDigests of its tensor digests (O(tensors)); it does
  // not rehash the weights (that is `dcr verify`). The mode comes from state.json.
  static Result<ReplicaState> Open(const std::string& dir, int threads);

  ReplicaState(ReplicaState&&) noexcept;
  ReplicaState& operator=(ReplicaState&&) noexcept;
  ~ReplicaState();

  const std::string& dir() const { return dir_; }
  // The canonical catalog, in both modes: what payloads, digests and done records index.
  const Catalog& catalog() const { return catalog_; }
  bool has_layout() const { return layout_ != nullptr; }
  // Layout mode only (nullptr otherwise): the layout and its shards. Writing through the shards
  // outside ApplyPayload breaks the journal's guarantees.
  const LayoutSet* layout() const;
  const ShardSet* shards() const;
  // Canonical mode only (a bug otherwise): the weights. Writing through them outside
  // ApplyPayload breaks the journal's guarantees.
  Checkpoint& weights();
  const Checkpoint& weights() const;
  const Version& version() const { return version_; }  // committed
  uint64_t last_transfer() const { return last_transfer_; }  // 0 at version 0
  Digest128 committed_digest() const;
  // Committed digests plus the digest deltas of every applied payload of the pending transfer.
  Digest128 running_digest() const;
  const std::vector<Digest128>& running_tensor_digests() const { return running_; }
  const std::optional<PendingTransfer>& pending() const { return pending_; }

  // Starts transfer `transfer_id` from `base`. kWrongBase (naming dir and both versions) unless
  // base is the committed version; nothing is written then. The same transfer pending: Ok, no-op.
  // Another transfer pending: aborted first if not voted; kInvalidArgument if voted.
  Status Begin(uint64_t transfer_id, const Version& base);

  // Applies one payload of the pending transfer in place, journaled (W2, W3). Refusals write
  // nothing: kInvalidArgument without a pending transfer or after Vote (unless a duplicate);
  // kCorrupt/kUnsupported for a payload that fails its checks or does not fit the catalog;
  // kWrongBase for a payload of another transfer; kCorrupt for an identity already applied with
  // other bytes. An identity already applied with the same checksum is a duplicate.
  // Layout mode also refuses (kUnsupported, nothing written) context-mode payloads and changes to
  // an element no copy holds exactly (Placer::OldBits); each change is digested as
  // (canonical index, old canonical bits from the owner copy, new bits) and every copy is written
  // with the absolute new bits (converted where the copy converts).
  Result<ApplyOutcome> ApplyPayload(std::span<const uint8_t> payload);
  bool HasApplied(uint32_t producer, uint32_t sequence) const;

  // Durably marks the pending transfer voted (W4). Idempotent.
  Status Vote();
  // Commits the pending transfer as `next` (W5). `next` must be
  // NextVersion(version(), transfer, running_digest()); otherwise kCorrupt (the replica does not
  // hold the bits the version names) and nothing is written.
  Status Commit(const Version& next);
  // Rolls the pending transfer back to the exact committed bits and removes the journal. Ok and
  // no-op when nothing is pending.
  Status Abort();

 private:
  ReplicaState(std::string dir, int threads, std::optional<Checkpoint> weights, std::unique_ptr<ReplicaLayout> layout);
  const std::vector<UndoTensor>& undo_tensors() const;
  Status SyncWeights();
  Status Recover();
  Status RollBack(const std::vector<std::pair<uint64_t, std::string>>& undo, bool crash_point);
  Status WriteState(const Version& v, const std::vector<Digest128>& digests, uint64_t last_transfer);
  std::vector<std::string> UndoPathsNewestFirst() const;
  Status Broken(Status s);

  std::string dir_, journal_;
  int threads_ = 0;
  std::optional<Checkpoint> weights_;      // canonical mode
  std::unique_ptr<ReplicaLayout> layout_;  // layout mode
  std::vector<UndoTensor> undo_tensors_;   // canonical mode: the weights' tensors, catalog order
  Catalog catalog_;
  std::vector<uint64_t> elements_;  // per canonical tensor
  Version version_;
  uint64_t last_transfer_ = 0;
  std::vector<Digest128> committed_, running_;  // per tensor, catalog order
  std::optional<PendingTransfer> pending_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> done_;  // (producer, sequence) -> checksum
  std::vector<std::pair<uint64_t, std::string>> undo_;     // (ordinal, path), ascending
  uint64_t next_ordinal_ = 0;
  // Set when a failed write left memory and disk out of step; every mutator returns it until
  // the directory is opened again (Open recovers).
  Status broken_;
};

}  // namespace dcr
