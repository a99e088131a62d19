#include "codec/location_coding.h"

#include <algorithm>
#include <bit>

#include "codec/bit_stream.h"

namespace dcr {
namespace {

constexpr int kMaxRiceK = 30;

// Exact size in bits of the Rice code of the block's gaps with parameter k.
uint64_t RiceBits(std::span<const uint32_t> pos, uint64_t block_start, int k) {
  uint64_t bits = pos.size() * static_cast<uint64_t>(k + 1);
  uint64_t prev = block_start;  // next position expected if there were no gap
  for (uint32_t p : pos) {
    bits += (p - prev) >> k;
    prev = uint64_t{p} + 1;
  }
  return bits;
}

size_t RangesBytes(std::span<const uint32_t> pos, uint64_t block_start, uint64_t* runs) {
  size_t bytes = 0;
  uint64_t r = 0;
  uint64_t prev_end = block_start;
  for (size_t i = 0; i < pos.size();) {
    size_t j = i + 1;
    while (j < pos.size() && pos[j] == pos[j - 1] + 1) ++j;
    bytes += static_cast<size_t>(VarintSize(pos[i] - prev_end) + VarintSize(j - i - 1));
    prev_end = uint64_t{pos[j - 1]} + 1;
    ++r;
    i = j;
  }
  *runs = r;
  return bytes + static_cast<size_t>(VarintSize(r));
}

void EncodeBlock(std::span<const uint32_t> pos, uint64_t block_start, uint64_t block_len,
                 std::vector<uint8_t>* out) {
  PutVarint(*out, pos.size());
  if (pos.empty()) return;
  // Rice parameter near the optimum for geometric gaps, then the exact best of three.
  uint64_t mean_gap = (block_len - pos.size()) / pos.size();
  int est = mean_gap == 0 ? 0 : std::bit_width(mean_gap) - 1;
  int best_k = 0;
  uint64_t best_bits = UINT64_MAX;
  for (int k = std::max(0, est - 1); k <= std::min(kMaxRiceK, est + 1); ++k) {
    uint64_t b = RiceBits(pos, block_start, k);
    if (b < best_bits) best_bits = b, best_k = k;
  }
  size_t rice_bytes = 1 + (best_bits + 7) / 8;
  size_t bitmap_bytes = (block_len + 7) / 8;
  uint64_t runs = 0;
  size_t ranges_bytes = RangesBytes(pos, block_start, &runs);

  if (rice_bytes <= bitmap_bytes && rice_bytes <= ranges_bytes) {
    out->push_back(static_cast<uint8_t>(LocationMethod::kRice));
    out->push_back(static_cast<uint8_t>(best_k));
    BitWriter w(*out);
    uint64_t prev = block_start;
    for (uint32_t p : pos) {
      uint64_t gap = p - prev;
      w.PutUnary(gap >> best_k);
      if (best_k > 0) w.Put(gap & ((1ull << best_k) - 1), best_k);
      prev = uint64_t{p} + 1;
    }
    w.Flush();
  } else if (bitmap_bytes <= ranges_bytes) {
    out->push_back(static_cast<uint8_t>(LocationMethod::kBitmap));
    size_t at = out->size();
    out->resize(at + bitmap_bytes, 0);
    for (uint32_t p : pos) {
      uint64_t o = p - block_start;
      (*out)[at + o / 8] |= static_cast<uint8_t>(1u << (o % 8));
    }
  } else {
    out->push_back(static_cast<uint8_t>(LocationMethod::kRanges));
    PutVarint(*out, runs);
    uint64_t prev_end = block_start;
    for (size_t i = 0; i < pos.size();) {
      size_t j = i + 1;
      while (j < pos.size() && pos[j] == pos[j - 1] + 1) ++j;
      PutVarint(*out, pos[i] - prev_end);
      PutVarint(*out, j - i - 1);
      prev_end = uint64_t{pos[j - 1]} + 1;
      i = j;
    }
  }
}

Status BlockError(uint64_t block, const std::string& what) {
  return Corrupt("location block " + std::to_string(block) + ": " + what);
}

}  // namespace

void EncodeLocations(std::span<const uint32_t> positions, uint64_t count, int block_log2,
                     std::vector<uint8_t>* out) {
  const uint64_t block = 1ull << block_log2;
  size_t i = 0;
  for (uint64_t start = 0; start < count; start += block) {
    uint64_t len = std::min(block, count - start);
    size_t j = i;
    while (j < positions.size() && positions[j] < start + len) ++j;
    EncodeBlock(positions.subspan(i, j - i), start, len, out);
    i = j;
  }
}

Status DecodeLocationsPrefix(std::span<const uint8_t> in, uint64_t count, int block_log2, uint64_t expected,
                             std::vector<uint32_t>* positions, size_t* consumed) {
  if (block_log2 < 3 || block_log2 > 31) return Corrupt("location block size 2^" + std::to_string(block_log2) + " out of range");
  positions->clear();
  positions->reserve(expected);
  const uint64_t block = 1ull << block_log2;
  ByteReader r(in);
  uint64_t b = 0;
  for (uint64_t start = 0; start < count; start += block, ++b) {
    const uint64_t len = std::min(block, count - start);
    uint64_t n = 0;
    if (!r.ReadVarint(&n)) return BlockError(b, "truncated count");
    if (n > len) return BlockError(b, std::to_string(n) + " changes in " + std::to_string(len) + " elements");
    if (positions->size() + n > expected) return BlockError(b, "more changes than the payload declares");
    if (n == 0) continue;
    uint8_t method = 0;
    if (!r.ReadByte(&method)) return BlockError(b, "truncated method");
    switch (static_cast<LocationMethod>(method)) {
      case LocationMethod::kRice: {
        uint8_t k = 0;
        if (!r.ReadByte(&k) || k > kMaxRiceK) return BlockError(b, "bad Rice parameter");
        BitReader bits(r.Rest());
        uint64_t next = start;  // smallest position the next change may take
        for (uint64_t i = 0; i < n; ++i) {
          uint64_t q = bits.GetUnary(len >> k);
          uint64_t gap = (q << k) | (k > 0 ? bits.Get(k) : 0);
          if (bits.overrun()) return BlockError(b, "truncated Rice code");
          uint64_t p = next + gap;
          if (p >= start + len) return BlockError(b, "position beyond the block");
          positions->push_back(static_cast<uint32_t>(p));
          next = p + 1;
        }
        r.Skip(bits.bytes_consumed());
        break;
      }
      case LocationMethod::kBitmap: {
        std::span<const uint8_t> bm;
        if (!r.ReadBytes((len + 7) / 8, &bm)) return BlockError(b, "truncated bitmap");
        uint64_t seen = 0;
        for (uint64_t byte = 0; byte < bm.size(); ++byte) {
          uint32_t v = bm[byte];
          while (v != 0) {
            uint64_t o = byte * 8 + static_cast<uint64_t>(std::countr_zero(v));
            v &= v - 1;
            if (o >= len) return BlockError(b, "bitmap bit beyond the block");
            if (++seen > n) return BlockError(b, "bitmap holds more bits than the block count");
            positions->push_back(static_cast<uint32_t>(start + o));
          }
        }
        if (seen != n) return BlockError(b, "bitmap holds fewer bits than the block count");
        break;
      }
      case LocationMethod::kRanges: {
        uint64_t runs = 0;
        if (!r.ReadVarint(&runs) || runs == 0 || runs > n) return BlockError(b, "bad range count");
        uint64_t next = start, seen = 0;
        for (uint64_t i = 0; i < runs; ++i) {
          uint64_t gap = 0, extra = 0;
          if (!r.ReadVarint(&gap) || !r.ReadVarint(&extra)) return BlockError(b, "truncated range");
          if (gap > len || extra >= len) return BlockError(b, "range beyond the block");
          uint64_t first = next + gap;
          if (first + extra >= start + len) return BlockError(b, "range beyond the block");
          if (seen + extra + 1 > n) return BlockError(b, "ranges cover more than the block count");
          for (uint64_t p = first; p <= first + extra; ++p) positions->push_back(static_cast<uint32_t>(p));
          seen += extra + 1;
          next = first + extra + 1;
        }
        if (seen != n) return BlockError(b, "ranges cover fewer than the block count");
        break;
      }
      default:
        return BlockError(b, "unknown method " + std::to_string(method));
    }
  }
  if (positions->size() != expected)
    return Corrupt("location code holds " + std::to_string(positions->size()) + " changes, payload declares " +
                   std::to_string(expected));
  *consumed = r.pos();
  return Status::Ok();
}

Status DecodeLocations(std::span<const uint8_t> in, uint64_t count, int block_log2, uint64_t expected,
                       std::vector<uint32_t>* positions) {
  size_t used = 0;
  DCR_RETURN_IF_ERROR(DecodeLocationsPrefix(in, count, block_log2, expected, positions, &used));
  if (used != in.size()) return Corrupt(std::to_string(in.size() - used) + " trailing bytes after the location code");
  return Status::Ok();
}

}  // namespace dcr
