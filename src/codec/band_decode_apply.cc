// DecodeApplyBandedLocations (band_context.h): the banded decoder that applies each tile's
// changes as its walk places them, on one thread or on two.
#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "base/reused_buffer.h"
#include "base/thread_pool.h"
#include "codec/apply_changes.h"
#include "codec/band_context.h"
#include "codec/band_parts.h"
#include "codec/second_part_walker.h"

namespace dcr {
namespace {

std::atomic<uint64_t> g_tails_handed_off{0};

// Applies the changes in segment s's slots [from, to) to their elements with `op`: apply.op(),
// or apply.undo() to take applied ones back.
void ApplySegmentSlots(std::span<const ContextSegment> segs, std::span<const std::span<uint32_t>> positions,
                       const WalkApply& apply, ApplyOp op, size_t s, uint64_t from, uint64_t to) {
  if (from < to)
    ApplyChangeRun(apply.to[s], DTypeWidth(segs[s].dtype), op, false, apply.values[s], positions[s].data(), from, to);
}

// The same for applied payload-order slots [from, to), across segments.
void UndoPayloadSlots(const PartDecoder& decoder, std::span<const ContextSegment> segs,
                      std::span<const std::span<uint32_t>> positions, const WalkApply& apply, uint64_t from, uint64_t to) {
  for (size_t s = 0; s < segs.size() && from < to; ++s) {
    const uint64_t first = decoder.SegmentFirst(s), end = decoder.SegmentFirst(s + 1);
    if (end <= from || first >= to) continue;
    ApplySegmentSlots(segs, positions, apply, apply.undo(), s, std::max(from, first) - first, std::min(to, end) - first);
  }
}

// One thread: the value section, then part by part its ordinals and its walk, applying. On an
// error, every change applied so far is undone (WalkApply::undo: the same values taken back); the
// error is the first in part order, ordinals before walk, as DecodeBandedLocations reports it.
// Each part's ordinals are decoded right before its walk into one reused buffer (OrdinalRoom):
// decoding every part's first and then walking them, the seven 31.6 MB payloads of a generated
// step at 4.2 % change (eight parts of ~84 K changes each) decoded+applied in 1.16-1.22x the time
// on one thread (the two orders alternated in one process), each payload's 5.4 MB of ordinals
// written out to memory and read back.
Status DecodeApplyOnOneThread(const PartDecoder& decoder, std::span<const ContextSegment> segs,
                              std::span<const std::span<uint32_t>> positions, const WalkApply& apply) {
  const size_t parts = decoder.parts();
  std::array<std::vector<uint64_t>, kMaxBandParts> applied;  // [p]: Walk's *applied
  for (size_t p = 0; p < parts; ++p) {
    PartOrdinals ord{};
    Status status = decoder.Ordinals(p, decoder.OrdinalRoom(p), &ord);
    if (status.ok()) status = decoder.Walk(p, ord, &apply, &applied[p]);
    if (status.ok()) continue;
    for (size_t q = 0; q <= p; ++q) {
      if (applied[q].empty()) continue;  // part p's ordinals failed: nothing of it was applied
      for (size_t s = 0; s < segs.size(); ++s) {
        const uint64_t from = decoder.FirstSlot(q, s);
        ApplySegmentSlots(segs, positions, apply, apply.undo(), s, from, from + applied[q][s]);
      }
    }
    return status;
  }
  return Status::Ok();
}

// The ordinals of one part's last bands, decoded by the thread that does not walk the part, to
// even out the threads' work where their parts hold unequal changes. The parts split the
// elements evenly, not the changes: the real 4.8 % pair's two hold 37,088 and 32,584, and
// thread 0's walk ended ~9 us after thread 1's. Same binary, alternating: the 4.5-5.1 % pairs'
// two-thread decode+apply 1.5-3 % faster with the hand-off, the 1.4 % ones 0-3 %.
struct OrdinalHandOff {
  static constexpr size_t kNone = ~size_t{0};
  size_t part = kNone;  // the part whose bands [from_band, k) the other thread may decode
  size_t from_band = 0;
  uint64_t head = 0, tail = 0;  // the part's changes in bands [0, from_band) and [from_band, k)
  ClaimOnce claim;              // whoever claims it decodes the tail: the walker only if first
  std::atomic<bool> done{false};
  bool ok = false;              // GetSplitRiceRuns of the tail
  const uint32_t* out = nullptr;  // the tail's ordinals
};

// Moving the ordinals of x of the heavier thread's changes (0.7 ns each) to the other thread
// balances threads whose parts differ by d changes where 2 x 0.7 = d c, c the time a change
// costs its thread (ordinals, walk, apply). On the real 4.8 % pair d = 4.5 K changes cost 9.3
// us (c ~ 2 ns: the walk's per-element work does not grow with changes), so x ~ 1.5 d; with x
// = 3 d the other thread ended 6 us after.
constexpr uint64_t kHandOffNum = 3, kHandOffDen = 2;
// Below this imbalance (in changes, relative to all of them) no hand-off: it costs a scan of the
// quotients up to the tail and the tail's ordinals read from the other core's cache.
constexpr uint64_t kHandOffMinImbalanceDivisor = 32;

// Plans the hand-off for threads taking parts [0, half) and [half, parts): the heavier
// thread's first part, split at the band that brings the tail nearest to the imbalance's x.
void PlanOrdinalHandOff(const PartDecoder& decoder, size_t half, uint64_t total, OrdinalHandOff* plan) {
  const size_t parts = decoder.parts(), k = decoder.bands();
  if (!decoder.SplitsOrdinals() || parts < 2 || k < 2) return;
  const uint64_t load0 = decoder.FirstChange(half), load1 = total - load0;
  const uint64_t imbalance = load0 > load1 ? load0 - load1 : load1 - load0;
  if (imbalance == 0 || imbalance < total / kHandOffMinImbalanceDivisor) return;
  const size_t q = load0 >= load1 ? 0 : half;
  const uint64_t want = imbalance * kHandOffNum / kHandOffDen;
  auto miss = [want](uint64_t tail) { return tail > want ? tail - want : want - tail; };
  uint64_t tail = 0, best_tail = 0;
  size_t best = 0;  // 0: none; the tail keeps band 0 with its walker
  for (size_t b = k - 1; b >= 1; --b) {  // tails [b, k), growing
    tail += decoder.BandChanges(q, b);
    if (tail > 0 && (best == 0 || miss(tail) < miss(best_tail))) best = b, best_tail = tail;
  }
  if (best == 0) return;
  plan->part = q;
  plan->from_band = best;
  plan->head = decoder.FirstChange(q + 1) - decoder.FirstChange(q) - best_tail;
  plan->tail = best_tail;
}

// Two threads, one hand-off: thread t decodes value share t (with its own decoder), then (if
// planned, OrdinalHandOff) the other thread's tail of ordinals, then its half of the parts
// (thread 0 the first half, rounded up), each part's ordinals then its walk,
// applying each tile's changes whose values are decoded: its own share's, and the other
// share's too if that was done when the part's walk began. A part's remaining changes are
// applied after its walk by thread 1 (once share 0 is done: thread 0 decodes it first thing),
// and by thread 0 only if share 1 is done by then, else once both threads have finished: thread
// 0 never waits for thread 1, which may be running on thread 0 itself after it (a helper that
// came too late). Errors are those of one thread (the value section's first, then the first
// failing part's); on any error every change applied is undone. Against decoding on two
// threads and then applying on two, this saves the apply's second pass over the changes and
// one hand-off (the 4.5 % real pair, one payload: 236 against 267 us, medians 245 against 288).
Status DecodeApplyOnTwoThreads(const PartDecoder& decoder, std::span<const ContextSegment> segs,
                               std::span<const std::span<uint32_t>> positions, const BandedValueSection& values,
                               const WalkApply& apply) {
  const size_t parts = decoder.parts(), nseg = segs.size();
  const size_t half = (parts + 1) / 2;  // thread 0: parts [0, half), thread 1: [half, parts)
  const uint64_t total = decoder.SegmentFirst(nseg);
  auto part_changes = [&](size_t p) {
    return std::pair{decoder.FirstChange(p), p + 1 < parts ? decoder.FirstChange(p + 1) : total};
  };
  struct Part {
    Status status;           // of its ordinals, else of its walk
    bool walked = false;     // walked applying, within slot_lo/slot_hi
    bool applied_all = false;
    std::vector<uint64_t> filled, slot_lo, slot_hi;  // Walk's *applied, and the bounds it applied within
  };
  std::array<Part, kMaxBandParts> part;
  OrdinalHandOff handoff;
  PlanOrdinalHandOff(decoder, half, total, &handoff);
  // The hand-off's tail into `out` (room for it and the slack), once.
  auto decode_tail = [&](uint32_t* out) {
    handoff.ok = decoder.OrdinalBands(handoff.part, handoff.from_band, decoder.bands(), out);
    handoff.out = out;
    handoff.done.store(true, std::memory_order_release);
  };
  // Part p's ordinals, into this thread's room but for a tail another thread decoded.
  auto ordinals = [&](size_t p, PartOrdinals* ord) -> Status {
    uint32_t* room = decoder.OrdinalRoom(p);
    if (p != handoff.part) return decoder.Ordinals(p, room, ord);
    const bool head_ok = decoder.OrdinalBands(p, 0, handoff.from_band, room);
    if (handoff.claim.Claim())
      decode_tail(room + handoff.head);
    else
      YieldUntil([&] { return handoff.done.load(std::memory_order_acquire); });
    if (!head_ok || !handoff.ok) return decoder.Ordinals(p, room, ord);  // fails: the error, as one thread reports it
    const uint32_t* o = room;
    for (size_t b = 0; b < kMaxContextBands; o += decoder.BandChanges(p, b++)) {
      if (b == handoff.from_band) o = handoff.out;
      (*ord)[b] = o;
    }
    return Status::Ok();
  };
  std::array<std::atomic<bool>, 2> share_done{};
  std::array<std::pair<uint64_t, uint64_t>, 2> share{};  // payload-order values of each share
  const std::thread::id caller = std::this_thread::get_id();
  auto apply_slots = [&](size_t s, uint64_t from, uint64_t to) {
    ApplySegmentSlots(segs, positions, apply, apply.op(), s, from, to);
  };
  // Applies what part p's walk did not: its changes outside its slot bounds, segment by segment.
  auto apply_rest = [&](size_t p) {
    const auto [c0, c1] = part_changes(p);
    for (size_t s = 0; s < nseg; ++s) {
      const uint64_t first = decoder.SegmentFirst(s), end = decoder.SegmentFirst(s + 1);
      if (end <= c0 || first >= c1) continue;
      const uint64_t from = std::max(c0, first) - first, to = std::min(c1, end) - first;  // the part's slots
      apply_slots(s, from, std::min(to, part[p].slot_lo[s]));
      apply_slots(s, std::max(from, part[p].slot_hi[s]), to);
    }
    part[p].applied_all = true;
  };
  auto run = [&](int t) {
    values.decode_share(t, true);
    share[t] = values.share_values(t);
    share_done[t].store(true, std::memory_order_release);
    if (handoff.part != OrdinalHandOff::kNone && (handoff.part < half) != (t == 0) && handoff.claim.Claim()) {
      thread_local ReusedBuffer<uint32_t> tail_room;
      decode_tail(tail_room.Take(static_cast<size_t>(handoff.tail) + kScratchSlackWords).data());
      g_tails_handed_off.fetch_add(1, std::memory_order_relaxed);
    }
    const size_t p0 = t == 0 ? 0 : half, p1 = t == 0 ? half : parts;
    for (size_t p = p0; p < p1; ++p) {  // each part's ordinals right before its walk, as on one thread
      PartOrdinals ord{};
      part[p].status = ordinals(p, &ord);
      if (!part[p].status.ok()) return;
      auto [lo, hi] = share[t];
      if (share_done[1 - t].load(std::memory_order_acquire)) {  // the shares are adjacent: their union
        lo = std::min(lo, share[1 - t].first);
        hi = std::max(hi, share[1 - t].second);
      }
      Part& q = part[p];
      q.slot_lo.resize(nseg);
      q.slot_hi.resize(nseg);
      for (size_t s = 0; s < nseg; ++s) {
        const uint64_t first = decoder.SegmentFirst(s), end = decoder.SegmentFirst(s + 1);
        q.slot_lo[s] = std::clamp(lo, first, end) - first;
        q.slot_hi[s] = std::clamp(hi, first, end) - first;
      }
      const WalkApply bounded{apply.to, apply.values, apply.steps, q.slot_lo, q.slot_hi};
      q.walked = true;
      q.status = decoder.Walk(p, ord, &bounded, &q.filled);
      if (std::this_thread::get_id() != caller) CountBandPartDecodedByHelper();
      if (!q.status.ok()) return;
    }
    if (t == 1) YieldUntil([&] { return share_done[0].load(std::memory_order_acquire); });
    if (t == 1 || share_done[1].load(std::memory_order_acquire))
      for (size_t p = p0; p < p1; ++p) apply_rest(p);
  };
  auto side = [&] {
    run(1);
    return Status::Ok();
  };
  auto main = [&] {
    run(0);
    return Status::Ok();
  };
  if (GetSecondPartWalkerForTests() == SecondPartWalker::kCallerWalksOn)
    (void)main(), (void)side();
  else
    (void)RunConcurrently(side, main);
  Status error = values.result();
  for (size_t p = 0; p < parts && error.ok(); ++p) error = part[p].status;
  if (error.ok()) {
    for (size_t p = 0; p < parts; ++p)
      if (!part[p].applied_all) apply_rest(p);
    return Status::Ok();
  }
  for (size_t p = 0; p < parts; ++p) {
    const Part& q = part[p];
    if (q.applied_all) {
      const auto [c0, c1] = part_changes(p);
      UndoPayloadSlots(decoder, segs, positions, apply, c0, c1);
    } else if (q.walked) {  // its filled slots within its bounds
      for (size_t s = 0; s < nseg; ++s)
        ApplySegmentSlots(segs, positions, apply, apply.undo(), s, std::max(decoder.FirstSlot(p, s), q.slot_lo[s]),
                          std::min(decoder.FirstSlot(p, s) + q.filled[s], q.slot_hi[s]));
    }
  }
  return error;
}

}  // namespace

uint64_t GetOrdinalTailsHandedOff() { return g_tails_handed_off.load(); }

Status DecodeApplyBandedLocations(std::span<const uint8_t> in, BandedForm form, std::span<const ContextSegment> segs,
                                  std::span<const std::span<uint32_t>> positions, const BandedValueSection& values,
                                  const WalkApply& apply, int threads) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_expected = 0;
  for (const auto& p : positions) total_expected += p.size();
  BandedHeader h;
  const Status header = ReadBandedHeader(in, form, total_elements, total_expected, &h);
  if (header.ok() && threads >= 2 && (h.parts >= 2 || values.splits)) {
    const PartDecoder decoder(h, segs, total_elements, positions);
    return DecodeApplyOnTwoThreads(decoder, segs, positions, values, apply);
  }
  values.decode_all();
  DCR_RETURN_IF_ERROR(values.result());  // the value section's errors come first
  DCR_RETURN_IF_ERROR(header);
  const PartDecoder decoder(h, segs, total_elements, positions);
  return DecodeApplyOnOneThread(decoder, segs, positions, apply);
}

}  // namespace dcr
