// Banded context coding of locations (docs/format.md §2.7-2.8), the decoder: the header, each
// part's Rice ordinals and checks, and the parts' distribution over threads; the O(dense) walks
// over the old bits are band_walk.h's, the encoder is band_encode.cc.
#include "codec/band_context.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <string>
#include <vector>

#include "base/int_math.h"
#include "base/thread_pool.h"
#include "codec/apply_changes.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"
#include "codec/split_rice.h"

namespace dcr {
namespace {

std::atomic<uint64_t> g_helper_parts{0};

// The location section's fields before the bit streams, and each part's stream.
struct BandedHeader {
  BandedForm form = BandedForm::kParts;
  ContextBands bands;
  size_t parts = 1;
  std::array<BandWords, kMaxBandParts> count{};  // [part][band]: changed elements
  std::array<std::array<uint8_t, kMaxContextBands>, kMaxBandParts> rice{};
  std::array<std::span<const uint8_t>, kMaxBandParts> stream{};
};

// Reads and checks everything before the bit streams (mode 2: one part, without the part count
// and stream lengths). Errors name the part only where there are several.
Status ReadBandedHeader(std::span<const uint8_t> in, BandedForm form, uint64_t total_elements, uint64_t total_expected,
                        BandedHeader* h) {
  ByteReader r(in);
  h->form = form;
  const bool in_parts = form != BandedForm::kOnePart;
  uint8_t k8 = 0;
  if (!r.ReadByte(&k8) || k8 == 0 || k8 > kMaxContextBands) return Corrupt("banded context code: bad band count");
  h->bands.k = k8;
  for (size_t i = 0; i + 1 < k8; ++i) {
    if (!r.ReadByte(&h->bands.t[i])) return Corrupt("banded context code: truncated thresholds");
    if (h->bands.t[i] == 0 || (i > 0 && h->bands.t[i] <= h->bands.t[i - 1]))
      return Corrupt("banded context code: thresholds not strictly ascending from 1");
  }
  uint8_t parts = 1;
  if (in_parts && (!r.ReadByte(&parts) || parts == 0 || parts > kMaxBandParts ||
                   (parts > 1 && total_elements / parts < kBandPartAlign)))
    return Corrupt("banded context code: bad part count " + std::to_string(parts) + " for " + std::to_string(total_elements) +
                   " elements");
  h->parts = parts;
  uint64_t sum = 0;
  for (size_t p = 0; p < parts; ++p) {
    const std::string part = parts > 1 ? " in part " + std::to_string(p) : "";
    for (size_t b = 0; b < k8; ++b) {
      uint64_t& c = h->count[p][b];
      if (!r.ReadVarint(&c) || c > total_expected - sum)
        return Corrupt("banded context code: bad change count of band " + std::to_string(b) + part);
      sum += c;
      if (c > 0 && (!r.ReadByte(&h->rice[p][b]) || h->rice[p][b] > kMaxContextRice))
        return Corrupt("banded context code: bad Rice parameter of band " + std::to_string(b) + part);
    }
  }
  if (sum != total_expected) return Corrupt("banded context code: band counts do not add up to the payload's changes");
  std::array<uint64_t, kMaxBandParts> length{};
  uint64_t lengths = 0;
  for (size_t p = 0; p + 1 < parts; ++p)
    if (!r.ReadVarint(&length[p]) || length[p] > in.size() || (lengths += length[p]) > in.size())
      return Corrupt("banded context code: bad stream length of part " + std::to_string(p));
  if (lengths > r.remaining()) return Corrupt("banded context code: part stream lengths exceed the section");
  length[parts - 1] = r.remaining() - lengths;
  std::span<const uint8_t> rest = r.Rest();
  for (size_t p = 0; p < parts; ++p) {
    h->stream[p] = rest.first(length[p]);
    rest = rest.subspan(length[p]);
  }
  return Status::Ok();
}

using PartOrdinals = std::array<const uint64_t*, kMaxContextBands>;

// Decodes one part: its ordinals (into ordinals[0, its changes)), then the walk over its
// elements, writing its positions into the slots that payload order gives them.
class PartDecoder {
 public:
  PartDecoder(const BandedHeader& h, std::span<const ContextSegment> segs, uint64_t total_elements,
              std::span<const std::span<uint32_t>> positions)
      : h_(h), segs_(segs), positions_(positions), starts_(FindBandPartStarts(segs, total_elements, h.parts)) {
    segment_first_.resize(segs.size() + 1);
    for (size_t s = 0; s < segs.size(); ++s) segment_first_[s + 1] = segment_first_[s] + positions[s].size();
    for (size_t p = 0; p < h.parts; ++p) {
      uint64_t n = 0;
      for (size_t b = 0; b < kMaxContextBands; ++b) n += h.count[p][b];
      change_first_[p + 1] = change_first_[p] + n;
    }
  }

  // Decodes part p's ordinals into `ordinals` (room for the part's changes; the caller's, not
  // shared with another part) and sets (*ord)[b] to band b's.
  Status Ordinals(size_t p, uint64_t* ordinals, PartOrdinals* ord) const {
    const std::string part = PartName(p);
    const uint64_t elements = starts_[p + 1].at - starts_[p].at;
    if (h_.form == BandedForm::kPartsSplitRice) {
      const size_t k = static_cast<size_t>(h_.bands.k);
      const SplitRiceError e = GetSplitRiceOrdinals(h_.stream[p], std::span<const uint64_t>(h_.count[p]).first(k),
                                                    std::span<const uint8_t>(h_.rice[p]).first(k), elements, ordinals);
      if (!e.ok())
        return Corrupt("banded context code: " + e.Message() + (e.NamesBand() ? " in band " + std::to_string(e.band) : "") +
                       part);
      const uint64_t* o = ordinals;
      for (size_t b = 0; b < kMaxContextBands; o += h_.count[p][b++]) (*ord)[b] = o;
    } else {
      BitReader bits(h_.stream[p]);
      uint64_t* o = ordinals;
      for (size_t b = 0; b < kMaxContextBands; ++b) {
        if (!GetRiceOrdinals(bits, h_.count[p][b], h_.rice[p][b], elements, o))
          return Corrupt("banded context code: truncated or out-of-range gap in band " + std::to_string(b) + part);
        (*ord)[b] = o;
        o += h_.count[p][b];
      }
      if (bits.bytes_consumed() != h_.stream[p].size()) return Corrupt("banded context code: trailing bytes" + part);
    }
    return Status::Ok();
  }

  // Walks part p with the ordinals Ordinals gave, checking that it fills exactly its share of
  // each segment's slots. With `apply`, the walk applies the changes it places: *applied (if
  // given) gets how many slots of each segment, from FirstSlot on, it wrote and applied,
  // failure or not.
  Status Walk(size_t p, const PartOrdinals& ord, const WalkApply* apply = nullptr,
              std::vector<uint64_t>* applied = nullptr) const {
    const std::string part = PartName(p);
    const BandPartStart& from = starts_[p];
    const BandPartStart& to = starts_[p + 1];
    // The part's changes are payload-order changes [c0, c1): segment s gets the ones among its
    // own [segment_first_[s], segment_first_[s + 1]), from slot c0 - segment_first_[s] on.
    const uint64_t c0 = change_first_[p], c1 = change_first_[p + 1];
    WalkPart walk;
    walk.from_seg = from.seg;
    walk.from_elem = from.elem;
    walk.seg_end = to.seg_end();
    walk.end_elem = to.end_elem();
    walk.limit = h_.count[p];
    walk.first_out = FirstSlot(p, from.seg);
    std::vector<uint64_t> room(segs_.size(), 0), own_filled;
    std::vector<uint64_t>& filled = applied != nullptr ? *applied : own_filled;
    filled.assign(segs_.size(), 0);
    uint64_t in_segments = 0;
    for (size_t s = walk.from_seg; s < walk.seg_end; ++s) {
      room[s] = std::clamp(c1, segment_first_[s], segment_first_[s + 1]) - std::clamp(c0, segment_first_[s], segment_first_[s + 1]);
      in_segments += room[s];
    }
    if (!DecodeBandWalk(segs_, h_.bands, ord, room, positions_, &walk, &filled, apply))
      return Corrupt("banded context code: a segment has more changes than its table entry" + part);
    for (size_t b = 0; b < static_cast<size_t>(h_.bands.k); ++b)
      if (walk.placed[b] != h_.count[p][b])
        return Corrupt("banded context code: band " + std::to_string(b) + " has ordinals past its population" + part);
    // Every change placed, each segment exactly its share: the part's changes all lie in its
    // own segments' slots, so the parts together fill every segment exactly.
    for (size_t s = walk.from_seg; s < walk.seg_end; ++s)
      if (filled[s] != room[s])
        return Corrupt("banded context code: segment " + std::to_string(s) + " change count disagrees with its table entry" +
                       part);
    if (in_segments != c1 - c0)
      return Corrupt("banded context code: the part's changes disagree with its segments' table entries" + part);
    return Status::Ok();
  }

  Status Decode(size_t p, uint64_t* ordinals) const {
    PartOrdinals ord{};
    DCR_RETURN_IF_ERROR(Ordinals(p, ordinals, &ord));
    return Walk(p, ord);
  }

  // Part p's first slot in segment s (0 but in its first segment).
  uint64_t FirstSlot(size_t p, size_t s) const {
    const uint64_t c0 = change_first_[p];
    return s != starts_[p].seg ? 0 : std::clamp(c0, segment_first_[s], segment_first_[s + 1]) - segment_first_[s];
  }

  uint64_t FirstChange(size_t p) const { return change_first_[p]; }

 private:
  std::string PartName(size_t p) const { return h_.parts > 1 ? " in part " + std::to_string(p) : ""; }

  const BandedHeader& h_;
  std::span<const ContextSegment> segs_;
  std::span<const std::span<uint32_t>> positions_;
  BandPartStarts starts_{};
  std::vector<uint64_t> segment_first_;                     // [s]: the payload-order index of segment s's first change
  std::array<uint64_t, kMaxBandParts + 1> change_first_{};  // [p]: the same of part p's first change
};

}  // namespace

size_t ChooseBandParts(uint64_t total_elements, uint64_t part_elements) {
  const uint64_t by_size = total_elements / std::max<uint64_t>(part_elements, 1);
  const uint64_t most = std::min<uint64_t>({by_size, total_elements / kBandPartAlign, kMaxBandParts});
  return most == 0 ? 1 : static_cast<size_t>(std::bit_floor(most));
}

BandPartStarts FindBandPartStarts(std::span<const ContextSegment> segs, uint64_t total_elements, size_t parts) {
  DCR_CHECK(parts >= 1 && parts <= kMaxBandParts && (parts == 1 || total_elements / parts >= kBandPartAlign));
  BandPartStarts starts{};
  size_t s = 0;
  uint64_t before = 0;  // elements of the segments before s
  for (size_t p = 1; p < parts; ++p) {
    const uint64_t at = FloorShare(total_elements, p, parts);
    while (before + segs[s].elements() <= at) before += segs[s++].elements();
    const uint64_t elem = (at - before) / kBandPartAlign * kBandPartAlign;
    starts[p] = {s, elem, before + elem};
  }
  starts[parts] = {segs.size(), 0, total_elements};
  return starts;
}

uint64_t GetBandPartsDecodedByHelper() { return g_helper_parts.load(); }

Status DecodeBandedLocations(std::span<const uint8_t> in, BandedForm form, std::span<const ContextSegment> segs,
                             std::span<const std::span<uint32_t>> positions,
                             int threads, ClaimableTask* also) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_expected = 0;
  for (const auto& p : positions) total_expected += p.size();
  BandedHeader h;
  DCR_RETURN_IF_ERROR(ReadBandedHeader(in, form, total_elements, total_expected, &h));
  const PartDecoder decoder(h, segs, total_elements, positions);
  // Ordinals of every part, part after part (8 bytes per change): the calling thread's buffer,
  // each part writing only its own range.
  uint64_t* ordinals = ScratchWords(total_expected).data();
  const size_t parts = h.parts;
  std::array<Status, kMaxBandParts> status;
  auto decode = [&](size_t p) { status[p] = decoder.Decode(p, ordinals + decoder.FirstChange(p)); };
  // The first failing part's error, as one thread decoding the parts in order would report it.
  auto first_error = [&] {
    for (size_t p = 0; p < parts; ++p)
      if (!status[p].ok()) return status[p];
    return Status::Ok();
  };
  if (threads < 2 || (parts == 1 && also == nullptr)) {
    for (size_t p = 0; p < parts; ++p)
      if (decode(p), !status[p].ok()) return status[p];
    return Status::Ok();
  }
  if (parts == 1)
    return OfferClaimable(*also, [&] {
      decode(0);
      return status[0];
    });

  // Parts go to whichever thread claims them first, in order; a helper that comes late takes
  // what is left, or nothing. Then the value section (`also`), if still unclaimed.
  const SecondPartWalker walker = GetSecondPartWalkerForTests();
  std::atomic<size_t> next{walker == SecondPartWalker::kHelperPath ? size_t{1} : size_t{0}};
  std::atomic<size_t> done{0};
  auto take_parts = [&](bool helper) {
    for (size_t p; (p = next.fetch_add(1, std::memory_order_relaxed)) < parts;) {
      decode(p);
      if (helper) g_helper_parts.fetch_add(1, std::memory_order_relaxed);
      done.fetch_add(1, std::memory_order_release);
    }
  };
  auto side = [&] {
    if (walker != SecondPartWalker::kCallerWalksOn) take_parts(true);
    if (also != nullptr) (void)also->RunIfUnclaimed();
    return Status::Ok();
  };
  auto main = [&] {
    if (walker == SecondPartWalker::kHelperPath) {
      decode(0);
      done.fetch_add(1, std::memory_order_release);
    } else {
      take_parts(false);
    }
    if (also != nullptr) (void)also->RunIfUnclaimed();
    YieldUntil([&] { return done.load(std::memory_order_acquire) == parts; });
    return Status::Ok();
  };
  if (walker == SecondPartWalker::kHelperPath)
    (void)RunConcurrently(side, main);
  else
    (void)OfferToHelper(side, main);
  return first_error();
}

Status DecodeApplyBandedLocations(std::span<const uint8_t> in, BandedForm form, std::span<const ContextSegment> segs,
                                  std::span<const std::span<uint32_t>> positions, const BandedValueSection& values,
                                  const WalkApply& apply) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_expected = 0;
  for (const auto& p : positions) total_expected += p.size();
  values.decode_share(0);
  values.decode_share(1);
  DCR_RETURN_IF_ERROR(values.result());  // the value section's errors come first
  BandedHeader h;
  DCR_RETURN_IF_ERROR(ReadBandedHeader(in, form, total_elements, total_expected, &h));
  const PartDecoder decoder(h, segs, total_elements, positions);
  uint64_t* ordinals = ScratchWords(total_expected).data();
  const size_t parts = h.parts;
  std::array<PartOrdinals, kMaxBandParts> ord{};
  size_t first_bad = 0;  // the first part whose ordinals fail, or `parts`
  Status ordinal_error;
  for (; first_bad < parts; ++first_bad) {
    ordinal_error = decoder.Ordinals(first_bad, ordinals + decoder.FirstChange(first_bad), &ord[first_bad]);
    if (!ordinal_error.ok()) break;
  }
  // With a part refused, the parts before it are walked without applying, only to find the
  // first error as DecodeBandedLocations would.
  const WalkApply* walk_apply = first_bad == parts ? &apply : nullptr;
  std::array<std::vector<uint64_t>, kMaxBandParts> applied;  // [p]: Walk's *applied
  for (size_t p = 0; p < first_bad; ++p) {
    const Status walked = decoder.Walk(p, ord[p], walk_apply, &applied[p]);
    if (walked.ok()) continue;
    // Undo what the walks applied, this part's tiles and every earlier part's: the same XOR
    // masks onto the same elements.
    if (walk_apply != nullptr)
      for (size_t q = 0; q <= p; ++q)
        for (size_t s = 0; s < segs.size(); ++s)
          if (applied[q][s] > 0) {
            const uint64_t from = decoder.FirstSlot(q, s);
            ApplyChangeRun(apply.to[s], DTypeWidth(segs[s].dtype), true, false, apply.xor_values[s], positions[s].data(),
                           from, from + applied[q][s]);
          }
    return walked;
  }
  return ordinal_error;
}

}  // namespace dcr
