#include "codec/diff.h"

#include <cstring>

#include "base/status.h"

namespace dcr {
namespace {

template <typename U>
void DiffTyped(const uint8_t* base, const uint8_t* next, size_t count, ValueKind kind,
               ChangeSet* out) {
  constexpr size_t kPerBlock = 32 / sizeof(U);  // 32-byte blocks: one AVX2 compare each
  size_t i = 0;
  auto emit = [&](size_t idx, U b, U n) {
    U v = kind == ValueKind::kXor ? static_cast<U>(b ^ n) : n;
    out->positions.push_back(static_cast<uint32_t>(idx));
    size_t at = out->values.size();
    out->values.resize(at + sizeof(U));
    std::memcpy(out->values.data() + at, &v, sizeof(U));
  };
  for (; i + kPerBlock <= count; i += kPerBlock) {
    uint64_t bw[4], nw[4];
    std::memcpy(bw, base + i * sizeof(U), 32);
    std::memcpy(nw, next + i * sizeof(U), 32);
    if (((bw[0] ^ nw[0]) | (bw[1] ^ nw[1]) | (bw[2] ^ nw[2]) | (bw[3] ^ nw[3])) == 0) continue;
    U be[kPerBlock], ne[kPerBlock];
    std::memcpy(be, bw, 32);
    std::memcpy(ne, nw, 32);
    for (size_t j = 0; j < kPerBlock; ++j)
      if (be[j] != ne[j]) emit(i + j, be[j], ne[j]);
  }
  for (; i < count; ++i) {
    U b, n;
    std::memcpy(&b, base + i * sizeof(U), sizeof(U));
    std::memcpy(&n, next + i * sizeof(U), sizeof(U));
    if (b != n) emit(i, b, n);
  }
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
