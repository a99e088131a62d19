// Location coding: which positions of a chunk changed. The chunk is cut into blocks of
// 2^block_log2 elements and each block picks the smallest of three codes (docs/format.md §2.2):
// Rice-coded gaps (scattered changes; written split into remainders and quotients,
// split_rice.h, decoded many per step), a bitmap (dense changes), or ranges (contiguous runs).
// Interleaved Rice codes (method 0, delta formats 1-5) are still read.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dcr {

inline constexpr int kDefaultLocationBlockLog2 = 16;

enum class LocationMethod : uint8_t { kRice = 0, kBitmap = 1, kRanges = 2, kSplitRice = 3 };

// Appends the code of `positions` (strictly ascending, each < count) to `out`.
void EncodeLocations(std::span<const uint32_t> positions, uint64_t count, int block_log2,
                     std::vector<uint8_t>* out);

// The blocks of EncodeLocations of a chunk from element `first` (a multiple of the block size)
// through first + count - 1: `positions` (ascending, in [first, first + count)) counted from the
// chunk's start. Pieces of a chunk coded so one after the other append what EncodeLocations of
// the whole chunk would.
void EncodeLocationsFrom(std::span<const uint32_t> positions, uint64_t first, uint64_t count, int block_log2,
                         std::vector<uint8_t>* out);

// The size in bytes of what EncodeLocations would append, without writing it.
uint64_t LocationCodeBytes(std::span<const uint32_t> positions, uint64_t count, int block_log2);

// A lower bound on LocationCodeBytes from each block's change count, first and last position and
// run count (no gap-by-gap costing): O(blocks × log + positions) and cheap per position.
uint64_t LocationCodeBytesLowerBound(std::span<const uint32_t> positions, uint64_t count, int block_log2);

// LocationCodeBytesLowerBound's share of the blocks [first, first + count) of a chunk (first a
// multiple of the block size; positions counted from the chunk's start): the bound is the sum
// of its blocks', so pieces' shares add up to the whole chunk's.
uint64_t LocationCodeBytesLowerBoundFrom(std::span<const uint32_t> positions, uint64_t first, uint64_t count,
                                         int block_log2);

// Decodes the code in `in` for a chunk of `count` elements that must hold exactly `expected`
// positions (`positions` is resized to them; emptied on failure). Fails with kCorrupt on any
// malformed input; never reads outside `in`.
Status DecodeLocations(std::span<const uint8_t> in, uint64_t count, int block_log2,
                       uint64_t expected, std::vector<uint32_t>* positions);

// As DecodeLocations, for a code at the front of `in` that must hold exactly positions.size()
// positions, written to `positions`; *consumed = its length in bytes. On failure `positions`
// holds unspecified values.
Status DecodeLocationsPrefix(std::span<const uint8_t> in, uint64_t count, int block_log2, std::span<uint32_t> positions,
                             size_t* consumed);

}  // namespace dcr
