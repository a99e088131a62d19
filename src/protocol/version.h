// Versions (DESIGN.md §2): one committed state of the policy. The id of version 0 is the state
// digest of the initial checkpoint; the id of version k is a hash of (id of version k-1, the
// transfer id, the target state digest), so equal ids mean equal histories and equal bits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/state_digest.h"

namespace dcr {

struct Version {
  Digest128 id;         // the hash chain value
  uint64_t number = 0;  // k: how many transfers since the initial checkpoint
  bool operator==(const Version&) const = default;
  std::string ToString() const;  // "v<number>:<first 12 hex digits of id>"
};

// Version 0 of a checkpoint whose state digest is `digest`.
inline Version InitialVersion(const Digest128& digest) { return {digest, 0}; }

// The version a committed transfer produces: xxh3-128 over 40 bytes, little-endian:
// prev.id.lo, prev.id.hi, transfer_id, target.lo, target.hi (docs/refit.md §Versions).
Version NextVersion(const Version& prev, uint64_t transfer_id, const Digest128& target_digest);

// The transfer id of attempt `attempt` (0, 1, …) to advance from `base`: xxh3-64 over 24 bytes,
// little-endian: base.id.lo, base.id.hi, attempt. Never 0 (0 is mapped to 1).
uint64_t LiveTransferId(const Version& base, uint64_t attempt);

// 16 lowercase hex digits (transfer ids), and its inverse (exactly 16 lowercase hex digits).
std::string Hex64(uint64_t v);
bool ParseHex64(std::string_view s, uint64_t* out);

}  // namespace dcr
