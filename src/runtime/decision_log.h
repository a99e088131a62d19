// The coordinator's durable record of transfers (DESIGN.md §7): one JSON file per transfer in
// DIR/decisions/, written atomically and fsynced (WriteFileAtomic) before anyone is told.
// A transfer is recorded as "started" before its first prepare (so a retry after a crash gets a
// new transfer id) and then as "commit" or "abort". No record, or "started", means no commit
// was ever decided: the transfer may be aborted. Layout: docs/refit.md §Decision log.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "protocol/version.h"

namespace dcr {

struct TransferRecord {
  enum class State { kStarted, kCommit, kAbort };
  uint64_t transfer = 0;
  State state = State::kStarted;
  Version base;
  Version target;      // meaningful for kCommit
  std::string reason;  // why it was aborted
};

class DecisionLog {
 public:
  // DIR/decisions is created if absent.
  static Result<DecisionLog> Open(const std::string& dir);

  Result<std::optional<TransferRecord>> Find(uint64_t transfer) const;
  // How many transfers were ever started from `base` (the next attempt number).
  Result<uint64_t> AttemptsFrom(const Version& base) const;
  // Durable before it returns. A decision (commit or abort) is final: recording another state
  // over it is kInternal.
  Status Record(const TransferRecord& record);

 private:
  std::string dir_;
};

const char* TransferStateName(TransferRecord::State s);

}  // namespace dcr
