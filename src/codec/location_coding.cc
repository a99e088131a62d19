// Compiled once per Highway target (foreach_target.h) and dispatched at run time, for the
// target's scalar instructions: on x86-64 the AVX2 and AVX-512 targets have BMI1/BMI2/LZCNT, whose
// register-count shifts (one micro-op, no flags) and trailing-zero counts the Rice coders run on;
// and for its vectors, which widen a block's positions into gaps. A block's split Rice code is
// written by PutSplitRice and costed from quotient sums, as the banded context code's runs are: on
// the real 4.5 % pair (65 Ki changes, one thread) the location coding's share of a plain encode
// fell from 25 to 15 % against the four-codes-per-write loop this replaced.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/location_coding.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "base/reused_buffer.h"
#include "codec/bit_stream.h"
#include "codec/location_coding.h"
#include "codec/split_rice.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

constexpr int kMaxRiceK = 30;

// The exact sizes of a block's candidate codes: split Rice with parameters k0, k0+1, k0+2
// (without the parameter byte) and ranges, in bytes, and the number of runs.
struct BlockCosts {
  uint64_t rice_bytes[3] = {0, 0, 0};
  uint64_t ranges_bytes = 0;
  uint64_t runs = 0;
};

// A split Rice code's bytes (split_rice.h): n remainders of r bits, padded, then the quotients
// (summing to `quotients`) and n terminators, padded.
uint64_t SplitRiceBytes(uint64_t n, int r, uint64_t quotients) {
  return (n * static_cast<uint64_t>(r) + 7) / 8 + (quotients + n + 7) / 8;
}

// Ranges: per run a varint gap (from the previous run's end) and a varint length - 1, after a
// varint run count. O(runs) varint sizes, so it is only computed when it can matter.
uint64_t RangesBytes(std::span<const uint32_t> pos, uint64_t block_start, uint64_t runs) {
  uint64_t bytes = static_cast<uint64_t>(VarintSize(runs));
  uint64_t prev_end = block_start;
  for (size_t i = 0; i < pos.size();) {
    size_t j = i + 1;
    while (j < pos.size() && pos[j] == pos[j - 1] + 1) ++j;
    bytes += static_cast<uint64_t>(VarintSize(pos[i] - prev_end) + VarintSize(j - i - 1));
    prev_end = uint64_t{pos[j - 1]} + 1;
    i = j;
  }
  return bytes;
}

using Lanes = uint32_t __attribute__((vector_size(16)));  // SSE2 on baseline x86-64, NEON on aarch64

// How many of p[from, to) do not continue the run before them (p[i] != p[i - 1] + 1); p[from - 1]
// must exist. Four per step.
uint64_t CountRunStarts(const uint32_t* from, const uint32_t* to) {
  Lanes starts = {};
  const uint32_t* p = from;
  for (; to - p >= 4; p += 4) {
    Lanes cur, prev;
    std::memcpy(&cur, p, sizeof(cur));
    std::memcpy(&prev, p - 1, sizeof(prev));
    starts -= cur != prev + 1;  // a true lane is all ones (-1)
  }
  uint64_t n = uint64_t{starts[0]} + starts[1] + starts[2] + starts[3];
  for (; p < to; ++p) n += p[0] != p[-1] + 1;
  return n;
}

// What a block's costs are made of, summed in the pass that widens its gaps: the Rice
// quotients with parameters k0, k0 + 1, k0 + 2, and the runs of consecutive positions.
struct GapSums {
  std::array<uint64_t, 3> quotients{};
  uint64_t runs = 0;
};

// A block's gaps, widened for the split Rice coder: gap i = pos[i] - pos[i - 1] - 1, gap 0 =
// pos[0] - block_start (a block is under 2^32 elements, so no gap overflows 32 bits); and their
// sums. A vector of positions per step. (With the widening, the quotient sums and the run count
// each a pass of its own, the real 4.5 % pair's location coding took 53 us against 40, one
// thread on a Zen 5.)
// A run starts at the first change and at every change after a gap (a nonzero gap i >= 1).
GapSums BlockGapsAndSums(std::span<const uint32_t> pos, uint64_t block_start, int k0, uint64_t* gaps) {
  const hn::ScalableTag<uint64_t> d64;
  const hn::Rebind<uint32_t, decltype(d64)> d32;
  const size_t lanes = hn::Lanes(d64);
  gaps[0] = pos[0] - block_start;
  auto s0 = hn::Zero(d64), s1 = hn::Zero(d64), s2 = hn::Zero(d64);
  size_t gapped = 0;  // nonzero gaps among 1..
  size_t i = 1;
  for (; i + lanes <= pos.size(); i += lanes) {
    const auto step = hn::Sub(hn::LoadU(d32, pos.data() + i), hn::LoadU(d32, pos.data() + i - 1));
    const auto gap32 = hn::Sub(step, hn::Set(d32, 1));
    gapped += hn::CountTrue(d32, hn::Ne(gap32, hn::Zero(d32)));
    const auto gap = hn::PromoteTo(d64, gap32);
    hn::StoreU(gap, d64, gaps + i);
    s0 = hn::Add(s0, hn::ShiftRightSame(gap, k0));
    s1 = hn::Add(s1, hn::ShiftRightSame(gap, k0 + 1));
    s2 = hn::Add(s2, hn::ShiftRightSame(gap, k0 + 2));
  }
  uint64_t q0 = hn::GetLane(hn::SumOfLanes(d64, s0)) + (gaps[0] >> k0);
  uint64_t q1 = hn::GetLane(hn::SumOfLanes(d64, s1)) + (gaps[0] >> (k0 + 1));
  uint64_t q2 = hn::GetLane(hn::SumOfLanes(d64, s2)) + (gaps[0] >> (k0 + 2));
  for (; i < pos.size(); ++i) {
    const uint64_t g = pos[i] - pos[i - 1] - 1;
    gaps[i] = g;
    gapped += g != 0;
    q0 += g >> k0, q1 += g >> (k0 + 1), q2 += g >> (k0 + 2);
  }
  return {{q0, q1, q2}, 1 + gapped};
}

// Rice costs and the run count from the block's gap sums (with parameters k0, k0 + 1, k0 + 2);
// the ranges size only if its lower bound (two bytes per run plus the count) does not already
// lose to Rice or the bitmap, since ties go to those (ChooseBlock).
BlockCosts MeasureBlock(std::span<const uint32_t> pos, const GapSums& sums, uint64_t block_start, int k0,
                        uint64_t bitmap_bytes) {
  BlockCosts c;
  const std::array<uint64_t, 3>& q = sums.quotients;
  c.runs = sums.runs;
  const uint64_t n = pos.size();
  for (int i = 0; i < 3; ++i) c.rice_bytes[i] = SplitRiceBytes(n, k0 + i, q[static_cast<size_t>(i)]);
  const uint64_t best_rice_bytes = 1 + std::min({c.rice_bytes[0], c.rice_bytes[1], c.rice_bytes[2]});
  const uint64_t ranges_at_least = static_cast<uint64_t>(VarintSize(c.runs)) + 2 * c.runs;
  c.ranges_bytes = ranges_at_least >= std::min(best_rice_bytes, bitmap_bytes) ? ranges_at_least
                                                                               : RangesBytes(pos, block_start, c.runs);
  return c;
}

// The code EncodeBlock writes for a block with changes, and its size after the method byte.
struct BlockChoice {
  LocationMethod method = LocationMethod::kSplitRice;
  int rice_k = 0;
  uint64_t runs = 0;
  size_t bytes = 0;
};

// Also writes the block's gaps (BlockGapsAndSums) to `gaps` (room for one per position).
BlockChoice ChooseBlock(std::span<const uint32_t> pos, uint64_t block_start, uint64_t block_len, uint64_t* gaps) {
  // Rice parameter near the optimum for geometric gaps, then the exact best of three
  // (the smallest k on ties).
  const uint64_t mean_gap = (block_len - pos.size()) / pos.size();
  const int est = mean_gap == 0 ? 0 : std::bit_width(mean_gap) - 1;
  const int k0 = std::clamp(est - 1, 0, kMaxRiceK - 2);
  const size_t bitmap_bytes = (block_len + 7) / 8;
  const BlockCosts costs = MeasureBlock(pos, BlockGapsAndSums(pos, block_start, k0, gaps), block_start, k0, bitmap_bytes);
  int best_k = k0;
  uint64_t best = costs.rice_bytes[0];
  for (int i = 1; i < 3; ++i)
    if (costs.rice_bytes[i] < best) best = costs.rice_bytes[i], best_k = k0 + i;
  const size_t rice_bytes = 1 + best;
  if (rice_bytes <= bitmap_bytes && rice_bytes <= costs.ranges_bytes)
    return {LocationMethod::kSplitRice, best_k, costs.runs, rice_bytes};
  if (bitmap_bytes <= costs.ranges_bytes) return {LocationMethod::kBitmap, 0, costs.runs, bitmap_bytes};
  return {LocationMethod::kRanges, 0, costs.runs, costs.ranges_bytes};
}

// A thread's room for one block's gaps (BlockGaps), grown to the largest block it has coded.
std::span<uint64_t> GapRoom(size_t n) {
  thread_local ReusedBuffer<uint64_t> room;
  return room.Take(n);
}

void EncodeBlock(std::span<const uint32_t> pos, uint64_t block_start, uint64_t block_len,
                 std::vector<uint8_t>* out) {
  PutVarint(*out, pos.size());
  if (pos.empty()) return;
  const std::span<uint64_t> gaps = GapRoom(pos.size());
  const BlockChoice c = ChooseBlock(pos, block_start, block_len, gaps.data());
  out->push_back(static_cast<uint8_t>(c.method));
  switch (c.method) {
    case LocationMethod::kSplitRice: {
      // Every gap's r low bits, then every quotient (zeros, then a one), each area padded
      // (split_rice.h): one run of the split code.
      out->push_back(static_cast<uint8_t>(c.rice_k));
      const size_t at = out->size();
      const RiceRun run{gaps, c.rice_k};
      PutSplitRice(std::span<const RiceRun>(&run, 1), out);
      DCR_CHECK(out->size() - at == c.bytes - 1);  // the size ChooseBlock costed
      break;
    }
    case LocationMethod::kRice:  // read, no longer written
      DCR_CHECK(false);
      break;
    case LocationMethod::kBitmap: {
      size_t at = out->size();
      out->resize(at + c.bytes, 0);
      for (uint32_t p : pos) {
        uint64_t o = p - block_start;
        (*out)[at + o / 8] |= static_cast<uint8_t>(1u << (o % 8));
      }
      break;
    }
    case LocationMethod::kRanges: {
      PutVarint(*out, c.runs);
      uint64_t prev_end = block_start;
      for (size_t i = 0; i < pos.size();) {
        size_t j = i + 1;
        while (j < pos.size() && pos[j] == pos[j - 1] + 1) ++j;
        PutVarint(*out, pos[i] - prev_end);
        PutVarint(*out, j - i - 1);
        prev_end = uint64_t{pos[j - 1]} + 1;
        i = j;
      }
      break;
    }
  }
}

// Calls fn(block positions, block start, block length) for every block of a chunk, or of its
// elements [first, first + count) (first a block start: positions are counted from the chunk's).
template <typename Fn>
void ForEachBlock(std::span<const uint32_t> positions, uint64_t count, int block_log2, Fn&& fn, uint64_t first = 0) {
  const uint64_t block = 1ull << block_log2;
  const uint32_t* at = positions.data();
  const uint32_t* end = at + positions.size();
  for (uint64_t start = first; start < first + count; start += block) {
    const uint64_t len = std::min(block, first + count - start);
    const uint32_t* stop = std::lower_bound(at, end, start + len);  // a search: a scan took a sixth of the coding
    fn(std::span<const uint32_t>(at, stop), start, len);
    at = stop;
  }
}

Status BlockError(uint64_t block, const std::string& what) {
  return Corrupt("location block " + std::to_string(block) + ": " + what);
}

}  // namespace

void EncodeLocationsImpl(std::span<const uint32_t> positions, uint64_t first, uint64_t count, int block_log2,
                         std::vector<uint8_t>* out) {
  ForEachBlock(
      positions, count, block_log2,
      [&](std::span<const uint32_t> pos, uint64_t start, uint64_t len) { EncodeBlock(pos, start, len, out); }, first);
}

uint64_t LocationCodeBytesImpl(std::span<const uint32_t> positions, uint64_t count, int block_log2) {
  uint64_t bytes = 0;
  ForEachBlock(positions, count, block_log2, [&](std::span<const uint32_t> pos, uint64_t start, uint64_t len) {
    bytes += static_cast<uint64_t>(VarintSize(pos.size()));
    if (pos.empty()) return;
    bytes += 1 + ChooseBlock(pos, start, len, GapRoom(pos.size()).data()).bytes;
  });
  return bytes;
}

uint64_t LocationCodeBytesLowerBoundImpl(std::span<const uint32_t> positions, uint64_t first, uint64_t count,
                                         int block_log2) {
  uint64_t bytes = 0;
  ForEachBlock(positions, count, block_log2, [&](std::span<const uint32_t> pos, uint64_t start, uint64_t len) {
    const uint64_t n = pos.size();
    bytes += static_cast<uint64_t>(VarintSize(n));
    if (n == 0) return;
    // Rice with parameter r: n(r + 1) bits plus sum(floor(gap / 2^r)) >= (G - n(2^r - 1)) / 2^r,
    // where the gaps sum to G = last - start + 1 - n. Bounded below over every r (the split code
    // holds the same bits, padded).
    const uint64_t gaps = uint64_t{pos.back()} - start + 1 - n;
    uint64_t rice_bits = UINT64_MAX;
    for (int r = 0; r <= kMaxRiceK; ++r) {
      const uint64_t slack = n * ((uint64_t{1} << r) - 1);
      const uint64_t quotients = gaps > slack ? (gaps - slack + (uint64_t{1} << r) - 1) >> r : 0;
      rice_bits = std::min(rice_bits, n * static_cast<uint64_t>(r + 1) + quotients);
    }
    // Ranges: every run costs a gap and a length varint, at least a byte each.
    const uint64_t runs = 1 + CountRunStarts(pos.data() + 1, pos.data() + n);
    const uint64_t ranges = static_cast<uint64_t>(VarintSize(runs)) + 2 * runs;
    bytes += 1 + std::min({1 + (rice_bits + 7) / 8, (len + 7) / 8, ranges});
  }, first);
  return bytes;
}

// DecodeLocationsPrefix's blocks, into `positions` (a block's count is checked against the room
// left before it writes).
Status DecodeLocationBlocks(std::span<const uint8_t> in, uint64_t count, int block_log2, std::span<uint32_t> positions,
                            size_t* consumed) {
  const uint64_t expected = positions.size();
  uint64_t have = 0;  // positions decoded so far
  const uint64_t block = 1ull << block_log2;
  ByteReader r(in);
  uint64_t b = 0;
  for (uint64_t start = 0; start < count; start += block, ++b) {
    const uint64_t len = std::min(block, count - start);
    uint64_t n = 0;
    if (!r.ReadVarint(&n)) return BlockError(b, "truncated count");
    if (n > len) return BlockError(b, std::to_string(n) + " changes in " + std::to_string(len) + " elements");
    if (have + n > expected) return BlockError(b, "more changes than the payload declares");
    if (n == 0) continue;
    uint8_t method = 0;
    if (!r.ReadByte(&method)) return BlockError(b, "truncated method");
    switch (static_cast<LocationMethod>(method)) {
      case LocationMethod::kRice: {
        uint8_t k = 0;
        if (!r.ReadByte(&k) || k > kMaxRiceK) return BlockError(b, "bad Rice parameter");
        BitReader bits(r.Rest());
        uint64_t next = start;  // smallest position the next change may take
        uint32_t* out = positions.data() + have;
        const uint64_t end = start + len;
        bool beyond = false;
        const bool read = bits.GetRiceRun(n, k, len >> k, [&](uint64_t gap) {
          const uint64_t p = next + gap;
          if (p >= end) return beyond = true, false;
          *out++ = static_cast<uint32_t>(p);
          next = p + 1;
          return true;
        });
        if (!read) return BlockError(b, beyond ? "position beyond the block" : "truncated Rice code");
        r.Skip(bits.bytes_consumed());
        break;
      }
      case LocationMethod::kSplitRice: {
        uint8_t k = 0;
        if (!r.ReadByte(&k) || k > kMaxRiceK) return BlockError(b, "bad Rice parameter");
        // Offsets in the block first (8 bytes each, a per-thread buffer reused across blocks
        // and payloads), then positions.
        thread_local std::vector<uint64_t> offsets;
        if (offsets.size() < n) offsets.resize(n);
        size_t used = 0;
        const SplitRiceError e = GetSplitRiceOrdinals(r.Rest(), {&n, 1}, {&k, 1}, len, offsets.data(), &used);
        if (!e.ok())
          return BlockError(b, e.kind == SplitRiceError::Kind::kOutOfRange ? "position beyond the block" : e.Message());
        uint32_t* out = positions.data() + have;
        for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(start + offsets[i]);
        r.Skip(used);
        break;
      }
      case LocationMethod::kBitmap: {
        std::span<const uint8_t> bm;
        if (!r.ReadBytes((len + 7) / 8, &bm)) return BlockError(b, "truncated bitmap");
        uint32_t* out = positions.data() + have;
        uint64_t seen = 0;
        for (uint64_t byte = 0; byte < bm.size(); ++byte) {
          uint32_t v = bm[byte];
          while (v != 0) {
            uint64_t o = byte * 8 + static_cast<uint64_t>(std::countr_zero(v));
            v &= v - 1;
            if (o >= len) return BlockError(b, "bitmap bit beyond the block");
            if (seen == n) return BlockError(b, "bitmap holds more bits than the block count");
            out[seen++] = static_cast<uint32_t>(start + o);
          }
        }
        if (seen != n) return BlockError(b, "bitmap holds fewer bits than the block count");
        break;
      }
      case LocationMethod::kRanges: {
        uint64_t runs = 0;
        if (!r.ReadVarint(&runs) || runs == 0 || runs > n) return BlockError(b, "bad range count");
        uint32_t* out = positions.data() + have;
        uint64_t next = start, seen = 0;
        for (uint64_t i = 0; i < runs; ++i) {
          uint64_t gap = 0, extra = 0;
          if (!r.ReadVarint(&gap) || !r.ReadVarint(&extra)) return BlockError(b, "truncated range");
          if (gap > len || extra >= len) return BlockError(b, "range beyond the block");
          uint64_t first = next + gap;
          if (first + extra >= start + len) return BlockError(b, "range beyond the block");
          if (seen + extra + 1 > n) return BlockError(b, "ranges cover more than the block count");
          for (uint64_t p = first; p <= first + extra; ++p) out[seen++] = static_cast<uint32_t>(p);
          next = first + extra + 1;
        }
        if (seen != n) return BlockError(b, "ranges cover fewer than the block count");
        break;
      }
      default:
        return BlockError(b, "unknown method " + std::to_string(method));
    }
    have += n;
  }
  if (have != expected)
    return Corrupt("location code holds " + std::to_string(have) + " changes, payload declares " +
                   std::to_string(expected));
  *consumed = r.pos();
  return Status::Ok();
}

Status DecodeLocationsPrefixImpl(std::span<const uint8_t> in, uint64_t count, int block_log2,
                                 std::span<uint32_t> positions, size_t* consumed) {
  if (block_log2 < 3 || block_log2 > 31) return Corrupt("location block size 2^" + std::to_string(block_log2) + " out of range");
  return DecodeLocationBlocks(in, count, block_log2, positions, consumed);
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr {

HWY_EXPORT(EncodeLocationsImpl);
HWY_EXPORT(LocationCodeBytesImpl);
HWY_EXPORT(LocationCodeBytesLowerBoundImpl);
HWY_EXPORT(DecodeLocationsPrefixImpl);

void EncodeLocations(std::span<const uint32_t> positions, uint64_t count, int block_log2, std::vector<uint8_t>* out) {
  HWY_DYNAMIC_DISPATCH(EncodeLocationsImpl)(positions, 0, count, block_log2, out);
}

void EncodeLocationsFrom(std::span<const uint32_t> positions, uint64_t first, uint64_t count, int block_log2,
                         std::vector<uint8_t>* out) {
  DCR_CHECK(block_log2 >= 0 && block_log2 < 64 && first % (uint64_t{1} << block_log2) == 0);
  HWY_DYNAMIC_DISPATCH(EncodeLocationsImpl)(positions, first, count, block_log2, out);
}

uint64_t LocationCodeBytes(std::span<const uint32_t> positions, uint64_t count, int block_log2) {
  return HWY_DYNAMIC_DISPATCH(LocationCodeBytesImpl)(positions, count, block_log2);
}

uint64_t LocationCodeBytesLowerBound(std::span<const uint32_t> positions, uint64_t count, int block_log2) {
  return HWY_DYNAMIC_DISPATCH(LocationCodeBytesLowerBoundImpl)(positions, 0, count, block_log2);
}

uint64_t LocationCodeBytesLowerBoundFrom(std::span<const uint32_t> positions, uint64_t first, uint64_t count,
                                         int block_log2) {
  DCR_CHECK(block_log2 >= 0 && block_log2 < 64 && first % (uint64_t{1} << block_log2) == 0);
  return HWY_DYNAMIC_DISPATCH(LocationCodeBytesLowerBoundImpl)(positions, first, count, block_log2);
}

Status DecodeLocationsPrefix(std::span<const uint8_t> in, uint64_t count, int block_log2, std::span<uint32_t> positions,
                             size_t* consumed) {
  return HWY_DYNAMIC_DISPATCH(DecodeLocationsPrefixImpl)(in, count, block_log2, positions, consumed);
}

Status DecodeLocations(std::span<const uint8_t> in, uint64_t count, int block_log2, uint64_t expected,
                       std::vector<uint32_t>* positions) {
  if (expected > count) return Corrupt(std::to_string(expected) + " changes declared in " + std::to_string(count) + " elements");
  positions->resize(expected);
  size_t used = 0;
  Status s = DecodeLocationsPrefix(in, count, block_log2, *positions, &used);
  if (s.ok() && used != in.size()) s = Corrupt(std::to_string(in.size() - used) + " trailing bytes after the location code");
  if (!s.ok()) positions->clear();
  return s;
}

}  // namespace dcr
#endif  // HWY_ONCE
