#include "codec/diff.h"

#include <cstring>

#include "base/status.h"

namespace dcr {
namespace {

// Scans in 32-byte blocks (one AVX2 compare each): equal blocks are skipped, the elements of
// an unequal block are emitted branch-free into a small stack buffer that is appended to the
// change set in bulk, so dense changes cost no mispredicted branches or per-element growth.
template <typename U>
void DiffTyped(const uint8_t* base, const uint8_t* next, size_t count, ValueKind kind, ChangeSet* out) {
  constexpr size_t kPerBlock = 32 / sizeof(U);
  constexpr size_t kBuffer = 1024;
  uint32_t pos[kBuffer + kPerBlock];
  U val[kBuffer + kPerBlock];
  size_t m = 0;
  const bool is_xor = kind == ValueKind::kXor;
  auto flush = [&] {
    out->positions.insert(out->positions.end(), pos, pos + m);
    const uint8_t* v = reinterpret_cast<const uint8_t*>(val);
    out->values.insert(out->values.end(), v, v + m * sizeof(U));
    m = 0;
  };
  auto scan = [&](size_t first, size_t n) {
    for (size_t j = 0; j < n; ++j) {
      U b, x;
      std::memcpy(&b, base + (first + j) * sizeof(U), sizeof(U));
      std::memcpy(&x, next + (first + j) * sizeof(U), sizeof(U));
      pos[m] = static_cast<uint32_t>(first + j);
      val[m] = is_xor ? static_cast<U>(b ^ x) : x;
      m += (b != x);
    }
  };
  size_t i = 0;
  for (; i + kPerBlock <= count; i += kPerBlock) {
    uint64_t bw[4], nw[4];
    std::memcpy(bw, base + i * sizeof(U), 32);
    std::memcpy(nw, next + i * sizeof(U), 32);
    if (((bw[0] ^ nw[0]) | (bw[1] ^ nw[1]) | (bw[2] ^ nw[2]) | (bw[3] ^ nw[3])) == 0) continue;
    scan(i, kPerBlock);
    if (m >= kBuffer) flush();
  }
  scan(i, count - i);
  flush();
}

}  // namespace

void DiffElements(std::span<const uint8_t> base, std::span<const uint8_t> next, uint32_t width,
                  ValueKind kind, ChangeSet* out) {
  DCR_CHECK(base.size() == next.size() && base.size() % width == 0);
  size_t count = base.size() / width;
  DCR_CHECK(count <= UINT32_MAX);
  out->width = width;
  out->Clear();
  switch (width) {
    case 1: return DiffTyped<uint8_t>(base.data(), next.data(), count, kind, out);
    case 2: return DiffTyped<uint16_t>(base.data(), next.data(), count, kind, out);
    case 4: return DiffTyped<uint32_t>(base.data(), next.data(), count, kind, out);
    case 8: return DiffTyped<uint64_t>(base.data(), next.data(), count, kind, out);
  }
  Fatal(__FILE__, __LINE__, "unsupported element width " + std::to_string(width));
}

}  // namespace dcr
