#include "protocol/version.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

namespace dcr {

std::string Version::ToString() const { return "v" + std::to_string(number) + ":" + id.ToHex().substr(0, 12); }

Version NextVersion(const Version& prev, uint64_t transfer_id, const Digest128& target_digest) {
  uint64_t words[5] = {prev.id.lo, prev.id.hi, transfer_id, target_digest.lo, target_digest.hi};
  const XXH128_hash_t h = XXH3_128bits(words, sizeof(words));
  return {{h.low64, h.high64}, prev.number + 1};
}

uint64_t LiveTransferId(const Version& base, uint64_t attempt) {
  uint64_t words[3] = {base.id.lo, base.id.hi, attempt};
  const uint64_t id = XXH3_64bits(words, sizeof(words));
  return id == 0 ? 1 : id;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool ParseHex64(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace dcr
