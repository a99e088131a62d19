// Value coding: XOR masks of neighbouring float values are mostly low-bit runs (0x1, 0x3, 0x7),
// so their high bytes are nearly all zero. Splitting values into byte planes (all byte-0s, then
// all byte-1s, ...) puts those zeros together, where the entropy stage removes them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dcr {

// values: n packed little-endian elements of `width` bytes. Appends width planes of n bytes.
void ToBytePlanes(std::span<const uint8_t> values, uint32_t width, std::vector<uint8_t>* planes);
// Inverse of ToBytePlanes; planes.size() must be a multiple of width.
void FromBytePlanes(std::span<const uint8_t> planes, uint32_t width, std::vector<uint8_t>* values);

}  // namespace dcr
