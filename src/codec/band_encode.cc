// Banded context coding of locations, the encoder (docs/format.md §2.7): fit the bands, walk the
// old bits for each change's band ordinal (band_walk.h), Rice-code each band's gaps.
#include <algorithm>
#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "base/thread_pool.h"
#include "codec/band_context.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"

namespace dcr {
namespace {

// The walk over every tile, split at `split` between the calling thread and a helper, which
// first runs `also` (if given and unclaimed) and waits for the bands (`fitted`). Either thread
// walks the second part, whichever claims it first, so a helper that comes late costs nothing.
// The second part counts its ordinals from the split and writes its gaps to a buffer of its own;
// joining adds the first part's population less its last change to each band's first gap there
// and appends the gaps. So the result is the one-thread walk's, whoever walked which part.
EncodeWalkEnd WalkInTwoParts(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                             const WalkSplit& split, const std::atomic<bool>& fitted, const FittedBands& fit,
                             const BandWords& offset, uint64_t* gaps, uint64_t total_gaps, ClaimableTask* also,
                             const std::function<void()>& fit_bands) {
  std::vector<std::span<const uint32_t>> first_pos(positions.begin(), positions.end()), second_pos = first_pos;
  const std::span<const uint32_t> at_split = positions[split.seg];
  const size_t cut = static_cast<size_t>(std::lower_bound(at_split.begin(), at_split.end(), split.elem) - at_split.begin());
  first_pos[split.seg] = at_split.first(cut);
  second_pos[split.seg] = at_split.subspan(cut);
  const EncodeWalkPart first{0, split.seg + 1, 0, split.elem}, second{split.seg, segs.size(), split.elem, ~uint64_t{0}};

  // The caller's buffer, reached through a pointer taken here (in a lambda the helper runs, the
  // name would be the helper's own thread_local).
  thread_local std::vector<uint64_t> second_buffer;
  if (second_buffer.size() < total_gaps) second_buffer.resize(total_gaps);
  uint64_t* const second_gaps = second_buffer.data();
  EncodeWalkEnd end_first, end_second;
  ClaimOnce second_claim;
  const SecondPartWalker walker = GetSecondPartWalkerForTests();
  const bool helper_path = walker == SecondPartWalker::kHelperPath;
  if (walker == SecondPartWalker::kCallerWalksOn) (void)second_claim.Claim();
  auto walk_second = [&] { end_second = EncodeBandWalk(segs, second_pos, fit.bands, offset, second_gaps, second); };
  auto side = [&] {
    if (also != nullptr) (void)also->RunIfUnclaimed();
    for (int spins = 0; !fitted.load(std::memory_order_acquire); ++spins)
      if (spins % 64 == 63) std::this_thread::yield();
    if (helper_path || second_claim.Claim()) walk_second();
    return Status::Ok();
  };
  auto main = [&] {
    fit_bands();
    end_first = EncodeBandWalk(segs, first_pos, fit.bands, offset, gaps, first);
    if (walker == SecondPartWalker::kCallerWalksOn || (!helper_path && second_claim.Claim())) walk_second();
    return Status::Ok();
  };
  if (helper_path)
    (void)RunConcurrently(side, main);
  else
    (void)OfferToHelper(side, main);

  EncodeWalkEnd whole;
  for (size_t b = 0; b < kMaxContextBands; ++b) {
    const uint64_t in_first = end_first.written[b], in_second = end_second.written[b];
    if (in_second > 0) {
      second_gaps[offset[b]] += end_first.population[b] - end_first.next[b];
      std::copy_n(second_gaps + offset[b], in_second, gaps + offset[b] + in_first);
    }
    whole.population[b] = end_first.population[b] + end_second.population[b];
    whole.written[b] = in_first + in_second;
  }
  return whole;
}

}  // namespace

void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out, int threads, ClaimableTask* also) {
  uint64_t total_elements = 0, total_changes = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    total_elements += segs[s].base.size() / DTypeWidth(segs[s].dtype);
    total_changes += positions[s].size();
  }
  FittedBands fit;
  BandWords offset{};
  std::atomic<bool> fitted{false};
  const auto fit_bands = [&] {
    fit = FitContextBands(segs, positions);
    for (size_t b = 1; b < kMaxContextBands; ++b) offset[b] = offset[b - 1] + fit.changes[b - 1];
    fitted.store(true, std::memory_order_release);
  };
  std::vector<uint64_t>& gaps = ScratchWords(total_changes);
  // The encoder's second part needs no population count first (unlike the decoder's), so any
  // payload large enough splits.
  const WalkSplit split = threads >= 2 && total_elements >= kSplitWalkMinElements ? HalfwayTileSplit(segs, total_elements) : WalkSplit{};
  EncodeWalkEnd walked;
  if (split.use) {
    walked = WalkInTwoParts(segs, positions, split, fitted, fit, offset, gaps.data(), total_changes, also, fit_bands);
  } else {
    auto walk_whole = [&] {
      fit_bands();
      walked = EncodeBandWalk(segs, positions, fit.bands, offset, gaps.data(), {0, segs.size(), 0, ~uint64_t{0}});
      return Status::Ok();
    };
    if (threads >= 2 && also != nullptr)
      (void)OfferClaimable(*also, walk_whole);
    else
      (void)walk_whole();
  }

  const size_t k = static_cast<size_t>(fit.bands.k);
  out->push_back(static_cast<uint8_t>(k));
  for (size_t i = 0; i + 1 < k; ++i) out->push_back(fit.bands.t[i]);
  std::array<int, kMaxContextBands> rice{};
  for (size_t b = 0; b < k; ++b) {
    const std::span<const uint64_t> g(gaps.data() + offset[b], fit.changes[b]);
    PutVarint(*out, g.size());
    if (g.empty()) continue;
    rice[b] = BestRiceParameter(g, walked.population[b]);
    out->push_back(static_cast<uint8_t>(rice[b]));
  }
  BitWriter w(*out);
  for (size_t b = 0; b < k; ++b) PutRiceGaps(w, std::span<const uint64_t>(gaps.data() + offset[b], fit.changes[b]), rice[b]);
  w.Flush();
}

}  // namespace dcr
