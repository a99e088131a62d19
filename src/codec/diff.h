// The diff scan: finds the elements whose bits differ between two equal-length element arrays,
// comparing through unsigned-integer views (never as floats: NaN != NaN and -0.0 == +0.0 would
// both be wrong here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/uninit_vector.h"

namespace dcr {

enum class ValueKind : uint8_t {
  kXor = 0,        // value = old ^ new; applying XORs it into the old bits
  kOverwrite = 1,  // value = new bits; applying stores it
};

// How a change set holds its values: as its kind says, or as steps (value_steps.h), which only
// a decoder holding the old bits can turn back.
enum class ValueForm : uint8_t {
  kAsKind = 0,
  kSteps = 1,
};

// Changed elements of one chunk: ascending positions relative to the chunk start, and for each
// its value (XOR mask or new bits, or its step where `form` is kSteps) as `width` little-endian
// bytes, packed back to back. Growing them (resize) does not zero-fill: the diff grows them by a
// tile's bound and trims.
struct ChangeSet {
  uint32_t width = 0;
  ValueForm form = ValueForm::kAsKind;
  UninitVector<uint32_t> positions;
  UninitVector<uint8_t> values;  // positions.size() * width bytes

  size_t size() const { return positions.size(); }
  void Clear() {
    positions.clear();
    values.clear();
  }
};

// One run's changes as DiffElements hands them over, views valid during the call: positions and
// values are the run's part of the ChangeSet being filled (values as their kind says, whatever
// the set's form: the diff makes steps of them after the call); old_bits holds each change's
// bits in `base` (width bytes each, back to back, as the values), which the extraction has at
// hand.
struct DiffChunk {
  std::span<const uint32_t> positions;
  std::span<const uint8_t> values;
  std::span<const uint8_t> old_bits;
};

// Called by DiffElements after each run of kDiffChunkElements elements that has changes (the
// last run may be shorter): per-change work on the old and new bits (the state digest) reads
// them from the chunk while they are in cache, and without gathering them from the arrays.
using DiffChunkFn = std::function<void(const DiffChunk& chunk)>;
inline constexpr size_t kDiffChunkElements = 64 * 1024;

// Scans base vs next (both `count` elements of `width` bytes, count < 2^32) and fills `out`, its
// values in `form` (kSteps: each run's values become steps once on_chunk has seen them, while
// they and their old bits are in cache).
void DiffElements(std::span<const uint8_t> base, std::span<const uint8_t> next, uint32_t width,
                  ValueKind kind, ChangeSet* out, const DiffChunkFn& on_chunk = {},
                  ValueForm form = ValueForm::kAsKind);

// DiffElements of a piece of a run of elements: base and next hold its elements from element
// `first` of the run on (first + count < 2^32); their changes are appended to `out` (of this
// width), positions counted from the run's start. Pieces diffed in order into one ChangeSet
// make what DiffElements of the whole run makes; on_chunk sees each piece's runs of
// kDiffChunkElements apart (a piece's last may be shorter).
void DiffElementsAppend(std::span<const uint8_t> base, std::span<const uint8_t> next, uint32_t width,
                        ValueKind kind, uint64_t first, ChangeSet* out, const DiffChunkFn& on_chunk = {},
                        ValueForm form = ValueForm::kAsKind);

}  // namespace dcr
