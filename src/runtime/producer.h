// One producer's part of a live transfer (DESIGN.md §3): diff the owned tensors of NEW against
// the baseline, encode payloads on a pool of threads, and stream them to the producer's root
// receiver while later payloads are still being encoded. Queues are bounded: at most
// 2·threads + 2 encoded payloads wait for the socket and at most `window` are unacknowledged;
// a payload's bytes are dropped once the root acknowledges it (staged ACK: from then on the
// root is responsible for its subtree). A payload is resent with identical bytes when the root
// refuses it as damaged in transit ("resend": true, at most 8 times) or does not acknowledge it
// in time; any other refusal ends the stream with that error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "protocol/baseline_state.h"
#include "protocol/delta_diff.h"
#include "runtime/messages.h"
#include "runtime/payload_encoder.h"

namespace dcr {

struct StreamOptions {
  int threads = 0;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  EncodeOptions encode;
  bool dense = false;          // every element as an overwrite: a full-checkpoint refit through the same path
  size_t window = 8;           // unacknowledged payloads in flight
  int ack_timeout_ms = 5000;   // resend a payload not acknowledged within this time
  int deadline_ms = 30000;     // give up when no acknowledgement arrives for this long
  // Fault injection for tests: damage the first send of these sequences; send everything twice.
  std::set<uint32_t> corrupt_first_send;
  bool duplicate_sends = false;
};

struct StreamResult {
  std::vector<StreamedPayload> payloads;  // in sequence order; bytes not kept (null)
  std::map<std::string, Digest128> target_digests;  // owned tensors
  uint64_t changed = 0, elements = 0, dense_bytes = 0;  // owned tensors
  uint64_t wire_bytes = 0;  // sum of payload sizes: one copy
  uint64_t sent_bytes = 0;  // payload bytes put on the socket, resends and injected duplicates included
  uint64_t resends = 0;
  double encode_seconds = 0;  // summed over encoder waves (wall)
  double stream_seconds = 0;  // first encode to last acknowledgement
};

Result<StreamResult> StreamPart(const BaselineState& baseline, const Checkpoint& next, uint64_t transfer,
                                const std::string& root, const StreamOptions& options);

}  // namespace dcr
