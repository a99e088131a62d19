// The O(dense) walks of banded context coding (band_context.h) over the old bits, compiled per
// SIMD target (band_walk.cc) and dispatched at run time. A tile is kMaskTileElements elements of
// one segment; band membership of 64 elements is a few SIMD compares (simd_masks.h).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "base/reused_buffer.h"
#include "codec/apply_changes.h"
#include "codec/band_fit.h"
#include "codec/context_coding.h"
#include "codec/simd_masks.h"

namespace dcr {

using BandWords = std::array<uint64_t, kMaxContextBands>;

// Both walks classify a tile's old bits (8 KiB of BF16) at once and then spend most of the
// tile's time on its changes, without further misses; from memory, the hardware prefetchers did
// not run ahead into the next tile. In payloads of at least this many bytes of old bits (those of
// models beyond the caches, which are cut into payloads of up to 32 MiB) each tile's walk
// prefetches the next tile into L2 (the decoder in two halves, PrefetchNextTile). On the 221 MB
// generated step (31.6 MB payloads, two threads, alternating with the build before):
// context decode+apply 11.2-11.5 -> 13.1-13.7 GB/s, encode 5.6-5.8 -> 6.0-6.1; the next tile's
// first 1-2 KiB alone gave nothing, nor did prefetching two or three tiles ahead. Where the
// caches hold the payload (the real 2.9 MB pairs in the bench's loop) the 128 prefetches a tile
// cost 4 %.
inline constexpr uint64_t kPrefetchTilesMinBytes = uint64_t{8} << 20;

// A run of consecutive tiles for EncodeBandWalk: from element `from_elem` (a tile start) of
// segment `from_seg` through segment `seg_end` - 1, of which only the elements before `end_elem`
// (when smaller than its size).
struct EncodeWalkPart {
  size_t from_seg = 0, seg_end = 0;
  uint64_t from_elem = 0, end_elem = ~uint64_t{0};
};

// Where an encoder walk over a part ended, per band: its population in the part and the gaps
// written.
struct EncodeWalkEnd {
  BandWords population{}, written{};
};

// Encoder: each band's gaps (in band ordinals counted from the part's start) of the changed
// positions in `part` (positions[s] ascending, relative to segment s, and within the part):
// band b's go to gaps[offset[b]...] in position order.
EncodeWalkEnd EncodeBandWalk(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                             const ContextBands& bands, const BandWords& offset, uint64_t* gaps,
                             const EncodeWalkPart& part);

// A run of consecutive tiles of the payload for DecodeBandWalk: from element `from_elem` (a tile
// start) of segment `from_seg` through segment `seg_end` - 1, of which only the elements before
// `end_elem` (when smaller than its size): one part of the payload (band_context.h), with
// ordinals counted from its start.
struct WalkPart {
  size_t from_seg = 0, seg_end = 0;
  uint64_t from_elem = 0, end_elem = ~uint64_t{0};
  BandWords run{};     // each band's population before the part
  BandWords placed{};  // each band's ordinals placed before the part; on return, through its end
  BandWords limit{};   // the part places band b's ordinals with an index below limit[b] only
  uint64_t first_out = 0;  // positions of segment from_seg written before the part
};

// DecodeBandWalk's optional apply (DecodeApplyPayload): as soon as a tile's positions are
// placed, each change's value goes onto its element while the tile's old bits are still in this
// core's cache. Per segment s: to[s], the bytes of its elements (those segs[s].base reads, or
// memory no segment's base reads), and values[s], its changes' XOR masks in slot order (width
// bytes each), or with `steps` their wrapping differences (value_steps.h), which are added. The
// walk reads a tile's old bits before it applies the tile's changes and never reads them again,
// so `to` may be the very bytes `base` reads.
struct WalkApply {
  std::span<uint8_t* const> to;
  std::span<const uint8_t* const> values;
  bool steps = false;
  ApplyOp op() const { return steps ? ApplyOp::kAdd : ApplyOp::kXor; }
  ApplyOp undo() const { return steps ? ApplyOp::kSubtract : ApplyOp::kXor; }
  // If not empty: per segment, only the changes in slots [slot_lo[s], slot_hi[s]) are applied
  // (the others' values may not be decoded yet); *filled still counts every position written.
  std::span<const uint64_t> slot_lo, slot_hi;
};

// Decoder: places each band's changed ordinals at their positions, for the tiles of `part`.
// Band b's are ordinals[b][0, count) (strictly ascending; 32 bits: a part has fewer than 2^32
// elements, PartDecoder). Segment s receives at most room[s] positions, written
// from positions[s][first_out] for the part's first segment and from positions[s][0] for the
// others, never past that room. Returns false if a segment would get more than room[s];
// part->placed[b] = ordinals of band b placed through the part (fewer than limit[b] at the
// payload's end when an ordinal lies past the band's population); *filled[s] = positions the
// part wrote to segment s. Parts write disjoint positions, so two threads may walk two parts at
// once. With `apply`, also applies each tile's changes once they are placed: the positions
// *filled counts are the changes applied, failure or not.
bool DecodeBandWalk(std::span<const ContextSegment> segs, const ContextBands& bands,
                    const std::array<const uint32_t*, kMaxContextBands>& ordinals, std::span<const uint64_t> room,
                    std::span<const std::span<uint32_t>> positions, WalkPart* part, std::vector<uint64_t>* filled,
                    const WalkApply* apply = nullptr);

// For tests: the band masks the walks build for elements [tile, tile + tn) of `seg` (tile a
// multiple of kMaskTileElements, tn <= kMaskTileElements), on the active SIMD target. masks:
// bands 0..kMaxContextBands - 1 one after another, ceil(tn / 64) words each (band b: the
// elements of class in [t[b - 1], t[b]), with t[-1] = 0 and t[k - 1] past every class; bands
// from k on: none). prefix: the same bands, kMaskTileElements / 64 + 1 entries each, entry wd =
// the band's members in words before wd (its total from its last word on).
struct TileBandsForTests {
  std::vector<uint64_t> masks;
  std::vector<int16_t> prefix;
};
TileBandsForTests LoadTileBandsForTests(const ContextSegment& seg, const ContextBands& bands, uint64_t tile,
                                        size_t tn);

// Where each band's run starts in an array of all bands' entries laid out band after band:
// the sum of the counts of the bands before it.
inline BandWords BandOffsets(const BandWords& counts) {
  BandWords offset{};
  for (size_t b = 1; b < kMaxContextBands; ++b) offset[b] = offset[b - 1] + counts[b - 1];
  return offset;
}

// A per-thread buffer of n words, reused across payloads (the encoder's gaps): a fresh buffer of
// this size (8 bytes per change) would be page-faulted in for every payload. kScratchSlackWords
// more entries lie past the span's end (here and in ScratchOrdinals): the decoder's vector search
// forms the addresses of up to 31 ordinals past a band's last (masked loads that read none of
// them), which must stay within the allocation.
inline constexpr size_t kScratchSlackWords = 32;
template <typename T>
std::span<T> ScratchOf(uint64_t n) {
  thread_local ReusedBuffer<T> scratch;  // one per type: an encoder and a decoder may run on one thread in turn
  return scratch.Take(static_cast<size_t>(n) + kScratchSlackWords).first(static_cast<size_t>(n));
}
inline std::span<uint64_t> ScratchWords(uint64_t n) { return ScratchOf<uint64_t>(n); }
// The same for the decoder's 32-bit ordinals.
inline std::span<uint32_t> ScratchOrdinals(uint64_t n) { return ScratchOf<uint32_t>(n); }

// For tests: decode without BMI2 pdep even where it is fast (the path of other CPUs), or not.
void ForcePortableBitDeposit(bool portable);

}  // namespace dcr
