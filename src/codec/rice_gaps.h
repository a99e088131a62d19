// Rice-coded gap streams as both context modes use them (docs/format.md §2.6, §2.7): the changed
// ordinals of one class or band as gaps (first from ordinal 0), each gap g as g >> r in unary and
// its r low bits, with r fitted to the stream.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>

#include "codec/bit_stream.h"

namespace dcr {

inline constexpr int kMaxContextRice = 30;

// The sums of gap >> lo, gap >> (lo + 1) and gap >> (lo + 2) over `gaps` (lo + 2 < 64), each
// modulo 2^64.
std::array<uint64_t, 3> QuotientSums(std::span<const uint64_t> gaps, int lo);

// The parameter for `gaps` (non-empty) of changes among `population` elements: near the optimum
// for geometric gaps, then the exact best of three (the smallest on ties), costed in one pass.
inline int BestRiceParameter(std::span<const uint64_t> gaps, uint64_t population) {
  const uint64_t mean = (population - gaps.size()) / gaps.size();
  const int est = mean == 0 ? 0 : std::bit_width(mean) - 1;
  const int lo = std::max(0, est - 1), hi = std::min(kMaxContextRice, est + 1);
  const std::array<uint64_t, 3> quotients = QuotientSums(gaps, lo);  // for r = lo, lo + 1, lo + 2
  int rice = lo;
  uint64_t best = UINT64_MAX;
  for (int r = lo; r <= hi; ++r) {
    const uint64_t bits = gaps.size() * static_cast<uint64_t>(r + 1) + quotients[static_cast<size_t>(r - lo)];
    if (bits < best) best = bits, rice = r;
  }
  return rice;
}

// Writes each gap as a Rice code with parameter r.
void PutRiceGaps(BitWriter& w, std::span<const uint64_t> gaps, int r);

// Reads n gaps coded with parameter r and writes the ascending ordinals they give to out[0, n).
// False (nothing else promised of out) if the stream runs out or an ordinal reaches `limit`.
bool GetRiceOrdinals(BitReader& bits, uint64_t n, int r, uint64_t limit, uint64_t* out);
// The same into 32-bit ordinals (limit <= 2^32).
bool GetRiceOrdinals(BitReader& bits, uint64_t n, int r, uint64_t limit, uint32_t* out);

}  // namespace dcr
