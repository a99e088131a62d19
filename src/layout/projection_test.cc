// Projection and placement agree with each other and with the shards `FillLocalTensor` makes, on
// every element of every generated layout of a small model (exhaustive, so any off-by-one in a
// generator, the band index or the affine maps shows up); shard sets are checked against layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "layout/dtype_convert.h"
#include "layout/generators.h"
#include "layout/projection.h"
#include "layout/shard.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

ModelSpec TinyModel(const std::string& type, bool tied) {
  std::string json = R"({"model_type": ")" + type + R"(", "hidden_size": 32, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
      "num_experts": 4, "moe_intermediate_size": 16, "tie_word_embeddings": )" + (tied ? "true" : "false") + "}";
  auto m = ParseHfConfig(json, "tiny");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

std::vector<std::pair<std::string, LayoutSet>> AllLayouts() {
  std::vector<std::pair<std::string, LayoutSet>> out;
  for (const char* type : {"qwen2", "qwen3_moe"})
    for (bool tied : {false, true}) {
      const ModelSpec m = TinyModel(type, tied);
      const std::string model = std::string(type) + (tied ? " tied" : "");
      for (uint32_t tp : {1u, 2u, 4u})
        for (uint32_t pp : {1u, 2u}) {
          for (uint32_t ep : {1u, 2u}) {
            auto train = GenerateMegatronLayouts(m, {tp, pp, ep});
            if (train.ok()) out.emplace_back(model + " train tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " ep" + std::to_string(ep), *train);
            else EXPECT_TRUE(ep > 1 && !m.is_moe()) << train.status().ToString();
          }
          for (DType dt : {DType::kBF16, DType::kF32}) {
            auto serve = GenerateVllmLayouts(m, {tp, pp, m.is_moe() && tp > 1 ? tp : 1u}, dt);
            EXPECT_TRUE(serve.ok()) << serve.status().ToString();
            if (serve.ok()) out.emplace_back(model + " serve tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " " + std::string(DTypeName(dt)), *serve);
          }
        }
    }
  return out;
}

// Canonical element bits: distinct per (tensor, element), never a NaN.
uint64_t CanonicalBits(size_t tensor, uint64_t index) {
  uint64_t x = (tensor + 1) * 0x9e3779b97f4a7c15ull ^ (index * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 29;
  return x & 0x3fff;
}

TEST(Projection, EveryLocalElementProjectsToACanonicalElementThatPlacesItBack) {
  for (const auto& [name, set] : AllLayouts()) {
    SCOPED_TRACE(name);
    const Catalog& catalog = set[0].canonical;
    const PlacementIndex placement(set);
    std::map<std::pair<uint32_t, uint64_t>, int> owners, copies;
    uint64_t projected = 0;
    for (const RankLayout& l : set) {
      const ProjectionIndex projection(l);
      for (uint32_t ti = 0; ti < l.tensors.size(); ++ti)
        for (uint64_t e = 0; e < l.tensors[ti].num_elements(); ++e) {
          auto target = projection.Project(ti, e);
          if (!target) continue;
          ++projected;
          ASSERT_LT(target->index, *ShapeElements(catalog[target->canonical].shape));
          owners[{target->canonical, target->index}] += target->piece->owner;
          ++copies[{target->canonical, target->index}];
          int found = 0;
          placement.ForEach(target->canonical, target->index, [&](const PlacementIndex::Placement& p, uint64_t local) {
            found += p.rank == l.rank && p.local_tensor == ti && local == e;
          });
          ASSERT_EQ(found, 1) << l.tensors[ti].name << " element " << e;
        }
    }
    uint64_t canonical_elements = 0, placed = 0;
    for (uint32_t c = 0; c < catalog.size(); ++c)
      for (uint64_t i = 0; i < *ShapeElements(catalog[c].shape); ++i) {
        ++canonical_elements;
        ASSERT_EQ((owners[{c, i}]), 1) << catalog[c].name << " element " << i;
        int n = 0;
        placement.ForEach(c, i, [&](const PlacementIndex::Placement&, uint64_t) { ++n; });
        ASSERT_EQ(n, (copies[{c, i}]));
        placed += static_cast<uint64_t>(n);
      }
    EXPECT_EQ(placed, projected);
    EXPECT_GE(projected, canonical_elements);
  }
}

TEST(FillLocalTensor, CopiesConvertsAndPadsEveryElement) {
  for (const auto& [name, set] : AllLayouts()) {
    SCOPED_TRACE(name);
    const Catalog& catalog = set[0].canonical;
    std::vector<std::vector<uint8_t>> storage(catalog.size());
    std::vector<std::span<const uint8_t>> canonical;
    for (size_t c = 0; c < catalog.size(); ++c) {
      const uint32_t w = DTypeWidth(catalog[c].dtype);
      storage[c].resize(*ShapeElements(catalog[c].shape) * w);
      for (uint64_t i = 0; i < storage[c].size() / w; ++i) {
        const uint64_t v = CanonicalBits(c, i);
        std::memcpy(&storage[c][i * w], &v, w);
      }
      canonical.push_back(storage[c]);
    }
    for (const RankLayout& l : set) {
      const ProjectionIndex projection(l);
      for (uint32_t ti = 0; ti < l.tensors.size(); ++ti) {
        const LocalTensor& t = l.tensors[ti];
        const uint32_t w = DTypeWidth(t.dtype);
        std::vector<uint8_t> local(t.num_elements() * w, 0xAB);
        FillLocalTensor(l, t, canonical, local);
        for (uint64_t e = 0; e < t.num_elements(); ++e) {
          uint64_t got = 0, want = 0;
          std::memcpy(&got, &local[e * w], w);
          if (auto target = projection.Project(ti, e)) {
            want = CanonicalBits(target->canonical, target->index);
            const DType cd = catalog[target->canonical].dtype;
            if (cd != t.dtype) want = ConvertBits(cd, t.dtype, want);
          } else {
            const PaddingRegion* pad = nullptr;
            const uint64_t row = e / t.shape.back();
            for (const PaddingRegion& r : t.padding)
              if (row >= r.start[0] && row < r.start[0] + r.extent[0]) pad = &r;
            ASSERT_NE(pad, nullptr) << t.name << " element " << e;
            if (pad->fill == PaddingFill::kRepeatLastRow) {
              const int64_t c = l.FindCanonical(pad->source);
              const uint64_t cols = catalog[c].shape[1];
              want = CanonicalBits(static_cast<size_t>(c), (catalog[c].shape[0] - 1) * cols + e % cols);
            }
          }
          ASSERT_EQ(got, want) << t.name << " element " << e;
        }
      }
    }
  }
}

TEST(ShardSet, RefusesMissingRanksAndTensorsThatDisagreeWithTheLayout) {
  test::TempDir dir("dcr_shardset_");
  auto set = GenerateVllmLayouts(TinyModel("qwen2", false), {2, 1, 1}, DType::kBF16);
  ASSERT_TRUE(set.ok());
  std::vector<TensorToWrite> canonical;
  std::vector<std::vector<uint8_t>> storage;
  for (const CatalogEntry& c : (*set)[0].canonical) storage.emplace_back(*ShapeElements(c.shape) * 2, 0);
  for (size_t i = 0; i < storage.size(); ++i)
    canonical.push_back({(*set)[0].canonical[i].name, DType::kBF16, (*set)[0].canonical[i].shape, storage[i], false});
  ASSERT_TRUE(WriteSafetensors(dir / "model.safetensors", canonical).ok());
  auto ckpt = Checkpoint::Open(dir / "model.safetensors");
  ASSERT_TRUE(ckpt.ok());
  ASSERT_TRUE(WriteShards(*set, *ckpt, dir / "shards", 1).ok());
  EXPECT_TRUE(ShardSet::Open(*set, dir / "shards", MappedFile::Mode::kReadOnly).ok());

  LayoutSet other = *set;
  other[1].tensors[0].name = "renamed";
  Status s = ShardSet::Open(other, dir / "shards", MappedFile::Mode::kReadOnly).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("layout has tensor 'renamed' but the shard does not"), std::string::npos) << s.message();

  std::filesystem::remove(dir / "shards/rank-00001.safetensors");
  s = ShardSet::Open(*set, dir / "shards", MappedFile::Mode::kReadOnly).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing the shard of rank 1"), std::string::npos) << s.message();

  auto one = GenerateVllmLayouts(TinyModel("qwen2", false), {1, 1, 1}, DType::kBF16);
  ASSERT_TRUE(one.ok());
  s = WriteShards(*one, *ckpt, dir / "tp1", 1);
  ASSERT_TRUE(s.ok());
  std::filesystem::copy_file(dir / "shards/rank-00000.safetensors", dir / "tp1/rank-00001.safetensors");
  EXPECT_EQ(ShardSet::Open(*one, dir / "tp1", MappedFile::Mode::kReadOnly).status().code(), StatusCode::kMismatch);
}

}  // namespace
}  // namespace dcr
