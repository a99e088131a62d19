// libFuzzer target: DecodePayload on arbitrary bytes must return an error or a payload whose
// segments obey the decoder contract, and must never read or write out of bounds (ASan).
// Odd-sized inputs get the magic and a valid checksum, so the fuzzer gets past both.
#include <xxhash.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/payload_codec.h"

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
  if (!dcr::DecodePayload(p, &out, base).ok()) return 0;
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
