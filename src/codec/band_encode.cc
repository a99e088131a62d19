// Banded context coding of locations, the encoder (docs/format.md §2.7): fit the bands, walk the
// old bits for each change's band ordinal (band_walk.h), Rice-code each band's gaps.
#include <algorithm>
#include <array>
#include <atomic>
#include <vector>

#include "base/thread_pool.h"
#include "codec/band_context.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"

namespace dcr {
namespace {

// Appends the code of the fitted bands and their gaps: fit.changes[b] gaps of band b from
// gaps[offset[b]] on, among walked.population[b] elements.
void WriteBandedCode(const FittedBands& fit, const BandWords& offset, const EncodeWalkEnd& walked, const uint64_t* gaps,
                     std::vector<uint8_t>* out) {
  const size_t k = static_cast<size_t>(fit.bands.k);
  out->push_back(static_cast<uint8_t>(k));
  for (size_t i = 0; i + 1 < k; ++i) out->push_back(fit.bands.t[i]);
  std::array<int, kMaxContextBands> rice{};
  for (size_t b = 0; b < k; ++b) {
    const std::span<const uint64_t> g(gaps + offset[b], fit.changes[b]);
    PutVarint(*out, g.size());
    if (g.empty()) continue;
    rice[b] = BestRiceParameter(g, walked.population[b]);
    out->push_back(static_cast<uint8_t>(rice[b]));
  }
  BitWriter w(*out);
  for (size_t b = 0; b < k; ++b) PutRiceGaps(w, std::span<const uint64_t>(gaps + offset[b], fit.changes[b]), rice[b]);
  w.Flush();
}

// One encode of banded locations, split between the calling thread and a helper: what both
// threads share. The band fit's class counts are split at a segment boundary (`fit_seg`; 0: not
// split) and the walk over the old bits at `split`. The calling thread counts the first segments'
// classes, fits the bands, walks the first part, joins the parts and writes the code; the second
// count and the second part go to whichever thread claims them first, so a helper that comes
// late costs nothing. Counts add up exactly, and the second part's gaps are joined onto the
// first's (Join), so the bytes are the one-thread encode's, whoever did what.
class TwoThreadEncode {
 public:
  TwoThreadEncode(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                  const WalkSplit& split, uint64_t total_elements, uint64_t total_changes, uint64_t* gaps)
      : segs_(segs), positions_(positions), split_(split), stride_(FitSampleStride(segs)), gaps_(gaps) {
    // The first segment boundary at or past half the elements, else the last boundary.
    uint64_t before = 0;  // elements of the segments before fit_seg_
    for (; fit_seg_ < segs.size() && 2 * before < total_elements; ++fit_seg_)
      before += segs[fit_seg_].elements();
    if (fit_seg_ == segs.size()) fit_seg_ = segs.size() - 1;  // 0 (one count) for one segment
    first_pos_.assign(positions.begin(), positions.end());
    second_pos_ = first_pos_;
    const std::span<const uint32_t> at_split = positions[split.seg];
    const size_t cut = static_cast<size_t>(std::lower_bound(at_split.begin(), at_split.end(), split.elem) - at_split.begin());
    first_pos_[split.seg] = at_split.first(cut);
    second_pos_[split.seg] = at_split.subspan(cut);
    // The caller's buffer for the second part's gaps, reached through a pointer taken here (in
    // code the helper runs, the name would be the helper's own thread_local).
    thread_local std::vector<uint64_t> second_buffer;
    if (second_buffer.size() < total_changes) second_buffer.resize(total_changes);
    second_gaps_ = second_buffer.data();
    const SecondPartWalker walker = GetSecondPartWalkerForTests();
    helper_path_ = walker == SecondPartWalker::kHelperPath;
    caller_walks_on_ = walker == SecondPartWalker::kCallerWalksOn;
    if (caller_walks_on_) (void)second_claim_.Claim(), (void)count_claim_.Claim();
  }

  // The helper's share: the second count (if unclaimed), then `filler` while the caller fits
  // the bands, then the second part of the walk (if unclaimed, or always on kHelperPath), then
  // `also` while the caller writes the code.
  void Help(ClaimableTask* filler, ClaimableTask* also) {
    if (fit_seg_ > 0 && count_claim_.Claim()) CountSecond();
    if (filler != nullptr) (void)filler->RunIfUnclaimed();
    YieldUntil([&] { return fitted_.load(std::memory_order_acquire); });
    if (helper_path_ || second_claim_.Claim()) WalkSecond();
    if (also != nullptr) (void)also->RunIfUnclaimed();
  }

  // The calling thread's share: count (the second segments' classes too unless the helper
  // claimed them), fit, walk the first part and, unless the helper claimed it, the second; then
  // the joined code, appended to `out`.
  void Main(std::vector<uint8_t>* out) {
    FitCounts counts;
    CountFitClasses(segs_, positions_, 0, fit_seg_ > 0 ? fit_seg_ : segs_.size(), stride_, &counts);
    if (fit_seg_ > 0) {
      if (count_claim_.Claim() || caller_walks_on_) CountSecond();
      YieldUntil([&] { return counted_.load(std::memory_order_acquire); });
      counts.Add(second_counts_);
    }
    fit_ = FitBandsToCounts(counts);
    offset_ = BandOffsets(fit_.changes);
    fitted_.store(true, std::memory_order_release);
    first_end_ = EncodeBandWalk(segs_, first_pos_, fit_.bands, offset_, gaps_, {0, split_.seg + 1, 0, split_.elem});
    if (caller_walks_on_ || (!helper_path_ && second_claim_.Claim()))
      WalkSecond();
    else
      YieldUntil([&] { return second_walked_.load(std::memory_order_acquire); });
    WriteBandedCode(fit_, offset_, Join(), gaps_, out);
  }

 private:
  // After both walks: the second part's gaps appended to the first's, each band's first gap
  // there made relative to the first part's last change, and the populations added.
  EncodeWalkEnd Join() {
    EncodeWalkEnd whole;
    for (size_t b = 0; b < kMaxContextBands; ++b) {
      const uint64_t in_first = first_end_.written[b], in_second = second_end_.written[b];
      if (in_second > 0) {
        second_gaps_[offset_[b]] += first_end_.population[b] - first_end_.next[b];
        std::copy_n(second_gaps_ + offset_[b], in_second, gaps_ + offset_[b] + in_first);
      }
      whole.population[b] = first_end_.population[b] + second_end_.population[b];
      whole.written[b] = in_first + in_second;
    }
    return whole;
  }

  void CountSecond() {
    CountFitClasses(segs_, positions_, fit_seg_, segs_.size(), stride_, &second_counts_);
    counted_.store(true, std::memory_order_release);
  }
  void WalkSecond() {
    second_end_ = EncodeBandWalk(segs_, second_pos_, fit_.bands, offset_, second_gaps_,
                                 {split_.seg, segs_.size(), split_.elem, ~uint64_t{0}});
    second_walked_.store(true, std::memory_order_release);
  }

  std::span<const ContextSegment> segs_;
  std::span<const std::span<const uint32_t>> positions_;
  WalkSplit split_;
  uint64_t stride_;
  uint64_t* gaps_;
  size_t fit_seg_ = 0;  // the first segment of the second count; 0: one count
  std::vector<std::span<const uint32_t>> first_pos_, second_pos_;
  uint64_t* second_gaps_ = nullptr;
  bool helper_path_ = false, caller_walks_on_ = false;
  ClaimOnce count_claim_, second_claim_;
  std::atomic<bool> counted_{false}, fitted_{false}, second_walked_{false};
  FitCounts second_counts_;
  FittedBands fit_;
  BandWords offset_{};
  EncodeWalkEnd first_end_, second_end_;
};

}  // namespace

// The encoder's second part needs no population count first (unlike the decoder's), so any
// payload large enough splits.
bool EncodeSplitsWalk(std::span<const ContextSegment> segs, int threads) {
  return threads >= 2 && TotalElements(segs) >= kSplitWalkMinElements;
}

void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out, int threads, ClaimableTask* also, ClaimableTask* filler) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_changes = 0;
  for (const std::span<const uint32_t>& p : positions) total_changes += p.size();
  std::vector<uint64_t>& gaps = ScratchWords(total_changes);
  const WalkSplit split = EncodeSplitsWalk(segs, threads) ? HalfwayTileSplit(segs, total_elements) : WalkSplit{};
  if (split.use) {
    TwoThreadEncode two(segs, positions, split, total_elements, total_changes, gaps.data());
    auto side = [&] {
      two.Help(filler, also);
      return Status::Ok();
    };
    auto main = [&] {
      two.Main(out);
      return Status::Ok();
    };
    if (GetSecondPartWalkerForTests() == SecondPartWalker::kHelperPath)
      (void)RunConcurrently(side, main);
    else
      (void)OfferToHelper(side, main);
    return;
  }
  auto encode_whole = [&] {
    const FittedBands fit = FitContextBands(segs, positions);
    const BandWords offset = BandOffsets(fit.changes);
    const EncodeWalkEnd walked = EncodeBandWalk(segs, positions, fit.bands, offset, gaps.data(), {0, segs.size(), 0, ~uint64_t{0}});
    WriteBandedCode(fit, offset, walked, gaps.data(), out);
    return Status::Ok();
  };
  if (threads < 2 || (also == nullptr && filler == nullptr)) {
    (void)encode_whole();
    return;
  }
  (void)OfferToHelper(
      [&] {
        if (filler != nullptr) (void)filler->RunIfUnclaimed();
        if (also != nullptr) (void)also->RunIfUnclaimed();
        return Status::Ok();
      },
      encode_whole);
}

}  // namespace dcr
