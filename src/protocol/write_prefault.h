// Which of a payload's target bytes to prefault for writing (PrefaultForWrite, base/mapped_file.h)
// before its changes are stored: the segments dense enough that nearly every page of theirs will
// be written anyway, so that prefaulting them writes back no page that the stores would not
// have dirtied, or few.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/payload_codec.h"
#include "protocol/placer.h"

namespace dcr {

// A segment's bytes in its tensor: [offset, offset + length) of tensor_of(tensor).
struct WriteRange {
  uint32_t tensor = 0;
  uint64_t offset = 0, length = 0;
};

// A segment is prefaulted when it holds at least one change per this many of its bytes (a 4 KiB
// page): changes spread evenly then write into ~63 % of its pages or more, and the real deltas of
// RL steps (0.5-5 % of BF16 elements, 10-100 changes per page) into all of them.
inline constexpr uint64_t kPrefaultBytesPerChange = 4096;

// Whether `writes` element writes into `bytes` bytes are at least one per
// kPrefaultBytesPerChange: the one density rule of every function below.
inline bool DenseEnoughToPrefault(uint64_t writes, uint64_t bytes) { return writes * kPrefaultBytesPerChange >= bytes; }

// The byte ranges of p's segments that hold at least one change per kPrefaultBytesPerChange
// bytes, in segment order.
std::vector<WriteRange> DenseWriteRanges(const DecodedPayload& p);

// PrefaultForWrite of each range of its tensor's bytes (tensor_of, as ApplyPayload takes it;
// every range within its tensor, as DenseWriteRanges gives them for a payload that decoded
// against these tensors). Returns the bytes prefaulted (0 where the kernel declined: the stores
// then fault as usual).
uint64_t PrefaultWriteRanges(std::span<const WriteRange> ranges, const TensorBytes& tensor_of);

// For a serving layout: the copies a segment writes (Slot, placer.h) grouped by local tensor,
// each group's bytes from its first written element to its last prefaulted where it holds at
// least one copy per kPrefaultBytesPerChange bytes of that span.
class DenseSlotSpans {
 public:
  void Add(const Slot& s);
  // Prefaults the dense spans of the copies added; returns the bytes prefaulted.
  uint64_t Prefault() const;

 private:
  struct Span {
    uint32_t rank, local_tensor;
    uint8_t *lo, *hi;  // the first written byte and one past the last
    uint64_t copies;
  };
  std::vector<Span> spans_;  // a canonical tensor's copies lie in a few local tensors
};

// DenseSlotSpans of `slots` (a placed segment's copies, PlacedPayload), prefaulted.
uint64_t PrefaultDenseSlots(std::span<const Slot> slots);

// For `dcr apply --layout`, before `seg` is placed: when the segment is dense in canonical
// elements, its changes resolved to their copies (Placer::Resolve; nothing read or written in
// the shards) and the DenseSlotSpans of those prefaulted. Resolving every change a second time
// costs far less than a write fault per page. Returns the bytes prefaulted.
uint64_t PrefaultDenseSegment(const Placer& placer, const DecodedSegment& seg);

}  // namespace dcr
