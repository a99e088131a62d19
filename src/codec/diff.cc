#include "codec/diff.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/status.h"
#include "codec/simd_masks.h"
#include "codec/value_steps.h"

namespace dcr {
namespace {

// Tiles of kMaskTileElements. Where the target diffs and extracts in one pass
// (FusedDiffExtract) and the tile before had a change per 64 elements or more, the tile goes
// through that pass, the outputs grown beforehand by the whole tile (they do not zero-fill). Else
// the SIMD kernel marks differing elements in a bit mask (and counts them), the outputs grow by
// that count, and a second kernel writes the marked elements' positions and values (and, for
// on_chunk, their old bits), reading the tile again from L1. Spare slots are trimmed at the end.
// Appends to `out`; positions are first + the element's index.
template <typename U>
void DiffTyped(const uint8_t* base, const uint8_t* next, size_t count, uint32_t first, ValueKind kind, ChangeSet* out,
               const DiffChunkFn& on_chunk, ValueForm form) {
  static_assert(kDiffChunkElements % kMaskTileElements == 0);
  uint64_t masks[kMaskTileElements / 64];
  const bool is_xor = kind == ValueKind::kXor;
  size_t have = out->size();  // changes found so far; the vectors may hold spare slots after them
  size_t chunk_from = have;   // the first change of the current run of kDiffChunkElements
  // The current run's old bits, for on_chunk and steps. Kept per thread and never shrunk.
  thread_local UninitVector<uint8_t> run_old_bits;
  const bool fused = FusedDiffExtract(sizeof(U));
  const bool steps = form == ValueForm::kSteps;
  // Where the next changes' old bits go, with room for `more` of them (nullptr where neither
  // on_chunk nor steps need them).
  auto old_bits_room = [&](size_t more) -> uint8_t* {
    if (!on_chunk && !steps) return nullptr;
    const size_t at = (have - chunk_from) * sizeof(U), room = at + more * sizeof(U);
    if (run_old_bits.size() < room) run_old_bits.resize(room);
    return run_old_bits.data() + at;
  };
  // Room in the outputs for `more` changes after the `have` found.
  auto grow = [&](size_t more) {
    if (out->positions.size() < have + more) {
      out->positions.resize(have + more);
      out->values.resize((have + more) * sizeof(U));
    }
  };
  bool dense = false;  // the tile before had at least one change per 64 elements
  auto end_run = [&] {  // hands the run's changes, if any, to on_chunk, then makes steps of them
    if (have > chunk_from) {
      const size_t n = have - chunk_from;
      const std::span<uint8_t> values(out->values.data() + chunk_from * sizeof(U), n * sizeof(U));
      const std::span<const uint8_t> old_bits(run_old_bits.data(), n * sizeof(U));
      if (on_chunk) on_chunk({std::span<const uint32_t>(out->positions.data() + chunk_from, n), values, old_bits});
      if (steps) ValuesToSteps(old_bits, kind, sizeof(U), values);
    }
    chunk_from = have;
  };
  for (size_t tile = 0; tile < count; tile += kMaskTileElements) {
    const size_t tn = std::min(kMaskTileElements, count - tile);
    if (tile % kDiffChunkElements == 0) end_run();
    const uint8_t* b = base + tile * sizeof(U);
    const uint8_t* x = next + tile * sizeof(U);
    if (fused && dense) {
      grow(tn + kExtractSlack);
      const size_t n = DiffExtractTile(b, x, sizeof(U), tn, is_xor, first + static_cast<uint32_t>(tile),
                                       out->positions.data() + have, out->values.data() + have * sizeof(U),
                                       old_bits_room(tn + kExtractSlack));
      dense = n >= tn / 64;
      have += n;
      continue;
    }
    const size_t differ = DifferMasks(b, x, sizeof(U), tn, masks);
    dense = differ >= tn / 64;
    if (differ == 0) continue;
    grow(differ + kExtractSlack);
    have += ExtractChanges(b, x, sizeof(U), tn, masks, differ, is_xor, first + static_cast<uint32_t>(tile),
                           out->positions.data() + have, out->values.data() + have * sizeof(U),
                           old_bits_room(differ + kExtractSlack));
  }
  out->positions.resize(have);
  out->values.resize(have * sizeof(U));
  end_run();
}

}  // namespace

void DiffElementsAppend(std::span<const uint8_t> base, std::span<const uint8_t> next, uint32_t width,
                        ValueKind kind, uint64_t first, ChangeSet* out, const DiffChunkFn& on_chunk, ValueForm form) {
  DCR_CHECK(base.size() == next.size() && base.size() % width == 0);
  const size_t count = base.size() / width;
  DCR_CHECK(first <= UINT32_MAX && count <= UINT32_MAX - first);
  DCR_CHECK(out->size() == 0 || (out->width == width && out->form == form));
  out->width = width;
  out->form = form;
  const auto at = static_cast<uint32_t>(first);
  switch (width) {
    case 1: return DiffTyped<uint8_t>(base.data(), next.data(), count, at, kind, out, on_chunk, form);
    case 2: return DiffTyped<uint16_t>(base.data(), next.data(), count, at, kind, out, on_chunk, form);
    case 4: return DiffTyped<uint32_t>(base.data(), next.data(), count, at, kind, out, on_chunk, form);
    case 8: return DiffTyped<uint64_t>(base.data(), next.data(), count, at, kind, out, on_chunk, form);
  }
  Fatal(__FILE__, __LINE__, "unsupported element width " + std::to_string(width));
}

void DiffElements(std::span<const uint8_t> base, std::span<const uint8_t> next, uint32_t width,
                  ValueKind kind, ChangeSet* out, const DiffChunkFn& on_chunk, ValueForm form) {
  out->Clear();
  DiffElementsAppend(base, next, width, kind, 0, out, on_chunk, form);
}

}  // namespace dcr
