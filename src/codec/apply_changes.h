// Writing decoded changes into a tensor's bytes: the one loop every apply path runs
// (ApplyPayload, and the context-mode walk that applies each tile as it places it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcr {

// How a change's value goes onto its element's old bits.
enum class ApplyOp : uint8_t {
  kStore,     // the new bits (ValueKind::kOverwrite)
  kXor,       // XOR masks (ValueKind::kXor): a run applied twice leaves the bytes as they were
  kAdd,       // wrapping differences new - old (steps, value_steps.h)
  kSubtract,  // the same, taken back
};

// For k in [from, to): element pos[k] of `base` (elements of `width` bytes: 1, 2, 4 or 8)
// becomes itself `op` vals[k] (width bytes at vals + k * width). `prefetch`: fetch the element
// kApplyAhead changes on ahead of each write, for changes scattered over more than the caches
// (ApplyPayload's choice).
void ApplyChangeRun(uint8_t* base, uint32_t width, ApplyOp op, bool prefetch, const uint8_t* vals, const uint32_t* pos,
                    size_t from, size_t to);

}  // namespace dcr
