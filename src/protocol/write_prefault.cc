#include "protocol/write_prefault.h"

#include "base/mapped_file.h"
#include "format/dtype.h"

namespace dcr {

std::vector<WriteRange> DenseWriteRanges(const DecodedPayload& p) {
  std::vector<WriteRange> out;
  for (const DecodedSegment& seg : p.segments) {
    const uint64_t width = DTypeWidth(seg.spec.dtype), length = seg.spec.count * width;
    if (seg.changes.size() * kPrefaultBytesPerChange >= length)
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

}  // namespace dcr
