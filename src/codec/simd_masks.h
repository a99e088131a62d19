// SIMD predicate kernels of the codec: each turns a run of fixed-width elements into bit masks,
// one bit per element, 64 elements per word (element i -> bit i % 64 of word i / 64); and the
// diff's extraction of the elements such masks mark (ExtractChanges). Compiled for
// every Highway target of the platform (SSE2..AVX-512 on x86-64, NEON/SVE on aarch64, portable
// scalar everywhere) and dispatched at run time to the best one the CPU has. Every target gives
// bit-identical masks (simd_masks_test checks each compiled target against a scalar model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dcr {

// Elements handled per kernel call by callers that tile their loops (a multiple of 64).
inline constexpr size_t kMaskTileElements = 4096;

// masks[w] bit j = (element 64w + j of `a` differs bitwise from the same element of `b`), for
// `count` elements of `width` (1, 2, 4, 8) bytes. Writes ceil(count / 64) words; bits past
// `count` in the last word are 0. Returns the number of set bits (differing elements).
size_t DifferMasks(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, uint64_t* masks);

// The elements `masks` marks (as DifferMasks wrote them for these `count` elements; `differ`
// set bits): for each in ascending order, its position first + index into `positions` and its
// value, the XOR of the two elements' bits (is_xor) or b's bits, as `width` bytes into `values`.
// With `old_bits` (else nullptr), also each one's bits in `a` there, laid out as `values`.
// Returns `differ`. The outputs need room for kExtractSlack more entries, which may be written;
// first + count must not exceed 2^32.
inline constexpr size_t kExtractSlack = 32;
size_t ExtractChanges(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, const uint64_t* masks,
                      size_t differ, bool is_xor, uint32_t first, uint32_t* positions, uint8_t* values,
                      uint8_t* old_bits = nullptr);

// DifferMasks then ExtractChanges (as above, `differ` aside) for one tile of `count` <=
// kMaskTileElements elements, in one pass where FusedDiffExtract(width) (AVX-512, 2-byte
// elements: each vector of elements is loaded and compared once). Returns the number of
// differing elements; the outputs need room for count + kExtractSlack entries.
size_t DiffExtractTile(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, bool is_xor, uint32_t first,
                       uint32_t* positions, uint8_t* values, uint8_t* old_bits = nullptr);
bool FusedDiffExtract(uint32_t width);

// For thresholds t[0] < t[1] < ... < t[k-1] (k <= 7, each 1..255) and an element class
// c(v) = (v >> shift) & class_mask (class_mask <= 0xff): out[i * words + w] bit j =
// (c(element 64w + j) >= t[i]), where words = ceil(count / 64). Bits past `count` are 0.
void ClassAtLeastMasks(const uint8_t* elems, uint32_t width, size_t count, int shift, uint32_t class_mask,
                       const uint8_t* thresholds, int k, uint64_t* out);

// Whether the CPU has GFNI (x86-64 Galois-field instructions, which the AVX3_DL target's tile
// row kernel uses beside that target's features); false elsewhere, and while ForceNoGfniForTests.
bool CpuHasGfni();
// For tests: CpuHasGfni answers false (the AVX3_DL target then builds tile rows with its compare
// kernel, as on a CPU with AVX-512 VBMI but without GFNI), or as the CPU says again.
void ForceNoGfniForTests(bool no_gfni);

// The Highway targets compiled in, for tests: each can be forced with ForceSimdTarget, and 0
// restores the normal choice (best supported).
std::vector<int64_t> CompiledSimdTargets();
void ForceSimdTarget(int64_t target);
const char* SimdTargetName(int64_t target);
// The target a kernel call would run on now.
const char* ActiveSimdTargetName();

// For tests: calls fn(target name) with each compiled target forced in turn, the best first,
// then restores the normal choice.
template <typename Fn>
void ForEachSimdTarget(Fn&& fn) {
  for (int64_t target : CompiledSimdTargets()) {
    ForceSimdTarget(target);
    fn(std::string(SimdTargetName(target)));
  }
  ForceSimdTarget(0);
}

}  // namespace dcr
