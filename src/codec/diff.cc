#include "codec/diff.h"

#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/status.h"

namespace dcr {
namespace {

// Bit i set iff byte i of the 32-byte blocks at a and b differs.
inline uint32_t DifferingBytes32(const uint8_t* a, const uint8_t* b) {
#if defined(__SSE2__)
  const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16));
  const uint32_t equal = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(a0, b0))) |
                         static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(a1, b1))) << 16;
  return ~equal;
#else
  uint32_t mask = 0;
  for (int w = 0; w < 4; ++w) {
    uint64_t x, y;
    std::memcpy(&x, a + 8 * w, 8);
    std::memcpy(&y, b + 8 * w, 8);
    uint64_t d = x ^ y;
    for (int k = 0; d != 0 && k < 8; ++k, d >>= 8)
      if (d & 0xff) mask |= 1u << (8 * w + k);
  }
  return mask;
#endif
}

// Scans in 32-byte blocks: a byte-compare mask per block (SSE2 where available) skips equal
// blocks in a few instructions and visits only the differing elements of the others. Changes go
// to a small stack buffer appended to the change set in bulk, so there is no per-element growth.
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
  auto emit = [&](size_t idx) {
    U b, x;
    std::memcpy(&b, base + idx * sizeof(U), sizeof(U));
    std::memcpy(&x, next + idx * sizeof(U), sizeof(U));
    pos[m] = static_cast<uint32_t>(idx);
    val[m] = is_xor ? static_cast<U>(b ^ x) : x;
    ++m;
  };
  size_t i = 0;
  for (; i + kPerBlock <= count; i += kPerBlock) {
    uint32_t bytes = DifferingBytes32(base + i * sizeof(U), next + i * sizeof(U));
    while (bytes != 0) {
      const uint32_t j = static_cast<uint32_t>(__builtin_ctz(bytes)) / sizeof(U);
      emit(i + j);
      const uint32_t end_bit = (j + 1) * sizeof(U);  // first byte of the next element
      bytes = end_bit >= 32 ? 0 : bytes & ~((1u << end_bit) - 1);
    }
    if (m >= kBuffer) flush();
  }
  for (; i < count; ++i)
    if (std::memcmp(base + i * sizeof(U), next + i * sizeof(U), sizeof(U)) != 0) emit(i);
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
