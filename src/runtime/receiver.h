// The receiver daemon (`dcr serve`, DESIGN.md §3, §6, §7): holds one replica in a state
// directory (protocol/replica_state.h), listens on a ROUTER socket, and for each transfer:
//   prepare  -> Begin (refused unless the transfer's base is its committed version)
//   payload  -> checksum verified, staged ACK to the sender, forwarded to its children in the
//               producer's relay tree, queued, and applied in place through the journal (one
//               payload per loop turn, so ACKs never wait for more than one apply)
//   flush    -> answered once every expected payload is applied: payload counts, running
//               digest and a vote (yes = all applied and digest == expected; made durable first)
//   commit / abort -> the coordinator's decision
// Payloads are deduplicated by identity; a resend with other bytes is refused. Forwarded
// payloads are kept until the child ACKs them and resent identically until then.
// Single-threaded event loop; every wait is bounded so SIGTERM (the stop flag) is honoured
// within ~100 ms.
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "base/status.h"

namespace dcr {

struct ReceiverOptions {
  std::string state_dir;
  std::string listen;  // tcp://HOST:PORT
  int threads = 0;
  int forward_retry_ms = 5000;  // resend a forwarded payload not ACKed within this time
  FILE* log = stderr;           // human lines and one JSON line per refit
};

class Receiver;

// Opens (and recovers) the state dir, binds `listen`, and serves until `stop` is set.
Status RunReceiver(const ReceiverOptions& options, const std::atomic<bool>& stop);

}  // namespace dcr
