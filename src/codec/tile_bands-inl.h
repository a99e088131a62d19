// Per-target tile bands of banded context coding (band_context.h): the band masks of one tile of
// a segment and their prefix counts, which every band walk (band_walk.cc) reads. Included by
// band_walk.cc only, once per Highway target; the include-guard toggling is Highway's
// convention for such headers.
#if defined(DCR_CODEC_TILE_BANDS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DCR_CODEC_TILE_BANDS_INL_H_
#undef DCR_CODEC_TILE_BANDS_INL_H_
#else
#define DCR_CODEC_TILE_BANDS_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "codec/band_fit.h"
#include "codec/context_coding.h"
#include "codec/simd_masks-inl.h"
#include "codec/simd_masks.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

constexpr size_t kTileWords = kMaskTileElements / 64;

// Entries per band (or row) of the prefix counts: kTileWords + 1 used, and up to 8 more stored by
// the GFNI kernel's last transposition (at `words` <= kTileWords), rounded up to whole 64-byte
// lines so that each band's counts start a line.
constexpr size_t kPreStride = 96;

// Slots per word of the class rows the compare kernels write (TileBands::rows): rows
// 0 .. kMaxContextBands, rounded up to a power of two.
constexpr size_t kRowSlots = 16;

// A tile's band masks and their prefix counts, as the walks read them: band b's mask of word wd
// is mask[wd * kMaxContextBands + b] (a word's masks are one 64-byte line), and before[b][wd]
// (wd <= kTileWords) counts band b's members in the words before wd; for wd >= words it is the
// band's total in the tile, so the counts never decrease along a band's 64-byte-aligned row, which
// the decoder's word search reads whole. Bands past k have no members (zero masks and counts).
// The GFNI kernel makes both directly; the compare kernels make class rows first (`rows`,
// `row_before`: row 0 marks the tile's elements, row i (1 <= i < k) those of class >= t[i - 1],
// rows from k on are zero; band b = row b & ~row b + 1), which LoadTileBands turns into bands.
// (Against class rows in the walks, where each change read two rows for its mask and each band
// subtracted two rows' counts per tile, and a GFNI kernel of nested rows: two-thread context
// decode+apply of the real pairs in 0.92 of the time at 4.8 % (152-154 against 165-167 us),
// 0.925 at 0.4 %, 0.915 at 1.4 %, context encode 0.98; alternating builds in one script.)
struct TileBands {
  alignas(64) uint64_t mask[kTileWords * kMaxContextBands] = {};
  alignas(64) int16_t before[kMaxContextBands][kPreStride] = {};
  size_t words = 0;
  // Scratch of the compare kernels. Rows past k stay zero: no kernel writes them.
  alignas(64) uint64_t rows[kTileWords * kRowSlots] = {};
  alignas(64) int16_t row_before[kMaxContextBands + 1][kPreStride];
  uint64_t Band(size_t b, size_t wd) const { return mask[wd * kMaxContextBands + b]; }
  int32_t Before(size_t b, size_t wd) const { return before[b][wd]; }
};

// Row 0's counts in a whole tile: 64 elements per word.
constexpr auto kElementsBefore = [] {
  std::array<int16_t, kTileWords + 1> a{};
  for (size_t wd = 0; wd <= kTileWords; ++wd) a[wd] = static_cast<int16_t>(64 * wd);
  return a;
}();

#if HWY_TARGET == HWY_AVX3_DL
// 2-byte elements on x86-64 with AVX-512 VBMI and GFNI (Ice Lake, Sapphire Rapids, Zen 4): all
// band masks of a word from one byte table lookup and one bit transpose, where the compare kernel
// spends a compare and a mask move per class row.
// - Each element's class byte is gathered with the elements of each 8-byte group in reverse
//   order, and looked up in a table of one-hot bytes: bit b = the element is in band b.
// - GF2P8AFFINEQB with the one-hot bytes as the matrix operand transposes each 8 x 8 bit block:
//   byte j of group q becomes band j's bits of the group's elements (the reversal undoes the
//   instruction's row order), and one byte permute makes qword b band b's mask word. (A table of
//   thermometer bytes, bit r = class >= t[r - 1], made nested class rows, whose bands took a
//   qword shift and an AND-NOT more per word: decode+apply of the real 4.8 % pair 1.07x as long.)
// - Prefix counts (GfniTileBands): VPOPCNTQ per word, kept as running sums of 8 words,
//   transposed to [band][word] with three levels of 16-bit permutes.
// The table has 256 entries (two lookups and a blend), or 128 (one lookup) when the thresholds
// span at most 127 class values: classes are then clamped into [t[0] - 1, t[0] + 126], which
// keeps every compare with a threshold.
struct GfniClassTable {
  bool use = false, clamp = false;
  uint8_t base = 0;  // clamp: the class of table entry 0
  alignas(64) uint8_t bits[256] = {};
};

#define DCR_GFNI_ATTR __attribute__((target(HWY_TARGET_STR ",gfni")))

inline GfniClassTable MakeGfniClassTable(const ContextClassFn& f, uint32_t width, const ContextBands& bands) {
  GfniClassTable g;
  const int k = bands.k;
  if (width != 2 || k < 2 || f.mask > 0xff || !CpuHasGfni()) return g;
  g.use = true;
  g.clamp = bands.t[static_cast<size_t>(k - 2)] - bands.t[0] <= 126;
  g.base = static_cast<uint8_t>(bands.t[0] - 1);
  for (uint32_t i = 0; i < 256; ++i) {
    const uint32_t c = g.clamp ? std::min<uint32_t>(g.base + std::min<uint32_t>(i, 127), 255) : i & static_cast<uint32_t>(f.mask);
    g.bits[i] = static_cast<uint8_t>(1u << bands.BandOf(c));
  }
  return g;
}

// Elements are prefetched this many words (4 KiB of 2-byte elements) ahead: the kernel waited on
// their loads, and with the prefetch one-thread decode+apply of the real pairs took 0.83-0.93 of
// the time from memory and 0.85-0.93 from cache at 0.4-1.3 % (interleaved runs; 8 to 96 words
// were tried, 24 to 48 were alike). Prefetches never fault, so the end of a segment needs no case.
constexpr size_t kPrefetchWords = 32;

// Index vectors of the GFNI kernels: the element gather and bit transpose of a word's
// classification, and the 16-bit permutes that transpose 8 words' running band counts.
struct GfniIndex {
  uint8_t gather[64], transpose[64];
  uint16_t pair[32], quad[32], lo[32], hi[32];
};
constexpr GfniIndex kGfniIndex = [] {
  GfniIndex x{};
  for (int p = 0; p < 64; ++p) x.gather[p] = static_cast<uint8_t>(2 * (8 * (p / 8) + 7 - p % 8));
  for (int r = 0; r < 8; ++r)
    for (int q = 0; q < 8; ++q) x.transpose[8 * r + q] = static_cast<uint8_t>(8 * q + r);
  // 16-bit lanes; lane 4r of a running-sum vector is band r's count; 32 + i: the second source.
  for (int r = 0; r < 8; ++r)
    for (int s = 0; s < 2; ++s) x.pair[2 * r + s] = static_cast<uint16_t>(4 * r + 32 * s);
  for (int r = 0; r < 8; ++r)
    for (int q = 0; q < 4; ++q) x.quad[4 * r + q] = static_cast<uint16_t>(2 * r + q % 2 + 32 * (q / 2));
  for (int r = 0; r < 4; ++r)
    for (int q = 0; q < 8; ++q) {
      x.lo[8 * r + q] = static_cast<uint16_t>(4 * r + q % 4 + 32 * (q / 4));
      x.hi[8 * r + q] = static_cast<uint16_t>(4 * (r + 4) + q % 4 + 32 * (q / 4));
    }
  return x;
}();

// One word's classification by the GFNI kernel: Bands(p) is a vector whose qword b is band b's
// mask of the 64 elements at p (which it also prefetches kPrefetchWords words ahead; past k, zero).
// Its constants live in registers across a kernel's loop.
template <bool kClamp, bool kMaskClass>
struct GfniWordBands {
  __m512i gather, transpose, t0, t1, t2, t3, mask, base, top, unit;
  __m128i count;
  DCR_GFNI_ATTR HWY_INLINE GfniWordBands(int shift, uint8_t class_mask, const GfniClassTable& g)
      : gather(_mm512_loadu_si512(kGfniIndex.gather)),
        transpose(_mm512_loadu_si512(kGfniIndex.transpose)),
        t0(_mm512_load_si512(g.bits)),
        t1(_mm512_load_si512(g.bits + 64)),
        t2(_mm512_load_si512(g.bits + 128)),
        t3(_mm512_load_si512(g.bits + 192)),
        mask(_mm512_set1_epi8(static_cast<char>(class_mask))),
        base(_mm512_set1_epi8(static_cast<char>(g.base))),
        top(_mm512_set1_epi8(127)),
        unit(_mm512_set1_epi64(static_cast<int64_t>(0x8040201008040201ull))),
        count(_mm_cvtsi32_si128(shift)) {}
  DCR_GFNI_ATTR HWY_INLINE __m512i Bands(const uint16_t* p) const {
    _mm_prefetch(reinterpret_cast<const char*>(p + 64 * kPrefetchWords), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + 64 * kPrefetchWords + 32), _MM_HINT_T0);
    const __m512i lo = _mm512_srl_epi16(_mm512_loadu_si512(p), count);
    const __m512i hi = _mm512_srl_epi16(_mm512_loadu_si512(p + 32), count);
    __m512i c = _mm512_permutex2var_epi8(lo, gather, hi);
    if constexpr (kMaskClass) c = _mm512_and_si512(c, mask);
    __m512i th;
    if constexpr (kClamp) {
      th = _mm512_permutex2var_epi8(t0, _mm512_min_epu8(_mm512_subs_epu8(c, base), top), t1);
    } else {
      th = _mm512_mask_blend_epi8(_mm512_movepi8_mask(c), _mm512_permutex2var_epi8(t0, c, t1),
                                  _mm512_permutex2var_epi8(t2, c, t3));
    }
    return _mm512_permutexvar_epi8(transpose, _mm512_gf2p8affine_epi64_epi8(unit, th, 0));
  }
};

// Band masks of words [0, words) of `e` into t->mask, and bands 0..7's prefix counts before each
// of words 0..words into t->before[b][0, words] (entries past words, up to words + 7, are
// overwritten with the totals too).
// kMaskClass: class_mask < 0xff (an AND per word; with BF16's 0xff, the kernel without it took
// 0.87 of the time in a loop benchmark on a Zen 5).
template <bool kClamp, bool kMaskClass>
DCR_GFNI_ATTR void GfniTileBands(const uint16_t* e, size_t words, int shift, uint8_t class_mask,
                                 const GfniClassTable& g, TileBands* t) {
  static_assert(kMaxContextBands == 8, "a word's band masks are one vector");
  const GfniWordBands<kClamp, kMaskClass> classify(shift, class_mask, g);
  const __m512i pair = _mm512_loadu_si512(kGfniIndex.pair), quad = _mm512_loadu_si512(kGfniIndex.quad);
  const __m512i lo_bands = _mm512_loadu_si512(kGfniIndex.lo), hi_bands = _mm512_loadu_si512(kGfniIndex.hi);
  // Band b's 8 counts of `before` (lane b of each: the band's members before the word) into
  // t->before[b][w0, w0 + 8), by three levels of 16-bit permutes: 16-byte stores, 8 per band
  // (masked stores of them took 1.1x as long in a loop benchmark on a Zen 5).
  auto store_counts = [&](const __m512i (&before)[8], size_t w0) DCR_GFNI_ATTR {
    const __m512i p01 = _mm512_permutex2var_epi16(before[0], pair, before[1]);
    const __m512i p23 = _mm512_permutex2var_epi16(before[2], pair, before[3]);
    const __m512i p45 = _mm512_permutex2var_epi16(before[4], pair, before[5]);
    const __m512i p67 = _mm512_permutex2var_epi16(before[6], pair, before[7]);
    const __m512i q0 = _mm512_permutex2var_epi16(p01, quad, p23), q1 = _mm512_permutex2var_epi16(p45, quad, p67);
    const __m512i lo = _mm512_permutex2var_epi16(q0, lo_bands, q1), hi = _mm512_permutex2var_epi16(q0, hi_bands, q1);
    // Band b's counts are 128-bit lane b of lo, band b + 4's of hi.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[0][w0]), _mm512_castsi512_si128(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[4][w0]), _mm512_castsi512_si128(hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[1][w0]), _mm512_extracti32x4_epi32(lo, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[5][w0]), _mm512_extracti32x4_epi32(hi, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[2][w0]), _mm512_extracti32x4_epi32(lo, 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[6][w0]), _mm512_extracti32x4_epi32(hi, 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[3][w0]), _mm512_extracti32x4_epi32(lo, 3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&t->before[7][w0]), _mm512_extracti32x4_epi32(hi, 3));
  };
  __m512i sum = _mm512_setzero_si512();  // lane b: band b's members before the word
  __m512i before[8];
  for (size_t w0 = 0; w0 < words; w0 += 8) {
    const size_t n = std::min<size_t>(8, words - w0);
    for (size_t i = 0; i < 8; ++i) {
      before[i] = sum;  // past the kernel's words (n < 8): the totals
      if (i >= n) continue;
      const __m512i m = classify.Bands(e + 64 * (w0 + i));
      _mm512_store_si512(t->mask + (w0 + i) * kMaxContextBands, m);
      sum = _mm512_add_epi64(sum, _mm512_popcnt_epi64(m));
    }
    store_counts(before, w0);
  }
  // The totals at `words` (kTileWords for a whole tile), stored from registers: read back from
  // a vector the kernel stored, the loads waited on the store (the tile load's share of
  // decode+apply samples 2.9 %; 0.9 % this way).
  for (size_t i = 0; i < 8; ++i) before[i] = sum;
  store_counts(before, words);
}

// Calls fn.template operator()<kClamp, kMaskClass>() for the GFNI kernel variant that suits
// class function f and table g.
template <typename Fn>
HWY_INLINE void WithGfniVariant(const ContextClassFn& f, const GfniClassTable& g, Fn&& fn) {
  if (static_cast<uint8_t>(f.mask) == 0xff) {
    if (g.clamp)
      fn.template operator()<true, false>();
    else
      fn.template operator()<false, false>();
  } else {
    if (g.clamp)
      fn.template operator()<true, true>();
    else
      fn.template operator()<false, true>();
  }
}

// A tile of `words` whole words by the GFNI kernel, where GfniClassifies(g).
inline void GfniTileBandsAnyClamp(const uint8_t* bytes, size_t words, const ContextClassFn& f, const GfniClassTable& g,
                                  TileBands* t) {
  WithGfniVariant(f, g, [&]<bool kClamp, bool kMaskClass>() {
    GfniTileBands<kClamp, kMaskClass>(reinterpret_cast<const uint16_t*>(bytes), words, f.shift,
                                      static_cast<uint8_t>(f.mask), g, t);
  });
}

// The encoder's view of a whole tile (kTileWords words of `e`): band b's mask of word wd into
// mask[wd * kMaxContextBands + b], and run[b] + band b's members in the words before wd into
// before[wd * kMaxContextBands + b]; run[b] then holds run[b] + the band's members in the tile. (What the encoder's walk needs of a tile, in the layout a change reads at
// one index, where GfniTileBands' counts are band by band for the decoder's word search.)
template <bool kClamp, bool kMaskClass>
DCR_GFNI_ATTR void GfniTileBandOrdinals(const uint16_t* e, int shift, uint8_t class_mask, const GfniClassTable& g,
                                        uint64_t* mask, uint64_t* before, uint64_t* run) {
  static_assert(kMaxContextBands == 8, "a word's band masks are one vector");
  const GfniWordBands<kClamp, kMaskClass> classify(shift, class_mask, g);
  __m512i sum = _mm512_loadu_si512(run);
  for (size_t wd = 0; wd < kTileWords; ++wd) {
    const __m512i m = classify.Bands(e + 64 * wd);
    _mm512_store_si512(mask + wd * kMaxContextBands, m);
    _mm512_store_si512(before + wd * kMaxContextBands, sum);
    sum = _mm512_add_epi64(sum, _mm512_popcnt_epi64(m));
  }
  _mm512_storeu_si512(run, sum);
}

// GfniTileBandOrdinals for a whole tile at `bytes`, where GfniClassifies(g).
inline void GfniTileBandOrdinalsAnyClamp(const uint8_t* bytes, const ContextClassFn& f, const GfniClassTable& g,
                                         uint64_t* mask, uint64_t* before, uint64_t* run) {
  WithGfniVariant(f, g, [&]<bool kClamp, bool kMaskClass>() {
    GfniTileBandOrdinals<kClamp, kMaskClass>(reinterpret_cast<const uint16_t*>(bytes), f.shift,
                                             static_cast<uint8_t>(f.mask), g, mask, before, run);
  });
}
inline bool GfniClassifies(const GfniClassTable& g) { return g.use; }
#undef DCR_GFNI_ATTR
#else
struct GfniClassTable {};
inline GfniClassTable MakeGfniClassTable(const ContextClassFn&, uint32_t, const ContextBands&) { return {}; }
inline void GfniTileBandsAnyClamp(const uint8_t*, size_t, const ContextClassFn&, const GfniClassTable&, TileBands*) {}
inline void GfniTileBandOrdinalsAnyClamp(const uint8_t*, const ContextClassFn&, const GfniClassTable&, uint64_t*,
                                         uint64_t*, uint64_t*) {}
inline bool GfniClassifies(const GfniClassTable&) { return false; }
#endif

// How a segment's elements fall into bands: its class function, element width and bands, and
// the table of the GFNI kernel where this target and CPU have one.
struct TileClassifier {
  ContextClassFn f;
  uint32_t width = 0;
  const ContextBands* bands = nullptr;
  GfniClassTable gfni;
  TileClassifier() = default;
  TileClassifier(const ContextSegment& seg, const ContextBands& b)
      : f(ContextClassFor(seg.dtype)), width(DTypeWidth(seg.dtype)), bands(&b), gfni(MakeGfniClassTable(f, width, b)) {}
};

// The classifier of each segment of a walk in turn, made again only where the dtype changes:
// payloads may hold thousands of small segments of one dtype.
class TileClassifiers {
 public:
  explicit TileClassifiers(const ContextBands& bands) : bands_(&bands) {}
  const TileClassifier& For(const ContextSegment& seg) {
    if (!made_ || seg.dtype != dtype_) {
      now_ = TileClassifier(seg, *bands_);
      dtype_ = seg.dtype;
      made_ = true;
    }
    return now_;
  }

 private:
  const ContextBands* bands_;
  bool made_ = false;
  DType dtype_ = DType::kU8;
  TileClassifier now_;
};

// The class rows of elements [0, tn) at `bytes` (a tile of `words` words) by the compare kernels,
// into t->rows and t->row_before (rows 0..k).
inline void LoadTileRowsByCompares(const uint8_t* bytes, const TileClassifier& c, size_t tn, size_t words,
                                   TileBands* t) {
  const size_t k = static_cast<size_t>(c.bands->k);
  for (size_t wd = 0; wd < words; ++wd) t->rows[wd * kRowSlots] = ~uint64_t{0};
  if (tn % 64 != 0) t->rows[(words - 1) * kRowSlots] = (uint64_t{1} << (tn % 64)) - 1;
  size_t counted = 0;  // words whose prefix counts the kernel wrote, in rows 1 .. k - 1
  if (k > 1)
    counted = ClassAtLeastMasksAnyWidth(bytes, c.width, tn, c.f.shift, static_cast<uint32_t>(c.f.mask),
                                        c.bands->t.data(), static_cast<int>(k) - 1,
                                        MaskOut{t->rows + 1, 1, kRowSlots},
                                        RowPrefixOut{t->row_before[1], kPreStride});
  for (size_t wd = 0; wd <= kTileWords; ++wd) t->row_before[0][wd] = static_cast<int16_t>(std::min<size_t>(64 * wd, tn));
  std::memset(t->row_before[k], 0, sizeof(int16_t) * (kTileWords + 1));
  for (size_t r = 1; r < k; ++r) {  // what the kernel left: the tail word, the totals, scalar kernels
    int16_t* pre = t->row_before[r];
    int32_t before = counted == 0 ? 0 : pre[counted - 1] + PopCount64(t->rows[(counted - 1) * kRowSlots + r]);
    for (size_t wd = counted; wd <= kTileWords; ++wd) {
      pre[wd] = static_cast<int16_t>(before);
      if (wd < words) before += PopCount64(t->rows[wd * kRowSlots + r]);
    }
  }
}

// t->mask and t->before of bands 0..k-1 from the class rows (band b = row b & ~row b + 1, its
// counts row b's less row b + 1's).
inline void BandsFromRows(size_t k, TileBands* t) {
  const hn::CappedTag<uint64_t, kMaxContextBands> d64;
  const size_t n64 = hn::Lanes(d64);
  for (size_t wd = 0; wd < t->words; ++wd) {
    const uint64_t* row = t->rows + wd * kRowSlots;
    for (size_t b = 0; b < kMaxContextBands; b += n64)  // rows past k are zero, so are their bands
      hn::Store(hn::AndNot(hn::LoadU(d64, row + b + 1), hn::Load(d64, row + b)), d64,
                t->mask + wd * kMaxContextBands + b);
  }
  const hn::CappedTag<int16_t, kTileWords> d16;
  const size_t n16 = hn::Lanes(d16);
  for (size_t b = 0; b < k; ++b) {
    for (size_t i = 0; i < kTileWords; i += n16)  // n16 divides kTileWords (a power of two, capped at it)
      hn::Store(hn::Sub(hn::Load(d16, t->row_before[b] + i), hn::Load(d16, t->row_before[b + 1] + i)), d16,
                t->before[b] + i);
    t->before[b][kTileWords] = static_cast<int16_t>(t->row_before[b][kTileWords] - t->row_before[b + 1][kTileWords]);
  }
}

// Fills `t` for elements [tile, tile + tn) of `seg` (tn <= kMaskTileElements): by the GFNI kernel
// where it classifies the segment and the tile is whole words, else by the compare kernels' rows.
inline void LoadTileBands(const ContextSegment& seg, const TileClassifier& c, uint64_t tile, size_t tn, TileBands* t) {
  const size_t k = static_cast<size_t>(c.bands->k), words = (tn + 63) / 64;
  t->words = words;
  const uint8_t* bytes = seg.base.data() + tile * c.width;
  if (tn % 64 == 0 && GfniClassifies(c.gfni)) {
    GfniTileBandsAnyClamp(bytes, words, c.f, c.gfni, t);
    for (size_t b = 0; b < k; ++b)  // the kernel stored the totals at [words, words + 8)
      for (size_t wd = words + 8; wd <= kTileWords; ++wd) t->before[b][wd] = t->before[b][words];
    return;
  }
  LoadTileRowsByCompares(bytes, c, tn, words, t);
  BandsFromRows(k, t);
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
