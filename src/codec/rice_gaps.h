// Rice-coded gap streams as both context modes use them (docs/format.md §2.6, §2.7): the changed
// ordinals of one class or band as gaps (first from ordinal 0), each gap g as g >> r in unary and
// its r low bits, with r fitted to the stream.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>

#include "codec/bit_stream.h"

namespace dcr {

inline constexpr int kMaxContextRice = 30;

// Bits of coding `gaps` with parameter r.
inline uint64_t RiceBits(std::span<const uint64_t> gaps, int r) {
  uint64_t bits = gaps.size() * static_cast<uint64_t>(r + 1);
  for (uint64_t g : gaps) bits += g >> r;
  return bits;
}

// The parameter for `gaps` (non-empty) of changes among `population` elements: near the optimum
// for geometric gaps, then the exact best of three (the smallest on ties).
inline int BestRiceParameter(std::span<const uint64_t> gaps, uint64_t population) {
  const uint64_t mean = (population - gaps.size()) / gaps.size();
  const int est = mean == 0 ? 0 : std::bit_width(mean) - 1;
  int rice = 0;
  uint64_t best = UINT64_MAX;
  for (int r = std::max(0, est - 1); r <= std::min(kMaxContextRice, est + 1); ++r) {
    const uint64_t bits = RiceBits(gaps, r);
    if (bits < best) best = bits, rice = r;
  }
  return rice;
}

inline void PutRiceGaps(BitWriter& w, std::span<const uint64_t> gaps, int r) {
  for (uint64_t g : gaps) {
    w.PutUnary(g >> r);
    if (r > 0) w.Put(g & ((uint64_t{1} << r) - 1), r);
  }
}

// Reads n gaps coded with parameter r and writes the ascending ordinals they give to out[0, n).
// False (nothing else promised of out) if the stream runs out or an ordinal reaches `limit`.
inline bool GetRiceOrdinals(BitReader& bits, uint64_t n, int r, uint64_t limit, uint64_t* out) {
  uint64_t next = 0;
  for (uint64_t j = 0; j < n; ++j) {
    const uint64_t q = bits.GetUnary(limit >> r);
    const uint64_t g = (q << r) | (r > 0 ? bits.Get(r) : 0);
    if (bits.overrun() || g >= limit || next + g >= limit) return false;
    out[j] = next + g;
    next += g + 1;
  }
  return true;
}

}  // namespace dcr
