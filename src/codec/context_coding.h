// Context-mode location coding, mode 1 (docs/format.md §2.6): decoded for files and payloads
// written before banded modes 2-3 (band_context.h) replaced it; the encoder remains for tests and
// for building such payloads. Also the element classes both modes share (ContextClassFor).
//
// Both sides hold the old bits, and the exponent of an element's old value predicts whether it
// changes (one BF16 ulp is smaller for small magnitudes). So elements are split into classes by
// old exponent; each class's elements, taken in payload order across all segments, form a
// sequence in which the changed ones are Rice-coded by gap with a parameter fitted to that
// class. On the real trajectories this costs ~6.2 bits per change where class-blind gaps cost
// ~9.4 (at 0.45 % change).
//
// Decoding reads every old element of the payload's segments once (O(dense) sequential), which
// is why context mode is a per-payload choice and plain mode always exists.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "format/dtype.h"

namespace dcr {

// The class of old bits v: (v >> shift) & mask with a dtype's exponent field (the top 8
// exponent bits for F64); 0 for integer and bool dtypes.
struct ContextClassFn {
  int shift = 0;
  uint64_t mask = 0;
};
ContextClassFn ContextClassFor(DType t);
// BF16's class, which ContextClassFor returns and the band encoder's BF16 fast path compiles in.
inline constexpr ContextClassFn kBF16Class{7, 0xff};

struct ContextSegment {
  DType dtype = DType::kU8;
  std::span<const uint8_t> base;  // the segment's old bytes: count × width
  uint64_t elements() const { return base.size() / DTypeWidth(dtype); }
};

inline uint64_t TotalElements(std::span<const ContextSegment> segs) {
  uint64_t n = 0;
  for (const ContextSegment& s : segs) n += s.elements();
  return n;
}

// Appends the class-stream code of the changed positions (positions[i] ascending, relative to
// segment i) to `out`.
void EncodeContextLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                            std::vector<uint8_t>* out);

// Inverse: fills positions[i] with exactly positions[i].size() ascending positions of segment
// i, or fails with kCorrupt (the spans' contents then unspecified). Never reads outside `in` or
// the segments' base bytes.
Status DecodeContextLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                              std::span<const std::span<uint32_t>> positions);

}  // namespace dcr
