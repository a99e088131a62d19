// Every SIMD kernel returns with the upper halves of the vector registers clean, on every target
// this build compiled and this CPU runs (each forced in turn).
//
// Why it matters: after a kernel leaves YMM/ZMM upper state dirty (a return without VZEROUPPER),
// each legacy-SSE instruction that follows, anywhere in the process, merges into the dirty
// register (a false dependency, and on some CPUs a blend or a state transition). The band fit,
// scalar double code compiled for baseline x86-64, ran 10x slower after the state digest had
// returned so: about 0.15 ms of a 1 ms one-thread context encode.
//
// The state is read with XGETBV(1) (XINUSE): bit 2 (upper 128 bits of YMM0-15) and bit 6 (upper
// 256 bits of ZMM0-15). The test is skipped where XINUSE is not available, or where it still
// reports the state in use right after VZEROUPPER (some hypervisors report it always).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codec/payload_codec.h"
#include "codec/simd_masks.h"
#include "protocol/state_digest.h"
#include "codec/span_test_support.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace dcr {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kUpperState = (1u << 2) | (1u << 6);

bool XinuseReadable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX)) return false;
  if (!__get_cpuid_count(0xd, 1, &a, &b, &c, &d)) return false;
  return (a & (1u << 2)) != 0;  // XGETBV with ECX = 1
}

uint32_t UpperStateInUse() {
  uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return lo & kUpperState;
}

void ClearUpperState() { asm volatile("vzeroupper" ::: "memory"); }
#endif

// Random elements, about 1 in 20 changed in the low mantissa bits, with every exponent.
struct Pair {
  std::vector<uint8_t> base, next;
  std::vector<uint32_t> changed;
};

Pair MakePair(uint32_t width, size_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  Pair p;
  p.base.resize(count * width);
  for (auto& b : p.base) b = static_cast<uint8_t>(rng());
  p.next = p.base;
  for (size_t i = 0; i < count; ++i)
    if (rng() % 20 == 0) {
      p.next[i * width] ^= static_cast<uint8_t>(1 + rng() % 7);
      p.changed.push_back(static_cast<uint32_t>(i));
    }
  return p;
}

DType DTypeOfWidth(uint32_t width) {
  switch (width) {
    case 1: return DType::kF8E4M3;
    case 2: return DType::kBF16;
    case 4: return DType::kF32;
    default: return DType::kF64;
  }
}

class SimdStateTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { ForceSimdTarget(GetParam()); }
  void TearDown() override { ForceSimdTarget(0); }

  // Runs `kernel` from a clean state and expects the state clean after it.
  void ExpectLeavesClean(const std::string& what, const std::function<void()>& kernel) {
#if defined(__x86_64__)
    ClearUpperState();
    kernel();
    EXPECT_EQ(UpperStateInUse(), 0u) << what << " returned with dirty upper vector state on " << ActiveSimdTargetName();
#else
    (void)what;
    (void)kernel;
#endif
  }
};

TEST_P(SimdStateTest, KernelsReturnWithCleanUpperVectorState) {
#if defined(__x86_64__)
  if (!XinuseReadable()) GTEST_SKIP() << "XGETBV(1) not available";
  ClearUpperState();
  if (UpperStateInUse() != 0) GTEST_SKIP() << "XINUSE reports the upper state in use right after VZEROUPPER";
#else
  GTEST_SKIP() << "x86-64 only";
#endif
  constexpr size_t kCount = 3 * kMaskTileElements + 77;  // whole tiles and a partial one
  for (uint32_t width : {1u, 2u, 4u, 8u}) {
    SCOPED_TRACE("width " + std::to_string(width));
    const Pair p = MakePair(width, kCount, width);
    std::vector<uint64_t> masks(8 * (kCount / 64 + 1));
    ExpectLeavesClean("DifferMasks", [&] { DifferMasks(p.base.data(), p.next.data(), width, kCount, masks.data()); });
    {
      const size_t tile = kMaskTileElements;
      const size_t differ = DifferMasks(p.base.data(), p.next.data(), width, tile, masks.data());
      std::vector<uint32_t> positions(differ + kExtractSlack);
      std::vector<uint8_t> values(positions.size() * width);
      ExpectLeavesClean("ExtractChanges", [&] {
        ExtractChanges(p.base.data(), p.next.data(), width, tile, masks.data(), differ, true, 0, positions.data(),
                       values.data());
      });
    }
    {
      const size_t tile = kMaskTileElements;
      std::vector<uint32_t> positions(tile + kExtractSlack);
      std::vector<uint8_t> values(positions.size() * width), old_bits(values.size());
      ExpectLeavesClean("DiffExtractTile", [&] {
        (void)DiffExtractTile(p.base.data(), p.next.data(), width, tile, true, 0, positions.data(), values.data(),
                              old_bits.data());
      });
    }
    const uint8_t thresholds[3] = {10, 60, 200};
    ExpectLeavesClean("ClassAtLeastMasks",
                      [&] { ClassAtLeastMasks(p.base.data(), width, kCount, 0, 0xff, thresholds, 3, masks.data()); });
    ExpectLeavesClean("DigestElements", [&] { (void)DigestElements(7, p.base, width, 0); });
    {
      std::vector<uint8_t> old_bits(p.changed.size() * width), masks(old_bits.size());
      ExpectLeavesClean("DigestChanges",
                        [&] { (void)DigestChanges(7, 0, p.changed, old_bits.data(), masks.data(), true, width); });
    }

    // Context mode: the band fit, walk and tile rows on the encoder's side, the walk on the
    // decoder's, each on one thread and on two.
    const SegmentSpec spec{0, DTypeOfWidth(width), ValueKind::kXor, 0, kCount};
    for (int threads : {1, 2}) {
      std::vector<uint8_t> payload;
      ExpectLeavesClean("context encode, " + std::to_string(threads) + " thread(s)", [&] {
        EncodeOptions options;
        options.context = EncodeOptions::Context::kAlways;
        options.band_part_elements = kMaskTileElements;
        PayloadBuilder builder(options);
        ASSERT_EQ(builder.AddDiff(spec, p.base, p.next), p.changed.size());
        builder.Finish({1, 2, 3}, &payload, threads);
      });
      DecodedPayload decoded;
      ExpectLeavesClean("context decode, " + std::to_string(threads) + " thread(s)", [&] {
        ASSERT_TRUE(DecodePayload(payload, &decoded, [&](const SegmentSpec&) -> Result<std::span<const uint8_t>> {
                      return std::span<const uint8_t>(p.base);
                    }, threads).ok());
      });
      ASSERT_EQ(decoded.mode, CodecMode::kContextSplitRice);
      ASSERT_EQ(decoded.segments.size(), 1u);
      EXPECT_EQ(AsVector(decoded.segments[0].changes.positions), p.changed);
    }

    // Plain mode: the location and value coders, compiled per target for its scalar instructions.
    std::vector<uint8_t> payload;
    ExpectLeavesClean("plain encode", [&] {
      EncodeOptions options;
      options.context = EncodeOptions::Context::kNever;
      PayloadBuilder builder(options);
      ASSERT_EQ(builder.AddDiff(spec, p.base, p.next), p.changed.size());
      builder.Finish({1, 2, 3}, &payload, 1);
    });
    DecodedPayload decoded;
    ExpectLeavesClean("plain decode", [&] { ASSERT_TRUE(DecodePayload(payload, &decoded).ok()); });
    ASSERT_EQ(decoded.segments.size(), 1u);
    EXPECT_EQ(AsVector(decoded.segments[0].changes.positions), p.changed);
  }
}

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) { return SimdTargetName(info.param); }

INSTANTIATE_TEST_SUITE_P(EveryTarget, SimdStateTest, ::testing::ValuesIn(CompiledSimdTargets()), TargetParamName);

}  // namespace
}  // namespace dcr
