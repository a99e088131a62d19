// Writing decoded changes into a tensor's bytes: the one loop every apply path runs
// (ApplyPayload, and the context-mode walk that applies each tile as it places it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcr {

// For k in [from, to): element pos[k] of `base` (elements of `width` bytes: 1, 2, 4 or 8)
// becomes vals[k] (width bytes at vals + k * width), or itself XOR vals[k] with `is_xor`; an
// XOR run applied twice leaves the bytes as they were. `prefetch`: fetch the element
// kApplyAhead changes on ahead of each write, for changes scattered over more than the caches
// (ApplyPayload's choice).
void ApplyChangeRun(uint8_t* base, uint32_t width, bool is_xor, bool prefetch, const uint8_t* vals, const uint32_t* pos,
                    size_t from, size_t to);

}  // namespace dcr
