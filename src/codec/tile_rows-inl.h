// Per-target tile rows of banded context coding (band_context.h): the band masks of one tile of
// a segment and their prefix counts, which every band walk (band_walk.cc) reads. Included by
// band_walk.cc only, once per Highway target; the include-guard toggling is Highway's
// convention for such headers.
#if defined(DCR_CODEC_TILE_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DCR_CODEC_TILE_ROWS_INL_H_
#undef DCR_CODEC_TILE_ROWS_INL_H_
#else
#define DCR_CODEC_TILE_ROWS_INL_H_
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

// Entries per row of TileRows::pre: kTileWords + 1 used, rounded up to whole 64-byte lines.
constexpr size_t kPreStride = 96;

// Slots per word in TileRows::w: rows 0 .. kMaxContextBands, rounded up so that a word's rows
// 0..7 are one aligned 64-byte line (the GFNI kernel stores them with one store).
constexpr size_t kRowSlots = 16;

// A tile's band masks as k + 1 rows of `words` words: row 0 marks the tile's elements, row i
// (1 <= i < k) those of class >= t[i - 1], row k is zero. Band b's mask of word wd is
// row b & ~row b + 1, with no case for the first or last band. A word's rows lie together
// (w[wd * kRowSlots + r]): a band's mask reads one line. Rows nest (each is a subset of the one
// before), so band b's members before word wd are pre[b][wd] - pre[b + 1][wd], where pre[r][wd]
// (wd <= kTileWords) counts row r's set bits in words before wd, and for wd >= words is the
// row's total in the tile: the counts never decrease.
// Rows past k are zero in every word: zeroed here, and no kernel writes a nonzero row past k.
struct TileRows {
  alignas(64) uint64_t w[kTileWords * kRowSlots] = {};
  alignas(64) int16_t pre[kMaxContextBands + 1][kPreStride];
  // The GFNI kernel's count of each row's set bits in the words it did (rows 0..7), stored whole,
  // so that LoadTileRows need not read them back from the prefix counts the kernel just stored.
  alignas(64) uint64_t kernel_totals[8];
  size_t words = 0;
  uint64_t Row(size_t r, size_t wd) const { return w[wd * kRowSlots + r]; }
  uint64_t Band(size_t b, size_t wd) const { return w[wd * kRowSlots + b] & ~w[wd * kRowSlots + b + 1]; }
  int32_t BandBefore(size_t b, size_t wd) const { return pre[b][wd] - pre[b + 1][wd]; }
};

// Row 0's counts in a whole tile: 64 elements per word.
constexpr auto kElementsBefore = [] {
  std::array<int16_t, kTileWords + 1> a{};
  for (size_t wd = 0; wd <= kTileWords; ++wd) a[wd] = static_cast<int16_t>(64 * wd);
  return a;
}();

#if HWY_TARGET == HWY_AVX3_DL
// 2-byte elements on x86-64 with AVX-512 VBMI and GFNI (Ice Lake, Sapphire Rapids, Zen 4): all
// rows of a word from one byte table lookup and one bit transpose, where the compare kernel
// spends a compare and a mask move per row.
// - Each element's class byte is gathered with the elements of each 8-byte group in reverse
//   order, and looked up in a table of "thermometer" bytes: bit r = the element is in row r
//   (bit 0 always; bits past k - 1 never).
// - GF2P8AFFINEQB with the thermometer bytes as the matrix operand transposes each 8 x 8 bit
//   block: byte j of group q becomes row j's bits of the group's elements (the reversal undoes
//   the instruction's row order), and one byte permute makes qword r row r's mask word.
// - Prefix counts: VPOPCNTQ per word, kept as running sums of 8 words, transposed to
//   [row][word] with three levels of 16-bit permutes and stored 8 per row with 16-byte stores
//   (masked stores of them took 1.1x as long in a loop benchmark on a Zen 5).
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
    g.bits[i] = static_cast<uint8_t>((2u << bands.BandOf(c)) - 1);
  }
  return g;
}

// Elements are prefetched this many words (4 KiB of 2-byte elements) ahead: the kernel waited on
// their loads, and with the prefetch one-thread decode+apply of the real pairs took 0.83-0.93 of
// the time from memory and 0.85-0.93 from cache at 0.4-1.3 % (interleaved runs; 8 to 96 words
// were tried, 24 to 48 were alike). Prefetches never fault, so the end of a segment needs no case.
constexpr size_t kPrefetchWords = 32;

// Index vectors of the GFNI kernels: the element gather and bit transpose of a word's
// classification, and the 16-bit permutes that transpose 8 words' running row counts.
struct GfniIndex {
  uint8_t gather[64], transpose[64];
  uint16_t pair[32], quad[32], lo[32], hi[32];
};
constexpr GfniIndex kGfniIndex = [] {
  GfniIndex x{};
  for (int p = 0; p < 64; ++p) x.gather[p] = static_cast<uint8_t>(2 * (8 * (p / 8) + 7 - p % 8));
  for (int r = 0; r < 8; ++r)
    for (int q = 0; q < 8; ++q) x.transpose[8 * r + q] = static_cast<uint8_t>(8 * q + r);
  // 16-bit lanes; lane 4r of a running-sum vector is row r's count; 32 + i: the second source.
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

// One word's classification by the GFNI kernel: Rows(p) is a vector whose qword r is row r's
// mask of the 64 elements at p (which it also prefetches kPrefetchWords words ahead). Its
// constants live in registers across a kernel's loop.
template <bool kClamp, bool kMaskClass>
struct GfniWordRows {
  __m512i gather, transpose, t0, t1, t2, t3, mask, base, top, unit;
  __m128i count;
  DCR_GFNI_ATTR HWY_INLINE GfniWordRows(int shift, uint8_t class_mask, const GfniClassTable& g)
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
  DCR_GFNI_ATTR HWY_INLINE __m512i Rows(const uint16_t* p) const {
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

// Rows 0..7 of words [0, words) of `e` into rows->w, and rows 0..7 of rows->pre for those words.
// kMaskClass: class_mask < 0xff (an AND per word; with BF16's 0xff, the kernel without it took
// 0.87 of the time in a loop benchmark on a Zen 5).
template <bool kClamp, bool kMaskClass>
DCR_GFNI_ATTR void GfniTileRows(const uint16_t* e, size_t words, int shift, uint8_t class_mask, const GfniClassTable& g,
                                TileRows* rows) {
  const GfniWordRows<kClamp, kMaskClass> classify(shift, class_mask, g);
  const __m512i pair = _mm512_loadu_si512(kGfniIndex.pair), quad = _mm512_loadu_si512(kGfniIndex.quad);
  const __m512i lo_rows = _mm512_loadu_si512(kGfniIndex.lo), hi_rows = _mm512_loadu_si512(kGfniIndex.hi);
  __m512i sum = _mm512_setzero_si512();  // lane r: row r's set bits before the word
  for (size_t w0 = 0; w0 < words; w0 += 8) {
    const size_t n = std::min<size_t>(8, words - w0);
    __m512i before[8];
    for (size_t i = 0; i < 8; ++i) {
      before[i] = sum;
      if (i >= n) continue;
      const __m512i v = classify.Rows(e + 64 * (w0 + i));
      _mm512_store_si512(rows->w + (w0 + i) * kRowSlots, v);
      sum = _mm512_add_epi64(sum, _mm512_popcnt_epi64(v));
    }
    const __m512i p01 = _mm512_permutex2var_epi16(before[0], pair, before[1]);
    const __m512i p23 = _mm512_permutex2var_epi16(before[2], pair, before[3]);
    const __m512i p45 = _mm512_permutex2var_epi16(before[4], pair, before[5]);
    const __m512i p67 = _mm512_permutex2var_epi16(before[6], pair, before[7]);
    const __m512i q0 = _mm512_permutex2var_epi16(p01, quad, p23), q1 = _mm512_permutex2var_epi16(p45, quad, p67);
    const __m512i lo = _mm512_permutex2var_epi16(q0, lo_rows, q1), hi = _mm512_permutex2var_epi16(q0, hi_rows, q1);
    // Row r's 8 counts are 128-bit lane r of lo, row r + 4's of hi. Stored whole: past the
    // kernel's words (n < 8) they are garbage, which LoadTileRows overwrites from `counted` on.
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[0][w0]), _mm512_castsi512_si128(lo));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[4][w0]), _mm512_castsi512_si128(hi));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[1][w0]), _mm512_extracti32x4_epi32(lo, 1));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[5][w0]), _mm512_extracti32x4_epi32(hi, 1));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[2][w0]), _mm512_extracti32x4_epi32(lo, 2));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[6][w0]), _mm512_extracti32x4_epi32(hi, 2));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[3][w0]), _mm512_extracti32x4_epi32(lo, 3));
    _mm_store_si128(reinterpret_cast<__m128i*>(&rows->pre[7][w0]), _mm512_extracti32x4_epi32(hi, 3));
  }
  _mm512_store_si512(rows->kernel_totals, sum);
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

// The whole words of a tile by the GFNI kernel; returns them (0: not used here).
inline size_t GfniTileRowsAnyClamp(const uint8_t* bytes, size_t tn, const ContextClassFn& f, const GfniClassTable& g,
                                   TileRows* rows) {
  if (!g.use) return 0;
  const size_t full = tn / 64;
  WithGfniVariant(f, g, [&]<bool kClamp, bool kMaskClass>() {
    GfniTileRows<kClamp, kMaskClass>(reinterpret_cast<const uint16_t*>(bytes), full, f.shift,
                                     static_cast<uint8_t>(f.mask), g, rows);
  });
  return full;
}

// The encoder's view of a whole tile (kTileWords words of `e`): band b's mask of word wd
// (row b & ~row b + 1) into mask[wd * kMaxContextBands + b], and run[b] + band b's members in the
// words before wd into before[wd * kMaxContextBands + b]; run[b] then holds run[b] + the band's
// members in the tile. (What the encoder's walk needs of a tile, without the rows and the
// per-row prefix counts of GfniTileRows.)
template <bool kClamp, bool kMaskClass>
DCR_GFNI_ATTR void GfniTileBandOrdinals(const uint16_t* e, int shift, uint8_t class_mask, const GfniClassTable& g,
                                        uint64_t* mask, uint64_t* before, uint64_t* run) {
  static_assert(kMaxContextBands == 8, "a word's band masks are one vector");
  const GfniWordRows<kClamp, kMaskClass> classify(shift, class_mask, g);
  __m512i sum = _mm512_loadu_si512(run);
  for (size_t wd = 0; wd < kTileWords; ++wd) {
    const __m512i v = classify.Rows(e + 64 * wd);
    // Lane b: row b & ~row b + 1 (past row 7, none).
    const __m512i m = _mm512_andnot_si512(_mm512_alignr_epi64(_mm512_setzero_si512(), v, 1), v);
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
inline size_t GfniTileRowsAnyClamp(const uint8_t*, size_t, const ContextClassFn&, const GfniClassTable&, TileRows*) {
  return 0;
}
inline void GfniTileBandOrdinalsAnyClamp(const uint8_t*, const ContextClassFn&, const GfniClassTable&, uint64_t*,
                                         uint64_t*, uint64_t*) {}
inline bool GfniClassifies(const GfniClassTable&) { return false; }
#endif

// How a segment's elements fall into rows: its class function, element width and bands, and
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

// Fills `rows` for elements [tile, tile + tn) of `seg` (tn <= kMaskTileElements).
inline void LoadTileRows(const ContextSegment& seg, const TileClassifier& c, uint64_t tile, size_t tn, TileRows* rows) {
  const size_t k = static_cast<size_t>(c.bands->k), words = (tn + 63) / 64;
  rows->words = words;
  const uint8_t* bytes = seg.base.data() + tile * c.width;
  // Words whose rows (0 .. 7) and prefix counts the kernel wrote: [0, gfni_words).
  const size_t gfni_words = GfniTileRowsAnyClamp(bytes, tn, c.f, c.gfni, rows);
  size_t counted = gfni_words;  // words whose prefix counts are written, in rows 1 .. k - 1
  for (size_t wd = gfni_words; wd < words; ++wd) rows->w[wd * kRowSlots] = ~uint64_t{0};
  if (tn % 64 != 0) rows->w[(words - 1) * kRowSlots] = (uint64_t{1} << (tn % 64)) - 1;
  if (k > 1 && gfni_words < words) {
    const size_t from = 64 * gfni_words;
    const size_t done = ClassAtLeastMasksAnyWidth(
        bytes + from * c.width, c.width, tn - from, c.f.shift, static_cast<uint32_t>(c.f.mask), c.bands->t.data(),
        static_cast<int>(k) - 1, MaskOut{rows->w + gfni_words * kRowSlots + 1, 1, kRowSlots},
        gfni_words == 0 ? RowPrefixOut{rows->pre[1], kPreStride} : RowPrefixOut{});
    if (gfni_words == 0) counted = done;
  }
  if (tn == kMaskTileElements) {
    std::memcpy(rows->pre[0], kElementsBefore.data(), sizeof(kElementsBefore));
  } else {
    for (size_t wd = 0; wd <= kTileWords; ++wd) rows->pre[0][wd] = static_cast<int16_t>(std::min<size_t>(64 * wd, tn));
  }
  std::memset(rows->pre[k], 0, sizeof(int16_t) * (kTileWords + 1));
  for (size_t r = 1; r < k; ++r) {  // what the kernels left: the tail word, the totals, scalar kernels
    int16_t* pre = rows->pre[r];
    // From the kernel's totals where it counted (its last stores of `pre` may hold garbage).
    int32_t before = counted == 0                                  ? 0
                     : counted == gfni_words                       ? static_cast<int32_t>(rows->kernel_totals[r])
                                                                   : pre[counted - 1] + PopCount64(rows->Row(r, counted - 1));
    for (size_t wd = counted; wd <= kTileWords; ++wd) {
      pre[wd] = static_cast<int16_t>(before);
      if (wd < words) before += PopCount64(rows->Row(r, wd));
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
