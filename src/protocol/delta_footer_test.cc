// Protocol tests: the delta file's footer compression. A footer of up to kSmallFooterJsonBytes
// of JSON is stored at zstd level 19, a larger one (a model of thousands of tensors) at level 9,
// and either kind of delta applies bit-exactly. Byte layout: docs/format.md §1.
#include <gtest/gtest.h>

#include <zstd.h>

#include <random>
#include <string>
#include <vector>

#include "codec/bit_stream.h"
#include "format/checkpoint.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

using test::ReadAll;
using test::TempDir;
using test::Tensors;

// A delta file's footer: its stored (compressed) bytes and its JSON (docs/format.md §1).
struct Footer {
  std::vector<uint8_t> stored;
  std::string json;
};

Footer ReadFooter(const std::string& path) {
  const std::vector<uint8_t> file = ReadAll(path);
  const size_t tail = file.size() - kDeltaTailBytes;
  const uint64_t stored = LoadLe(file.data() + tail, 8), json = LoadLe(file.data() + tail + 8, 8);
  Footer f;
  f.stored.assign(file.begin() + static_cast<std::ptrdiff_t>(tail - stored), file.begin() + static_cast<std::ptrdiff_t>(tail));
  f.json.resize(json);
  const size_t n = ZSTD_decompress(f.json.data(), f.json.size(), f.stored.data(), f.stored.size());
  EXPECT_FALSE(ZSTD_isError(n));
  EXPECT_EQ(n, json);
  return f;
}

std::vector<uint8_t> Compress(const std::string& json, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(json.size()));
  const size_t n = ZSTD_compress(out.data(), out.size(), json.data(), json.size(), level);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// `tensors` small BF16 tensors, each with a few elements changed, diffed into a delta file that
// is then applied to a copy of the base: the copy must hold exactly the next bits. Returns the
// delta's footer.
Footer DiffAndApply(size_t tensors) {
  TempDir dir("dcr_footer_test_");
  std::mt19937_64 rng(tensors);
  Tensors base, next;
  for (size_t i = 0; i < tensors; ++i) {
    const std::string name = "model.layers." + std::to_string(i / 16) + ".experts." + std::to_string(i % 16) + ".weight";
    base.Add(name, DType::kBF16, {4, 8}, rng);
    next.Add(name, DType::kBF16, {4, 8});
    next.storage.back() = base.storage.back();
    next.storage.back()[rng() % 64] ^= 1;
  }
  const std::string base_path = dir / "base.safetensors", next_path = dir / "next.safetensors";
  const std::string delta_path = dir / "d.dcr", target_path = dir / "t.safetensors";
  EXPECT_TRUE(WriteSafetensors(base_path, base.Bind()).ok());
  EXPECT_TRUE(WriteSafetensors(next_path, next.Bind()).ok());
  EXPECT_TRUE(WriteSafetensors(target_path, base.Bind()).ok());
  {
    auto b = Checkpoint::Open(base_path), n = Checkpoint::Open(next_path);
    EXPECT_TRUE(b.ok() && n.ok());
    EXPECT_TRUE(DiffCheckpoints(*b, *n, delta_path, DiffOptions{}).ok());
    auto delta = DeltaReader::Open(delta_path);
    auto target = Checkpoint::Open(target_path, MappedFile::Mode::kReadWrite);
    EXPECT_TRUE(delta.ok() && target.ok());
    EXPECT_TRUE(ApplyDelta(*delta, *target, ApplyOptions{}).ok());
  }
  EXPECT_EQ(ReadAll(target_path), ReadAll(next_path));
  return ReadFooter(delta_path);
}

TEST(DeltaFooter, ASmallFooterIsStoredAtLevel19) {
  const Footer f = DiffAndApply(40);
  ASSERT_LE(f.json.size(), kSmallFooterJsonBytes);
  EXPECT_EQ(f.stored, Compress(f.json, 19));
}

TEST(DeltaFooter, AFooterOfThousandsOfTensorsIsStoredAtLevel9AndApplies) {
  const Footer f = DiffAndApply(3000);
  ASSERT_GT(f.json.size(), kSmallFooterJsonBytes);
  EXPECT_EQ(f.stored, Compress(f.json, 9));
  EXPECT_NE(f.stored, Compress(f.json, 19));  // the two levels are told apart
}

TEST(DeltaFooter, LevelChangesAtTheBound) {
  EXPECT_EQ(FooterZstdLevel(0), 19);
  EXPECT_EQ(FooterZstdLevel(kSmallFooterJsonBytes), 19);
  EXPECT_EQ(FooterZstdLevel(kSmallFooterJsonBytes + 1), 9);
  EXPECT_EQ(FooterZstdLevel(kMaxDeltaFooterBytes), 9);
}

}  // namespace
}  // namespace dcr
