// Banded context-mode location coding (payload codec modes 2-4, docs/format.md §2.7-2.9). Both sides hold
// the old bits, and the exponent of an element's old value predicts whether it changes (one BF16
// ulp is smaller for small magnitudes). The encoder cuts the class axis (the exponent field,
// ContextClassFor) into at most 8 contiguous bands fitted to the payload; each band's elements,
// taken in payload order across all segments, form a sequence in which the changed ones are
// Rice-coded by gap with a parameter fitted to that band. Mode 4 (written) codes the payload in
// parts that threads code and decode independently, each part's Rice codes split into a
// remainder and a unary area (split_rice.h); mode 3 (read) interleaves them, mode 2 (read) is
// one part.
//
// On the real trajectories deltas with fitted bands are within 0.2 % of their size with one class
// per exponent value (mode 1, context_coding.h), and both directions are several times faster:
// band membership of 64 elements is a few SIMD compares and popcounts (simd_masks.h), so neither
// side visits unchanged elements one by one. The O(dense) walk over the old bits still bounds
// decoding (docs/format.md §2.7).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "codec/band_fit.h"
#include "codec/context_coding.h"
#include "codec/second_part_walker.h"
#include "codec/simd_masks.h"

namespace dcr {

// Parts (payload codec mode 3, docs/format.md §2.8): the payload's elements cut into 1 to
// kMaxBandParts ranges, each with its own per-band change counts, Rice parameters and bit stream,
// its ordinals counted from its own start. So each part is coded and decoded on its own, by
// whichever thread takes it, and nothing about a part needs the parts before it.
inline constexpr size_t kMaxBandParts = 8;
// Part boundaries lie on multiples of this many elements from their segment's start (normative:
// the decoder derives the boundaries from the part count). A multiple of kMaskTileElements, so
// a part starts at a tile of the walks.
inline constexpr uint64_t kBandPartAlign = 4096;
static_assert(kBandPartAlign % kMaskTileElements == 0);
// The encoder's default: at least this many elements per part. Below it a part's own counts and
// Rice parameters (about 10-20 bytes) would weigh on small payloads for threads they rarely get.
inline constexpr uint64_t kDefaultBandPartElements = 512 * 1024;

// The most elements in one part the encoder writes. The decoder takes parts of fewer than 2^32
// elements (32-bit ordinals) and split Rice streams of fewer than 2^29 bytes (32-bit bit
// indices); a part's stream is at most about a bit per element (the Rice parameter 0 codes a
// band's changes and gaps in one bit each, and the fit takes no larger code), so 2^31 elements
// keep both with room.
inline constexpr uint64_t kMaxEncodedPartElements = uint64_t{1} << 31;

// The most elements a part of `total_elements` cut into `parts` can have (a part starts at a
// multiple of kBandPartAlign within its segment, up to kBandPartAlign - 1 before its share).
inline uint64_t MaxPartElements(uint64_t total_elements, size_t parts) {
  return (total_elements + parts - 1) / parts + kBandPartAlign;
}

// The bound the encoder keeps its parts within: kMaxEncodedPartElements, or a smaller one a test
// set (SetMaxEncodedPartElementsForTests; 0 restores the constant), so that the bound's effects
// show on payloads a test can hold.
uint64_t MaxEncodedPartElements();
void SetMaxEncodedPartElementsForTests(uint64_t elements);

// Whether the encoder can code locations of `total_elements` in banded context mode: in
// kMaxBandParts parts, none above MaxEncodedPartElements() (more elements: plain mode).
bool BandedCodeFits(uint64_t total_elements);

// The parts the encoder cuts `total_elements` into: the largest power of two at most
// total / part_elements and total / kBandPartAlign, within 1..kMaxBandParts, or, where parts
// that few could exceed MaxEncodedPartElements(), the fewest more that do not (where
// BandedCodeFits). A function of the payload alone, so the bytes do not depend on the thread
// count.
size_t ChooseBandParts(uint64_t total_elements, uint64_t part_elements);

// Where part i starts, for i = 0..parts (parts: the end): segment `seg`, element `elem` of it,
// and `at`, the element's index in payload order. Part i > 0 starts at the multiple of
// kBandPartAlign (from its segment's start) at or below payload element floor(i * total / parts).
// Needs total >= parts * kBandPartAlign when parts > 1, so that every part holds an element.
struct BandPartStart {
  size_t seg = 0;
  uint64_t elem = 0, at = 0;
  // For a part ending here: one past its last segment, and its end within that segment (the
  // walks' seg_end and end_elem).
  size_t seg_end() const { return elem == 0 ? seg : seg + 1; }
  uint64_t end_elem() const { return elem == 0 ? ~uint64_t{0} : elem; }
};
using BandPartStarts = std::array<BandPartStart, kMaxBandParts + 1>;
BandPartStarts FindBandPartStarts(std::span<const ContextSegment> segs, uint64_t total_elements, size_t parts);

// The banded code's forms (docs/format.md §2.7-2.9): one part without the part fields (mode 2),
// parts with interleaved Rice codes (mode 3), parts with split Rice streams (mode 4,
// split_rice.h).
enum class BandedForm : uint8_t { kOnePart, kParts, kPartsSplitRice };

// Appends the banded code in parts (mode 4, or mode 3 without `split_rice`) of the changed positions (positions[i] ascending,
// relative to segment i, at least one in all) to `out`, with ChooseBandParts(total elements,
// part_elements) parts. Deterministic: a function of the segments' bytes and part_elements
// only, the same with any thread count. The band fit's counts are `counted` if given (every
// segment's, made beforehand with any stride by FitCounter, band_fit.h: the code is then a
// function of those counts instead of FitSampleStride(segs)'s), else the calling thread makes
// them. With threads >= 2 and at least kSplitWalkMinElements elements, a helper thread runs
// `early` (or without it `also`: other work of the same payload) while the calling thread fits
// the bands, then takes parts from the back, then `also`; the calling thread takes parts from
// the front, then `also` (the steps the helper has not). Each step is done once, by whichever
// thread claims it first. `early` and `also` may still be unclaimed on return; the caller runs
// them then (RunIfUnclaimed). Below kSplitWalkMinElements a helper only runs `early` and
// `also`. `coded`, if given, runs once, right after the code is appended to `out`, on the thread
// whose part was the last to be finished (which then takes `also`, while the other thread may
// already be in it), and has returned when this returns. (band_encode.cc)
void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out, uint64_t part_elements = kDefaultBandPartElements, int threads = 1,
                           ClaimableTask* early = nullptr, ClaimableTask* also = nullptr,
                           const FitCounts* counted = nullptr, bool split_rice = true,
                           const std::function<void()>& coded = {});

// Whether EncodeBandedLocations uses a second thread for these segments.
bool EncodeUsesHelper(std::span<const ContextSegment> segs, int threads);

// Inverse, for every form:
// fills positions[i] with exactly positions[i].size() ascending positions of segment i, or fails
// with kCorrupt (the spans' contents then unspecified). Never reads outside `in` or the
// segments' base bytes; the memory it uses besides `positions` is bounded by their total size.
// With threads >= 2, a helper thread may decode parts (when it comes in time);
// positions and errors are the same as with one thread (the first failing part's error). With
// threads >= 2, the helper also runs `also` (another section's decode) if no thread has claimed
// it; the caller runs it afterwards if it is still unclaimed.
Status DecodeBandedLocations(std::span<const uint8_t> in, BandedForm form, std::span<const ContextSegment> segs,
                             std::span<const std::span<uint32_t>> positions, int threads = 1, ClaimableTask* also = nullptr);

struct WalkApply;  // band_walk.h

// The value section, for DecodeApplyBandedLocations: decode_share(share, apart) decodes share 0
// or 1 (ValueSectionDecoder's shares); with apart, the two shares run on two threads at once and
// so must share no decoder (a decoder shared by two threads, its table built by one and read by
// both, decoded each share markedly slower). result() is the section's status once both shares
// ran, either way; share_values(share), after decode_share(share, true), the payload-order
// values [first, second) that share decoded (share 0's end is share 1's start). `splits`: both
// shares hold values (the Huffman code in streams).
struct BandedValueSection {
  std::function<void(int, bool)> decode_share;
  std::function<void()> decode_all;  // both shares on the calling thread (ValueSectionDecoder::DecodeAll)
  std::function<Status()> result;
  std::function<std::pair<uint64_t, uint64_t>(int)> share_values;
  bool splits = false;
};

// DecodeBandedLocations that also applies the changes (DecodeApplyPayload), each tile's as soon
// as the walk has placed them, while the tile's old bits are in cache: `apply` (band_walk.h)
// names, per segment, the bytes to change and the changes' XOR masks (or, with steps, their
// differences), which `values` decodes.
// On one thread: first the value section, then every part's ordinals, then, only if all of
// those succeeded, the parts' walks. With threads >= 2, where there are two parts or two value
// shares, a helper thread takes value share 1 and the later half of the parts while the calling
// thread takes share 0 and the first half (band_decode_apply.cc). On failure nothing stays
// applied (the applied changes are taken back) and the error is the one DecodeBandedLocations
// would return, the value section's first.
Status DecodeApplyBandedLocations(std::span<const uint8_t> in, BandedForm form, std::span<const ContextSegment> segs,
                                  std::span<const std::span<uint32_t>> positions, const BandedValueSection& values,
                                  const WalkApply& apply, int threads = 1);

// Parts whose last bands' ordinals the thread that does not walk the part decoded (two-thread
// DecodeApplyBandedLocations, where the threads' parts hold unequal changes), since the process
// started.
uint64_t GetOrdinalTailsHandedOff();

// Parts that a helper thread (not the calling thread) decoded, since the process started.
uint64_t GetBandPartsDecodedByHelper();

// The band fit's class counts are split between two threads only in payloads this large.
inline constexpr uint64_t kSplitWalkMinElements = 256 * 1024;

}  // namespace dcr
