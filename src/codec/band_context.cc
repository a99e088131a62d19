// Compiled once per Highway target (foreach_target.h): the O(dense) walks over band masks run
// with the target's SIMD and POPCNT; the HWY_ONCE part codes the O(changes) streams and
// dispatches the walks.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/band_context.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <bit>
#include <vector>

#include "codec/band_context.h"
#include "codec/simd_masks-inl.h"
#include "codec/simd_masks.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

using BandWords = std::array<uint64_t, kMaxContextBands>;

// Walks every element of every segment in payload order, 64 at a time, keeping each band's
// running population. For each word it calls fn(segment, first element, band masks, band
// populations before the word); mask[b] has bit j set iff element first + j is in band b.
template <typename Fn>
void WalkBands(std::span<const ContextSegment> segs, const ContextBands& bands, BandWords* run, Fn&& fn) {
  const int k = bands.k;
  uint64_t ge[(kMaxContextBands - 1) * (kMaskTileElements / 64)];
  for (size_t s = 0; s < segs.size(); ++s) {
    const ContextClassFn f = ContextClassFor(segs[s].dtype);
    const uint32_t w = DTypeWidth(segs[s].dtype);
    const uint64_t n = segs[s].base.size() / w;
    for (uint64_t tile = 0; tile < n; tile += kMaskTileElements) {
      const size_t tn = static_cast<size_t>(std::min<uint64_t>(kMaskTileElements, n - tile));
      const size_t words = (tn + 63) / 64;
      if (k > 1)
        ClassAtLeastMasksAnyWidth(segs[s].base.data() + tile * w, w, tn, f.shift, static_cast<uint32_t>(f.mask),
                                  bands.t.data(), k - 1, ge);
      for (size_t wd = 0; wd < words; ++wd) {
        const size_t len = std::min<size_t>(64, tn - 64 * wd);
        uint64_t above = len == 64 ? ~uint64_t{0} : (uint64_t{1} << len) - 1;  // class >= t[b - 1]
        BandWords mask;
        for (int b = 0; b < k; ++b) {
          const uint64_t next = b + 1 < k ? ge[static_cast<size_t>(b) * words + wd] : 0;
          mask[static_cast<size_t>(b)] = above & ~next;
          above = next;
        }
        fn(s, tile + 64 * wd, mask, *run);
        for (int b = 0; b < k; ++b) (*run)[static_cast<size_t>(b)] += static_cast<uint64_t>(PopCount64(mask[static_cast<size_t>(b)]));
      }
    }
  }
}

// Each band's gaps (in band ordinals): band b's go to gaps[offset[b]...] in position order.
// *population = each band's population.
void EncodeBandWalk(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                    const ContextBands& bands, const BandWords& offset, uint64_t* gaps, BandWords* population) {
  BandWords next{};  // per band, the ordinal a change would take with gap 0
  std::array<uint64_t*, kMaxContextBands> out;
  for (size_t b = 0; b < kMaxContextBands; ++b) out[b] = gaps + offset[b];
  *population = BandWords{};
  const uint32_t* pos = nullptr;
  const uint32_t* pos_end = nullptr;
  size_t seg = SIZE_MAX;
  WalkBands(segs, bands, population, [&](size_t s, uint64_t first, const BandWords& mask, const BandWords& run) {
    if (s != seg) seg = s, pos = positions[s].data(), pos_end = pos + positions[s].size();
    for (; pos != pos_end && *pos < first + 64; ++pos) {
      const uint64_t bit = uint64_t{1} << (*pos - first);
      size_t b = 0;  // the band holding the bit, without a data-dependent branch
      for (size_t i = 1; i < static_cast<size_t>(bands.k); ++i) b += (mask[i] & bit) != 0 ? i : 0;
      const uint64_t ordinal = run[b] + static_cast<uint64_t>(PopCount64(mask[b] & (bit - 1)));
      *out[b]++ = ordinal - next[b];
      next[b] = ordinal + 1;
    }
  });
}

// The (j+1)-th lowest set bit of `mask` (which has more than j set bits).
HWY_INLINE int SelectBit(uint64_t mask, uint64_t j) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // these targets guarantee BMI2
  return static_cast<int>(_tzcnt_u64(_pdep_u64(uint64_t{1} << j, mask)));
#else
  for (; j > 0; --j) mask &= mask - 1;
  return __builtin_ctzll(mask);
#endif
}

// Places each band's changed ordinals back at positions: band b's are ordinals[offset[b] ..
// offset[b] + count[b]), followed by a UINT64_MAX sentinel. positions[s] must hold expected[s]
// slots. Returns false if a segment would get more than expected[s]; *placed[b] = ordinals of
// band b placed (fewer than count[b] when an ordinal lies past the band's population); *filled[s]
// = positions written to segment s.
bool DecodeBandWalk(std::span<const ContextSegment> segs, const ContextBands& bands, const uint64_t* ordinals,
                    const BandWords& offset, std::span<const uint64_t> expected,
                    std::span<std::vector<uint32_t>* const> positions, std::array<size_t, kMaxContextBands>* placed,
                    std::vector<uint64_t>* filled) {
  // Band-major per tile: each band scans its own word masks (a tight loop whose branch is
  // predictable for the many bands with few changes), marking its changes in a tile bitmap;
  // the bitmap then yields the tile's positions in ascending order.
  const size_t k = static_cast<size_t>(bands.k);
  BandWords target, run{};  // per band: the next changed ordinal (the sentinel at the end), population so far
  std::array<const uint64_t*, kMaxContextBands> at{};
  for (size_t b = 0; b < kMaxContextBands; ++b) at[b] = ordinals + offset[b], target[b] = *at[b];
  constexpr size_t kWords = kMaskTileElements / 64;
  uint64_t ge[(kMaxContextBands - 1) * kWords];
  uint64_t hit[kWords];
  bool ok = true;
  for (size_t s = 0; s < segs.size() && ok; ++s) {
    const ContextClassFn f = ContextClassFor(segs[s].dtype);
    const uint32_t w = DTypeWidth(segs[s].dtype);
    const uint64_t n = segs[s].base.size() / w;
    uint32_t* out = positions[s]->data();
    uint64_t room = expected[s];
    for (uint64_t tile = 0; tile < n && ok; tile += kMaskTileElements) {
      const size_t tn = static_cast<size_t>(std::min<uint64_t>(kMaskTileElements, n - tile));
      const size_t words = (tn + 63) / 64;
      const uint64_t last = tn % 64 == 0 ? ~uint64_t{0} : (uint64_t{1} << (tn % 64)) - 1;  // valid bits, last word
      if (k > 1)
        ClassAtLeastMasksAnyWidth(segs[s].base.data() + tile * w, w, tn, f.shift, static_cast<uint32_t>(f.mask),
                                  bands.t.data(), static_cast<int>(k) - 1, ge);
      for (size_t wd = 0; wd < words; ++wd) hit[wd] = 0;
      for (size_t b = 0; b < k; ++b) {
        const uint64_t* above = b > 0 ? ge + (b - 1) * words : nullptr;  // class >= t[b - 1]
        const uint64_t* next = b + 1 < k ? ge + b * words : nullptr;      // class >= t[b]
        uint64_t t = target[b], r = run[b];
        for (size_t wd = 0; wd < words; ++wd) {
          const uint64_t m = (above ? above[wd] : (wd + 1 == words ? last : ~uint64_t{0})) & ~(next ? next[wd] : 0);
          const uint64_t stop = r + static_cast<uint64_t>(PopCount64(m));
          while (t < stop) {
            hit[wd] |= uint64_t{1} << SelectBit(m, t - r);
            t = *++at[b];
          }
          r = stop;
        }
        target[b] = t, run[b] = r;
      }
      for (size_t wd = 0; wd < words; ++wd) {
        uint64_t h = hit[wd];
        if (h == 0) continue;
        const uint64_t c = static_cast<uint64_t>(PopCount64(h));
        if (c > room) {
          ok = false;
          break;
        }
        room -= c;
        for (; h != 0; h &= h - 1) *out++ = static_cast<uint32_t>(tile + 64 * wd + static_cast<uint64_t>(__builtin_ctzll(h)));
      }
    }
    (*filled)[s] = expected[s] - room;
  }
  for (size_t b = 0; b < kMaxContextBands; ++b) (*placed)[b] = static_cast<size_t>(at[b] - (ordinals + offset[b]));
  return ok;
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"

namespace dcr {

HWY_EXPORT(EncodeBandWalk);
HWY_EXPORT(DecodeBandWalk);

namespace {

// A per-thread buffer of at least n words, reused across payloads: a fresh buffer of this size
// (8 bytes per change) would be page-faulted in for every payload.
std::vector<uint64_t>& ScratchWords(uint64_t n) {
  thread_local std::vector<uint64_t> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch;
}

}  // namespace

void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out) {
  const FittedBands fit = FitContextBands(segs, positions);
  const size_t k = static_cast<size_t>(fit.bands.k);
  std::array<uint64_t, kMaxContextBands> offset{}, population;
  for (size_t b = 1; b < kMaxContextBands; ++b) offset[b] = offset[b - 1] + fit.changes[b - 1];
  std::vector<uint64_t>& gaps = ScratchWords(offset[kMaxContextBands - 1] + fit.changes[kMaxContextBands - 1]);
  HWY_DYNAMIC_DISPATCH(EncodeBandWalk)(segs, positions, fit.bands, offset, gaps.data(), &population);

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

Status DecodeBandedLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                             std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions) {
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

  // Changed ordinals, band after band, ascending within a band, each band followed by a
  // UINT64_MAX sentinel; memory bounded by the payload's change count.
  std::vector<uint64_t>& ordinals = ScratchWords(total_expected + kMaxContextBands);
  std::array<uint64_t, kMaxContextBands> offset{};
  for (size_t b = 1; b < kMaxContextBands; ++b) offset[b] = offset[b - 1] + count[b - 1] + 1;
  BitReader bits(r.Rest());
  for (size_t b = 0; b < kMaxContextBands; ++b) {
    uint64_t* o = ordinals.data() + offset[b];
    if (!GetRiceOrdinals(bits, count[b], rice[b], total_elements, o))
      return Corrupt("banded context code: truncated or out-of-range gap in band " + std::to_string(b));
    o[count[b]] = UINT64_MAX;
  }
  if (bits.bytes_consumed() != r.remaining()) return Corrupt("banded context code: trailing bytes");

  for (size_t s = 0; s < segs.size(); ++s) positions[s]->resize(expected[s]);
  std::array<size_t, kMaxContextBands> placed;
  std::vector<uint64_t> filled(segs.size(), 0);
  if (!HWY_DYNAMIC_DISPATCH(DecodeBandWalk)(segs, bands, ordinals.data(), offset, expected, positions, &placed, &filled))
    return Corrupt("banded context code: a segment has more changes than its table entry");
  for (size_t b = 0; b < k8; ++b)
    if (placed[b] != count[b])
      return Corrupt("banded context code: band " + std::to_string(b) + " has ordinals past its population");
  for (size_t s = 0; s < segs.size(); ++s)
    if (filled[s] != expected[s])
      return Corrupt("banded context code: segment " + std::to_string(s) + " change count disagrees with its table entry");
  return Status::Ok();
}

}  // namespace dcr
#endif  // HWY_ONCE
