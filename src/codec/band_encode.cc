// Banded context coding of locations, the encoder (docs/format.md §2.7-2.8): fit the bands, then
// per part walk the old bits for each change's band ordinal (band_walk.h) and Rice-code each
// band's gaps; parts go to whichever of two threads takes them.
#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <optional>
#include <vector>

#include "base/thread_pool.h"
#include "codec/band_context.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"
#include "codec/split_rice.h"

namespace dcr {
namespace {

// One part's code: its per-band change counts and Rice parameters, and its bit stream.
struct CodedPart {
  BandWords count{};
  std::array<uint8_t, kMaxContextBands> rice{};
  std::vector<uint8_t> stream;
};

// The positions of `positions` (ascending, per segment) that lie in [from, to).
std::vector<std::span<const uint32_t>> PartPositions(std::span<const std::span<const uint32_t>> positions,
                                                      const BandPartStart& from, const BandPartStart& to) {
  std::vector<std::span<const uint32_t>> part(positions.size());
  for (size_t s = from.seg; s < to.seg_end(); ++s) {
    std::span<const uint32_t> p = positions[s];
    if (s == to.seg) p = p.first(static_cast<size_t>(std::lower_bound(p.begin(), p.end(), to.elem) - p.begin()));
    if (s == from.seg) p = p.subspan(static_cast<size_t>(std::lower_bound(p.begin(), p.end(), from.elem) - p.begin()));
    part[s] = p;
  }
  return part;
}

// Codes part [from, to): the walk writes band b's gaps to gaps[offset[b]...] (room for all of the
// band's changes), then each band's Rice parameter is fitted to the part's gaps, and the codes
// are written split (mode 4) or interleaved (mode 3).
void CodePart(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
              const ContextBands& bands, const BandWords& offset, const BandPartStart& from, const BandPartStart& to,
              bool split_rice, uint64_t* gaps, CodedPart* out) {
  const std::vector<std::span<const uint32_t>> part = PartPositions(positions, from, to);
  const EncodeWalkEnd walked = EncodeBandWalk(segs, part, bands, offset, gaps,
                                              {from.seg, to.seg_end(), from.elem, to.end_elem()});
  std::array<RiceRun, kMaxContextBands> runs{};
  const size_t k = static_cast<size_t>(bands.k);
  for (size_t b = 0; b < k; ++b) {
    runs[b].gaps = std::span<const uint64_t>(gaps + offset[b], walked.written[b]);
    out->count[b] = runs[b].gaps.size();
    if (!runs[b].gaps.empty())
      runs[b].r = out->rice[b] = static_cast<uint8_t>(BestRiceParameter(runs[b].gaps, walked.population[b]));
  }
  out->stream.clear();
  if (split_rice) {
    PutSplitRice(std::span<const RiceRun>(runs).first(k), &out->stream);
    return;
  }
  BitWriter w(out->stream);
  for (size_t b = 0; b < k; ++b)
    if (!runs[b].gaps.empty()) PutRiceGaps(w, runs[b].gaps, runs[b].r);
  w.Flush();
}

// Appends the section: bands, part count, each part's counts and Rice parameters, the lengths of
// all streams but the last, then the streams.
void WriteBandedCode(const ContextBands& bands, std::span<const CodedPart> parts, std::vector<uint8_t>* out) {
  const size_t k = static_cast<size_t>(bands.k);
  out->push_back(static_cast<uint8_t>(k));
  for (size_t i = 0; i + 1 < k; ++i) out->push_back(bands.t[i]);
  out->push_back(static_cast<uint8_t>(parts.size()));
  for (const CodedPart& p : parts)
    for (size_t b = 0; b < k; ++b) {
      PutVarint(*out, p.count[b]);
      if (p.count[b] > 0) out->push_back(p.rice[b]);
    }
  for (size_t i = 0; i + 1 < parts.size(); ++i) PutVarint(*out, parts[i].stream.size());
  for (const CodedPart& p : parts) out->insert(out->end(), p.stream.begin(), p.stream.end());
}

// One encode of banded locations, by the calling thread and possibly a helper. The calling
// thread fits the bands (to the counts made beforehand, as the producer makes them while it
// diffs, or to its own); then each thread takes parts in order until none is left, and the
// thread that codes the last part writes the code and runs `then`. Whoever codes a part, its
// bytes are the same.
class BandedEncode {
 public:
  // `helper`: a second thread runs Help (else Main does everything). `counted`: the fit's
  // counts, if made beforehand. The code goes to `out`, then `then` (if not empty) runs.
  BandedEncode(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
               uint64_t part_elements, bool helper, const FitCounts* counted, bool split_rice,
               std::vector<uint8_t>* out, const std::function<void()>& then)
      : segs_(segs), positions_(positions), counted_before_(counted), split_rice_(split_rice), out_(out), then_(then) {
    const uint64_t total = TotalElements(segs);
    for (const std::span<const uint32_t>& p : positions) total_changes_ += p.size();
    parts_ = ChooseBandParts(total, part_elements);
    starts_ = FindBandPartStarts(segs, total, parts_);
    // The parts' codes live in the calling thread's buffers, reached through a pointer taken
    // here (in code the helper runs, the name would be the helper's own thread_local).
    thread_local std::array<CodedPart, kMaxBandParts> coded;
    coded_ = coded.data();
    const SecondPartWalker walker = helper ? GetSecondPartWalkerForTests() : SecondPartWalker::kCallerWalksOn;
    helper_path_ = walker == SecondPartWalker::kHelperPath;
    caller_all_ = walker == SecondPartWalker::kCallerWalksOn;
    // The helper takes every part but the first on kHelperPath.
    part_claims_.emplace(helper_path_ ? 1 : 0, static_cast<uint32_t>(parts_));
  }

  // The helper's share: `early` (else `also`) if the caller is still fitting the bands; then
  // parts while any is left, then `also` if still unclaimed.
  void Help(ClaimableTask* early, ClaimableTask* also) {
    // The fit is the calling thread's alone: take other work now rather than wait for it.
    ClaimableTask* meanwhile = early != nullptr ? early : also;
    if (meanwhile != nullptr && !fitted_.load(std::memory_order_acquire)) (void)meanwhile->RunIfUnclaimed();
    if (!caller_all_) {
      YieldUntil([&] { return fitted_.load(std::memory_order_acquire); });
      TakeParts(/*from_back=*/true);
    }
    if (also != nullptr) (void)also->RunIfUnclaimed();
  }

  // The calling thread's share: the counts (unless made beforehand), the fit, parts while any is
  // left, the steps of `also` (if given) still unclaimed; returns once the code is written and
  // `then` has run (by whichever thread coded the last part).
  void Main(ClaimableTask* also) {
    FitCounts counts;
    if (counted_before_ != nullptr)
      counts = *counted_before_;
    else
      CountFitClasses(segs_, positions_, FitSampleStride(segs_), &counts);
    fit_ = FitBandsToCounts(counts);
    offset_ = BandOffsets(fit_.changes);
    fitted_.store(true, std::memory_order_release);
    if (helper_path_)
      CodeOne(0);
    else
      TakeParts(/*from_back=*/false);
    // Then `also`, whether or not the helper still codes a part: a chain of steps, each taken by
    // one thread, so the two threads share it. (Taken only while the helper still coded, `also`
    // was left to the helper alone whenever it finished its part first, and this thread then
    // waited for it: ~150 us of a 650 us encode of the 4.8 % pair.)
    if (also != nullptr) (void)also->RunIfUnclaimed();
    YieldUntil([&] { return written_.load(std::memory_order_acquire); });
  }

 private:
  // The calling thread takes parts from the front, the helper from the back: the threads
  // diffed the payload's segments so (EncodePlannedPayload), and each then reads the positions
  // it wrote (which its cache holds, and which the next payload's diff will overwrite cheaply).
  void TakeParts(bool from_back) {
    for (std::optional<uint32_t> p; (p = part_claims_->Take(from_back));) CodeOne(*p);
  }
  // Gaps go to this thread's scratch buffer (room for every change, band b's from offset_[b]).
  // The thread that codes the last part writes the code and runs `then` right away, before it
  // takes `also`: the other thread, done first, is coding value streams meanwhile. (The calling
  // thread wrote the code after both had coded streams, and then the payload's location section
  // (its zstd probe ~5 us) while the helper idled. Alternating in one process, two-thread
  // context encodes of the real 4.5 / 4.8 / 5.1 % pairs took 0.99-1.0 of that time, best and
  // 10th percentile: the streams left then end ~1 us apart, claimed one at a time.)
  void CodeOne(size_t p) {
    CodePart(segs_, positions_, fit_.bands, offset_, starts_[p], starts_[p + 1], split_rice_,
             ScratchWords(total_changes_).data(), &coded_[p]);
    if (coded_parts_.fetch_add(1, std::memory_order_acq_rel) + 1 < parts_) return;
    WriteBandedCode(fit_.bands, std::span<const CodedPart>(coded_, parts_), out_);
    if (then_) then_();
    written_.store(true, std::memory_order_release);
  }

  std::span<const ContextSegment> segs_;
  std::span<const std::span<const uint32_t>> positions_;
  const FitCounts* counted_before_;
  bool split_rice_;
  uint64_t total_changes_ = 0;
  size_t parts_ = 1;
  BandPartStarts starts_{};
  CodedPart* coded_ = nullptr;
  bool helper_path_ = false, caller_all_ = false;
  std::atomic<bool> fitted_{false};
  std::optional<TwoEndedClaims> part_claims_;
  std::atomic<size_t> coded_parts_{0};
  std::vector<uint8_t>* out_;
  const std::function<void()>& then_;
  std::atomic<bool> written_{false};  // the code is in out_ and then_ has returned
  FittedBands fit_;
  BandWords offset_{};
};

}  // namespace

bool EncodeUsesHelper(std::span<const ContextSegment> segs, int threads) {
  return threads >= 2 && TotalElements(segs) >= kSplitWalkMinElements;
}

void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out, uint64_t part_elements, int threads, ClaimableTask* early,
                           ClaimableTask* also, const FitCounts* counted, bool split_rice,
                           const std::function<void()>& coded) {
  const bool helper = EncodeUsesHelper(segs, threads);
  BandedEncode encode(segs, positions, part_elements, helper, counted, split_rice, out, coded);
  if (helper) {
    auto side = [&] {
      encode.Help(early, also);
      return Status::Ok();
    };
    auto main = [&] {
      encode.Main(also);
      return Status::Ok();
    };
    if (GetSecondPartWalkerForTests() == SecondPartWalker::kHelperPath)
      (void)RunConcurrently(side, main);
    else
      (void)OfferToHelper(side, main);
    return;
  }
  auto encode_whole = [&] {
    encode.Main(nullptr);
    return Status::Ok();
  };
  if (threads < 2 || (early == nullptr && also == nullptr)) {
    (void)encode_whole();
    return;
  }
  (void)OfferToHelper(
      [&] {
        if (early != nullptr) (void)early->RunIfUnclaimed();
        if (also != nullptr) (void)also->RunIfUnclaimed();
        return Status::Ok();
      },
      encode_whole);
}

}  // namespace dcr
