// Refit through an object store (DESIGN.md §6; objects and protocol in docs/store.md): for
// trainers and replicas that share a bucket instead of a network path.
//
// `dcr push --store URL`: one producer publishes each transfer as objects — open.json, the
// payloads while they are still being encoded (uploads overlap the diff), then manifest.json —
// waits for the votes of the live receivers at the base, records the decision durably in its
// baseline dir (runtime/decision_log.h) and only then publishes decision.json, the chain link
// and head.json. The first push to an empty store publishes the baseline as the first anchor; a
// commit at a multiple of the anchor interval publishes a new anchor; old anchors, chain links
// and transfers are then garbage-collected, never one a registered receiver still needs.
//
// `dcr serve --store URL --state DIR`: a receiver that seeds an empty DIR from the newest anchor
// (or --init), catches up through the chain, then follows: applies each open transfer's
// payloads as they appear (journaled, runtime/replica_state.h), votes when the manifest's
// digests match, and commits or rolls back on the decision object.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

#include "base/status.h"
#include "codec/payload_codec.h"
#include "protocol/delta_diff.h"
#include "runtime/push.h"
#include "store/object_store.h"

namespace dcr {

struct StorePushOptions {
  std::string store_url;
  StoreOptions store;
  std::string baseline_dir, new_checkpoint;
  uint64_t anchor_every = 10;  // a full anchor at every version number divisible by this (0: only the first)
  uint64_t keep_anchors = 2;   // anchors kept by garbage collection (at least 1)
  int vote_timeout_ms = 60000;  // the transfer aborts if a live receiver at the base has not voted by then
  int live_ms = 10000;          // a receiver whose heartbeat is older than this is not waited for
  int threads = 0;              // encoder threads (0: all)
  int uploads = 4;              // payload uploads in flight
  uint64_t chunk_bytes = kDefaultChunkBytes;
  EncodeOptions encode;
  bool dense = false;
  // Fault injection for tests: publish these payload sequences damaged, or list them in the
  // manifest without publishing them.
  std::set<uint32_t> corrupt, missing;
  FILE* log = stderr;
};

// Producer 0 of 1 (several producers through a store are not supported yet: kUnsupported).
Result<PushReport> RunStorePush(const StorePushOptions& options);

struct StoreReceiverOptions {
  std::string store_url;
  StoreOptions store;
  std::string state_dir;
  std::string name;         // registration name (CheckReceiverName); empty: derived from host and DIR
  std::string init, layout;  // seed an empty DIR from this checkpoint (version 0) instead of an anchor
  int threads = 0;
  int poll_ms = 200;
  int heartbeat_ms = 1000;
  bool exit_when_current = false;  // return once at the store's head with nothing open (catch-up only)
  FILE* log = stderr;
};

Status RunStoreReceiver(const StoreReceiverOptions& options, const std::atomic<bool>& stop);

}  // namespace dcr
