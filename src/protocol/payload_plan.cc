#include "protocol/payload_plan.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <utility>

#include "base/thread_pool.h"
#include "codec/diff.h"
#include "codec/location_coding.h"

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

namespace {

// A segment diffed before the builder takes it (by either of two threads), its digest delta
// and, for a plain-only payload, its location code.
struct DiffedSegment {
  ChangeSet changes;
  Digest128 digest;
  std::vector<uint8_t> locations;
  uint64_t plain_at_least = 0;  // for a payload that may be coded in context mode
};

// Whether a second thread pays for diffing the segments: two or more, with enough elements.
bool WorthTwoThreads(const std::vector<PlannedSegment>& segments) {
  uint64_t total = 0;
  for (const PlannedSegment& seg : segments) total += seg.count;
  return segments.size() >= 2 && total >= kConcurrentDiffMinElements;
}

}  // namespace

void EncodePlannedPayload(const std::vector<PlannedSegment>& segments, const std::vector<TensorRef>& base,
                          const std::vector<TensorRef>& next, ValueKind kind, const EncodeOptions& encode,
                          const PayloadIdentity& identity, EncodedPayload* out, int threads) {
  out->bytes.clear();
  out->changed = 0;
  out->digest_deltas.clear();
  // One builder per thread, reused: its buffers (a few bytes per change) stay mapped, where fresh
  // ones would be page-faulted in for every payload. The same for segments diffed by two threads.
  thread_local PayloadBuilder builder;
  thread_local std::vector<DiffedSegment> diffed_storage;
  thread_local ValueTally value_tallies[2];
  std::vector<DiffedSegment>& diffed = diffed_storage;  // this thread's, also when the helper uses it
  builder.Reset();  // a payload before on this thread with nothing changed was not finished
  builder.set_options(encode);
  const bool plain_only = encode.context == EncodeOptions::Context::kNever;
  if (!plain_only) {
    // The band fit counts each segment as it is diffed (PayloadBuilder::CountFitAhead).
    uint64_t planned = 0;
    for (const PlannedSegment& seg : segments) planned += seg.count;
    builder.CountFitAhead(planned);
  }
  auto spec_of = [&](const PlannedSegment& seg) {
    DCR_CHECK(seg.tensor < base.size() && seg.tensor < next.size());
    const TensorRef& b = base[seg.tensor];
    const TensorRef& x = next[seg.tensor];
    DCR_CHECK(b.info != nullptr && x.info != nullptr && b.dtype() == x.dtype() &&
              b.num_elements() == x.num_elements() && seg.count <= b.num_elements() &&
              seg.start <= b.num_elements() - seg.count);
    return SegmentSpec{seg.tensor, b.dtype(), kind, seg.start, seg.count};
  };
  auto bytes_of = [&](const TensorRef& t, const PlannedSegment& seg) {
    const uint64_t w = DTypeWidth(t.dtype());
    return t.bytes.subspan(seg.start * w, seg.count * w);
  };
  // Target digest = base digest + the changes: O(changed elements), taken run by run from the
  // old bits and values the diff hands over (*sum accumulates the segment's).
  auto digest_runs = [&](const PlannedSegment& seg, Digest128* sum) -> DiffChunkFn {
    const TensorRef& b = base[seg.tensor];
    return [sum, key = TensorKey(b.name()), start = seg.start, is_xor = kind == ValueKind::kXor,
            w = DTypeWidth(b.dtype())](const DiffChunk& c) {
      *sum += DigestChanges(key, start, c.positions, c.old_bits.data(), c.values.data(), is_xor, w);
    };
  };
  auto add_digest = [&](uint32_t tensor, const Digest128& d) {
    // Segments of one tensor are adjacent in a plan: merge them into one entry per tensor.
    if (!out->digest_deltas.empty() && out->digest_deltas.back().first == tensor)
      out->digest_deltas.back().second += d;
    else
      out->digest_deltas.emplace_back(tensor, d);
  };
  auto add_all = [&] {
    for (size_t i = 0; i < segments.size(); ++i) {
      const PlannedSegment& seg = segments[i];
      const SegmentSpec spec = spec_of(seg);
      Digest128 d;
      if (builder.AddDiff(spec, bytes_of(base[seg.tensor], seg), bytes_of(next[seg.tensor], seg), digest_runs(seg, &d)) == 0)
        continue;
      add_digest(seg.tensor, d);
    }
  };
  // With a second thread, both threads take segments and diff, digest and (for a plain-only
  // payload) code the locations of each into its own slot; the builder then adds them in plan
  // order, so the bytes are the same as from one thread. The calling thread takes segments from
  // the front of the plan, the helper from the back, until they meet (TwoEndedClaims), which
  // keeps their shares within about one segment of each other. Each thread's changes so lie at
  // one end of the payload, and Finish has the same thread walk the band parts and code the
  // value share at that end: each mostly reads what it wrote. That matters because the buffers
  // are reused payload after payload, and on a Zen 5 a store to a line another core has read
  // since costs ~9 ns (one it wrote, ~1.7; its own, ~0.4): with segments taken largest first by
  // either thread, two-thread encodes of the real 4.5 % pair took 1.07-1.09x as long in context
  // mode and 1.03-1.05x in plain mode (medians of 3000). Each thread also counts the band fit's
  // classes of the segments it diffed, into its own counts, which the builder adds up, and
  // bounds their plain code's size (AddChanges).
  if (threads < 2 || !WorthTwoThreads(segments)) {
    add_all();
  } else {
    diffed.resize(segments.size());
    TwoEndedClaims claims(static_cast<uint32_t>(segments.size()));
    FitCounts fit_counts[2];
    // Each thread also counts the values' symbols of the segments it diffed, into its own tally
    // (this thread's thread_locals, named here for the same reason as below).
    ValueTally* tallies = value_tallies;  // each thread clears its own first
    // Read here: in code the helper runs, `builder` would name the helper's own thread_local.
    const uint64_t fit_stride = plain_only ? 1 : builder.fit_stride();
    const bool weighs_plain = encode.context == EncodeOptions::Context::kWhenSmaller;
    auto diff_some = [&](FitCounts* counts, ValueTally* tally, bool from_back) {
      tally->Clear();
      // Only payloads that may be coded in context mode fit bands: a plain-only one would zero,
      // fold and add ~12 KiB of counts per thread for nothing.
      std::optional<FitCounter> fit_counter;
      if (!plain_only) fit_counter.emplace(fit_stride);
      for (std::optional<uint32_t> taken; (taken = claims.Take(from_back));) {
        const size_t i = *taken;
        const PlannedSegment& seg = segments[i];
        const SegmentSpec spec = spec_of(seg);
        DiffedSegment& d = diffed[i];
        d.digest = Digest128{};
        // A plain-only payload codes each segment's locations on its own: the thread that
        // diffed the segment codes them, and the builder appends them as they are. Otherwise
        // the thread counts the segment for the band fit: each run's changes from the old bits
        // the diff hands over (in cache), then the segment's sampled elements.
        DiffChunkFn digest = digest_runs(seg, &d.digest);
        DiffElements(bytes_of(base[seg.tensor], seg), bytes_of(next[seg.tensor], seg), DTypeWidth(spec.dtype), kind,
                     &d.changes, plain_only ? digest : [&](const DiffChunk& c) {
                       digest(c);
                       fit_counter->CountChangedOldBits(spec.dtype, c.old_bits);
                     });
        d.locations.clear();
        if (d.changes.size() == 0) continue;
        tally->Add(d.changes.values, d.changes.width);
        if (plain_only)
          EncodeLocations(d.changes.positions, seg.count, encode.block_log2, &d.locations);
        else
          fit_counter->CountPopulation({spec.dtype, bytes_of(base[seg.tensor], seg)});
        if (weighs_plain) d.plain_at_least = LocationCodeBytesLowerBound(d.changes.positions, seg.count, encode.block_log2);
      }
      if (fit_counter) fit_counter->AddTo(counts);
      return Status::Ok();
    };
    (void)RunConcurrently([&] { return diff_some(&fit_counts[1], &tallies[1], /*from_back=*/true); },
                          [&] { return diff_some(&fit_counts[0], &tallies[0], /*from_back=*/false); });
    if (!plain_only) builder.AddFitCounts(fit_counts[0]), builder.AddFitCounts(fit_counts[1]);
    builder.AddValueTally(&tallies[0]), builder.AddValueTally(&tallies[1]);
    for (size_t i = 0; i < segments.size(); ++i) {
      const PlannedSegment& seg = segments[i];
      const DiffedSegment& d = diffed[i];
      if (d.changes.size() == 0) continue;
      // `diffed` outlives Finish below: the builder reads the changes where they are.
      builder.AddChanges(spec_of(seg), d.changes, bytes_of(base[seg.tensor], seg), d.locations,
                         PayloadBuilder::Changes::kKeptUntilFinish,
                         weighs_plain ? std::optional<uint64_t>(d.plain_at_least) : std::nullopt);
      add_digest(seg.tensor, d.digest);
    }
  }
  out->changed = builder.changed();
  if (builder.segments() > 0) builder.Finish(identity, &out->bytes, threads);
}

}  // namespace dcr
