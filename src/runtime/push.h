// `dcr push`: one refit from the producers' side (DESIGN.md §7). Producer 0 of M is the
// coordinator: it binds --coordinator (when M > 1), waits for the other producers to join,
// prepares the receivers, starts the producers, streams its own part, flushes, collects votes,
// records the decision durably in its baseline dir (runtime/decision_log.h) and only then tells
// receivers and producers. Producers 1..M-1 connect to the coordinator, learn the transfer and
// the receivers from it, stream their part to their own root receiver, stage their next baseline
// and advance it when told the decision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/messages.h"
#include "runtime/producer.h"

namespace dcr {

struct PushOptions {
  std::string baseline_dir;
  std::string new_checkpoint;
  std::vector<std::string> receivers;  // coordinator only
  uint32_t producer = 0, producers = 1;
  std::string coordinator;  // tcp endpoint: bound by producer 0, connected by the others (M > 1)
  size_t arity = 2;
  int timeout_ms = 30000;  // bound on every wait for a peer
  StreamOptions stream;
  FILE* log = stderr;  // progress lines
};

struct ReceiverFlush {
  std::string endpoint;
  bool vote = false;
  uint64_t applied = 0;
  std::string digest, reason;
  uint64_t forwarded_bytes = 0;
};

struct PushReport {
  bool committed = false;
  Version base, version;
  uint64_t transfer = 0;
  uint64_t changed = 0, elements = 0, dense_bytes = 0, wire_bytes = 0, sent_bytes = 0, payloads = 0, resends = 0;
  double encode_seconds = 0, stream_seconds = 0, stage_seconds = 0, flush_seconds = 0, commit_seconds = 0, total_seconds = 0;
  std::vector<ReceiverFlush> receivers;  // coordinator only
  std::vector<std::string> warnings;     // e.g. a receiver that has not acknowledged the commit yet
  // Through an object store only: its requests, retries and bytes moved during the push.
  bool via_store = false;
  uint64_t store_requests = 0, store_retries = 0, store_bytes_put = 0, store_bytes_got = 0;
  Json ToJson() const;
};

// Producer 0: the whole protocol. Producers > 0: their part. An aborted transfer is an error
// whose message gives the reason; the baselines are then unchanged.
Result<PushReport> RunCoordinator(const PushOptions& options);
Result<PushReport> RunFollower(const PushOptions& options);

}  // namespace dcr
