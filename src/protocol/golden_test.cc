// Golden files pin the byte formats: every delta format version this build claims to read has
// committed files under testdata/golden/v<N>/, and decoding them must keep giving exactly the
// committed target. Regenerate (only when adding a new version) with DCR_WRITE_GOLDEN=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = fs::path(DCR_SOURCE_DIR) / "testdata/golden/v1";

using test::ReadAll;
using test::TempDir;

// Base and target: every width, special float bits, an empty tensor, a scalar, and a tensor
// with contiguous, scattered and dense changes (so all three location codes appear).
void MakeGoldenCheckpoints(const fs::path& dir) {
  std::vector<uint16_t> bf16(5000), bf16_new;
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint16_t>(0x3c00 + (i * 7919) % 997);
  bf16_new = bf16;
  for (size_t i = 0; i < 5000; i += 97) bf16_new[i] ^= 0x1;       // scattered
  for (size_t i = 2000; i < 2300; ++i) bf16_new[i] ^= 0x3;        // a run
  for (size_t i = 4000; i < 4400; i += 2) bf16_new[i] ^= 0x7;     // dense
  std::vector<uint32_t> f32 = {0x7fc00001u, 0x80000000u, 0x00000001u, 0x7f800000u, 0x3f800000u};
  std::vector<uint32_t> f32_new = {0x7fc00002u, 0x00000000u, 0x00000002u, 0xff800000u, 0x3f800000u};
  std::vector<uint64_t> i64 = {1, 2, 3, 0xffffffffffffffffull}, i64_new = {1, 5, 3, 0};
  std::vector<uint8_t> u8 = {0, 1, 2, 3, 4, 5, 6, 7}, u8_new = {0, 1, 9, 3, 4, 5, 6, 8};
  uint16_t scalar = 0x3c00, scalar_new = 0xbc00;
  auto bytes = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  auto one = [](const uint16_t& v) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), 2); };
  std::vector<TensorToWrite> base = {
      {"a.bf16", DType::kBF16, {50, 100}, bytes(bf16)}, {"b.f32", DType::kF32, {5}, bytes(f32)},
      {"c.i64", DType::kI64, {2, 2}, bytes(i64)},      {"d.u8", DType::kU8, {8}, bytes(u8)},
      {"e.empty", DType::kF16, {0, 4}, {}},            {"f.scalar", DType::kBF16, {}, one(scalar)}};
  std::vector<TensorToWrite> target = base;
  target[0].data = bytes(bf16_new);
  target[1].data = bytes(f32_new);
  target[2].data = bytes(i64_new);
  target[3].data = bytes(u8_new);
  target[5].data = one(scalar_new);
  ASSERT_TRUE(WriteSafetensors((dir / "base.safetensors").string(), base).ok());
  ASSERT_TRUE(WriteSafetensors((dir / "target.safetensors").string(), target).ok());
}

TEST(GoldenV1, WriteWhenAsked) {
  if (std::getenv("DCR_WRITE_GOLDEN") == nullptr) GTEST_SKIP() << "set DCR_WRITE_GOLDEN=1 to regenerate";
  fs::create_directories(kGolden);
  MakeGoldenCheckpoints(kGolden);
  auto base = Checkpoint::Open((kGolden / "base.safetensors").string());
  auto target = Checkpoint::Open((kGolden / "target.safetensors").string());
  ASSERT_TRUE(base.ok() && target.ok());
  using Context = EncodeOptions::Context;
  for (auto [name, kind, context] : {std::tuple{"xor.dcr", ValueKind::kXor, Context::kNever},
                                     std::tuple{"overwrite.dcr", ValueKind::kOverwrite, Context::kNever},
                                     std::tuple{"context.dcr", ValueKind::kXor, Context::kAlways}}) {
    DiffOptions o;
    o.kind = kind;
    o.encode.context = context;
    o.chunk_bytes = 4096;  // several payloads, one tensor split across two
    o.encode.block_log2 = 10;
    ASSERT_TRUE(DiffCheckpoints(*base, *target, (kGolden / name).string(), o).ok());
  }
}

class GoldenV1Decode : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenV1Decode, CommittedDeltaTakesCommittedBaseExactlyToCommittedTarget) {
  TempDir work("dcr_golden_");
  fs::copy_file(kGolden / "base.safetensors", work / "t.safetensors");
  auto delta = DeltaReader::Open((kGolden / GetParam()).string());
  ASSERT_TRUE(delta.ok()) << delta.status().ToString();
  EXPECT_GT(delta->header().payloads.size(), 1u);
  auto t = Checkpoint::Open(work / "t.safetensors", MappedFile::Mode::kReadWrite);
  ASSERT_TRUE(t.ok());
  auto st = ApplyDelta(*delta, *t, {});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(ReadAll(work / "t.safetensors"), ReadAll(kGolden / "target.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenV1Decode, ::testing::Values("xor.dcr", "overwrite.dcr", "context.dcr"));

}  // namespace
}  // namespace dcr
