#include "codec/context_coding.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "codec/bit_stream.h"
#include "codec/rice_gaps.h"

namespace dcr {
namespace {

constexpr int kClasses = 256;

// Visits every element of every segment in payload order: fn(segment, position, class).
template <typename Fn>
void ForEachClassed(std::span<const ContextSegment> segs, Fn&& fn) {
  for (size_t s = 0; s < segs.size(); ++s) {
    const ContextClassFn c = ContextClassFor(segs[s].dtype);
    const uint32_t w = DTypeWidth(segs[s].dtype);
    const uint8_t* p = segs[s].base.data();
    const uint64_t n = segs[s].base.size() / w;
    auto run = [&](auto zero) {
      using U = decltype(zero);
      for (uint64_t i = 0; i < n; ++i) {
        U v;
        std::memcpy(&v, p + i * sizeof(U), sizeof(U));
        fn(s, i, static_cast<uint32_t>((static_cast<uint64_t>(v) >> c.shift) & c.mask));
      }
    };
    switch (w) {
      case 1: run(uint8_t{}); break;
      case 2: run(uint16_t{}); break;
      case 4: run(uint32_t{}); break;
      default: run(uint64_t{}); break;
    }
  }
}

}  // namespace

ContextClassFn ContextClassFor(DType t) {
  switch (t) {
    case DType::kBF16: return kBF16Class;
    case DType::kF16: return {10, 0x1f};
    case DType::kF32: return {23, 0xff};
    case DType::kF64: return {55, 0xff};
    case DType::kF8E4M3: return {3, 0xf};
    case DType::kF8E5M2: return {2, 0x1f};
    default: return {0, 0};
  }
}

void EncodeContextLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                            std::vector<uint8_t>* out) {
  // Ordinal of each element within its class; the changed ones become gaps per class.
  std::array<uint64_t, kClasses> ordinal{}, next{};
  std::vector<std::vector<uint64_t>> gaps(kClasses);
  std::vector<size_t> cursor(segs.size(), 0);
  ForEachClassed(segs, [&](size_t s, uint64_t i, uint32_t c) {
    const auto& pos = positions[s];
    if (cursor[s] < pos.size() && pos[cursor[s]] == i) {
      gaps[c].push_back(ordinal[c] - next[c]);
      next[c] = ordinal[c] + 1;
      ++cursor[s];
    }
    ++ordinal[c];
  });
  uint64_t present = 0;
  for (const auto& g : gaps) present += !g.empty();
  PutVarint(*out, present);
  std::array<int, kClasses> rice{};
  for (int c = 0; c < kClasses; ++c) {
    if (gaps[c].empty()) continue;
    rice[c] = BestRiceParameter(gaps[c], ordinal[c]);
    out->push_back(static_cast<uint8_t>(c));
    PutVarint(*out, gaps[c].size());
    out->push_back(static_cast<uint8_t>(rice[c]));
  }
  BitWriter w(*out);
  for (int c = 0; c < kClasses; ++c) PutRiceGaps(w, gaps[c], rice[c]);
  w.Flush();
}

Status DecodeContextLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                              std::span<const std::span<uint32_t>> positions) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_expected = 0;
  for (const auto& p : positions) total_expected += p.size();
  ByteReader r(in);
  uint64_t present = 0;
  if (!r.ReadVarint(&present) || present == 0 || present > kClasses) return Corrupt("context code: bad class count");
  struct ClassCode {
    int id;
    uint64_t k;
    int rice;
  };
  std::vector<ClassCode> classes;
  uint64_t sum_k = 0;
  for (uint64_t i = 0; i < present; ++i) {
    uint8_t id = 0, rice = 0;
    uint64_t k = 0;
    if (!r.ReadByte(&id) || !r.ReadVarint(&k) || !r.ReadByte(&rice)) return Corrupt("context code: truncated class table");
    if ((!classes.empty() && id <= classes.back().id) || k == 0 || k > total_expected || rice > kMaxContextRice)
      return Corrupt("context code: invalid class entry " + std::to_string(i));
    sum_k += k;
    classes.push_back({id, k, rice});
  }
  if (sum_k != total_expected) return Corrupt("context code: class counts do not add up to the payload's changes");

  // Changed ordinals per class, ascending.
  std::vector<std::vector<uint64_t>> ordinals(kClasses);
  BitReader bits(r.Rest());
  for (const ClassCode& c : classes) {
    auto& o = ordinals[static_cast<size_t>(c.id)];
    o.resize(c.k);
    if (!GetRiceOrdinals(bits, c.k, c.rice, total_elements, o.data())) return Corrupt("context code: truncated or out-of-range gap");
  }
  if (bits.bytes_consumed() != r.remaining()) return Corrupt("context code: trailing bytes");

  // target[c]: the next changed ordinal of class c (UINT64_MAX once all are found), so the
  // per-element test is one comparison.
  std::array<uint64_t, kClasses> ordinal{}, target;
  std::array<size_t, kClasses> cursor{};
  for (int c = 0; c < kClasses; ++c) target[c] = ordinals[c].empty() ? UINT64_MAX : ordinals[c][0];
  std::vector<size_t> have(segs.size(), 0);  // positions found per segment
  bool overflow = false;
  ForEachClassed(segs, [&](size_t s, uint64_t i, uint32_t c) {
    if (ordinal[c]++ != target[c]) return;
    if (have[s] < positions[s].size()) positions[s][have[s]++] = static_cast<uint32_t>(i);
    else overflow = true;
    const auto& o = ordinals[c];
    target[c] = ++cursor[c] < o.size() ? o[cursor[c]] : UINT64_MAX;
  });
  if (overflow) return Corrupt("context code: a segment has more changes than its table entry");
  for (const ClassCode& c : classes)
    if (cursor[static_cast<size_t>(c.id)] != c.k) return Corrupt("context code: class " + std::to_string(c.id) + " has ordinals past its population");
  for (size_t s = 0; s < segs.size(); ++s)
    if (have[s] != positions[s].size()) return Corrupt("context code: segment " + std::to_string(s) + " change count disagrees with its table entry");
  return Status::Ok();
}

}  // namespace dcr
