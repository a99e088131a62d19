// libFuzzer target: DecodePayload on arbitrary bytes must return an error or a payload whose
// segments obey the decoder contract, and must never read or write out of bounds (ASan).
// DecodeApplyPayload on tensors its base lookup reads must give DecodePayload + ApplyPayload's
// status and bytes, and on failure leave the tensors as they were. Odd-sized inputs get the
// magic and a valid checksum, so the fuzzer gets past both.
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/payload_codec.h"

namespace {

using Tensors = std::map<uint32_t, std::vector<uint8_t>>;

dcr::BaseLookup LookupIn(Tensors* t) {
  return [t](const dcr::SegmentSpec& s) -> dcr::Result<std::span<const uint8_t>> {
    const uint64_t w = dcr::DTypeWidth(s.dtype);
    return std::span<const uint8_t>(t->at(s.tensor_index)).subspan(s.start * w, s.count * w);
  };
}

dcr::TensorBytes BytesOf(Tensors* t) {
  return [t](uint32_t i) { return std::span<uint8_t>(t->at(i)); };
}

// One tensor per index the segments name, as large as its segments reach (16 MiB in all at
// most), filled from the input; DecodeApplyPayload on them against the two steps on a copy.
void CheckDecodeApply(const std::vector<uint8_t>& p, const uint8_t* data, size_t size) {
  dcr::PayloadLayout layout;
  if (!dcr::ParsePayload(p, &layout).ok()) return;
  std::map<uint32_t, uint64_t> reach;
  for (const dcr::SegmentSpec& s : layout.segments) {
    const uint64_t end = (s.start + s.count) * dcr::DTypeWidth(s.dtype);
    if (end > (16u << 20)) return;
    reach[s.tensor_index] = std::max(reach[s.tensor_index], end);
  }
  uint64_t total = 0;
  Tensors before;
  for (const auto& [index, bytes] : reach) {
    if ((total += bytes) > (16u << 20)) return;
    auto& b = before[index];
    b.resize(bytes);
    for (uint64_t i = 0; i < bytes; ++i) b[i] = data[(i * 7 + index) % size];
  }
  Tensors two = before;
  dcr::DecodedPayload d2;
  dcr::Status s2 = dcr::DecodePayload(p, &d2, LookupIn(&two));
  if (s2.ok()) s2 = dcr::ApplyPayload(d2, BytesOf(&two));
  // On one thread and on two (which, from 4 Ki changes, decode and apply in two shares).
  for (int threads : {1, 2}) {
    Tensors one = before;
    dcr::DecodedPayload d1;
    const dcr::Status s1 = dcr::DecodeApplyPayload(p, &d1, LookupIn(&one), BytesOf(&one), threads);
    if (s1.code() != s2.code() || s1.message() != s2.message()) __builtin_trap();
    if (one != (s1.ok() ? two : before)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> p(data, data + size);
  if (p.size() >= 16 && (p.size() & 1)) {
    dcr::StoreLe(p.data(), dcr::kPayloadMagic, 4);
    dcr::StoreLe(p.data() + p.size() - 8, XXH3_64bits(p.data(), p.size() - 8), 8);
  }
  // Context-mode payloads decode against a base of arbitrary (here: input-derived) bits.
  // One buffer per segment: spans handed out must stay valid for the whole decode.
  std::deque<std::vector<uint8_t>> bases;
  uint64_t base_total = 0;
  dcr::BaseLookup base = [&](const dcr::SegmentSpec& s) -> dcr::Result<std::span<const uint8_t>> {
    const uint64_t n = s.count * dcr::DTypeWidth(s.dtype);
    if ((base_total += n) > (16u << 20)) return dcr::Corrupt("segments too large for the fuzz base");
    auto& b = bases.emplace_back(n);
    for (uint64_t i = 0; i < n; ++i) b[i] = data[i % size];
    return std::span<const uint8_t>(b);
  };
  dcr::DecodedPayload out;
  const dcr::Status decoded = dcr::DecodePayload(p, &out, base);
  CheckDecodeApply(p, data, size);
  if (!decoded.ok()) return 0;
  for (const auto& seg : out.segments) {
    if (seg.changes.size() == 0 || seg.changes.size() > seg.spec.count) __builtin_trap();
    for (size_t k = 0; k < seg.changes.size(); ++k) {
      if (seg.changes.positions[k] >= seg.spec.count) __builtin_trap();
      if (k > 0 && seg.changes.positions[k] <= seg.changes.positions[k - 1]) __builtin_trap();
    }
    // Applying into a tensor exactly as large as the segment must stay in bounds.
    std::vector<uint8_t> tensor((seg.spec.count) * dcr::DTypeWidth(seg.spec.dtype) > (64u << 20)
                                    ? 0
                                    : seg.spec.count * dcr::DTypeWidth(seg.spec.dtype));
    dcr::DecodedSegment local = seg;
    local.spec.start = 0;
    if (!tensor.empty() && !dcr::ApplySegment(local, tensor).ok()) __builtin_trap();
  }
  return 0;
}
