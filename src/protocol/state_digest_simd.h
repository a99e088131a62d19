// Runtime-dispatched kernels behind DigestElements and DigestChanges (state_digest.h): the same
// sums, computed with the best SIMD target the CPU has. Internal to state_digest.cc.
#pragma once

#include <cstdint>
#include <span>

#include "protocol/state_digest.h"

namespace dcr {

// Sum of ElementHash over n elements of `width` bytes at p, indices first, first + 1, ...
Digest128 DigestElementsDispatch(uint64_t key, const uint8_t* p, uint64_t n, uint32_t width, uint64_t first);

// Sum of h(new) - h(old) over element first + positions[k], given each one's old bits and value.
Digest128 DigestChangesDispatch(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                                const uint8_t* values, bool values_are_xor, uint32_t width);

}  // namespace dcr
