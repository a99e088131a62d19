#include "codec/section_coding.h"

#include <zstd.h>

#include <cstring>

#include "base/reused_buffer.h"

namespace dcr {

namespace {

// One zstd context per thread, reused: ZSTD_compress and ZSTD_decompress would allocate and set
// up a fresh one per section (tens of microseconds, a tenth of a small payload's encode). The
// output is the same: ZSTD_compressCCtx applies `zstd_level` afresh on every call.
struct ZstdContexts {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~ZstdContexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};

ZstdContexts& ThreadZstd() {
  thread_local ZstdContexts contexts;
  DCR_CHECK(contexts.c != nullptr && contexts.d != nullptr);
  return contexts;
}

}  // namespace

SectionCodec CompressSection(std::span<const uint8_t> raw, int zstd_level, std::vector<uint8_t>* out) {
  if (raw.size() >= 64) {
    // Compressed into this thread's buffer, grown to the largest bound it has met: resizing
    // `out` by the bound zero-filled it for every section, most of which are then stored raw.
    thread_local ReusedBuffer<uint8_t> room;
    const size_t bound = ZSTD_compressBound(raw.size());
    const std::span<uint8_t> packed = room.Take(bound);
    ZSTD_CCtx* const c = ThreadZstd().c;
    auto shrinks_at = [&](int level, size_t* n) {
      *n = ZSTD_compressCCtx(c, packed.data(), bound, raw.data(), raw.size(), level);
      return !ZSTD_isError(*n) && *n < raw.size();
    };
    // The probe: a section the fastest level cannot shrink at all is stored raw without trying
    // `zstd_level`. Real payloads' location sections (Rice and bitmap codes) never shrink, and
    // level 3 spent 16-49 us on the real pairs' 8-35 KB context sections where the probe
    // spends 2-7 (about 4 % of a two-thread encode).
    size_t n = 0;
    const bool probe_shrinks =
        raw.size() < kZstdProbeMinBytes || zstd_level <= kZstdProbeLevel || shrinks_at(kZstdProbeLevel, &n);
    if (probe_shrinks && shrinks_at(zstd_level, &n)) {
      out->insert(out->end(), packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(n));
      return SectionCodec::kZstd;
    }
  }
  out->insert(out->end(), raw.begin(), raw.end());
  return SectionCodec::kRaw;
}

namespace {

Status CheckRawLength(std::span<const uint8_t> stored, uint64_t raw_len) {
  if (stored.size() != raw_len)
    return Corrupt("raw section of " + std::to_string(stored.size()) + " bytes, header says " + std::to_string(raw_len));
  return Status::Ok();
}

}  // namespace

Result<std::span<const uint8_t>> SectionBytes(SectionCodec codec, std::span<const uint8_t> stored, uint64_t raw_len,
                                              std::vector<uint8_t>* scratch) {
  if (codec == SectionCodec::kRaw) {
    DCR_RETURN_IF_ERROR(CheckRawLength(stored, raw_len));
    return stored;
  }
  DCR_RETURN_IF_ERROR(DecompressSection(codec, stored, raw_len, scratch));
  return std::span<const uint8_t>(scratch->data(), raw_len);
}

Status DecompressSection(SectionCodec codec, std::span<const uint8_t> stored, uint64_t raw_len,
                         std::vector<uint8_t>* out) {
  switch (codec) {
    case SectionCodec::kRaw:
      DCR_RETURN_IF_ERROR(CheckRawLength(stored, raw_len));
      out->assign(stored.begin(), stored.end());
      return Status::Ok();
    case SectionCodec::kZstd: {
      unsigned long long frame = ZSTD_getFrameContentSize(stored.data(), stored.size());
      if (frame == ZSTD_CONTENTSIZE_ERROR) return Corrupt("zstd section is not a zstd frame");
      if (frame != ZSTD_CONTENTSIZE_UNKNOWN && frame != raw_len)
        return Corrupt("zstd section decodes to " + std::to_string(frame) + " bytes, header says " +
                       std::to_string(raw_len));
      out->resize(raw_len);
      size_t n = ZSTD_decompressDCtx(ThreadZstd().d, out->data(), raw_len, stored.data(), stored.size());
      if (ZSTD_isError(n)) return Corrupt(std::string("zstd section: ") + ZSTD_getErrorName(n));
      if (n != raw_len)
        return Corrupt("zstd section decodes to " + std::to_string(n) + " bytes, header says " +
                       std::to_string(raw_len));
      return Status::Ok();
    }
  }
  return Corrupt("unknown section codec " + std::to_string(static_cast<int>(codec)));
}

}  // namespace dcr
