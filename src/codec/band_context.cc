// Banded context coding of locations (docs/format.md §2.7): the O(changes) streams; the O(dense)
// walks over the old bits are band_walk.h's.
#include "codec/band_context.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <vector>

#include "base/thread_pool.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"
#include "codec/simd_masks.h"

namespace dcr {
namespace {

// A per-thread buffer of at least n words, reused across payloads: a fresh buffer of this size
// (8 bytes per change) would be page-faulted in for every payload.
std::vector<uint64_t>& ScratchWords(uint64_t n) {
  thread_local std::vector<uint64_t> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch;
}

// A tile's words: DecodeBandWalk reads up to this many plus one past a band bitmap's last set bit's word.
constexpr uint64_t kTileWordsAfter = kMaskTileElements / 64;

std::atomic<uint64_t> g_split_walks{0}, g_split_fallbacks{0};

}  // namespace

BandWalkSplitCounts GetBandWalkSplitCounts() { return {g_split_walks.load(), g_split_fallbacks.load()}; }

void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out) {
  const FittedBands fit = FitContextBands(segs, positions);
  const size_t k = static_cast<size_t>(fit.bands.k);
  std::array<uint64_t, kMaxContextBands> offset{}, population;
  for (size_t b = 1; b < kMaxContextBands; ++b) offset[b] = offset[b - 1] + fit.changes[b - 1];
  std::vector<uint64_t>& gaps = ScratchWords(offset[kMaxContextBands - 1] + fit.changes[kMaxContextBands - 1]);
  EncodeBandWalk(segs, positions, fit.bands, offset, gaps.data(), &population);

  out->push_back(static_cast<uint8_t>(k));
  for (size_t i = 0; i + 1 < k; ++i) out->push_back(fit.bands.t[i]);
  std::array<int, kMaxContextBands> rice{};
  for (size_t b = 0; b < k; ++b) {
    const std::span<const uint64_t> g(gaps.data() + offset[b], fit.changes[b]);
    PutVarint(*out, g.size());
    if (g.empty()) continue;
    rice[b] = BestRiceParameter(g, population[b]);
    out->push_back(static_cast<uint8_t>(rice[b]));
  }
  BitWriter w(*out);
  for (size_t b = 0; b < k; ++b) PutRiceGaps(w, std::span<const uint64_t>(gaps.data() + offset[b], fit.changes[b]), rice[b]);
  w.Flush();
}

namespace {

// Where two threads split the decoder's walk: the first walks the elements before element `elem`
// (a tile start) of segment `seg`, the second the rest.
struct WalkSplit {
  bool use = false;
  size_t seg = 0;
  uint64_t elem = 0;
};

WalkSplit ChooseWalkSplit(std::span<const ContextSegment> segs, uint64_t total_elements, int threads) {
  WalkSplit split;
  if (threads < 2 || total_elements < kSplitWalkMinElements) return split;
  uint64_t before = 0;  // elements of the segments before s
  for (size_t s = 0; s < segs.size(); ++s) {
    const uint64_t n = segs[s].base.size() / DTypeWidth(segs[s].dtype);
    if (before + n > total_elements / 2) {
      split = {true, s, (total_elements / 2 - before) / kMaskTileElements * kMaskTileElements};
      return split;
    }
    before += n;
  }
  return split;
}

// The walk in two parts on two threads, the second starting from `split_run` (each band's
// population before the split). True only if both parts succeed and every count agrees, in
// which case the positions are the serial walk's; otherwise the caller walks again serially,
// for its errors.
bool WalkInTwoParts(std::span<const ContextSegment> segs, const ContextBands& bands, const WalkSplit& split,
                    const BandWords& split_run, const std::array<const uint64_t*, kMaxContextBands>& ordinals,
                    const std::array<const uint64_t*, kMaxContextBands>& bitmap, const BandWords& count,
                    std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions) {
  WalkPart first, second;
  first.seg_end = split.seg + 1;
  first.end_elem = split.elem;
  uint64_t changes_before = 0;  // changed ordinals before the split, over all bands
  for (size_t b = 0; b < kMaxContextBands; ++b) {
    first.limit[b] = static_cast<uint64_t>(std::lower_bound(ordinals[b], ordinals[b] + count[b], split_run[b]) - ordinals[b]);
    changes_before += first.limit[b];
  }
  uint64_t seg_before = 0;  // positions of the segments before split.seg
  for (size_t s = 0; s < split.seg; ++s) seg_before += expected[s];
  if (changes_before < seg_before || changes_before - seg_before > expected[split.seg]) return false;
  const uint64_t out_before = changes_before - seg_before;  // split.seg's positions before the split
  second.from_seg = split.seg;
  second.from_elem = split.elem;
  second.seg_end = segs.size();
  second.run = split_run;
  second.placed = first.limit;
  second.limit = count;
  second.first_out = out_before;
  std::vector<uint64_t> room_first(expected.begin(), expected.end()), room_second = room_first;
  room_first[split.seg] = out_before;
  room_second[split.seg] -= out_before;
  std::vector<uint64_t> filled_first(segs.size(), 0), filled_second(segs.size(), 0);
  bool ok_first = false, ok_second = false;
  (void)RunConcurrently(
      [&] {
        ok_second = DecodeBandWalk(segs, bands, ordinals, bitmap, room_second, positions, &second, &filled_second);
        return Status::Ok();
      },
      [&] {
        ok_first = DecodeBandWalk(segs, bands, ordinals, bitmap, room_first, positions, &first, &filled_first);
        return Status::Ok();
      });
  if (!ok_first || !ok_second || first.placed != first.limit || second.placed != count) return false;
  for (size_t s = 0; s < segs.size(); ++s) {
    const uint64_t want_first = s < split.seg ? expected[s] : s == split.seg ? out_before : 0;
    if (filled_first[s] != want_first || filled_second[s] != expected[s] - want_first) return false;
  }
  return true;
}

}  // namespace

Status DecodeBandedLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                             std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions,
                             int threads) {
  uint64_t total_elements = 0, total_expected = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    total_elements += segs[s].base.size() / DTypeWidth(segs[s].dtype);
    total_expected += expected[s];
  }
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
  std::array<uint64_t, kMaxContextBands> count{};
  std::array<uint8_t, kMaxContextBands> rice{};
  uint64_t sum = 0;
  for (size_t b = 0; b < k8; ++b) {
    if (!r.ReadVarint(&count[b]) || count[b] > total_expected - sum)
      return Corrupt("banded context code: bad change count of band " + std::to_string(b));
    sum += count[b];
    if (count[b] > 0 && (!r.ReadByte(&rice[b]) || rice[b] > kMaxContextRice))
      return Corrupt("banded context code: bad Rice parameter of band " + std::to_string(b));
  }
  if (sum != total_expected) return Corrupt("banded context code: band counts do not add up to the payload's changes");

  // Changed ordinals, band after band, ascending within a band, and the same as one bitmap per
  // band over its ordinals, zero for kTileWords + 1 words past its last one (DecodeBandWalk
  // reads that far). Memory: 8 bytes per change plus a bit per ordinal up to each band's last.
  std::vector<uint64_t>& ordinals = ScratchWords(total_expected);
  std::array<uint64_t, kMaxContextBands> offset{};
  for (size_t b = 1; b < kMaxContextBands; ++b) offset[b] = offset[b - 1] + count[b - 1];
  thread_local std::vector<uint64_t> bitmaps;
  std::array<const uint64_t*, kMaxContextBands> band_ordinals, band_bitmap;
  auto read_ordinals = [&] {
    BitReader bits(r.Rest());
    for (size_t b = 0; b < kMaxContextBands; ++b)
      if (!GetRiceOrdinals(bits, count[b], rice[b], total_elements, ordinals.data() + offset[b]))
        return Corrupt("banded context code: truncated or out-of-range gap in band " + std::to_string(b));
    if (bits.bytes_consumed() != r.remaining()) return Corrupt("banded context code: trailing bytes");
    std::array<uint64_t, kMaxContextBands + 1> map_at{};
    for (size_t b = 0; b < kMaxContextBands; ++b)
      map_at[b + 1] = map_at[b] + (count[b] == 0 ? 0 : (ordinals[offset[b] + count[b] - 1] >> 6) + kTileWordsAfter + 2);
    if (bitmaps.size() < map_at[kMaxContextBands]) bitmaps.resize(map_at[kMaxContextBands]);
    std::fill_n(bitmaps.begin(), map_at[kMaxContextBands], 0);
    for (size_t b = 0; b < kMaxContextBands; ++b) {
      uint64_t* map = bitmaps.data() + map_at[b];
      for (uint64_t i = offset[b]; i < offset[b] + count[b]; ++i) map[ordinals[i] >> 6] |= uint64_t{1} << (ordinals[i] & 63);
      band_ordinals[b] = ordinals.data() + offset[b];
      band_bitmap[b] = map;
    }
    return Status::Ok();
  };
  // With a second thread, it counts the band populations before the split (which needs only the
  // old bits) while this one reads the ordinals; then each walks one part.
  const WalkSplit split = ChooseWalkSplit(segs, total_elements, threads);
  BandWords split_run{};
  if (split.use) {
    DCR_RETURN_IF_ERROR(RunConcurrently(
        [&] {
          CountBandPopulations(segs, bands, split.seg, split.elem, &split_run);
          return Status::Ok();
        },
        read_ordinals));
  } else {
    DCR_RETURN_IF_ERROR(read_ordinals());
  }

  for (size_t s = 0; s < segs.size(); ++s) positions[s]->resize(expected[s]);
  const bool walked = split.use && WalkInTwoParts(segs, bands, split, split_run, band_ordinals, band_bitmap, count, expected,
                                                  positions);
  if (split.use) {
    g_split_walks.fetch_add(1, std::memory_order_relaxed);
    if (!walked) g_split_fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
  if (walked) return Status::Ok();
  // One thread walks everything: without a split, and for a failed split walk's error.
  WalkPart all;
  all.seg_end = segs.size();
  all.limit = count;
  std::vector<uint64_t> filled(segs.size(), 0);
  if (!DecodeBandWalk(segs, bands, band_ordinals, band_bitmap, expected, positions, &all, &filled))
    return Corrupt("banded context code: a segment has more changes than its table entry");
  for (size_t b = 0; b < k8; ++b)
    if (all.placed[b] != count[b])
      return Corrupt("banded context code: band " + std::to_string(b) + " has ordinals past its population");
  for (size_t s = 0; s < segs.size(); ++s)
    if (filled[s] != expected[s])
      return Corrupt("banded context code: segment " + std::to_string(s) + " change count disagrees with its table entry");
  return Status::Ok();
}

}  // namespace dcr
