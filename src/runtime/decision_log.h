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
#include "protocol/baseline_state.h"
#include "protocol/version.h"
#include "runtime/messages.h"

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

// The record's JSON form: {"transfer", "state", "base", "target" (commit only), "reason" (if
// any)}; the same in the decision log and in a store's decision objects (docs/store.md).
Json TransferRecordJson(const TransferRecord& r);
// kCorrupt naming `where` unless `j` is such a record.
Result<TransferRecord> ParseTransferRecord(const Json& j, const std::string& where);

// Applies the log's decision to every transfer staged in `baseline` (CommitStaged or
// DropStaged); a transfer never decided is first recorded as aborted, before anyone acts on it.
Status ResolveStaged(BaselineState& baseline, DecisionLog& log);

}  // namespace dcr
