// A producer's durable baseline (DESIGN.md §2, §7): the bits of the last committed version of the
// tensors this producer owns (OwnedTensors), which it diffs the trainer's next state against.
// The baseline advances only after the coordinator durably decided COMMIT: the next baseline is
// first staged (written completely and durably beside the current one), then made current by one
// atomic rename of baseline.json. Every file and field, the crash-consistency argument and the
// recovery rules are in docs/state-dirs.md §Producer baseline directory.
//
//   DIR/baseline.json                     the current state; names the current tensors file
//   DIR/baseline-<transfer>.safetensors   owned tensors of a version (<transfer>: 16 hex digits of
//                                         the transfer that produced it; 0000000000000000: seed)
//   DIR/staged/<transfer>.json            a complete staged next baseline (written last)
//
// A baseline directory is not a checkpoint: never Checkpoint::Open(DIR) (it may hold several
// tensors files). One process at a time may hold a BaselineState on a directory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"
#include "protocol/state_digest.h"
#include "protocol/version.h"

namespace dcr {

// xxh3-64 (seed 0) of the catalog serialized as, per entry in catalog order, all little-endian:
// u32 name length, name bytes (UTF-8), u32 dtype-name length, dtype name (safetensors spelling:
// "BF16", "F32", …), u32 rank, rank × u64 dims. Identifies the full catalog (names, dtypes,
// shapes) that a baseline's ownership was computed from.
uint64_t CatalogDigest64(const Catalog& catalog);

class BaselineState {
 public:
  // Seeds an absent or empty DIR from a full checkpoint (file or sharded directory): writes the
  // owned tensors (OwnedTensors(catalog, producer, producers)) to baseline-0000000000000000.
  // safetensors and then baseline.json, version 0 = InitialVersion(state digest of the WHOLE
  // checkpoint), so every producer seeded from the same checkpoint records the same version.
  // kInvalidArgument if DIR already holds baseline.json, holds files that are not a baseline's
  // (leftovers of an interrupted Init are removed), or producer >= producers or producers == 0.
  static Status Init(const std::string& dir, const std::string& checkpoint, uint32_t producer, uint32_t producers,
                     int threads);

  // Opens DIR (kNotFound without baseline.json; kCorrupt if its files are inconsistent). Refuses
  // with kInvalidArgument, naming both, if producer/producers differ from the recorded ones.
  // Recovers from interrupted operations (docs/state-dirs.md §Recovery at Open): removes
  // temporary files, staged transfers that can never be committed (based on another version,
  // i.e. already committed or stale, or missing their tensors file), and tensors files referenced
  // neither by baseline.json nor by a remaining staged transfer. A malformed staged json is
  // kCorrupt. Complete stages based on the current version are kept: the caller, who knows the
  // coordinator's decision, calls CommitStaged or DropStaged.
  static Result<BaselineState> Open(const std::string& dir, uint32_t producer, uint32_t producers);

  BaselineState(BaselineState&&) = default;
  BaselineState& operator=(BaselineState&&) = default;

  const std::string& dir() const { return dir_; }
  const Version& version() const { return version_; }
  uint32_t producer() const { return producer_; }
  uint32_t producers() const { return producers_; }
  uint64_t catalog_digest() const { return catalog_digest_; }
  // The transfer that produced the current baseline; 0 for the seed.
  uint64_t last_transfer() const { return last_transfer_; }
  // The owned tensors (read-only mapping of the current tensors file), sorted by name.
  const Checkpoint& baseline() const { return *baseline_; }
  // State digests (state_digest.h) of the owned tensors, by name.
  const std::map<std::string, Digest128>& tensor_digests() const { return tensor_digests_; }
  // Transfer ids (ascending) with a complete staged baseline based on the current version.
  std::vector<uint64_t> staged_transfers() const;

  // The owned tensors indexed by catalog index of `catalog` (the full catalog; its
  // CatalogDigest64 must equal catalog_digest(), else kMismatch): entry t is the baseline's
  // tensor for an owned t and an empty TensorRef (info == nullptr) otherwise. The form
  // EncodePlannedPayload takes as `base`. Valid while this state is neither moved from nor
  // advanced by CommitStaged.
  Result<std::vector<TensorRef>> TensorsByCatalogIndex(const Catalog& catalog) const;

  // Recomputes the owned tensors' state digests from the bits (O(owned bytes)) and compares
  // them with tensor_digests(): kCorrupt naming the first tensor that differs.
  Status Verify(int threads) const;

  // Writes the next baseline for `transfer` (never 0, never last_transfer()) durably: the owned
  // tensors' bits copied from `next`, a FULL checkpoint whose catalog must contain every owned
  // tensor with equal dtype and shape (else kMismatch naming the tensor) and have this baseline's
  // catalog digest (else kMismatch); the target version (number must be version().number + 1,
  // else kInvalidArgument) and the owned tensors' target digests by name (exactly the owned names,
  // else kInvalidArgument; the caller computes them as base digests + changes). Writes
  // baseline-<transfer>.safetensors, then staged/<transfer>.json (its presence marks the stage
  // complete), then CrashPoint("baseline.staged"). Staging the same transfer again replaces it.
  // On any error the current baseline is untouched.
  Status Stage(uint64_t transfer, const Checkpoint& next, const Version& target,
               const std::map<std::string, Digest128>& target_digests);

  // After the coordinator durably decided COMMIT: makes the staged baseline current by writing
  // baseline.json atomically (the single switch; the tensors file is already in place), then
  // CrashPoint("baseline.committed"), then removes the previous tensors file and every staged
  // transfer (all are based on the previous version). A crash at any point leaves either the old
  // or the new baseline complete; calling it again completes it. Idempotent: Ok when the
  // baseline is already at `transfer`. kNotFound if `transfer` is neither staged nor current.
  Status CommitStaged(uint64_t transfer);

  // After ABORT: removes the staged transfer (its json first, then its tensors file). Ok if
  // absent; kInvalidArgument if `transfer` is the committed current baseline.
  Status DropStaged(uint64_t transfer);

 private:
  BaselineState() = default;

  std::string dir_;
  uint32_t producer_ = 0, producers_ = 1;
  Version version_;
  uint64_t catalog_digest_ = 0;
  uint64_t last_transfer_ = 0;
  std::string file_;  // the current tensors file, relative to dir_
  std::map<std::string, Digest128> tensor_digests_;
  std::optional<Checkpoint> baseline_;  // always set once opened
};

}  // namespace dcr
