// The banded code's decoder internals (docs/format.md §2.7-2.9), shared by the decoders in
// band_context.cc (positions only) and band_decode_apply.cc (applying as it places): the header
// before the bit streams, and per part its ordinals and its walk over the old bits.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "codec/band_context.h"
#include "codec/band_walk.h"

namespace dcr {

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
                        BandedHeader* h);

// Adds one to GetBandPartsDecodedByHelper (band_context.h).
void CountBandPartDecodedByHelper();

// Parts have fewer elements than this: their ordinals are 32 bits (PartOrdinals).
inline constexpr uint64_t kMaxPartElements = uint64_t{1} << 32;

// Each band's ordinals in a part, 32 bits each: a part has fewer than 2^32 elements (Ordinals
// refuses larger ones), and 4 bytes per change halve the memory the decoder writes and reads
// back.
using PartOrdinals = std::array<const uint32_t*, kMaxContextBands>;

// Decodes one part: its ordinals (into ordinals[0, its changes)), then the walk over its
// elements, writing its positions into the slots that payload order gives them.
class PartDecoder {
 public:
  PartDecoder(const BandedHeader& h, std::span<const ContextSegment> segs, uint64_t total_elements,
              std::span<const std::span<uint32_t>> positions);

  size_t parts() const { return h_.parts; }

  // Decodes part p's ordinals into `ordinals` (room for the part's changes, such as
  // OrdinalRoom's; the caller's, not shared with another part) and sets (*ord)[b] to band b's.
  // kCorrupt for a part of 2^32 elements or more, or a split Rice stream of 2^29 bytes or more
  // (limits of this decoder, docs/format.md §2.9: payloads of up to 32 MiB never reach them).
  Status Ordinals(size_t p, uint32_t* ordinals, PartOrdinals* ord) const;

  // Part p's ordinals of bands [from, to) into `out` (room for those bands' changes, and
  // kScratchSlackWords more: the walk's reads past a band's last), as Ordinals would decode them,
  // for a decoder that splits one part's ordinals between two threads (split Rice streams
  // only: SplitsOrdinals). True where Ordinals would not fail on those bands (GetSplitRiceRuns):
  // if either call of a split at band m ([0, m), [m, k)) is false, Ordinals fails and says why.
  bool SplitsOrdinals() const { return h_.form == BandedForm::kPartsSplitRice; }
  bool OrdinalBands(size_t p, size_t from, size_t to, uint32_t* out) const;
  uint64_t BandChanges(size_t p, size_t b) const { return h_.count[p][b]; }
  size_t bands() const { return static_cast<size_t>(h_.bands.k); }

  // Walks part p with the ordinals Ordinals gave, checking that it fills exactly its share of
  // each segment's slots. With `apply`, the walk applies the changes it places (those within
  // apply's slot bounds, if it has any): *applied (if given) gets how many slots of each
  // segment, from FirstSlot on, it wrote (and applied, within the bounds), failure or not.
  Status Walk(size_t p, const PartOrdinals& ord, const WalkApply* apply = nullptr,
              std::vector<uint64_t>* applied = nullptr) const;

  // Ordinals, then Walk without applying.
  Status Decode(size_t p, uint32_t* ordinals) const;

  // Part p's first slot in segment s (0 but in its first segment).
  uint64_t FirstSlot(size_t p, size_t s) const;

  uint64_t FirstChange(size_t p) const { return change_first_[p]; }
  // Room for part p's ordinals in the calling thread's scratch (ScratchOrdinals), valid until
  // this thread takes scratch again: every part a thread decodes reuses the same buffer once the
  // part before it is walked, so a payload's ordinals stay in that core's caches. (All parts'
  // ordinals decoded before the first walk, then 8 bytes per change, went out to memory and back
  // on large payloads: see DecodeApplyOnOneThread.)
  uint32_t* OrdinalRoom(size_t p) const { return ScratchOrdinals(change_first_[p + 1] - change_first_[p]).data(); }
  // The payload-order index of segment s's first change (s = segments: every change).
  uint64_t SegmentFirst(size_t s) const { return segment_first_[s]; }

 private:
  std::string PartName(size_t p) const { return h_.parts > 1 ? " in part " + std::to_string(p) : ""; }
  // kCorrupt where part p exceeds this decoder's 32-bit ordinals (Ordinals).
  Status Within32BitOrdinals(size_t p) const;

  const BandedHeader& h_;
  std::span<const ContextSegment> segs_;
  std::span<const std::span<uint32_t>> positions_;
  BandPartStarts starts_{};
  std::vector<uint64_t> segment_first_;                     // [s]: the payload-order index of segment s's first change
  std::array<uint64_t, kMaxBandParts + 1> change_first_{};  // [p]: the same of part p's first change
};

}  // namespace dcr
