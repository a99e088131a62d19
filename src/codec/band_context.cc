// Banded context coding of locations (docs/format.md §2.7), the decoder: the O(changes) streams
// and the two-thread split; the O(dense) walks over the old bits are band_walk.h's, the encoder
// is band_encode.cc.
#include "codec/band_context.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <vector>

#include "base/thread_pool.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"
#include "codec/simd_masks.h"

namespace dcr {
namespace {

std::atomic<uint64_t> g_split_walks{0}, g_split_fallbacks{0};

}  // namespace

BandWalkSplitCounts GetBandWalkSplitCounts() { return {g_split_walks.load(), g_split_fallbacks.load()}; }

namespace {

WalkSplit ChooseWalkSplit(std::span<const ContextSegment> segs, uint64_t total_elements, uint64_t total_changes,
                          int threads, bool forced) {
  if (threads < 2 || total_elements < kSplitWalkMinElements || (total_changes < kSplitWalkMinChanges && !forced)) return {};
  return HalfwayTileSplit(segs, total_elements);
}

// Each band's changed ordinals, as DecodeBandWalk takes them (band_walk.h), and their counts.
struct BandStreams {
  std::array<const uint64_t*, kMaxContextBands> ordinals{};
  BandWords count{};
};

// The checks on a walk over every tile, in the order the one-thread walk makes them: its errors
// are the canonical ones. `ok` and `placed` are the walk's result, filled[s] the positions it
// gave segment s.
Status CheckWholeWalk(bool ok, const BandWords& placed, const ContextBands& bands, const BandWords& count,
                      std::span<const uint64_t> expected, std::span<const uint64_t> filled) {
  if (!ok) return Corrupt("banded context code: a segment has more changes than its table entry");
  for (size_t b = 0; b < static_cast<size_t>(bands.k); ++b)
    if (placed[b] != count[b])
      return Corrupt("banded context code: band " + std::to_string(b) + " has ordinals past its population");
  for (size_t s = 0; s < expected.size(); ++s)
    if (filled[s] != expected[s])
      return Corrupt("banded context code: segment " + std::to_string(s) + " change count disagrees with its table entry");
  return Status::Ok();
}

// The one-thread walk over every tile.
Status WalkWhole(std::span<const ContextSegment> segs, const ContextBands& bands, const BandStreams& st,
                 std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions) {
  WalkPart all;
  all.seg_end = segs.size();
  all.limit = st.count;
  std::vector<uint64_t> filled(segs.size(), 0);
  const bool ok = DecodeBandWalk(segs, bands, st.ordinals, expected, positions, &all, &filled);
  return CheckWholeWalk(ok, all.placed, bands, st.count, expected, filled);
}

std::atomic<SecondPartWalker> g_second_part_walker{SecondPartWalker::kClaimed};

// The walk's part from the split through the last segment, given each band's population before
// the split (`run`) and its ordinals placed before it.
WalkPart PartAfter(const WalkSplit& split, size_t nseg, const BandWords& run, const BandWords& placed,
                   const BandWords& count) {
  WalkPart part;
  part.from_seg = split.seg;
  part.from_elem = split.elem;
  part.seg_end = nseg;
  part.run = run;
  part.placed = placed;
  part.limit = count;
  return part;
}

// The walk split at `split` between the calling thread and a helper. The calling thread reads
// the ordinals (read_ordinals) and walks the first part. The second part goes to whichever
// thread claims it first: the helper, which must first count each band's population before the
// split, or the calling thread once the first part is done, which then simply walks on. So a
// helper slow to wake (0.1 ms or more on an idle virtual machine) costs nothing, and the
// result is the one-thread walk's either way: a helper's part is accepted only if every count
// agrees with the first part's, and is otherwise walked again by WalkWhole for its error. The
// helper also runs `also`, if given and unclaimed, while it waits for the ordinals and after its
// part; the calling thread after its part when the helper walks the second.
Status WalkInTwoParts(std::span<const ContextSegment> segs, const ContextBands& bands, const WalkSplit& split,
                      const std::function<Status()>& read_ordinals, const BandStreams& st,
                      std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions,
                      ClaimableTask* also) {
  const size_t nseg = segs.size();
  enum : int { kPending, kReady, kFailed };
  std::atomic<int> ordinals_state{kPending};
  ClaimOnce second_claim;
  const SecondPartWalker walker = g_second_part_walker.load(std::memory_order_relaxed);
  const bool helper_path = walker == SecondPartWalker::kHelperPath;
  if (walker == SecondPartWalker::kCallerWalksOn) (void)second_claim.Claim();

  // The helper's part writes segment split.seg's positions here (the caller's buffer: the helper
  // may serve another caller as soon as this call ends), and the others in place.
  thread_local std::vector<uint32_t> split_tail;
  split_tail.resize(expected[split.seg]);
  std::vector<std::vector<uint32_t>*> second_outs(positions.begin(), positions.end());
  second_outs[split.seg] = &split_tail;
  bool helper_walked = false, ok_second = false;
  BandWords split_run{}, second_from{};
  WalkPart second;
  std::vector<uint64_t> filled_second(nseg, 0);
  auto side = [&] {
    if (helper_path || second_claim.Claim()) {
      helper_walked = true;
      CountBandPopulations(segs, bands, split.seg, split.elem, &split_run);
      if (also != nullptr && ordinals_state.load(std::memory_order_acquire) == kPending) (void)also->RunIfUnclaimed();
      YieldUntil([&] { return ordinals_state.load(std::memory_order_acquire) != kPending; });
      if (ordinals_state.load(std::memory_order_acquire) == kReady) {
        for (size_t b = 0; b < kMaxContextBands; ++b)
          second_from[b] = static_cast<uint64_t>(
              std::lower_bound(st.ordinals[b], st.ordinals[b] + st.count[b], split_run[b]) - st.ordinals[b]);
        second = PartAfter(split, nseg, split_run, second_from, st.count);
        ok_second = DecodeBandWalk(segs, bands, st.ordinals, expected, second_outs, &second, &filled_second);
      }
    }
    if (also != nullptr) (void)also->RunIfUnclaimed();
    return Status::Ok();
  };

  Status status;
  bool main_walked_all = false, ok_first = false;
  WalkPart first;
  std::vector<uint64_t> filled(nseg, 0);  // the first part's, then the whole walk's
  auto main = [&] {
    status = read_ordinals();
    ordinals_state.store(status.ok() ? kReady : kFailed, std::memory_order_release);
    if (!status.ok()) return Status::Ok();
    first.seg_end = split.seg + 1;
    first.end_elem = split.elem;
    first.limit = st.count;
    ok_first = DecodeBandWalk(segs, bands, st.ordinals, expected, positions, &first, &filled);
    if (helper_path || (walker != SecondPartWalker::kCallerWalksOn && !second_claim.Claim())) {
      // The helper walks the second part: `also` (the value section) is this thread's if still
      // unclaimed, rather than the helper's after its part while this thread waits.
      if (also != nullptr) (void)also->RunIfUnclaimed();
      return Status::Ok();
    }
    // The helper has not come: walk on from where the first part ended, as one thread would.
    main_walked_all = true;
    bool ok = ok_first;
    if (ok) {
      WalkPart rest = PartAfter(split, nseg, first.run, first.placed, st.count);
      rest.first_out = filled[split.seg];
      std::vector<uint64_t> room(expected.begin(), expected.end()), filled_rest(nseg, 0);
      room[split.seg] -= filled[split.seg];
      ok = DecodeBandWalk(segs, bands, st.ordinals, room, positions, &rest, &filled_rest);
      first.placed = rest.placed;
      for (size_t s = split.seg; s < nseg; ++s) filled[s] += filled_rest[s];
    }
    status = CheckWholeWalk(ok, first.placed, bands, st.count, expected, filled);
    return Status::Ok();
  };
  if (helper_path)
    (void)RunConcurrently(side, main);
  else
    (void)OfferToHelper(side, main);
  if (!status.ok() || main_walked_all) return status;

  g_split_walks.fetch_add(1, std::memory_order_relaxed);
  // (first.run is not compared: the walk stops counting a band once its changes are all placed.)
  bool agree = helper_walked && ok_first && ok_second && first.placed == second_from && second.placed == st.count;
  for (size_t s = 0; s < nseg && agree; ++s) {
    const uint64_t got = s < split.seg ? filled[s] : s == split.seg ? filled[s] + filled_second[s] : filled_second[s];
    agree = got == expected[s];
  }
  if (agree) {
    std::copy_n(split_tail.begin(), filled_second[split.seg], positions[split.seg]->begin() + filled[split.seg]);
    return Status::Ok();
  }
  g_split_fallbacks.fetch_add(1, std::memory_order_relaxed);
  return WalkWhole(segs, bands, st, expected, positions);
}

}  // namespace

void SetSecondPartWalkerForTests(SecondPartWalker walker) { g_second_part_walker.store(walker); }
SecondPartWalker GetSecondPartWalkerForTests() { return g_second_part_walker.load(std::memory_order_relaxed); }

Status DecodeBandedLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                             std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions,
                             int threads, ClaimableTask* also) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_expected = 0;
  for (uint64_t e : expected) total_expected += e;
  ByteReader r(in);
  uint8_t k8 = 0;
  if (!r.ReadByte(&k8) || k8 == 0 || k8 > kMaxContextBands) return Corrupt("banded context code: bad band count");
  ContextBands bands;
  bands.k = k8;
  for (size_t i = 0; i + 1 < k8; ++i) {
    if (!r.ReadByte(&bands.t[i])) return Corrupt("banded context code: truncated thresholds");
    if (bands.t[i] == 0 || (i > 0 && bands.t[i] <= bands.t[i - 1]))
      return Corrupt("banded context code: thresholds not strictly ascending from 1");
  }
  BandStreams st;
  std::array<uint8_t, kMaxContextBands> rice{};
  uint64_t sum = 0;
  for (size_t b = 0; b < k8; ++b) {
    if (!r.ReadVarint(&st.count[b]) || st.count[b] > total_expected - sum)
      return Corrupt("banded context code: bad change count of band " + std::to_string(b));
    sum += st.count[b];
    if (st.count[b] > 0 && (!r.ReadByte(&rice[b]) || rice[b] > kMaxContextRice))
      return Corrupt("banded context code: bad Rice parameter of band " + std::to_string(b));
  }
  if (sum != total_expected) return Corrupt("banded context code: band counts do not add up to the payload's changes");

  // Changed ordinals, band after band, ascending within a band. Memory: 8 bytes per change.
  std::vector<uint64_t>& ordinals = ScratchWords(total_expected);
  const BandWords offset = BandOffsets(st.count);
  const std::function<Status()> read_ordinals = [&] {
    BitReader bits(r.Rest());
    for (size_t b = 0; b < kMaxContextBands; ++b) {
      if (!GetRiceOrdinals(bits, st.count[b], rice[b], total_elements, ordinals.data() + offset[b]))
        return Corrupt("banded context code: truncated or out-of-range gap in band " + std::to_string(b));
      st.ordinals[b] = ordinals.data() + offset[b];
    }
    if (bits.bytes_consumed() != r.remaining()) return Corrupt("banded context code: trailing bytes");
    return Status::Ok();
  };
  for (size_t s = 0; s < segs.size(); ++s) positions[s]->resize(expected[s]);
  const WalkSplit split = ChooseWalkSplit(segs, total_elements, total_expected, threads,
                                          g_second_part_walker.load(std::memory_order_relaxed) != SecondPartWalker::kClaimed);
  if (split.use) return WalkInTwoParts(segs, bands, split, read_ordinals, st, expected, positions, also);
  auto walk_whole = [&] {
    DCR_RETURN_IF_ERROR(read_ordinals());
    return WalkWhole(segs, bands, st, expected, positions);
  };
  if (threads < 2 || also == nullptr) return walk_whole();
  return OfferClaimable(*also, walk_whole);
}

}  // namespace dcr
