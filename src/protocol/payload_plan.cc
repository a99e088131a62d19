#include "protocol/payload_plan.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace dcr {

namespace {

// The planner itself, over the listed tensors' (element count, element width) given by `size`.
template <typename Size>
PayloadPlan Plan(const std::vector<uint32_t>& listed, uint64_t capacity, Size size) {
  DCR_CHECK(capacity >= 8);
  PayloadPlan plan(1);
  uint64_t fill = 0;
  for (size_t i = 0; i < listed.size(); ++i) {
    const uint32_t t = listed[i];
    DCR_CHECK(i == 0 || listed[i - 1] < t);
    const auto [n, w] = size(t);
    for (uint64_t s = 0; s < n;) {
      if (capacity - fill < w) {
        plan.emplace_back();
        fill = 0;
      }
      const uint64_t take = std::min({n - s, (capacity - fill) / w, kMaxSegmentElements});
      plan.back().push_back({t, s, take});
      fill += take * w;
      s += take;
    }
  }
  if (plan.back().empty()) plan.pop_back();
  return plan;
}

std::vector<uint32_t> AllTensors(size_t n) {
  std::vector<uint32_t> all(n);
  for (uint32_t t = 0; t < all.size(); ++t) all[t] = t;
  return all;
}

}  // namespace

PayloadPlan PlanPayloads(const std::vector<TensorRef>& tensors, const std::vector<uint32_t>& owned, uint64_t capacity) {
  return Plan(owned, capacity, [&](uint32_t t) {
    DCR_CHECK(t < tensors.size());
    return std::pair<uint64_t, uint64_t>(tensors[t].num_elements(), DTypeWidth(tensors[t].dtype()));
  });
}

PayloadPlan PlanPayloads(const std::vector<TensorRef>& tensors, uint64_t capacity) {
  return PlanPayloads(tensors, AllTensors(tensors.size()), capacity);
}

PayloadPlan PlanPayloads(const Catalog& catalog, uint64_t capacity) {
  return Plan(AllTensors(catalog.size()), capacity, [&](uint32_t t) {
    return std::pair<uint64_t, uint64_t>(*ShapeElements(catalog[t].shape), DTypeWidth(catalog[t].dtype));
  });
}

void EncodePlannedPayload(const std::vector<PlannedSegment>& segments, const std::vector<TensorRef>& base,
                          const std::vector<TensorRef>& next, ValueKind kind, const EncodeOptions& encode,
                          const PayloadIdentity& identity, EncodedPayload* out) {
  out->bytes.clear();
  out->changed = 0;
  out->digest_deltas.clear();
  // One builder per thread, reused: its buffers (a few bytes per change) stay mapped, where fresh
  // ones would be page-faulted in for every payload.
  thread_local PayloadBuilder builder;
  builder.set_options(encode);
  for (const PlannedSegment& seg : segments) {
    DCR_CHECK(seg.tensor < base.size() && seg.tensor < next.size());
    const TensorRef& b = base[seg.tensor];
    const TensorRef& x = next[seg.tensor];
    DCR_CHECK(b.info != nullptr && x.info != nullptr && b.dtype() == x.dtype() &&
              b.num_elements() == x.num_elements() && seg.count <= b.num_elements() &&
              seg.start <= b.num_elements() - seg.count);
    const uint32_t w = DTypeWidth(b.dtype());
    const SegmentSpec spec{seg.tensor, b.dtype(), kind, seg.start, seg.count};
    if (builder.AddDiff(spec, b.bytes.subspan(seg.start * w, seg.count * w),
                        x.bytes.subspan(seg.start * w, seg.count * w)) == 0)
      continue;
    // Target digest = base digest + the changes: O(changed elements).
    const Digest128 d = DigestChanges(TensorKey(b.name()), seg.start, builder.last_changes().positions,
                                      b.bytes.data() + seg.start * w, x.bytes.data() + seg.start * w, w);
    // Segments of one tensor are adjacent in a plan: merge them into one entry per tensor.
    if (!out->digest_deltas.empty() && out->digest_deltas.back().first == seg.tensor)
      out->digest_deltas.back().second += d;
    else
      out->digest_deltas.emplace_back(seg.tensor, d);
  }
  out->changed = builder.changed();
  if (builder.segments() > 0) builder.Finish(identity, &out->bytes);
}

}  // namespace dcr
