// State digests (DESIGN.md §7). A tensor's digest is the lane-wise sum mod 2^64 of a keyed
// 128-bit hash of every (element index, element bits): additive, so it can be updated in
// O(changed elements) from (index, old bits, new bits), and its value does not depend on the
// order or grouping in which elements are hashed. A checkpoint's digest is xxh3-128 of its
// catalog and per-tensor digests (O(tensors) to recompute). docs/format.md gives the exact
// functions. These digests detect accidents (bugs, bit rot, wrong files), not adversaries.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"

namespace dcr {

struct Digest128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Digest128&) const = default;
  Digest128& operator+=(const Digest128& o) {
    lo += o.lo, hi += o.hi;
    return *this;
  }
  Digest128& operator-=(const Digest128& o) {
    lo -= o.lo, hi -= o.hi;
    return *this;
  }
  std::string ToHex() const;  // 32 hex digits, hi then lo
  static bool FromHex(std::string_view hex, Digest128* out);
};

// The hash key of a tensor: xxh3-64 of its name.
uint64_t TensorKey(std::string_view name);

inline uint64_t DigestMix64(uint64_t x) {  // murmur3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

inline Digest128 ElementHash(uint64_t key, uint64_t index, uint64_t bits) {
  uint64_t x = key ^ (index * 0x9e3779b97f4a7c15ull);
  return {DigestMix64(x + bits * 0xd6e8feb86659fd93ull + 1),
          DigestMix64((x ^ 0x8cb92ba72f3d8dd7ull) + ((bits << 29) | (bits >> 35)) * 0xa0761d6478bd642full)};
}

// Adds h(new) - h(old) for one changed element.
inline void DigestUpdate(Digest128* d, uint64_t key, uint64_t index, uint64_t old_bits, uint64_t new_bits) {
  *d += ElementHash(key, index, new_bits);
  *d -= ElementHash(key, index, old_bits);
}

// The digest change of the listed elements of one tensor, element first + positions[k] for each
// k: Σ h(new) - h(old), equal to DigestUpdate per element; O(positions). Each element's old bits
// are old_bits[k * width, +width) and its value values[k * width, +width): the XOR of its old and
// new bits (values_are_xor) or its new bits; the diff hands both over as it extracts the changes
// (DiffChunk), so the sum loads whole vectors instead of gathering from the tensors.
Digest128 DigestChanges(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                        const uint8_t* values, bool values_are_xor, uint32_t width);

// Sum of ElementHash over elements [first_index, first_index + n) held in `bytes`.
Digest128 DigestElements(uint64_t key, std::span<const uint8_t> bytes, uint32_t width, uint64_t first_index);

struct CheckpointDigest {
  std::vector<Digest128> tensors;  // in catalog order
  Digest128 total;
};

// The checkpoint digest from a catalog and its per-tensor digests.
Digest128 CombineDigests(const Catalog& catalog, const std::vector<Digest128>& tensors);

// Full digest of every tensor, in parallel over fixed-size slices (deterministic).
CheckpointDigest DigestCheckpoint(const Checkpoint& ckpt, int threads);

}  // namespace dcr
