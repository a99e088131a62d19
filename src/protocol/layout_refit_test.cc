// Layout-aware refit end to end: canonical base -> shards of a Megatron-style training layout ->
// layout diff -> canonical delta -> layout apply into shards of a vLLM-style serving layout gives,
// bit for bit, the serving shards of the new canonical checkpoint (DESIGN.md §5's correctness
// test), for every combination in the issue's matrix; plus every refusal leaves the shards as
// they were.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>

#include "base/mapped_file.h"
#include "layout/generators.h"
#include "protocol/delta_apply.h"
#include "protocol/layout_apply.h"
#include "protocol/layout_diff.h"
#include "synth/trajectory.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

const char* const kConfigs[][2] = {
    {"llama_gqa", R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300})"},
    {"qwen2_tied", R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300, "tie_word_embeddings": true})"},
    {"qwen3_moe", R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300, "num_experts": 8,
        "moe_intermediate_size": 32, "mlp_only_layers": [1]})"},
    {"qwen3_moe_tied", R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300, "num_experts": 8,
        "moe_intermediate_size": 32, "tie_word_embeddings": true})"},
};

std::string Label(const char* role, const ParallelSizes& s) {
  return std::string(role) + " tp" + std::to_string(s.tp) + " pp" + std::to_string(s.pp) + " ep" + std::to_string(s.ep);
}

// A model with a canonical base and a new checkpoint one optimizer step later.
struct ModelCase {
  ModelSpec spec;
  std::unique_ptr<test::TempDir> dir;
  std::string base, next;  // canonical checkpoints
};

ModelCase MakeCase(int which) {
  ModelCase c;
  auto spec = ParseHfConfig(kConfigs[which][1], kConfigs[which][0]);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  c.spec = *spec;
  c.dir = std::make_unique<test::TempDir>(std::string("dcr_refit_") + kConfigs[which][0] + "_");
  SynthTrajectory traj(SynthParamsForCatalog(CanonicalCatalog(c.spec)), {static_cast<uint64_t>(11 + which), 2e-5});
  c.base = *c.dir / "base.safetensors";
  c.next = *c.dir / "new.safetensors";
  EXPECT_TRUE(traj.WriteSnapshot(c.base).ok());
  traj.Step();
  EXPECT_TRUE(traj.WriteSnapshot(c.next).ok());
  return c;
}

Checkpoint Open(const std::string& path) {
  auto c = Checkpoint::Open(path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

void Shard(const LayoutSet& set, const std::string& ckpt, const std::string& out) {
  ASSERT_TRUE(WriteShards(set, Open(ckpt), out, 2).ok());
}

// Every shard file of `a` is byte-identical to the same file of `b`.
void ExpectSameShards(const LayoutSet& set, const std::string& a, const std::string& b) {
  for (const RankLayout& l : set) {
    const auto x = test::ReadAll(fs::path(a) / ShardFileName(l.rank));
    const auto y = test::ReadAll(fs::path(b) / ShardFileName(l.rank));
    ASSERT_FALSE(x.empty());
    EXPECT_TRUE(x == y) << "rank " << l.rank << " differs between " << a << " and " << b;
  }
}

std::map<std::string, std::vector<uint8_t>> Snapshot(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> files;
  for (const auto& e : fs::directory_iterator(dir)) files[e.path().filename().string()] = test::ReadAll(e.path());
  return files;
}

struct Pipeline {
  ModelCase m;
  // Makes the delta from training shards of `train`.
  Result<LayoutDiffStats> Diff(const LayoutSet& train, const std::string& tag, const LayoutDiffOptions& o = {}) {
    const std::string tb = *m.dir / ("train_base_" + tag), tn = *m.dir / ("train_new_" + tag);
    fs::remove_all(tb);
    fs::remove_all(tn);
    Shard(train, m.base, tb);
    Shard(train, m.next, tn);
    return DiffLayoutShardDirs(train, tb, tn, *m.dir / (tag + ".dcr"), o);
  }
};

TEST(LayoutRefit, EveryTrainingLayoutToEveryServingLayoutIsBitExact) {
  const std::vector<ParallelSizes> train_sizes = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 2, 1}, {2, 2, 1}, {4, 2, 1},
                                                  {1, 1, 2}, {2, 1, 2}, {4, 1, 2}, {1, 2, 2}, {2, 2, 2}, {4, 2, 2}};
  const std::vector<ParallelSizes> serve_sizes = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {8, 1, 1}, {2, 3, 1},
                                                  {2, 1, 2}, {4, 1, 4}, {8, 1, 8}};
  int chains = 0;
  std::vector<uint8_t> probe(4096);
  const bool kernel_prefaults = PrefaultForWrite(std::span<uint8_t>(probe));
  for (int which = 0; which < 4; ++which) {
    Pipeline p{MakeCase(which)};
    SCOPED_TRACE(kConfigs[which][0]);
    // Serving shards of base (the receivers' start) and of new (what a dense refit would give).
    std::vector<std::pair<ParallelSizes, LayoutSet>> serves;
    for (const ParallelSizes& s : serve_sizes) {
      if (s.ep > 1 && !p.m.spec.is_moe()) continue;
      auto serve = GenerateVllmLayouts(p.m.spec, s, p.m.spec.dtype);
      ASSERT_TRUE(serve.ok()) << Label("serve", s) << ": " << serve.status().ToString();
      Shard(*serve, p.m.base, *p.m.dir / ("serve_base_" + Label("", s)));
      Shard(*serve, p.m.next, *p.m.dir / ("serve_new_" + Label("", s)));
      serves.emplace_back(s, std::move(*serve));
    }
    for (const ParallelSizes& t : train_sizes) {
      if (t.ep > 1 && !p.m.spec.is_moe()) continue;
      SCOPED_TRACE(Label("train", t));
      auto train = GenerateMegatronLayouts(p.m.spec, t);
      ASSERT_TRUE(train.ok()) << train.status().ToString();
      auto stats = p.Diff(*train, "delta");
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      EXPECT_GT(stats->changed_elements, 0u);
      EXPECT_LT(stats->changed_elements, stats->total_elements);
      auto delta = DeltaReader::Open(*p.m.dir / "delta.dcr");
      ASSERT_TRUE(delta.ok()) << delta.status().ToString();

      // The delta is an ordinary canonical delta: `dcr apply` to the canonical base gives new.
      fs::copy_file(p.m.base, *p.m.dir / "replica.safetensors", fs::copy_options::overwrite_existing);
      auto replica = Checkpoint::Open(*p.m.dir / "replica.safetensors", MappedFile::Mode::kReadWrite);
      ASSERT_TRUE(replica.ok());
      ASSERT_TRUE(ApplyDelta(*delta, *replica, {}).ok());
      EXPECT_TRUE(test::ReadAll(*p.m.dir / "replica.safetensors") == test::ReadAll(p.m.next));

      for (const auto& [s, serve] : serves) {
        SCOPED_TRACE(Label("serve", s));
        const std::string target = *p.m.dir / "target";
        fs::remove_all(target);
        fs::copy(*p.m.dir / ("serve_base_" + Label("", s)), target);
        auto applied = ApplyLayoutDeltaToDir(*delta, serve, target, {});
        ASSERT_TRUE(applied.ok()) << applied.status().ToString();
        EXPECT_EQ(applied->changed_elements, stats->changed_elements);
        EXPECT_GE(applied->placed_elements, applied->changed_elements);
        // These deltas change a few % of the elements: the shards' touched spans are dense and
        // are prefaulted where the kernel can (write_prefault.h).
        if (kernel_prefaults) {
          EXPECT_GT(applied->prefaulted_bytes, 0u);
        }
        ExpectSameShards(serve, target, *p.m.dir / ("serve_new_" + Label("", s)));
        ++chains;
      }
    }
  }
  EXPECT_EQ(chains, 2 * 6 * 5 + 2 * 12 * 8);
}

TEST(LayoutRefit, LayoutDiffIsByteIdenticalToTheCanonicalDiff) {
  Pipeline p{MakeCase(2)};
  auto train = GenerateMegatronLayouts(p.m.spec, {2, 2, 2});
  ASSERT_TRUE(train.ok());
  for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
    LayoutDiffOptions lo;
    lo.kind = kind;
    lo.chunk_bytes = 4096;  // many payloads, tensors split across them
    ASSERT_TRUE(p.Diff(*train, "layout", lo).ok());
    DiffOptions co;
    co.kind = kind;
    co.chunk_bytes = 4096;
    ASSERT_TRUE(DiffCheckpoints(Open(p.m.base), Open(p.m.next), *p.m.dir / "canonical.dcr", co).ok());
    EXPECT_TRUE(test::ReadAll(*p.m.dir / "layout.dcr") == test::ReadAll(*p.m.dir / "canonical.dcr"));
  }
}

TEST(LayoutRefit, ConvertingServingLayoutsGetTheConvertedNewValues) {
  Pipeline p{MakeCase(1)};
  auto train = GenerateMegatronLayouts(p.m.spec, {2, 1, 1});
  ASSERT_TRUE(train.ok());
  LayoutDiffOptions overwrite;
  overwrite.kind = ValueKind::kOverwrite;
  ASSERT_TRUE(p.Diff(*train, "xor").ok());
  ASSERT_TRUE(p.Diff(*train, "overwrite", overwrite).ok());
  auto xor_delta = DeltaReader::Open(*p.m.dir / "xor.dcr");
  auto ow_delta = DeltaReader::Open(*p.m.dir / "overwrite.dcr");
  ASSERT_TRUE(xor_delta.ok() && ow_delta.ok());

  // F32 holds BF16 exactly: XOR deltas place and verify.
  auto f32 = GenerateVllmLayouts(p.m.spec, {4, 1, 1}, DType::kF32);
  ASSERT_TRUE(f32.ok());
  Shard(*f32, p.m.base, *p.m.dir / "f32");
  Shard(*f32, p.m.next, *p.m.dir / "f32_new");
  auto applied = ApplyLayoutDeltaToDir(*xor_delta, *f32, *p.m.dir / "f32", {});
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  ExpectSameShards(*f32, *p.m.dir / "f32", *p.m.dir / "f32_new");

  // F16 rounds: the base cannot be verified and XOR masks cannot be placed; overwrites can.
  auto f16 = GenerateVllmLayouts(p.m.spec, {2, 1, 1}, DType::kF16);
  ASSERT_TRUE(f16.ok());
  Shard(*f16, p.m.base, *p.m.dir / "f16");
  Shard(*f16, p.m.next, *p.m.dir / "f16_new");
  const auto before = Snapshot(*p.m.dir / "f16");
  Status s = ApplyLayoutDeltaToDir(*ow_delta, *f16, *p.m.dir / "f16", {}).status();
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("cannot verify the base"), std::string::npos) << s.message();
  LayoutApplyOptions unverified;
  unverified.verify = false;
  s = ApplyLayoutDeltaToDir(*xor_delta, *f16, *p.m.dir / "f16", unverified).status();
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("an XOR delta cannot be placed"), std::string::npos) << s.message();
  EXPECT_TRUE(Snapshot(*p.m.dir / "f16") == before);
  applied = ApplyLayoutDeltaToDir(*ow_delta, *f16, *p.m.dir / "f16", unverified);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  ExpectSameShards(*f16, *p.m.dir / "f16", *p.m.dir / "f16_new");
}

TEST(LayoutRefit, SpecialValuesConvertBitExactly) {
  Pipeline p{MakeCase(0)};
  // Rewrite new with NaNs (with payloads), infinities, signed zeros, subnormals, F16 overflow and
  // F16 rounding ties in the first elements of every tensor.
  const uint16_t specials[] = {0x7fc1, 0xff81, 0x7f80, 0xff80, 0x8000, 0x0000, 0x0001, 0x807f, 0x477f,
                               0xc780, 0x3f81, 0x3a01, 0x3380, 0x3300, 0x7f7f, 0x0080};
  {
    auto next = Checkpoint::Open(p.m.next);
    ASSERT_TRUE(next.ok());
    std::vector<std::vector<uint8_t>> storage;
    std::vector<TensorToWrite> tensors;
    for (const TensorRef& t : next->tensors()) {
      storage.emplace_back(t.bytes.begin(), t.bytes.end());
      for (size_t i = 0; i < std::size(specials) && 2 * i < storage.back().size(); ++i)
        std::memcpy(&storage.back()[2 * i], &specials[i], 2);
    }
    for (size_t i = 0; i < storage.size(); ++i)
      tensors.push_back({next->tensors()[i].name(), DType::kBF16, next->tensors()[i].info->shape, storage[i], false});
    ASSERT_TRUE(WriteSafetensors(*p.m.dir / "special.safetensors", tensors).ok());
  }
  p.m.next = *p.m.dir / "special.safetensors";
  auto train = GenerateMegatronLayouts(p.m.spec, {2, 2, 1});
  ASSERT_TRUE(train.ok());
  LayoutDiffOptions overwrite;
  overwrite.kind = ValueKind::kOverwrite;
  ASSERT_TRUE(p.Diff(*train, "xor").ok());
  ASSERT_TRUE(p.Diff(*train, "ow", overwrite).ok());
  LayoutApplyOptions unverified;
  unverified.verify = false;
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    auto serve = GenerateVllmLayouts(p.m.spec, {4, 1, 1}, dt);
    ASSERT_TRUE(serve.ok());
    const std::string dir = *p.m.dir / ("serve_" + std::string(DTypeName(dt)));
    Shard(*serve, p.m.base, dir);
    Shard(*serve, p.m.next, dir + "_new");
    auto delta = DeltaReader::Open(*p.m.dir / (dt == DType::kF16 ? "ow.dcr" : "xor.dcr"));
    ASSERT_TRUE(delta.ok());
    auto applied = ApplyLayoutDeltaToDir(*delta, *serve, dir, dt == DType::kF16 ? unverified : LayoutApplyOptions{});
    ASSERT_TRUE(applied.ok()) << DTypeName(dt) << ": " << applied.status().ToString();
    ExpectSameShards(*serve, dir, dir + "_new");
  }
}

TEST(LayoutRefit, RefusalsLeaveTheServingShardsUnchanged) {
  Pipeline p{MakeCase(2)};
  auto train = GenerateMegatronLayouts(p.m.spec, {2, 1, 2});
  auto serve = GenerateVllmLayouts(p.m.spec, {4, 1, 1}, DType::kBF16);
  ASSERT_TRUE(train.ok() && serve.ok());
  ASSERT_TRUE(p.Diff(*train, "delta").ok());
  const std::string dir = *p.m.dir / "serve";
  Shard(*serve, p.m.next, dir);  // already at the target: the wrong base
  auto delta = DeltaReader::Open(*p.m.dir / "delta.dcr");
  ASSERT_TRUE(delta.ok());
  auto before = Snapshot(dir);
  Status s = ApplyLayoutDeltaToDir(*delta, *serve, dir, {}).status();
  EXPECT_EQ(s.code(), StatusCode::kWrongBase);
  EXPECT_NE(s.message().find("does not hold the delta's base bits; nothing was written"), std::string::npos) << s.message();
  EXPECT_TRUE(Snapshot(dir) == before);

  // A serving layout of another model.
  auto other = ParseHfConfig(kConfigs[0][1], "llama");
  auto wrong_model = GenerateVllmLayouts(*other, {4, 1, 1}, DType::kBF16);
  ASSERT_TRUE(wrong_model.ok());
  EXPECT_EQ(ApplyLayoutDeltaToDir(*delta, *wrong_model, dir, {}).status().code(), StatusCode::kMismatch);

  // A corrupted payload.
  fs::remove_all(dir);
  Shard(*serve, p.m.base, dir);
  before = Snapshot(dir);
  auto bytes = test::ReadAll(*p.m.dir / "delta.dcr");
  bytes[8 + 100] ^= 0x10;
  test::WriteAll(*p.m.dir / "corrupt.dcr", bytes);
  auto corrupt = DeltaReader::Open(*p.m.dir / "corrupt.dcr");
  ASSERT_TRUE(corrupt.ok());
  EXPECT_EQ(ApplyLayoutDeltaToDir(*corrupt, *serve, dir, {}).status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Snapshot(dir) == before);

  // A missing rank.
  fs::rename(fs::path(dir) / ShardFileName(3), *p.m.dir / "aside");
  EXPECT_EQ(ApplyLayoutDeltaToDir(*delta, *serve, dir, {}).status().code(), StatusCode::kNotFound);
  fs::rename(*p.m.dir / "aside", fs::path(dir) / ShardFileName(3));

  // Context-mode payloads need canonical ranges the receiver does not hold.
  DiffOptions ctx;
  ctx.encode.context = EncodeOptions::Context::kAlways;
  ASSERT_TRUE(DiffCheckpoints(Open(p.m.base), Open(p.m.next), *p.m.dir / "ctx.dcr", ctx).ok());
  auto ctx_delta = DeltaReader::Open(*p.m.dir / "ctx.dcr");
  ASSERT_TRUE(ctx_delta.ok());
  s = ApplyLayoutDeltaToDir(*ctx_delta, *serve, dir, {}).status();
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("plain-mode payloads"), std::string::npos) << s.message();
  EXPECT_TRUE(Snapshot(dir) == before);

  // The base digest may come from the receiver's bookkeeping instead of a full recomputation.
  const CheckpointDigest base = DigestCheckpoint(Open(p.m.base), 1);
  LayoutApplyOptions known;
  known.known_base = &base.tensors;
  auto applied = ApplyLayoutDeltaToDir(*delta, *serve, dir, known);
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->base_check_seconds >= 0, true);
  EXPECT_EQ(applied->target_tensor_digests, DigestCheckpoint(Open(p.m.next), 1).tensors);
}

TEST(LayoutDiff, ReplicaAndPaddingChangesAreNotEmitted) {
  Pipeline p{MakeCase(0)};
  auto train = GenerateMegatronLayouts(p.m.spec, {4, 1, 1});
  ASSERT_TRUE(train.ok());
  const std::string base = *p.m.dir / "tb", next = *p.m.dir / "tn";
  Shard(*train, p.m.base, base);
  Shard(*train, p.m.base, next);
  {
    // Rank 1's copy of a norm (owned by rank 0) and rank 3's padding rows change.
    auto shards = ShardSet::Open(*train, next, MappedFile::Mode::kReadWrite);
    ASSERT_TRUE(shards.ok());
    const RankLayout& r1 = (*train)[1];
    for (size_t i = 0; i < r1.tensors.size(); ++i)
      if (r1.tensors[i].name == "decoder.final_layernorm.weight") shards->mutable_bytes()[1][i][0] ^= 1;
    const RankLayout& r3 = (*train)[3];
    for (size_t i = 0; i < r3.tensors.size(); ++i)
      if (r3.tensors[i].name == "embedding.word_embeddings.weight") shards->mutable_bytes()[3][i].back() ^= 1;
    ASSERT_TRUE(shards->Sync().ok());
  }
  auto stats = DiffLayoutShardDirs(*train, base, next, *p.m.dir / "d.dcr", {});
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->changed_elements, 0u);
  EXPECT_EQ(stats->replica_changes, 1u);
  EXPECT_EQ(stats->padding_changes, 1u);
  EXPECT_EQ(stats->base_digest, stats->target_digest);
  EXPECT_EQ(stats->base_digest, DigestCheckpoint(Open(p.m.base), 1).total);
}

}  // namespace
}  // namespace dcr
