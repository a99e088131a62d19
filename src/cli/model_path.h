// What `dcr verify`, `dcr digest` and `dcr inspect` accept: a checkpoint (safetensors file or
// sharded directory), a receiver state dir (`dcr serve --state`) or a producer baseline dir
// (`dcr push --baseline`). State dirs are read, never recovered or modified: a pending transfer
// is reported, not rolled back (docs/state-dirs.md).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "base/status.h"
#include "format/checkpoint.h"
#include "protocol/state_digest.h"

namespace dcr::cli {

struct OpenedModel {
  enum class Kind { kCheckpoint, kReceiverState, kProducerBaseline };
  Kind kind = Kind::kCheckpoint;
  // The weights (a producer baseline holds only its own tensors); absent for a receiver that
  // holds a serving layout (`dcr serve --layout`), whose weights are per-rank shards.
  std::optional<Checkpoint> checkpoint;
  std::string layout_dir, shards_dir;  // receiver in layout mode
  nlohmann::json state;             // state.json / baseline.json, for state dirs
  std::optional<Digest128> committed_digest;  // receiver: the digest its committed bits must have
  std::string pending;              // receiver: "transfer <id> pending[, voted]" when a journal exists
  const char* KindName() const;
};

Result<OpenedModel> OpenModel(const std::string& path);

}  // namespace dcr::cli
