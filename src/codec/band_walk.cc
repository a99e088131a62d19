// Compiled once per Highway target (foreach_target.h): the O(dense) walks over band masks run
// with the target's SIMD and POPCNT; the HWY_ONCE part dispatches them.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/band_walk.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/apply_changes.h"
#include "codec/band_walk.h"
#include "codec/simd_masks-inl.h"
#include "codec/simd_masks.h"
#include "codec/tile_bands-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

// Prefetches into L2 the old bits of the tile after `tile` in a segment of n elements of `width`
// bytes (nothing past the segment's end), all of them or (halves 2) half `half` of them: the
// walks call it once a tile is classified, so that the next tile's bytes arrive while this
// one's changes are placed (kPrefetchTilesMinBytes). The decoder asks for the second half later
// in the tile: with all 128 lines asked for at once, decode+apply of the 221 MB generated step
// took 1.03-1.06x as long (medians of 20, alternating; thirds were no better than halves, and
// the second half alone, at either point, worse than both: the classification kernel's own
// prefetches into L1, 4 KiB ahead, reach only the next tile's first half). The encoder's tile
// has no such midpoint: its second half asked for after the tile's changes, or after the first
// half of its changes, was no faster.
HWY_INLINE void PrefetchNextTile(const ContextSegment& seg, uint32_t width, uint64_t tile, uint64_t n, int half = 0,
                                 int halves = 1) {
  const uint64_t next = tile + kMaskTileElements;
  if (next >= n) return;
  const uint8_t* from = seg.base.data() + next * width;
  const uint64_t bytes = std::min<uint64_t>(kMaskTileElements, n - next) * width;
  const uint64_t per = kMaskTileElements * width / static_cast<uint64_t>(halves);  // a multiple of 64
  const uint64_t first = per * static_cast<uint64_t>(half), last = std::min(bytes, first + per);
  for (uint64_t at = first; at < last; at += 64) __builtin_prefetch(from + at, 0, 2);
}

// Whether the walks over `segs` prefetch tiles (kPrefetchTilesMinBytes).
bool PrefetchesTiles(std::span<const ContextSegment> segs) {
  uint64_t bytes = 0;
  for (const ContextSegment& seg : segs) bytes += seg.base.size();
  return bytes >= kPrefetchTilesMinBytes;
}

// Each band's ordinal before each word of a tile, in the [word][band] order of the tile's band
// masks (TileBands::mask), so that a change reads both at one index: mask[wd * kMaxContextBands
// + b] and before[wd * kMaxContextBands + b], band b's members before word wd counted from the
// part's start. Made by the GFNI kernel for whole tiles (beside the masks it writes into the
// TileBands), else from the tile's bands (Load) for tiles with more changes than words.
struct TileBandOrdinals {
  const uint64_t* mask = nullptr;  // the tile's TileBands::mask
  alignas(64) uint64_t before[kTileWords * kMaxContextBands];
  // From the bands of a tile whose first element is member run[b] of band b.
  void Load(const TileBands& bands, const BandWords& run) {
    mask = bands.mask;
    const hn::CappedTag<uint64_t, kMaxContextBands> d;
    const size_t n = hn::Lanes(d), words = bands.words;
    for (size_t b = 0; b < kMaxContextBands; b += n) {  // past k, the masks are zero
      auto sum = hn::LoadU(d, run.data() + b);
      for (size_t wd = 0; wd < words; ++wd) {
        hn::Store(sum, d, before + wd * kMaxContextBands + b);
        sum = hn::Add(sum, hn::PopulationCount(hn::Load(d, bands.mask + wd * kMaxContextBands + b)));
      }
    }
  }
};

// The first change of [pos, end) (ascending) at or past `tile_end`, where *pos lies in a tile of
// `words` words: by a linear scan where the tile has at most `words` changes, else by a
// branch-free binary search of the (at most kMaskTileElements) entries past them.
HWY_INLINE const uint32_t* TileStop(const uint32_t* pos, const uint32_t* end, size_t words, uint64_t tile_end) {
  if (static_cast<size_t>(end - pos) <= words || pos[words] >= tile_end) {
    while (pos != end && *pos < tile_end) ++pos;
    return pos;
  }
  const uint32_t* lo = pos + words + 1;
  for (size_t n = std::min<size_t>(static_cast<size_t>(end - lo), kMaskTileElements); n > 0;) {
    const size_t half = n / 2;
    const bool before = lo[half] < tile_end;
    lo = before ? lo + half + 1 : lo;
    n = before ? n - half - 1 : half;
  }
  return lo;
}

// The band of an element of type U: by f, or (kMask != 0, BF16) by its bits >> kShift, the
// sign with the class, from a table of 512 entries.
template <typename U, int kShift, uint64_t kMask>
HWY_INLINE size_t BandOfElement(const uint8_t* band_of, const ContextClassFn& f, U v) {
  if constexpr (kMask != 0) {
    static_assert(sizeof(U) * 8 - kShift <= 9 && kMask == 0xff);
    return band_of[static_cast<uint32_t>(v) >> kShift];
  } else {
    return band_of[static_cast<size_t>((static_cast<uint64_t>(v) >> f.shift) & f.mask)];
  }
}

// Where the encoder walk puts each band's ordinals: out[b] is band b's next slot.
using BandOut = std::array<uint64_t*, kMaxContextBands>;

// A change's band and its ordinal in the band (tb.before + one popcount at one index), for the
// change at element `at` of the segment whose old bits start at `base`, in the tile at `tile`.
struct BandOrdinal {
  size_t band;
  uint64_t ordinal;
};
template <typename U, int kShift, uint64_t kMask>
HWY_INLINE BandOrdinal BandOrdinalOf(const uint8_t* base, const ContextClassFn& f, const uint8_t* band_of,
                                     const TileBandOrdinals& tb, uint64_t tile, uint32_t at) {
  U v;
  std::memcpy(&v, base + size_t{at} * sizeof(U), sizeof(U));
  const size_t b = BandOfElement<U, kShift, kMask>(band_of, f, v);
  const uint64_t p = at - tile, i = (p >> 6) * kMaxContextBands + b;
  const uint64_t below = tb.mask[i] & ((uint64_t{1} << (p & 63)) - 1);
  return {b, tb.before[i] + static_cast<uint64_t>(PopCount64(below))};
}

// The changes [pos, stop) of a tile, by BandOrdinalOf; each ordinal goes to its band's next slot.
template <typename U, int kShift, uint64_t kMask>
void EncodeTileByOrdinals(const ContextSegment& seg, const ContextClassFn& f, uint64_t tile, const TileBandOrdinals& tb,
                          const uint8_t* band_of, const uint32_t* pos, const uint32_t* stop, BandOut* out) {
  const uint8_t* base = seg.base.data();  // in locals: the stores below might alias the members
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // The bands' next slots, counted from band 0's, in the lanes of a vector: a change's slot is a
  // permute away and the update a masked add, with no store and reload of the band's pointer in
  // the chain of consecutive changes of one band (which took ~6 cycles per change).
  alignas(32) uint32_t slot[kMaxContextBands];
  uint64_t* const out0 = (*out)[0];
  uint64_t widest = 0;
  for (size_t b = 0; b < kMaxContextBands; ++b) {
    const auto d = static_cast<uint64_t>((*out)[b] - out0);
    slot[b] = static_cast<uint32_t>(d);
    widest = std::max(widest, d);
  }
  if (widest + kMaskTileElements <= UINT32_MAX) {  // always, unless a payload has 2^32 changes
    __m256i slots = _mm256_load_si256(reinterpret_cast<const __m256i*>(slot));
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), one = _mm256_set1_epi32(1);
    for (; pos != stop; ++pos) {
      const BandOrdinal c = BandOrdinalOf<U, kShift, kMask>(base, f, band_of, tb, tile, *pos);
      const __m256i bv = _mm256_set1_epi32(static_cast<int32_t>(c.band));
      out0[static_cast<uint32_t>(_mm256_cvtsi256_si32(_mm256_permutexvar_epi32(bv, slots)))] = c.ordinal;
      slots = _mm256_mask_add_epi32(slots, _mm256_cmpeq_epi32_mask(bv, lane), slots, one);
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(slot), slots);
    for (size_t b = 0; b < kMaxContextBands; ++b) (*out)[b] = out0 + slot[b];
    return;
  }
#endif
  for (; pos != stop; ++pos) {
    const BandOrdinal c = BandOrdinalOf<U, kShift, kMask>(base, f, band_of, tb, tile, *pos);
    *(*out)[c.band]++ = c.ordinal;
  }
}

// The changes [pos, stop) of a tile with at most as many changes as words, straight from the
// tile's `bands` (a mask and a prefix count per change); the tile's first element is member
// run[b].
template <typename U, int kShift, uint64_t kMask>
void EncodeTileByBands(const ContextSegment& seg, const ContextClassFn& f, uint64_t tile, const TileBands& bands,
                       const BandWords& run, const uint8_t* band_of, const uint32_t* pos, const uint32_t* stop,
                       BandOut* out) {
  const uint8_t* base = seg.base.data();
  for (; pos != stop; ++pos) {
    U v;
    std::memcpy(&v, base + size_t{*pos} * sizeof(U), sizeof(U));
    const size_t b = BandOfElement<U, kShift, kMask>(band_of, f, v);
    const uint64_t p = *pos - tile, wd = p >> 6;
    const uint64_t below = bands.Band(b, wd) & ((uint64_t{1} << (p & 63)) - 1);
    *(*out)[b]++ = run[b] + static_cast<uint64_t>(bands.Before(b, wd) + PopCount64(below));
  }
}

// Calls fn.template operator()<U, kShift, kMask>() for elements of `width` bytes: BF16 with its
// class function's shift and mask as constants (GCC spilled them from the per-change loops).
template <typename Fn>
HWY_INLINE void WithElementType(uint32_t width, const ContextClassFn& f, Fn&& fn) {
  switch (width) {
    case 1: fn.template operator()<uint8_t, 0, 0>(); break;
    case 2:
      if (f.shift == kBF16Class.shift && f.mask == kBF16Class.mask)
        fn.template operator()<uint16_t, kBF16Class.shift, kBF16Class.mask>();
      else
        fn.template operator()<uint16_t, 0, 0>();
      break;
    case 4: fn.template operator()<uint32_t, 0, 0>(); break;
    default: fn.template operator()<uint64_t, 0, 0>(); break;
  }
}

// Band ordinals (ascending) to gaps in place: g[0] = o[0], g[i] = o[i] - o[i - 1] - 1.
void OrdinalsToGaps(uint64_t* o, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t lanes = hn::Lanes(d);
  const auto one = hn::Set(d, 1);
  size_t i = n;
  for (; i >= lanes + 1; i -= lanes)  // from the back: each step reads ordinals not yet replaced
    hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, o + i - lanes), hn::LoadU(d, o + i - lanes - 1)), one), d,
               o + i - lanes);
  for (; i > 1; --i) o[i - 1] = o[i - 1] - o[i - 2] - 1;
}

// EncodeBandWalk of band_walk.h, for this target. Each band's ordinals (counted from the part's
// start) go to its slots as the changes come, then become gaps in one pass per band: with no
// previous ordinal per band in the per-change chain.
EncodeWalkEnd EncodeBandWalk(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                             const ContextBands& bands, const BandWords& offset, uint64_t* gaps,
                             const EncodeWalkPart& part) {
  const size_t k = static_cast<size_t>(bands.k);
  std::array<uint8_t, 512> band_of{};  // by class, or by BF16 bits >> 7 (BandOfElement)
  for (uint32_t c = 0; c < 512; ++c) band_of[c] = static_cast<uint8_t>(bands.BandOf(c & 0xff));
  BandOut out;
  for (size_t b = 0; b < kMaxContextBands; ++b) out[b] = gaps + offset[b];
  BandWords run{};  // per band, the members before the tile
  TileBands tile_bands;
  TileBandOrdinals tb;
  TileClassifiers classifiers(bands);
  const bool prefetch = PrefetchesTiles(segs);
  for (size_t s = part.from_seg; s < part.seg_end; ++s) {
    const TileClassifier& classes = classifiers.For(segs[s]);
    const ContextClassFn f = classes.f;
    const uint32_t w = classes.width;
    const uint64_t size = segs[s].base.size() / w;
    const uint64_t n = s + 1 == part.seg_end ? std::min(size, part.end_elem) : size;
    const uint32_t* pos = positions[s].data();
    const uint32_t* end = pos + positions[s].size();
    for (uint64_t tile = s == part.from_seg ? part.from_elem : 0; tile < n; tile += kMaskTileElements) {
      const size_t tn = static_cast<size_t>(std::min<uint64_t>(kMaskTileElements, n - tile));
      const size_t words = (tn + 63) / 64;
      const uint32_t* stop = TileStop(pos, end, words, tile + tn);
      // A whole tile that the GFNI kernel classifies: straight to its band ordinals. (Through the
      // class rows and their prefix counts, with a pointer per band in memory and gaps formed per
      // change, two-thread context encodes of the real pairs took 1.02-1.03x as long at 0.4-1.4 %
      // change and 1.12x at 4.5-5 %.)
      if (tn == kMaskTileElements && GfniClassifies(classes.gfni)) {
        GfniTileBandOrdinalsAnyClamp(segs[s].base.data() + tile * w, f, classes.gfni, tile_bands.mask, tb.before,
                                     run.data());
        tb.mask = tile_bands.mask;
        if (prefetch) PrefetchNextTile(segs[s], w, tile, n);
        WithElementType(w, f, [&]<typename U, int kShift, uint64_t kMask>() {
          EncodeTileByOrdinals<U, kShift, kMask>(segs[s], f, tile, tb, band_of.data(), pos, stop, &out);
        });
        pos = stop;
        continue;
      }
      LoadTileBands(segs[s], classes, tile, tn, &tile_bands);
      if (prefetch) PrefetchNextTile(segs[s], w, tile, n);
      const bool dense = static_cast<size_t>(stop - pos) > words;  // then a table per tile pays
      if (dense) tb.Load(tile_bands, run);
      WithElementType(w, f, [&]<typename U, int kShift, uint64_t kMask>() {
        if (dense)
          EncodeTileByOrdinals<U, kShift, kMask>(segs[s], f, tile, tb, band_of.data(), pos, stop, &out);
        else
          EncodeTileByBands<U, kShift, kMask>(segs[s], f, tile, tile_bands, run, band_of.data(), pos, stop, &out);
      });
      pos = stop;
      for (size_t b = 0; b < k; ++b) run[b] += static_cast<uint64_t>(tile_bands.Before(b, words));
    }
  }
  EncodeWalkEnd done;
  done.population = run;
  for (size_t b = 0; b < kMaxContextBands; ++b) {
    done.written[b] = static_cast<uint64_t>(out[b] - (gaps + offset[b]));
    OrdinalsToGaps(gaps + offset[b], done.written[b]);
  }
  return done;
}

// The (j+1)-th lowest set bit of `m` (which has more than j set bits), without BMI2: byte
// populations by SWAR, their prefix sums by one multiply, then a table for the byte.
int SelectBitPortable(uint64_t m, uint64_t j) {
  static constexpr auto kInByte = [] {
    std::array<std::array<uint8_t, 8>, 256> t{};
    for (int v = 0; v < 256; ++v)
      for (int i = 0, seen = 0; i < 8; ++i)
        if (v >> i & 1) t[static_cast<size_t>(v)][static_cast<size_t>(seen++)] = static_cast<uint8_t>(i);
    return t;
  }();
  uint64_t s = m - ((m >> 1) & 0x5555555555555555ull);
  s = (s & 0x3333333333333333ull) + ((s >> 2) & 0x3333333333333333ull);
  s = (s + (s >> 4)) & 0x0f0f0f0f0f0f0f0full;
  const uint64_t prefix = s * 0x0101010101010101ull;  // byte i: set bits in bytes 0..i
  // Bytes whose prefix is <= j lie wholly before the wanted bit; they are the low bytes.
  const uint64_t le = ((j * 0x0101010101010101ull) | 0x8080808080808080ull) - prefix;
  const int byte = PopCount64(le & 0x8080808080808080ull);
  const uint64_t before = byte == 0 ? 0 : (prefix >> (8 * byte - 8)) & 0xff;
  return 8 * byte + kInByte[(m >> (8 * byte)) & 0xff][j - before];
}

// The bits of `bits` (low popcount(m) bits) placed at the set bits of `m`, in order: BMI2 pdep
// where the CPU has a fast one.
HWY_INLINE uint64_t DepositBits(uint64_t bits, uint64_t m, bool fast_pdep) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // these targets guarantee BMI2
  if (fast_pdep) return _pdep_u64(bits, m);
#else
  (void)fast_pdep;
#endif
  uint64_t out = 0;
  for (; bits != 0; bits &= bits - 1)
    out |= uint64_t{1} << SelectBitPortable(m, static_cast<uint64_t>(__builtin_ctzll(bits)));
  return out;
}

// A band places its changes in a tile one by one (a vector search for the word and a one-bit
// deposit each) when it has fewer changes than the tile has words; more, and it deposits its
// bitmap word by word (branch-free). Half the words was best on an Emerald Rapids (against a
// quarter and two thirds, when the search read two rows of counts per change). With the counts
// read once per band (now TileBands::before), on a Zen 5 the bound of one change per word took
// 0.87 of the time of one half in one-thread decodes at 4.5 % (where a band has up to ~60
// changes in a tile) and 0.9-1.0 at 7 %; two per word or always one by one were no faster
// there and slower at 48 % (synthetic).
constexpr uint64_t kSparseChangesPerWordNum = 1, kSparseChangesPerWordDen = 1;

// A tile's changes of its sparse bands (those placed one by one), found band by band and
// deposited into the tile's bitmap after the last band: change i is member number rank[i] of
// its band in word wd, slot[i] = wd * kMaxContextBands + b (its mask's index in TileBands::mask;
// the word's bit in the tile bitmap is slot[i] / kMaxContextBands).
// Searching every band before depositing lets the bands' searches overlap (each is a chain of
// dependent steps). The real 4.5 % pair, where 99 % of the changes are sparse: one-thread
// decode+apply in 0.91 of the time of a deposit right after each change's search (this and the
// vector search and the interleaved deposits below); the 0.4 and 1.4 % pairs alike or faster.
struct SparseChanges {
  // Fewer than kTileWords changes per band (the sparse bound), and a vector store's slack.
  static constexpr size_t kCapacity = kMaxContextBands * kTileWords + 32;
  HWY_ALIGN uint16_t slot[kCapacity];
  HWY_ALIGN uint16_t rank[kCapacity];
  size_t n = 0;
};

// The word of the tile holding member number `local` (< the band's members in the tile) of the
// band whose counts are `before` (TileBands::before[b], 64-byte aligned): the last word wd with
// before[wd] <= local. One compare per vector of 16-bit lanes, no branches; past the tile's words
// the counts are the band's total, above `local`.
HWY_INLINE size_t WordOfMemberIn(const int16_t* before, int16_t local) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  static_assert(kTileWords == 64);
  // Both halves' compares in one 64-bit mask: one mask move and one popcount, not two each.
  const __m512i v = _mm512_set1_epi16(local);
  const __mmask32 lo = _mm512_cmpgt_epi16_mask(_mm512_load_si512(before), v);
  const __mmask32 hi = _mm512_cmpgt_epi16_mask(_mm512_load_si512(before + 32), v);
  return kTileWords - 1 - static_cast<size_t>(PopCount64(_cvtmask64_u64(_mm512_kunpackd(hi, lo))));
#else
  const hn::CappedTag<int16_t, kTileWords> d;
  const size_t n = hn::Lanes(d);
  const auto v = hn::Set(d, local);
  size_t after = 0;  // words wholly after the member
  for (size_t i = 0; i < kTileWords; i += n) after += hn::CountTrue(d, hn::Gt(hn::Load(d, before + i), v));
  return kTileWords - 1 - after;
#endif
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// From this many changes of a band in a tile on, the vector search below: its fixed cost loses
// to a few single searches (decodes of the real 0.4 and 1.4 % pairs, where a band has a few
// changes in a tile, took 1.05-1.1x as long with it always).
constexpr uint64_t kSparseVectorMin = 8;

// Band b's ordinals ord[p, last) below `end` (fewer than kTileWords), each member r0 + local of
// the tile, into `out`: 32 at a time, the word of each by a branch-free search over `before`
// (TileBands::before[b]; three compares and four 16-bit permutes for 32 members). Returns the
// first ordinal not taken. Ordinals past `last` are not read (masked loads; their addresses,
// up to 31 entries past the band's last ordinal, lie in ScratchOrdinals' slack).
HWY_INLINE uint64_t FindSparseChangesVector(const uint32_t* ord, uint64_t p, uint64_t last, uint64_t r0, uint64_t end,
                                            const int16_t* before, size_t b, SparseChanges* out) {
  static_assert(kTileWords == 64, "one two-register permute spans the counts");
  const __m512i lo = _mm512_load_si512(before), hi = _mm512_load_si512(before + 32);
  // Ordinals, r0 and end are below 2^32 (a part's elements).
  const __m512i first = _mm512_set1_epi32(static_cast<int32_t>(r0));
  const __m512i stop = _mm512_set1_epi32(static_cast<int32_t>(end));
  const __m512i sixteen = _mm512_set1_epi16(16);
  while (p < last) {
    const uint64_t n = std::min<uint64_t>(32, last - p);
    const uint32_t lanes = n == 32 ? ~0u : (1u << n) - 1;
    __m256i local16[2];  // members' numbers in the tile, 16 bits each
    uint32_t below = 0;  // lanes below `end`: a prefix, the ordinals ascend
    for (int g = 0; g < 2; ++g) {
      const auto m = static_cast<__mmask16>(lanes >> (16 * g));
      const __m512i o = _mm512_maskz_loadu_epi32(m, ord + p + 16 * g);
      below |= static_cast<uint32_t>(_mm512_mask_cmplt_epu32_mask(m, o, stop)) << (16 * g);
      local16[g] = _mm512_cvtepi32_epi16(_mm512_sub_epi32(o, first));
    }
    const __m512i local = _mm512_inserti64x4(_mm512_castsi256_si512(local16[0]), local16[1], 1);
    // The last word wd with before[wd] <= local (before[0] = 0; lanes past `end` are not kept):
    // its group of 16 words by three independent compares with the groups' first counts, then
    // four binary steps within the group. (Six binary steps, each waiting on the one before,
    // took 1.006-1.008x as long in one-thread and two-thread decodes of the real 4.8 % pair;
    // groups of 8 were alike, of 4 slower.)
    __m512i wd = _mm512_setzero_si512();
    for (int g = 1; g < 4; ++g)
      wd = _mm512_mask_add_epi16(wd, _mm512_cmple_epi16_mask(_mm512_set1_epi16(before[16 * g]), local), wd, sixteen);
    for (int16_t step = 8; step >= 1; step = static_cast<int16_t>(step / 2)) {
      const __m512i cand = _mm512_add_epi16(wd, _mm512_set1_epi16(step));
      wd = _mm512_mask_mov_epi16(wd, _mm512_cmple_epi16_mask(_mm512_permutex2var_epi16(lo, cand, hi), local), cand);
    }
    static_assert(kMaxContextBands == 8);
    const __m512i slot = _mm512_add_epi16(_mm512_slli_epi16(wd, 3), _mm512_set1_epi16(static_cast<int16_t>(b)));
    _mm512_storeu_si512(out->slot + out->n, slot);
    _mm512_storeu_si512(out->rank + out->n, _mm512_sub_epi16(local, _mm512_permutex2var_epi16(lo, wd, hi)));
    const int count = PopCount64(below);
    out->n += static_cast<size_t>(count);
    p += static_cast<uint64_t>(count);
    if (static_cast<uint64_t>(count) < n) break;
  }
  return p;
}
#endif

// Band b's ordinals ord[p, last) below `end` (fewer than kTileWords), each member r0 + local of
// the tile, into `out`; returns the first ordinal not taken. One by one, or, from
// kSparseVectorMin of them on, 32 at a time where the target has AVX-512.
HWY_INLINE uint64_t FindSparseChanges(const uint32_t* ord, uint64_t p, uint64_t last, uint64_t r0, uint64_t end,
                                      const int16_t* before, size_t b, SparseChanges* out) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (last - p >= kSparseVectorMin && ord[p + kSparseVectorMin - 1] < end)
    return FindSparseChangesVector(ord, p, last, r0, end, before, b, out);
#endif
  for (; p < last && ord[p] < end; ++p) {
    const auto local = static_cast<int16_t>(ord[p] - r0);
    const size_t wd = WordOfMemberIn(before, local);
    out->slot[out->n] = static_cast<uint16_t>(wd * kMaxContextBands + b);
    out->rank[out->n++] = static_cast<uint16_t>(local - before[wd]);
  }
  return p;
}

// Marks the changes of `sparse` in the tile bitmap `hit`, the list's four quarters interleaved: a
// band's next change often lies in the same word, and its |= in memory then waits on the one
// before; quarters run four such chains at once (two halves: one-thread decodes of the 4.5 %
// pair in 0.93 of the time of one pass in order; with one mask read per change, four quarters
// gave two-thread decode+apply of the real 4.8 % pair in 0.988 of the time of two halves, and
// the 0.4 and 1.4 % pairs' alike, within 1 %).
HWY_INLINE void DepositSparseChanges(const SparseChanges& sparse, const TileBands& bands, uint64_t* hit,
                                     bool fast_pdep) {
  auto one = [&](size_t i) {
    const size_t slot = sparse.slot[i];
    hit[slot / kMaxContextBands] |= DepositBits(uint64_t{1} << sparse.rank[i], bands.mask[slot], fast_pdep);
  };
  const size_t q = sparse.n / 4;
  for (size_t i = 0; i < q; ++i) one(i), one(i + q), one(i + 2 * q), one(i + 3 * q);
  for (size_t i = 4 * q; i < sparse.n; ++i) one(i);
}

// The end of the run of ord[p, n) (ascending) below `end`: a vector of ordinals per step, so
// that the scan ends with one mispredicted branch per band and tile instead of one per change.
// Ordinals and `end` are below 2^32 (a part's elements).
HWY_INLINE uint64_t OrdinalsBelow(const uint32_t* ord, uint64_t p, uint64_t n, uint64_t end) {
  const hn::CappedTag<uint32_t, 16> d;
  const size_t lanes = hn::Lanes(d);
  const auto e = hn::Set(d, static_cast<uint32_t>(end));
  uint64_t q = p;
  for (; q + lanes <= n; q += lanes) {
    const size_t below = hn::CountTrue(d, hn::Lt(hn::LoadU(d, ord + q), e));
    if (below < lanes) return q + below;
  }
  while (q < n && ord[q] < end) ++q;
  return q;
}

// `count` (<= 64) bits of `bitmap` from bit `at` on, as the low bits of a word. Reads words
// at / 64 and at / 64 + 1.
HWY_INLINE uint64_t BitsAt(const uint64_t* bitmap, uint64_t at, int count) {
  const uint64_t* p = bitmap + (at >> 6);
  const int o = static_cast<int>(at & 63);
  const uint64_t v = (p[0] >> o) | ((p[1] << 1) << (63 - o));
  return count == 64 ? v : v & ((uint64_t{1} << count) - 1);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// The positions (tile + index) of the set bits of a tile's `words` words, ascending, at `out`,
// where the walk over set bits mispredicts about once per word; for tiles with at least one
// change per word. StoreMaskPositions per word: fewer steps than compressing 16-bit indices per
// half word and widening them afterwards. Writes up to 16 slots past the last position.
HWY_INLINE uint32_t* TilePositionsCompressed(const uint64_t* hit, size_t words, uint32_t tile, uint32_t* out) {
  const __m512i iota = ByteIota();
  for (size_t wd = 0; wd < words; ++wd)
    out += StoreMaskPositions(iota, hit[wd], tile + 64 * static_cast<uint32_t>(wd), out);
  return out;
}
#endif

// DecodeBandWalk of band_walk.h, for this target and kind of bit deposit (a template parameter:
// a run-time flag was tested at every change).
template <bool kFastPdep>
bool DecodeBandWalkWith(std::span<const ContextSegment> segs, const ContextBands& bands,
                        const std::array<const uint32_t*, kMaxContextBands>& ordinals, std::span<const uint64_t> room_of,
                        std::span<const std::span<uint32_t>> positions, WalkPart* part, std::vector<uint64_t>* filled,
                        const WalkApply* apply) {
  constexpr bool fast_pdep = kFastPdep;
  // Band-major per tile: each band with changes in the tile marks them in a tile bitmap of
  // changed elements, either one by one (few changes: found band by band, then all deposited
  // after the last band, SparseChanges) or by depositing a bitmap of its changes among its
  // members in the tile onto its element mask word by word (branch-free); the tile bitmap then
  // yields the tile's positions in ascending order.
  const size_t k = static_cast<size_t>(bands.k);
  // Per band: population before the tile, and ordinals placed. Kept here and stored at the end:
  // `part` may share a cache line with the other thread's part, which it writes as often.
  BandWords run = part->run;
  BandWords placed_here = part->placed;
  BandWords* placed = &placed_here;
  const BandWords count = part->limit;
  TileBands tile_bands;
  TileClassifiers classifiers(bands);
  uint64_t hit[kTileWords];
  SparseChanges sparse;
  uint64_t tile_map[kTileWords + 2];  // a dense band's changes in the tile, by member
  bool ok = true;
  const bool prefetch = PrefetchesTiles(segs);
  for (size_t s = part->from_seg; s < part->seg_end && ok; ++s) {
    const TileClassifier& classes = classifiers.For(segs[s]);
    const uint32_t w = classes.width;
    const uint64_t n = s + 1 == part->seg_end ? std::min(segs[s].base.size() / w, part->end_elem) : segs[s].base.size() / w;
    uint32_t* out = positions[s].data() + (s == part->from_seg ? part->first_out : 0);
    uint64_t room = room_of[s];
    for (uint64_t tile = s == part->from_seg ? part->from_elem : 0; tile < n && ok; tile += kMaskTileElements) {
      const size_t tn = static_cast<size_t>(std::min<uint64_t>(kMaskTileElements, n - tile));
      LoadTileBands(segs[s], classes, tile, tn, &tile_bands);
      if (prefetch) PrefetchNextTile(segs[s], w, tile, n, 0, 2);
      const size_t words = tile_bands.words;
      for (size_t wd = 0; wd < words; ++wd) hit[wd] = 0;
      sparse.n = 0;
      for (size_t b = 0; b < k; ++b) {
        if ((*placed)[b] == count[b]) continue;  // no changes left: the band's count no longer matters
        const int16_t* const before = tile_bands.before[b];
        const int32_t members = before[words];
        const uint64_t r0 = run[b], end = r0 + static_cast<uint64_t>(members);
        run[b] = end;
        const uint32_t* ord = ordinals[b];
        uint64_t p = (*placed)[b];  // the band's ordinals in this tile: [p, q)
        if (ord[p] >= end) continue;
        // Sparse unless the tile holds the band's ordinal number p + many - 1 too; then one by
        // one up to the first ordinal past the tile, with no count of them beforehand.
        const uint64_t many = std::max<uint64_t>(1, words * kSparseChangesPerWordNum / kSparseChangesPerWordDen);
        if (count[b] - p < many || ord[p + many - 1] >= end) {
          const uint64_t last = std::min(count[b], p + many);  // the tile's ordinals end before it
          (*placed)[b] = FindSparseChanges(ord, p, last, r0, end, before, b, &sparse);
          continue;
        }
        const uint64_t q = OrdinalsBelow(ord, p + many, count[b], end);
        (*placed)[b] = q;
        // The band's changes in the tile as a bitmap over its members in the tile (BitsAt reads
        // one word past the last member's). A word's bits gather in a register and the word is
        // stored whole: an |= in memory per ordinal would chain through store forwarding.
        const size_t map_words = (static_cast<size_t>(members) >> 6) + 2;
        for (size_t i = 0; i < map_words; ++i) tile_map[i] = 0;
        for (uint64_t i = p, word = ~uint64_t{0}, bits_of_word = 0; i < q; ++i) {
          const uint64_t local = ord[i] - r0, wd = local >> 6;
          bits_of_word = (wd == word ? bits_of_word : 0) | uint64_t{1} << (local & 63);
          tile_map[wd] = bits_of_word;
          word = wd;
        }
        for (size_t wd = 0; wd < words; ++wd) {
          const int c = before[wd + 1] - before[wd];
          const uint64_t bits = BitsAt(tile_map, static_cast<uint64_t>(before[wd]), c);
          hit[wd] |= DepositBits(bits, tile_bands.Band(b, wd), fast_pdep);
        }
      }
      if (prefetch) PrefetchNextTile(segs[s], w, tile, n, 1, 2);
      DepositSparseChanges(sparse, tile_bands, hit, fast_pdep);
      // The tile's changes, and which words hold any: the loop below visits only those.
      uint64_t nonzero = 0, changes = 0;
      for (size_t wd = 0; wd < words; ++wd) {
        nonzero |= static_cast<uint64_t>(hit[wd] != 0) << wd;
        changes += static_cast<uint64_t>(PopCount64(hit[wd]));
      }
      if (changes > room) {
        ok = false;
        break;
      }
      room -= changes;
      uint32_t* const tile_out = out;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
      if (room >= 16 && changes >= words) {
        out = TilePositionsCompressed(hit, words, static_cast<uint32_t>(tile), out);
      } else
#endif
      if (room >= 3) {
        // Four slots per step, so that the loop's exit is predictable (one step for up to four
        // changes in a word) where a step per set bit would mispredict once per word. Past a
        // word's last set bit, bit 63 stands in: up to three slots after the tile's changes are
        // written early and overwritten later, within the segment's room (>= 3 after the tile).
        // Never past the room: another part's positions may follow it.
        for (; nonzero != 0; nonzero &= nonzero - 1) {
          const size_t wd = static_cast<size_t>(__builtin_ctzll(nonzero));
          const uint32_t at = static_cast<uint32_t>(tile + 64 * wd);
          uint64_t h = hit[wd];
          uint32_t* o = out;
          do {
            #pragma GCC unroll 4
            for (int u = 0; u < 4; ++u) {
              o[u] = at + static_cast<uint32_t>(__builtin_ctzll(h | (uint64_t{1} << 63)));
              h &= h - 1;
            }
            o += 4;
          } while (h != 0);
          out += PopCount64(hit[wd]);
        }
      } else {
        for (; nonzero != 0; nonzero &= nonzero - 1) {
          const size_t wd = static_cast<size_t>(__builtin_ctzll(nonzero));
          const uint32_t at = static_cast<uint32_t>(tile + 64 * wd);
          for (uint64_t h = hit[wd]; h != 0; h &= h - 1) *out++ = at + static_cast<uint32_t>(__builtin_ctzll(h));
        }
      }
      // The tile's changes are placed: apply them while its elements are in this core's cache.
      if (apply != nullptr && out != tile_out) {
        const uint32_t* first = positions[s].data();
        size_t from = static_cast<size_t>(tile_out - first), to = static_cast<size_t>(out - first);
        if (!apply->slot_lo.empty()) {
          from = std::max<size_t>(from, apply->slot_lo[s]);
          to = std::min<size_t>(to, apply->slot_hi[s]);
        }
        if (from < to) ApplyChangeRun(apply->to[s], w, apply->op(), false, apply->values[s], first, from, to);
      }
    }
    (*filled)[s] = room_of[s] - room;
  }
  part->run = run;
  part->placed = placed_here;
  return ok;
}

bool DecodeBandWalk(std::span<const ContextSegment> segs, const ContextBands& bands,
                    const std::array<const uint32_t*, kMaxContextBands>& ordinals, bool fast_pdep,
                    std::span<const uint64_t> room_of, std::span<const std::span<uint32_t>> positions, WalkPart* part,
                    std::vector<uint64_t>* filled, const WalkApply* apply) {
  return fast_pdep ? DecodeBandWalkWith<true>(segs, bands, ordinals, room_of, positions, part, filled, apply)
                   : DecodeBandWalkWith<false>(segs, bands, ordinals, room_of, positions, part, filled, apply);
}

// LoadTileBandsForTests of band_walk.h, for this target.
void LoadTileBandsForTests(const ContextSegment& seg, const ContextBands& bands, uint64_t tile, size_t tn,
                           TileBandsForTests* out) {
  TileClassifiers classifiers(bands);
  auto t = std::make_unique<TileBands>();
  LoadTileBands(seg, classifiers.For(seg), tile, tn, t.get());
  out->masks.clear();
  out->prefix.clear();
  for (size_t b = 0; b < kMaxContextBands; ++b)
    for (size_t wd = 0; wd < t->words; ++wd) out->masks.push_back(t->Band(b, wd));
  for (size_t b = 0; b < kMaxContextBands; ++b)
    out->prefix.insert(out->prefix.end(), t->before[b], t->before[b] + kTileWords + 1);
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace dcr {

HWY_EXPORT(EncodeBandWalk);
HWY_EXPORT(DecodeBandWalk);
HWY_EXPORT(LoadTileBandsForTests);

namespace {

// Whether BMI2 pdep is fast: it is microcoded, at tens of cycles per mask bit, on AMD before
// Zen 3 (family 0x19) and on Hygon; elsewhere on x86-64 with BMI2 it takes a few cycles.
bool FastBitDeposit() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amd_like = (ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163) ||  // AuthenticAMD
                        (ebx == 0x6f677948 && edx == 0x6e65476e && ecx == 0x656e6975);    // HygonGenuine
  if (!amd_like) return true;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned base_family = (eax >> 8) & 0xf;
  return base_family + (base_family == 0xf ? (eax >> 20) & 0xff : 0) >= 0x19;  // Hygon is 0x18
#else
  return false;
#endif
}

std::atomic<bool> g_portable_deposit{false};

}  // namespace

void ForcePortableBitDeposit(bool portable) { g_portable_deposit.store(portable); }

EncodeWalkEnd EncodeBandWalk(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                             const ContextBands& bands, const BandWords& offset, uint64_t* gaps,
                             const EncodeWalkPart& part) {
  return HWY_DYNAMIC_DISPATCH(EncodeBandWalk)(segs, positions, bands, offset, gaps, part);
}

bool DecodeBandWalk(std::span<const ContextSegment> segs, const ContextBands& bands,
                    const std::array<const uint32_t*, kMaxContextBands>& ordinals, std::span<const uint64_t> room,
                    std::span<const std::span<uint32_t>> positions, WalkPart* part, std::vector<uint64_t>* filled,
                    const WalkApply* apply) {
  static const bool fast_cpu = FastBitDeposit();
  const bool fast_pdep = fast_cpu && !g_portable_deposit.load(std::memory_order_relaxed);
  return HWY_DYNAMIC_DISPATCH(DecodeBandWalk)(segs, bands, ordinals, fast_pdep, room, positions, part, filled, apply);
}

TileBandsForTests LoadTileBandsForTests(const ContextSegment& seg, const ContextBands& bands, uint64_t tile,
                                        size_t tn) {
  TileBandsForTests out;
  HWY_DYNAMIC_DISPATCH(LoadTileBandsForTests)(seg, bands, tile, tn, &out);
  return out;
}

}  // namespace dcr
#endif  // HWY_ONCE
