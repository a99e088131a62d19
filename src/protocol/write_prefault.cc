#include "protocol/write_prefault.h"

#include <algorithm>

#include "base/mapped_file.h"
#include "format/dtype.h"

namespace dcr {

std::vector<WriteRange> DenseWriteRanges(const DecodedPayload& p) {
  std::vector<WriteRange> out;
  for (const DecodedSegment& seg : p.segments) {
    const uint64_t width = DTypeWidth(seg.spec.dtype), length = seg.spec.count * width;
    if (DenseEnoughToPrefault(seg.changes.size(), length))
      out.push_back({seg.spec.tensor_index, seg.spec.start * width, length});
  }
  return out;
}

uint64_t PrefaultWriteRanges(std::span<const WriteRange> ranges, const TensorBytes& tensor_of) {
  uint64_t done = 0;
  for (const WriteRange& r : ranges)
    if (PrefaultForWrite(tensor_of(r.tensor).subspan(r.offset, r.length))) done += r.length;
  return done;
}

void DenseSlotSpans::Add(const Slot& s) {
  uint8_t* end = s.at + DTypeWidth(s.local_dtype);
  for (Span& g : spans_)
    if (g.rank == s.rank && g.local_tensor == s.local_tensor) {
      g.lo = std::min(g.lo, s.at), g.hi = std::max(g.hi, end);
      ++g.copies;
      return;
    }
  spans_.push_back({s.rank, s.local_tensor, s.at, end, 1});
}

uint64_t DenseSlotSpans::Prefault() const {
  uint64_t done = 0;
  for (const Span& g : spans_) {
    const auto length = static_cast<uint64_t>(g.hi - g.lo);
    if (DenseEnoughToPrefault(g.copies, length) && PrefaultForWrite({g.lo, static_cast<size_t>(length)})) done += length;
  }
  return done;
}

uint64_t PrefaultDenseSlots(std::span<const Slot> slots) {
  DenseSlotSpans spans;
  for (const Slot& s : slots) spans.Add(s);
  return spans.Prefault();
}

uint64_t PrefaultDenseSegment(const Placer& placer, const DecodedSegment& seg) {
  if (!DenseEnoughToPrefault(seg.changes.size(), seg.spec.count * DTypeWidth(seg.spec.dtype))) return 0;
  DenseSlotSpans spans;
  std::vector<Slot> copies;
  for (uint32_t pos : seg.changes.positions) {
    copies.clear();
    placer.Resolve(seg.spec.tensor_index, seg.spec.start + pos, &copies);
    for (const Slot& c : copies) spans.Add(c);
  }
  return spans.Prefault();
}

}  // namespace dcr
