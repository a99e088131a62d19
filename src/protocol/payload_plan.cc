#include "protocol/payload_plan.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "base/thread_pool.h"
#include "codec/diff.h"
#include "codec/location_coding.h"

namespace dcr {

namespace {

// Greedy cuts of the listed tensors' elements into payloads of at most `capacity` bytes, over
// their (element count, element width) given by `size`.
template <typename Size>
PayloadPlan GreedyPlan(const std::vector<uint32_t>& listed, uint64_t capacity, Size size) {
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

// The planner: as many payloads as GreedyPlan makes at `capacity`, of about equal size. Payloads
// are encoded and decoded in parallel, one per thread (ParallelForItems), so a plan of one full
// payload and a small one keeps a thread idle for most of a refit: a 39 MB model at 32 MiB was
// 33.5 MB and 5.3 MB. GreedyPlan at the mean size plus 8 bytes (the widest element) closes each
// payload but the last above the mean, so it makes no more payloads.
template <typename Size>
PayloadPlan Plan(const std::vector<uint32_t>& listed, uint64_t capacity, Size size) {
  PayloadPlan plan = GreedyPlan(listed, capacity, size);
  if (plan.size() < 2) return plan;
  uint64_t total = 0;
  for (const uint32_t t : listed) total += size(t).first * size(t).second;
  const uint64_t mean = (total + plan.size() - 1) / plan.size();
  return GreedyPlan(listed, std::min(capacity, mean + 8), size);
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
  uint64_t changed = 0;         // all its changes, those of `stolen` pieces too
  // A plain-only payload's segment: the last `stolen` pieces were diffed by the other thread,
  // and their changes and location codes stay where it put them (EncodePlannedPayload).
  uint32_t stolen = 0;
};

std::atomic<uint64_t> g_pieces_stolen{0};  // DiffPiecesStolenForTests
std::atomic<int> g_owner_pause_us{0};      // SetDiffPiecePauseForTests

// A piece of a segment diffed by the thread that does not own it (EncodePlannedPayload).
struct StolenPiece {
  ChangeSet changes;
  Digest128 digest;
  uint64_t plain_at_least = 0;     // for a payload that may be coded in context mode
  std::vector<uint8_t> locations;  // plain only
};

// The order in which the two diffing threads take a payload's segments (indices into `segments`,
// the calling thread from the front, the helper from the back): the first half of the plan (by
// bytes, up to the segment that reaches half) largest first, then the second half smallest
// first. Each thread so diffs its own half, its largest segments first, and they meet among the
// smallest segments, where the faster one takes some of the other's: taken in plan order, they
// met wherever the plan put them, and on the real pairs the helper waited ~18 us for the calling
// thread's last segment (a 147 Ki-element tensor, ~34 us of diff) after its own. Alternating
// with plan order in one process (1500 two-thread encodes each): the real 4.5-5.1 % pairs'
// context encodes in 0.986-0.989 of the time and plain ones in 0.966-0.970; the 0.4 and 1.4 %
// pairs' in 0.98-0.986 and 0.977-0.997.
void ClaimOrder(const std::vector<PlannedSegment>& segments, const std::vector<TensorRef>& base,
                std::vector<uint32_t>* order) {
  order->resize(segments.size());
  for (uint32_t i = 0; i < order->size(); ++i) (*order)[i] = i;
  auto bytes = [&](const PlannedSegment& seg) { return seg.count * DTypeWidth(base[seg.tensor].dtype()); };
  uint64_t total = 0, first_half = 0;
  for (const PlannedSegment& seg : segments) total += bytes(seg);
  size_t m = 0;
  while (m < segments.size() && 2 * first_half < total) first_half += bytes(segments[m++]);
  auto larger = [&](uint32_t a, uint32_t b) {
    return segments[a].count != segments[b].count ? segments[a].count > segments[b].count : a < b;
  };
  const auto middle = order->begin() + static_cast<std::ptrdiff_t>(m);
  std::sort(order->begin(), middle, larger);
  std::sort(middle, order->end(), [&](uint32_t a, uint32_t b) { return larger(b, a); });
}

// Whether a second thread pays for diffing the segments: enough elements, in more than one piece.
bool WorthTwoThreads(const std::vector<PlannedSegment>& segments, uint64_t piece_elements) {
  uint64_t total = 0;
  for (const PlannedSegment& seg : segments) total += seg.count;
  return total >= kConcurrentDiffMinElements && total > piece_elements;
}

}  // namespace

uint64_t DiffPiecesStolenForTests() { return g_pieces_stolen.load(std::memory_order_relaxed); }
void SetDiffPiecePauseForTests(int microseconds) { g_owner_pause_us.store(microseconds, std::memory_order_relaxed); }

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
  thread_local std::deque<TwoEndedClaims> piece_claims_storage;  // per segment (grown, never shrunk)
  thread_local std::vector<StolenPiece> stolen_storage;
  // This thread's, also when the helper uses them.
  std::vector<DiffedSegment>& diffed = diffed_storage;
  std::deque<TwoEndedClaims>& piece_claims = piece_claims_storage;
  std::vector<StolenPiece>& stolen = stolen_storage;
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
  // the front of ClaimOrder, the helper from the back, until they meet (TwoEndedClaims), and the
  // segment where they meet is shared by pieces (below). Each thread's changes so lie mostly at
  // one end of the payload, and Finish has the same thread walk the band parts and code the value
  // share at that end: each mostly reads what it wrote. That matters because the buffers
  // are reused payload after payload, and on a Zen 5 a store to a line another core has read
  // since costs ~9 ns (one it wrote, ~1.7; its own, ~0.4): with segments taken largest first by
  // either thread, two-thread encodes of the real 4.5 % pair took 1.07-1.09x as long in context
  // mode and 1.03-1.05x in plain mode (medians of 3000). Each thread also counts the band fit's
  // classes of the segments it diffed, into its own counts, which the builder adds up, and
  // bounds their plain code's size (AddChanges).
  // Pieces of the two-thread diff (below): whole blocks of the location code.
  const uint64_t piece_elements = std::max<uint64_t>(kDiffPieceElements, uint64_t{1} << encode.block_log2);
  if (threads < 2 || !WorthTwoThreads(segments, piece_elements)) {
    add_all();
  } else {
    diffed.resize(segments.size());
    TwoEndedClaims claims(static_cast<uint32_t>(segments.size()));
    thread_local std::vector<uint32_t> order_storage;  // reused, as the buffers above
    std::vector<uint32_t>& order = order_storage;
    ClaimOrder(segments, base, &order);
    FitCounts fit_counts[2];
    // Each thread also counts the values' symbols of the segments it diffed, into its own tally
    // (this thread's thread_locals, named here for the same reason as below).
    ValueTally* tallies = value_tallies;  // each thread clears its own first
    // Read here: in code the helper runs, `builder` would name the helper's own thread_local.
    const uint64_t fit_stride = plain_only ? 1 : builder.fit_stride();
    const bool weighs_plain = encode.context == EncodeOptions::Context::kWhenSmaller;
    // Each segment is diffed in pieces, which the thread that took the segment (its owner)
    // takes from the front, in order, into the segment's slot, until none is left. A thread left
    // without segments takes pieces from the back of the other's current one (into `stolen`,
    // last piece first): the threads end within about a piece of each other, not a segment,
    // and a payload of one segment is diffed by both.
    // Whoever diffs a piece also counts its values, bounds its plain code and, in a plain-only
    // payload, codes its locations: pieces are whole blocks of the location code, whose size
    // and bound are sums over blocks, so the pieces' add up to the whole segment's. A plain-only
    // payload's builder takes the stolen pieces where they are (AddCodedPieces); otherwise the
    // owner copies them after its own (the band walk reads a segment's positions as one array).
    // The band fit counts the sampled elements of segments with changes only, known once a
    // segment is done: the owner counts its own pieces then, and the thread that took pieces
    // counts them apart, and those counts are added where the segment has changes (pieces are
    // whole strides of the sampling, so the same elements are counted as from the whole
    // segment; else the owner counts the whole segment). The 16 Mi-element BF16 tensor at 4 %
    // change, one payload, two threads: before pieces, 4.7 ms (plain) and 6.9 (context), the
    // helper idle after one segment-sized claim; with them, 2.5-2.7 and 4.8-4.9.
    const bool population_by_piece = !plain_only && piece_elements % fit_stride == 0;
    FitCounts stolen_population;           // the thief's pieces' sampled elements
    std::atomic<int64_t> stolen_from{-1};  // the segment the thief took pieces of
    auto pieces_of = [&](size_t i) {
      return static_cast<uint32_t>((segments[i].count + piece_elements - 1) / piece_elements);
    };
    // Piece `piece` of `seg`'s bytes in tensor t (base or next).
    auto piece_bytes = [&](const TensorRef& t, const PlannedSegment& seg, uint32_t piece) {
      const uint64_t w = DTypeWidth(t.dtype()), first = uint64_t{piece} * piece_elements;
      return bytes_of(t, seg).subspan(first * w, std::min<uint64_t>(piece_elements, seg.count - first) * w);
    };
    uint32_t most_pieces = 0;
    while (piece_claims.size() < segments.size()) piece_claims.emplace_back(0);
    for (size_t i = 0; i < segments.size(); ++i) {
      piece_claims[i].Reset(pieces_of(i));
      most_pieces = std::max(most_pieces, pieces_of(i));
    }
    if (stolen.size() < most_pieces) stolen.resize(most_pieces);
    // The segment each thread is diffing as its owner, each in a cache line of its own: each
    // thread stores its own once per segment.
    struct alignas(64) Owned {
      std::atomic<int64_t> segment{-1};
    };
    Owned owned[2];
    std::atomic<uint32_t> stolen_done{0};      // pieces of `stolen` complete
    auto diff_some = [&](FitCounts* counts, ValueTally* tally, int me) {
      const bool from_back = me == 1;
      tally->Clear();
      // Only payloads that may be coded in context mode fit bands: a plain-only one would zero,
      // fold and add ~12 KiB of counts per thread for nothing.
      std::optional<FitCounter> fit_counter;
      if (!plain_only) fit_counter.emplace(fit_stride);
      // What the diff of `seg` hands each run of changes to: their digest, added to *sum, and
      // for the band fit their old bits' classes. Made once per segment (or stolen piece).
      auto on_chunk_of = [&](const PlannedSegment& seg, Digest128* sum) -> DiffChunkFn {
        DiffChunkFn digest = digest_runs(seg, sum);
        if (plain_only) return digest;
        return [digest = std::move(digest), dtype = base[seg.tensor].dtype(), &fit_counter](const DiffChunk& c) {
          digest(c);
          fit_counter->CountChangedOldBits(dtype, c.old_bits);
        };
      };
      // Piece `piece` of `seg`, appended to *changes (its runs handed to on_chunk, its plain
      // code's bound added to *plain_bound, its location code appended to *locations in a
      // plain-only payload).
      auto do_piece = [&](const PlannedSegment& seg, uint32_t piece, ChangeSet* changes, const DiffChunkFn& on_chunk,
                          uint64_t* plain_bound, std::vector<uint8_t>* locations) {
        const uint64_t w = DTypeWidth(base[seg.tensor].dtype()), first = uint64_t{piece} * piece_elements;
        const std::span<const uint8_t> old_bytes = piece_bytes(base[seg.tensor], seg, piece);
        const uint64_t n = old_bytes.size() / w;
        const size_t before = changes->size();
        DiffElementsAppend(old_bytes, piece_bytes(next[seg.tensor], seg, piece), static_cast<uint32_t>(w), kind, first,
                           changes, on_chunk, encode.value_form());
        const std::span<const uint32_t> found = std::span<const uint32_t>(changes->positions).subspan(before);
        if (!found.empty()) tally->Add(std::span<const uint8_t>(changes->values).subspan(before * w), static_cast<uint32_t>(w));
        if (plain_only) EncodeLocationsFrom(found, first, n, encode.block_log2, locations);
        if (weighs_plain) *plain_bound += LocationCodeBytesLowerBoundFrom(found, first, n, encode.block_log2);
      };
      for (std::optional<uint32_t> taken; (taken = claims.Take(from_back));) {
        const size_t i = order[*taken];
        const PlannedSegment& seg = segments[i];
        const SegmentSpec spec = spec_of(seg);
        DiffedSegment& d = diffed[i];
        d.digest = Digest128{};
        d.plain_at_least = 0;
        d.changes.Clear();
        d.changes.width = DTypeWidth(spec.dtype);  // also where the other thread takes every piece
        d.changes.form = encode.value_form();
        d.locations.clear();
        owned[me].segment.store(static_cast<int64_t>(i), std::memory_order_release);
        uint32_t mine = 0;
        const DiffChunkFn on_chunk = on_chunk_of(seg, &d.digest);
        // A segment of several pieces has its pieces' sampled elements counted right after
        // each piece's diff, while they are in cache, apart until the segment is known to have
        // changes. (Counted after the whole segment, a large one's came from memory: the
        // two-thread context encode of a 16 Mi-element BF16 tensor ended its diff 35-150 us
        // later, of ~4.2 ms.)
        std::optional<FitCounter> piece_population;
        if (population_by_piece && pieces_of(i) > 1) piece_population.emplace(fit_stride);
        for (std::optional<uint32_t> piece; (piece = piece_claims[i].Take(false)); ++mine) {
          do_piece(seg, *piece, &d.changes, on_chunk, &d.plain_at_least, &d.locations);
          if (piece_population)
            piece_population->CountPopulation({spec.dtype, piece_bytes(base[seg.tensor], seg, *piece)});
          if (const int pause = g_owner_pause_us.load(std::memory_order_relaxed); pause > 0)
            std::this_thread::sleep_for(std::chrono::microseconds(pause));
        }
        owned[me].segment.store(-1, std::memory_order_relaxed);
        d.stolen = pieces_of(i) - mine;
        d.changed = d.changes.size();
        if (d.stolen > 0) {
          YieldUntil([&] { return stolen_done.load(std::memory_order_acquire) == d.stolen; });
          size_t more = 0;
          for (uint32_t k = 0; k < d.stolen; ++k) {
            d.digest += stolen[k].digest, d.plain_at_least += stolen[k].plain_at_least;
            more += stolen[k].changes.size();
          }
          d.changed += more;
          // A plain-only payload's builder takes the stolen pieces' values and location codes
          // where they are (AddCodedPieces). Otherwise the band walk needs the segment's
          // positions in one array: the stolen ones are appended, the last piece stolen first.
          // (Copied with memcpy: the vectors' allocator constructs element by element, and
          // insert took ~2 ns per change.)
          if (!plain_only) {
            const uint32_t w = d.changes.width;
            size_t at = d.changes.size();
            d.changes.positions.resize(d.changed);
            d.changes.values.resize(d.changed * w);
            for (uint32_t k = d.stolen; k-- > 0;) {
              const ChangeSet& c = stolen[k].changes;
              if (c.size() == 0) continue;
              std::memcpy(d.changes.positions.data() + at, c.positions.data(), c.size() * sizeof(uint32_t));
              std::memcpy(d.changes.values.data() + at * w, c.values.data(), c.size() * w);
              at += c.size();
            }
          }
        }
        if (d.changed == 0) continue;
        if (piece_population) {
          piece_population->AddTo(counts);
        } else if (!plain_only) {
          const uint64_t counted = population_by_piece ? std::min<uint64_t>(seg.count, mine * piece_elements) : seg.count;
          const uint64_t w = DTypeWidth(spec.dtype);
          fit_counter->CountPopulation({spec.dtype, bytes_of(base[seg.tensor], seg).first(counted * w)});
        }
      }
      // No segment left: pieces of the other thread's, from the back.
      const int64_t j = owned[1 - me].segment.load(std::memory_order_acquire);
      if (j >= 0) {
        const PlannedSegment& seg = segments[static_cast<size_t>(j)];
        std::optional<FitCounter> population;  // the stolen pieces' sampled elements
        for (uint32_t k = 0; const std::optional<uint32_t> piece = piece_claims[static_cast<size_t>(j)].Take(true); ++k) {
          StolenPiece& sp = stolen[k];
          sp.digest = Digest128{};
          sp.plain_at_least = 0;
          sp.changes.Clear();
          sp.locations.clear();
          do_piece(seg, *piece, &sp.changes, on_chunk_of(seg, &sp.digest), &sp.plain_at_least, &sp.locations);
          if (population_by_piece) {
            if (!population) population.emplace(fit_stride), stolen_from.store(j, std::memory_order_relaxed);
            population->CountPopulation({base[seg.tensor].dtype(), piece_bytes(base[seg.tensor], seg, *piece)});
          }
          stolen_done.fetch_add(1, std::memory_order_release);
          g_pieces_stolen.fetch_add(1, std::memory_order_relaxed);
        }
        if (population) population->AddTo(&stolen_population);
      }
      if (fit_counter) fit_counter->AddTo(counts);
      return Status::Ok();
    };
    (void)RunConcurrently([&] { return diff_some(&fit_counts[1], &tallies[1], 1); },
                          [&] { return diff_some(&fit_counts[0], &tallies[0], 0); });
    if (!plain_only) builder.AddFitCounts(fit_counts[0]), builder.AddFitCounts(fit_counts[1]);
    if (const int64_t j = stolen_from.load(std::memory_order_relaxed); j >= 0 && diffed[static_cast<size_t>(j)].changed > 0)
      builder.AddFitCounts(stolen_population);
    builder.AddValueTally(&tallies[0]), builder.AddValueTally(&tallies[1]);
    std::vector<ValueRun> runs;
    std::vector<std::span<const uint8_t>> location_pieces;
    for (size_t i = 0; i < segments.size(); ++i) {
      const PlannedSegment& seg = segments[i];
      const DiffedSegment& d = diffed[i];
      if (d.changed == 0) continue;
      add_digest(seg.tensor, d.digest);
      // `diffed` and `stolen` outlive Finish below: the builder reads the changes where they are.
      if (d.stolen == 0 || !plain_only) {
        builder.AddChanges(spec_of(seg), d.changes, bytes_of(base[seg.tensor], seg), d.locations,
                           PayloadBuilder::Changes::kKeptUntilFinish,
                           weighs_plain ? std::optional<uint64_t>(d.plain_at_least) : std::nullopt);
        continue;
      }
      runs.clear(), location_pieces.assign(1, d.locations);
      if (d.changes.size() > 0) runs.push_back({d.changes.width, d.changes.size(), d.changes.values});
      for (uint32_t k = d.stolen; k-- > 0;) {  // the last piece was stolen first
        const StolenPiece& sp = stolen[k];
        if (sp.changes.size() > 0) runs.push_back({sp.changes.width, sp.changes.size(), sp.changes.values});
        location_pieces.push_back(sp.locations);
      }
      builder.AddCodedPieces(spec_of(seg), d.changed, runs, location_pieces);
    }
  }
  out->changed = builder.changed();
  if (builder.segments() > 0) builder.Finish(identity, &out->bytes, threads);
}

}  // namespace dcr
