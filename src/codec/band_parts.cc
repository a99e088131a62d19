// The banded decoder's header reader and per-part decoder (band_parts.h).
#include "codec/band_parts.h"

#include <algorithm>

#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"
#include "codec/split_rice.h"

namespace dcr {

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

PartDecoder::PartDecoder(const BandedHeader& h, std::span<const ContextSegment> segs, uint64_t total_elements,
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

Status PartDecoder::Within32BitOrdinals(size_t p) const {
  const uint64_t elements = starts_[p + 1].at - starts_[p].at;
  if (elements >= kMaxPartElements)
    return Corrupt("banded context code: " + std::to_string(elements) + " elements" + PartName(p) +
                   ": this decoder takes parts of fewer than 2^32");
  if (h_.form == BandedForm::kPartsSplitRice && h_.stream[p].size() >= kMaxSplitRiceStream32Bytes)
    return Corrupt("banded context code: a stream of " + std::to_string(h_.stream[p].size()) + " bytes" + PartName(p) +
                   ": this decoder takes fewer than 2^29");
  return Status::Ok();
}

Status PartDecoder::Ordinals(size_t p, uint32_t* ordinals, PartOrdinals* ord) const {
  DCR_RETURN_IF_ERROR(Within32BitOrdinals(p));
  const std::string part = PartName(p);
  const uint64_t elements = starts_[p + 1].at - starts_[p].at;
  if (h_.form == BandedForm::kPartsSplitRice) {
    const size_t k = static_cast<size_t>(h_.bands.k);
    const SplitRiceError e = GetSplitRiceOrdinals(h_.stream[p], std::span<const uint64_t>(h_.count[p]).first(k),
                                                  std::span<const uint8_t>(h_.rice[p]).first(k), elements, ordinals);
    if (!e.ok())
      return Corrupt("banded context code: " + e.Message() + (e.NamesBand() ? " in band " + std::to_string(e.band) : "") +
                     part);
    const uint32_t* o = ordinals;
    for (size_t b = 0; b < kMaxContextBands; o += h_.count[p][b++]) (*ord)[b] = o;
  } else {
    BitReader bits(h_.stream[p]);
    uint32_t* o = ordinals;
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

bool PartDecoder::OrdinalBands(size_t p, size_t from, size_t to, uint32_t* out) const {
  const size_t k = static_cast<size_t>(h_.bands.k);
  if (!Within32BitOrdinals(p).ok()) return false;  // Ordinals says why
  return GetSplitRiceRuns(h_.stream[p], std::span<const uint64_t>(h_.count[p]).first(k),
                          std::span<const uint8_t>(h_.rice[p]).first(k), starts_[p + 1].at - starts_[p].at, from, to, out);
}

Status PartDecoder::Walk(size_t p, const PartOrdinals& ord, const WalkApply* apply,
            std::vector<uint64_t>* applied) const {
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

Status PartDecoder::Decode(size_t p, uint32_t* ordinals) const {
  PartOrdinals ord{};
  DCR_RETURN_IF_ERROR(Ordinals(p, ordinals, &ord));
  return Walk(p, ord);
}

uint64_t PartDecoder::FirstSlot(size_t p, size_t s) const {
  const uint64_t c0 = change_first_[p];
  return s != starts_[p].seg ? 0 : std::clamp(c0, segment_first_[s], segment_first_[s + 1]) - segment_first_[s];
}

}  // namespace dcr
