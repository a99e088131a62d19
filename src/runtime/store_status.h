// What a refit store holds, for `dcr status --store` (docs/store.md): the head, the open
// transfer's progress, anchors, the chain's extent and every registered receiver. Read-only.
#pragma once

#include "base/status.h"
#include "runtime/messages.h"
#include "store/object_store.h"

namespace dcr {

// {"store", "catalog", "anchor_every", "head": {"version", "last_transfer"}, "open" (if any):
// {"transfer", "payloads" (published so far), "manifest" (bool), "votes": {R: bool}}, "anchors":
// [version numbers], "chain": {"first", "last"} (link numbers; absent when empty), "receivers":
// [{"name", "version", "pending", "heartbeat_age_s", "host"}]}. kNotFound for a store without
// store.json.
Result<Json> DescribeStore(ObjectStore& store);

}  // namespace dcr
