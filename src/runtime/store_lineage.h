// A store's lineage (DESIGN.md §6, docs/store.md §Lineage): full anchors every N versions plus
// the chain of committed transfers between them, and its garbage collection.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/store_records.h"
#include "store/object_store.h"

namespace dcr {

// Publishes the safetensors file `model` as the anchor of `record.version`: the model first,
// then anchor.json (its presence marks the anchor complete).
Status PublishAnchor(ObjectStore& store, const std::string& model, const AnchorRecord& record);

// The complete anchors (those with anchor.json), ascending by version number.
Result<std::vector<AnchorRecord>> ListAnchors(ObjectStore& store);

struct GcReport {
  uint64_t anchors = 0, links = 0, transfers = 0, objects = 0;  // removed
  uint64_t keep_from = 0;  // the oldest version number whose chain onward is kept
};

// Removes what no receiver can need any more, given the head:
//  - anchors older than the newest `keep_anchors` complete ones;
//  - chain links into versions <= keep_from, where keep_from is the smallest of the oldest kept
//    anchor's number and the version of every registered receiver (a registration pins the
//    chain from its version on, however old its heartbeat: remove receivers/<R>.json to
//    release it);
//  - the objects of every transfer that is neither the open one, nor a kept link's, nor a
//    registered receiver's pending one (aborted transfers, and those of removed links).
// Order: anchor.json before the model (a reader never finds a record without its model), a
// chain link before its transfer's objects. `log` gets one line per removal class.
Result<GcReport> CollectGarbage(ObjectStore& store, const HeadRecord& head, uint64_t keep_anchors, FILE* log);

}  // namespace dcr
