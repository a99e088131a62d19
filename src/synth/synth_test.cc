#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "format/checkpoint.h"
#include "synth/trajectory.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

using test::ReadAll;
using test::TempDir;

constexpr char kDirPrefix[] = "dcr_synth_test_";

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
bool IsBf16NaN(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0; }

// Reference rounding, spelled out: keep the top 16 bits, round up when the dropped 16 bits are
// above half, or exactly half and the kept part is odd.
uint16_t ReferenceBf16(uint32_t u) {
  uint32_t kept = u >> 16, dropped = u & 0xffff;
  bool up = dropped > 0x8000 || (dropped == 0x8000 && (kept & 1));
  return static_cast<uint16_t>(kept + (up ? 1 : 0));
}

SynthModelConfig Tiny() {
  SynthModelConfig m;
  m.layers = 1;
  m.hidden = 32;
  m.intermediate = 64;
  m.vocab = 64;
  m.heads = 4;
  m.kv_heads = 2;
  return m;
}

TEST(Fp32ToBf16, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f807fff)), 0x3f80);  // below half: down
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808001)), 0x3f81);  // above half: up
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808000)), 0x3f80);  // tie, kept part even: stays
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f818000)), 0x3f82);  // tie, kept part odd: up to even
  EXPECT_EQ(Fp32ToBf16(FromBits(0xbf818000)), 0xbf82);  // sign does not change the rule
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3fffffff)), 0x4000);  // carry into the exponent
  EXPECT_EQ(Fp32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00000001)), 0x0000);  // smallest subnormal rounds to +0
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00008000)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x007fffff)), 0x0080);  // largest subnormal -> smallest normal
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f7fffff)), 0x7f80);  // max float overflows to +inf
}

TEST(Fp32ToBf16, InfinitiesStayInfiniteAndNaNsStayNaN) {
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f800000)), 0x7f80);
  EXPECT_EQ(Fp32ToBf16(FromBits(0xff800000)), 0xff80);
  // NaNs whose payload lies only in the dropped bits would become infinities if truncated or
  // rounded; they must stay NaN, with their sign.
  for (uint32_t u : {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u, 0x7fbfffffu}) {
    uint16_t b = Fp32ToBf16(FromBits(u));
    EXPECT_TRUE(IsBf16NaN(b)) << std::hex << u << " -> " << b;
    EXPECT_EQ(b & 0x8000, (u >> 16) & 0x8000) << std::hex << u;
    EXPECT_NE(b & 0x0040, 0) << "quiet bit set for " << std::hex << u;
  }
}

TEST(Fp32ToBf16, AgreesWithTheReferenceOnRandomAndBoundaryBits) {
  std::mt19937_64 rng(31);
  auto check = [](uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return;  // NaNs are covered above
    ASSERT_EQ(Fp32ToBf16(FromBits(u)), ReferenceBf16(u)) << std::hex << u;
  };
  for (int i = 0; i < 2000000; ++i) check(static_cast<uint32_t>(rng()));
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) check((hi << 16) | lo);
}

TEST(Bf16ToFp32, IsExactAndRoundTripsEveryNonNaNValue) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = Bf16ToFp32(static_cast<uint16_t>(b));
    ASSERT_EQ(ToBits(f), b << 16);
    uint16_t back = Fp32ToBf16(f);
    if (IsBf16NaN(static_cast<uint16_t>(b)))
      ASSERT_TRUE(IsBf16NaN(back)) << std::hex << b;
    else
      ASSERT_EQ(back, b) << std::hex << b;
  }
}

TEST(SynthTrajectory, SameSeedGivesByteIdenticalSnapshots) {
  TempDir dir(kDirPrefix);
  SynthTrajectoryOptions opt;
  opt.seed = 42;
  SynthTrajectory a(Tiny(), opt), b(Tiny(), opt);
  ASSERT_TRUE(a.WriteSnapshot(dir / "a0.safetensors").ok());
  ASSERT_TRUE(b.WriteSnapshot(dir / "b0.safetensors").ok());
  EXPECT_EQ(ReadAll(dir / "a0.safetensors"), ReadAll(dir / "b0.safetensors"));
  for (int i = 0; i < 3; ++i) a.Step(), b.Step();
  EXPECT_EQ(a.step(), 3);
  ASSERT_TRUE(a.WriteSnapshot(dir / "a3.safetensors").ok());
  ASSERT_TRUE(b.WriteSnapshot(dir / "b3.safetensors").ok());
  EXPECT_EQ(ReadAll(dir / "a3.safetensors"), ReadAll(dir / "b3.safetensors"));
  EXPECT_NE(ReadAll(dir / "a0.safetensors"), ReadAll(dir / "a3.safetensors"));

  opt.seed = 43;
  SynthTrajectory c(Tiny(), opt);
  ASSERT_TRUE(c.WriteSnapshot(dir / "c0.safetensors").ok());
  EXPECT_NE(ReadAll(dir / "a0.safetensors"), ReadAll(dir / "c0.safetensors"));
}

// Tensors of several random-stream chunks (64 Ki elements) and a partial one.
SynthModelConfig Chunky() {
  SynthModelConfig m = Tiny();
  m.hidden = 256;
  m.intermediate = 688;
  m.vocab = 1100;  // embeddings of 281600 elements: four whole chunks and part of a fifth
  return m;
}

TEST(SynthTrajectory, TheSameTrajectoryOnAnyThreadCountAndWithWarmUpStepsTakenTogetherOrOneByOne) {
  TempDir dir(kDirPrefix);
  SynthTrajectoryOptions opt;
  opt.seed = 9;
  opt.learning_rate = 1e-5;
  opt.warmup_steps = 3;
  opt.threads = 1;
  SynthTrajectory one(Chunky(), opt);
  opt.threads = 2;
  SynthTrajectory two(Chunky(), opt);
  // The warm-up as plain steps at learning rate 0, taken one call at a time.
  opt.warmup_steps = 0;
  SynthTrajectory stepped(Chunky(), opt);
  stepped.set_learning_rate(0.0);
  for (int i = 0; i < 3; ++i) stepped.Step();
  stepped.set_learning_rate(1e-5);
  for (int i = 0; i < 2; ++i) one.Step(), two.Step(), stepped.Step();
  ASSERT_TRUE(one.WriteSnapshot(dir / "one.safetensors").ok());
  ASSERT_TRUE(two.WriteSnapshot(dir / "two.safetensors").ok());
  ASSERT_TRUE(stepped.WriteSnapshot(dir / "stepped.safetensors").ok());
  const auto want = ReadAll(dir / "one.safetensors");
  EXPECT_EQ(ReadAll(dir / "two.safetensors"), want);
  EXPECT_EQ(ReadAll(dir / "stepped.safetensors"), want);
}

TEST(SynthTrajectory, SnapshotHasTheConfiguredBf16Tensors) {
  TempDir dir(kDirPrefix);
  SynthTrajectory t(Tiny(), SynthTrajectoryOptions{});
  ASSERT_TRUE(t.WriteSnapshot(dir / "s.safetensors").ok());
  auto c = Checkpoint::Open(dir / "s.safetensors");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->total_elements(), t.num_parameters());
  // embed + lm_head + norm + per layer: 2 norms, q, k, v, o, gate, up, down.
  EXPECT_EQ(c->tensors().size(), 3u + 9u);
  for (const auto& r : c->tensors()) EXPECT_EQ(r.dtype(), DType::kBF16) << r.name();
  const TensorRef* k = c->Find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->info->shape, (std::vector<uint64_t>{2 * 8, 32}));  // kv_heads * head_dim, hidden
  const uint64_t h = 32, i = 64, v = 64, kv = 16;
  EXPECT_EQ(t.num_parameters(), 2 * v * h + h + 2 * h + 2 * h * h + 2 * kv * h + 3 * i * h);
}

TEST(SynthTrajectory, AStepChangesSomeButNotAllBf16Elements) {
  TempDir dir(kDirPrefix);
  SynthTrajectory t(Tiny(), SynthTrajectoryOptions{});
  t.Step();  // moments warm up
  ASSERT_TRUE(t.WriteSnapshot(dir / "before.safetensors").ok());
  t.Step();
  ASSERT_TRUE(t.WriteSnapshot(dir / "after.safetensors").ok());
  auto a = Checkpoint::Open(dir / "before.safetensors");
  auto b = Checkpoint::Open(dir / "after.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  uint64_t changed = 0, total = 0;
  for (size_t ti = 0; ti < a->tensors().size(); ++ti) {
    const auto& x = a->tensors()[ti].bytes;
    const auto& y = b->tensors()[ti].bytes;
    ASSERT_EQ(x.size(), y.size());
    for (size_t e = 0; e < x.size() / 2; ++e) {
      uint16_t u, v;
      std::memcpy(&u, x.data() + 2 * e, 2);
      std::memcpy(&v, y.data() + 2 * e, 2);
      changed += u != v;
      ++total;
    }
  }
  EXPECT_GT(changed, 0u);
  EXPECT_LT(changed, total / 2);  // the small-step regime: most bf16 bits stay put
}

TEST(SynthTrajectory, ShardedSnapshotHoldsTheSameBitsAsTheSingleFile) {
  TempDir dir(kDirPrefix);
  SynthTrajectory t(Tiny(), SynthTrajectoryOptions{});
  t.Step();
  ASSERT_TRUE(t.WriteSnapshot(dir / "s.safetensors").ok());
  ASSERT_TRUE(t.WriteShardedSnapshot(dir / "sharded", 8192).ok());
  auto a = Checkpoint::Open(dir / "s.safetensors");
  auto b = Checkpoint::Open(dir / "sharded");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(b->sharded());
  EXPECT_GT(b->num_files(), 1u);
  auto d = FirstDifference(*a, *b);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->has_value());
}

}  // namespace
}  // namespace dcr
