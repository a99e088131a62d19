#include "codec/diff.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "codec/simd_masks.h"

namespace dcr {
namespace {

// Tiles of kMaskTileElements: the SIMD kernel marks differing elements in a bit mask (and counts
// them), the outputs grow once per tile, and only the marked elements are then visited, four per
// step: a loop whose exit is predictable where a loop per set bit would mispredict once per word.
// Steps past the last set bit write into kSlack spare slots, trimmed at the end.
template <typename U>
void DiffTyped(const uint8_t* base, const uint8_t* next, size_t count, ValueKind kind, ChangeSet* out,
               const DiffChunkFn& on_chunk) {
  static_assert(kDiffChunkElements % kMaskTileElements == 0);
  constexpr size_t kSlack = 3;
  uint64_t masks[kMaskTileElements / 64];
  const bool is_xor = kind == ValueKind::kXor;
  size_t have = 0;  // changes found so far; the vectors hold kSlack more while tiles are walked
  size_t chunk_from = 0;  // the first change of the current run of kDiffChunkElements
  auto end_run = [&] {      // hands the run's changes, if any, to on_chunk
    if (on_chunk && have > chunk_from) on_chunk(std::span<const uint32_t>(out->positions.data() + chunk_from, have - chunk_from));
    chunk_from = have;
  };
  for (size_t tile = 0; tile < count; tile += kMaskTileElements) {
    const size_t tn = std::min(kMaskTileElements, count - tile);
    if (tile % kDiffChunkElements == 0) end_run();
    const uint8_t* b = base + tile * sizeof(U);
    const uint8_t* x = next + tile * sizeof(U);
    const size_t differ = DifferMasks(b, x, sizeof(U), tn, masks);
    if (differ == 0) continue;
    out->positions.resize(have + differ + kSlack);
    out->values.resize((have + differ + kSlack) * sizeof(U));
    uint32_t* pos = out->positions.data() + have;
    uint8_t* val = out->values.data() + have * sizeof(U);
    have += differ;
    // Only the words holding changes are visited: a test per word would mispredict often at
    // the usual 0.5-5 % change (a word of 64 elements holds one about a quarter to all of the time).
    const size_t words = (tn + 63) / 64;
    uint64_t nonzero = 0;
    for (size_t w = 0; w < words; ++w) nonzero |= static_cast<uint64_t>(masks[w] != 0) << w;
    for (; nonzero != 0; nonzero &= nonzero - 1) {
      const size_t w = static_cast<size_t>(__builtin_ctzll(nonzero));
      for (uint64_t m = masks[w]; m != 0;) {
        size_t step = 0;
        #pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          // Past the last set bit ctz(0) would be undefined: bit 63 stands in (clamped to the
          // tile for the loads; the slot is not kept).
          const size_t i = 64 * w + static_cast<size_t>(__builtin_ctzll(m | (uint64_t{1} << 63)));
          U ob, nb;
          std::memcpy(&ob, b + std::min(i, tn - 1) * sizeof(U), sizeof(U));
          std::memcpy(&nb, x + std::min(i, tn - 1) * sizeof(U), sizeof(U));
          const U v = is_xor ? static_cast<U>(ob ^ nb) : nb;
          pos[u] = static_cast<uint32_t>(tile + i);
          std::memcpy(val + u * sizeof(U), &v, sizeof(U));
          step += m != 0;
          m &= m - 1;
        }
        pos += step;
        val += step * sizeof(U);
      }
    }
  }
  out->positions.resize(have);
  out->values.resize(have * sizeof(U));
  end_run();
}

}  // namespace

void DiffElements(std::span<const uint8_t> base, std::span<const uint8_t> next, uint32_t width,
                  ValueKind kind, ChangeSet* out, const DiffChunkFn& on_chunk) {
  DCR_CHECK(base.size() == next.size() && base.size() % width == 0);
  size_t count = base.size() / width;
  DCR_CHECK(count <= UINT32_MAX);
  out->width = width;
  out->Clear();
  switch (width) {
    case 1: return DiffTyped<uint8_t>(base.data(), next.data(), count, kind, out, on_chunk);
    case 2: return DiffTyped<uint16_t>(base.data(), next.data(), count, kind, out, on_chunk);
    case 4: return DiffTyped<uint32_t>(base.data(), next.data(), count, kind, out, on_chunk);
    case 8: return DiffTyped<uint64_t>(base.data(), next.data(), count, kind, out, on_chunk);
  }
  Fatal(__FILE__, __LINE__, "unsupported element width " + std::to_string(width));
}

}  // namespace dcr
