#include "protocol/state_digest.h"

#include <xxhash.h>

#include <cstring>

#include "base/thread_pool.h"
#include "protocol/state_digest_simd.h"

namespace dcr {
namespace {

constexpr uint64_t kDigestSliceElements = 1ull << 22;

void RequireElementWidth(uint32_t width) {
  if (width != 1 && width != 2 && width != 4 && width != 8) Fatal(__FILE__, __LINE__, "unsupported element width");
}

}  // namespace

std::string Digest128::ToHex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

bool Digest128::FromHex(std::string_view hex, Digest128* out) {
  if (hex.size() != 32) return false;
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    parts[i / 16] = (parts[i / 16] << 4) | static_cast<uint64_t>(v);
  }
  out->hi = parts[0];
  out->lo = parts[1];
  return true;
}

uint64_t TensorKey(std::string_view name) { return XXH3_64bits(name.data(), name.size()); }

Digest128 DigestElements(uint64_t key, std::span<const uint8_t> bytes, uint32_t width, uint64_t first) {
  RequireElementWidth(width);
  return DigestElementsDispatch(key, bytes.data(), bytes.size() / width, width, first);
}

Digest128 DigestChanges(uint64_t key, uint64_t first, std::span<const uint32_t> positions, const uint8_t* old_bits,
                        const uint8_t* values, bool values_are_xor, uint32_t width) {
  RequireElementWidth(width);
  return DigestChangesDispatch(key, first, positions, old_bits, values, values_are_xor, width);
}

Digest128 CombineDigests(const Catalog& catalog, const std::vector<Digest128>& tensors) {
  DCR_CHECK(catalog.size() == tensors.size());
  // Canonical serialization: per tensor, u32 name length, name, u8 dtype code, u32 rank,
  // u64 dims, u64 lo, u64 hi; all little-endian.
  std::vector<uint8_t> buf;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  for (size_t i = 0; i < catalog.size(); ++i) {
    const auto& e = catalog[i];
    put(e.name.size(), 4);
    buf.insert(buf.end(), e.name.begin(), e.name.end());
    put(DTypeCode(e.dtype), 1);
    put(e.shape.size(), 4);
    for (uint64_t d : e.shape) put(d, 8);
    put(tensors[i].lo, 8);
    put(tensors[i].hi, 8);
  }
  XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return {h.low64, h.high64};
}

CheckpointDigest DigestCheckpoint(const Checkpoint& ckpt, int threads) {
  struct Slice {
    size_t tensor;
    uint64_t first, count;
  };
  std::vector<Slice> slices;
  const auto& ts = ckpt.tensors();
  for (size_t t = 0; t < ts.size(); ++t)
    for (uint64_t s = 0; s < ts[t].num_elements(); s += kDigestSliceElements)
      slices.push_back({t, s, std::min(kDigestSliceElements, ts[t].num_elements() - s)});
  std::vector<Digest128> partial(slices.size());
  Status s = ParallelFor(slices.size(), threads, [&](size_t i) {
    const Slice& sl = slices[i];
    const TensorRef& t = ts[sl.tensor];
    uint32_t w = DTypeWidth(t.dtype());
    partial[i] = DigestElements(TensorKey(t.name()), t.bytes.subspan(sl.first * w, sl.count * w), w, sl.first);
    return Status::Ok();
  });
  DCR_CHECK(s.ok());
  CheckpointDigest d;
  d.tensors.resize(ts.size());
  for (size_t i = 0; i < slices.size(); ++i) d.tensors[slices[i].tensor] += partial[i];
  d.total = CombineDigests(ckpt.catalog(), d.tensors);
  return d;
}

}  // namespace dcr
