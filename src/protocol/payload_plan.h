// The payload planner and the per-payload encoder shared by the offline diff (delta_diff.h) and
// the live producer. A plan cuts a set of tensors, in catalog order, into payloads of bounded
// dense size (small tensors share one, large ones are split); each planned payload is then diffed
// and encoded on its own, so payloads can be encoded in parallel and emitted in plan order.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "protocol/state_digest.h"

namespace dcr {

// A contiguous element range [start, start + count) of the tensor at catalog index `tensor`.
struct PlannedSegment {
  uint32_t tensor;  // catalog index
  uint64_t start, count;
  bool operator==(const PlannedSegment&) const = default;
};
// plan[i] is the i-th payload's segments, ascending by (tensor, start).
using PayloadPlan = std::vector<std::vector<PlannedSegment>>;

// Covers every element of the listed tensors (`owned`: catalog indices into `tensors`, strictly
// ascending) exactly once, in (tensor, start) order, with payloads of at most `capacity` dense
// bytes (`capacity` >= 8, the widest element), balanced: as many payloads as cutting greedily at
// `capacity` makes (tensors taken in order, a payload closed when the next element no longer
// fits), but cut greedily at their mean size plus 8 bytes (at most `capacity`), so that every
// payload but the last holds more than the mean (or than capacity - 8, where that is less) and,
// where the mean is at most capacity - 8, the last no more than the mean. No segment exceeds
// kMaxSegmentElements. Empty tensors get no segment; a plan may be empty. Deterministic: it
// depends only on the listed tensors' dtypes and element counts.
PayloadPlan PlanPayloads(const std::vector<TensorRef>& tensors, const std::vector<uint32_t>& owned,
                         uint64_t capacity);

// Every tensor owned: 0, 1, …, tensors.size() - 1.
PayloadPlan PlanPayloads(const std::vector<TensorRef>& tensors, uint64_t capacity);
// The same plan from a catalog alone (what a checkpoint with this catalog gets), for callers that
// hold the model as shards (layout diff).
PayloadPlan PlanPayloads(const Catalog& catalog, uint64_t capacity);

struct EncodedPayload {
  std::vector<uint8_t> bytes;  // the encoded payload; empty when nothing in it changed
  uint64_t changed = 0;        // changed elements
  // Per touched tensor (catalog index, ascending): the state-digest change h(new) - h(old) summed
  // over its changed elements in this payload. Target digest = base digest + these deltas.
  std::vector<std::pair<uint32_t, Digest128>> digest_deltas;
};

// Diffs and encodes one planned payload. `base` and `next` are indexed by catalog index (the
// same catalog); only the entries the segments name are read, and they must hold tensors of
// equal dtype and element count (checked: a violation is a bug in the caller). `out` is reset
// first (its buffers are reused). With nothing changed, `out->bytes` stays empty and nothing is
// encoded. The bytes depend only on the inputs (not on threads or scheduling). With threads >= 2
// and at least kConcurrentDiffMinElements elements (more than one piece, kDiffPieceElements), a
// second thread diffs segments too (the calling thread takes them from the front of the plan,
// the helper from the back, each cut into pieces the other may share at the end); and codes the
// value section (PayloadBuilder::Finish).
void EncodePlannedPayload(const std::vector<PlannedSegment>& segments, const std::vector<TensorRef>& base,
                          const std::vector<TensorRef>& next, ValueKind kind, const EncodeOptions& encode,
                          const PayloadIdentity& identity, EncodedPayload* out, int threads = 1);
// Below this many elements a second thread costs more to start than it saves.
inline constexpr uint64_t kConcurrentDiffMinElements = uint64_t{1} << 20;
// Two threads diff a payload's segments in pieces of this many elements (the last of a segment
// shorter): a thread with no segment left takes pieces of the other's. Each piece costs a few
// calls and, where taken, a hand-over: with 32 Ki, two-thread encodes of the real 0.4 % pair
// (segments of up to 147 Ki elements) took ~1.05x as long (plain) as before pieces, and the
// 4.5 % pair gained nothing from its diffs ending closer together; with 256 Ki, a 16 Mi-element
// segment is shared as well (64 pieces) and the real pairs' segments are whole pieces.
inline constexpr uint64_t kDiffPieceElements = uint64_t{1} << 18;
// For tests: pieces a thread has taken from the other's segment so far (all payloads); and a
// pause after each piece a segment's owner diffs (0: none), which leaves the other thread time
// to take pieces even on a loaded machine.
uint64_t DiffPiecesStolenForTests();
void SetDiffPiecePauseForTests(int microseconds);

}  // namespace dcr
