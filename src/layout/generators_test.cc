// The generators follow shared/notes/layout-facts.md: names, fused row orders, splits, padding,
// pipeline renumbering, expert placement, tying, and the parallel sizes each framework refuses.
#include <gtest/gtest.h>

#include <algorithm>

#include "layout/generators.h"
#include "layout/model_config.h"

namespace dcr {
namespace {

ModelSpec Model(const std::string& json) {
  auto m = ParseHfConfig(json, "config.json");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : ModelSpec{};
}

// Llama with n_q = 32, n_kv = 8, d = 4 (the notes' example).
ModelSpec Llama32x8(uint64_t layers = 2, bool tied = false) {
  return Model(R"({"model_type": "llama", "hidden_size": 128, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "intermediate_size": 256, "num_hidden_layers": )" + std::to_string(layers) +
               R"(, "vocab_size": 1000, "tie_word_embeddings": )" + (tied ? "true" : "false") + "}");
}

ModelSpec Qwen3Moe(uint64_t experts = 8) {
  return Model(R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
                   "head_dim": 16, "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300,
                   "num_experts": )" + std::to_string(experts) + R"(, "moe_intermediate_size": 32, "mlp_only_layers": [1]})");
}

const LocalTensor& Find(const RankLayout& l, const std::string& name) {
  auto it = std::find_if(l.tensors.begin(), l.tensors.end(), [&](const LocalTensor& t) { return t.name == name; });
  EXPECT_NE(it, l.tensors.end()) << "rank " << l.rank << " lacks " << name;
  static const LocalTensor none;
  return it == l.tensors.end() ? none : *it;
}

bool Has(const RankLayout& l, const std::string& name) {
  return std::any_of(l.tensors.begin(), l.tensors.end(), [&](const LocalTensor& t) { return t.name == name; });
}

// "q0 q1 k0 ..." for the fused rows of a local QKV tensor (head granularity, d = head_dim).
std::string HeadOrder(const LocalTensor& t, uint64_t d) {
  std::string out;
  for (const Piece& p : t.pieces) {
    const char kind = p.canonical[p.canonical.find("_proj") - 1];
    for (uint64_t h = 0; h < p.extent[0] / d; ++h)
      out += (out.empty() ? "" : " ") + std::string(1, kind) + std::to_string(p.canonical_start[0] / d + h);
  }
  return out;
}

TEST(MegatronLayout, FusedQkvIsGroupedQueryOrderCutInContiguousRowChunks) {
  auto set = GenerateMegatronLayouts(Llama32x8(), {4, 1, 1});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const LocalTensor& qkv = Find((*set)[0], "decoder.layers.0.self_attention.linear_qkv.weight");
  EXPECT_EQ(qkv.shape, (std::vector<uint64_t>{48 * 4 / 4, 128}));
  EXPECT_EQ(HeadOrder(qkv, 4), "q0 q1 q2 q3 k0 v0 q4 q5 q6 q7 k1 v1");
}

TEST(MegatronLayout, MoreRanksThanKeyValueGroupsSplitAGroupWithoutReplicating) {
  auto set = GenerateMegatronLayouts(Llama32x8(), {16, 1, 1});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(HeadOrder(Find((*set)[0], "decoder.layers.0.self_attention.linear_qkv.weight"), 4), "q0 q1 q2");
  EXPECT_EQ(HeadOrder(Find((*set)[1], "decoder.layers.0.self_attention.linear_qkv.weight"), 4), "q3 k0 v0");
  for (const RankLayout& l : *set)
    for (const Piece& p : Find(l, "decoder.layers.0.self_attention.linear_qkv.weight").pieces) EXPECT_TRUE(p.owner);
}

TEST(MegatronLayout, GateUpIsFusedPerRankAndDownIsSplitByColumns) {
  auto set = GenerateMegatronLayouts(Llama32x8(), {2, 1, 1});
  ASSERT_TRUE(set.ok());
  const LocalTensor& fc1 = Find((*set)[1], "decoder.layers.1.mlp.linear_fc1.weight");
  ASSERT_EQ(fc1.pieces.size(), 2u);
  EXPECT_EQ(fc1.pieces[0].canonical, "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(fc1.pieces[0].canonical_start, (std::vector<uint64_t>{128, 0}));
  EXPECT_EQ(fc1.pieces[1].canonical, "model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(fc1.pieces[1].local_start, (std::vector<uint64_t>{128, 0}));
  const LocalTensor& fc2 = Find((*set)[1], "decoder.layers.1.mlp.linear_fc2.weight");
  EXPECT_EQ(fc2.shape, (std::vector<uint64_t>{128, 128}));
  EXPECT_EQ(fc2.pieces[0].canonical_start, (std::vector<uint64_t>{0, 128}));
}

TEST(MegatronLayout, VocabularyIsPaddedToMultiplesOf128TimesTpWithRepeatedLastRows) {
  auto set = GenerateMegatronLayouts(Llama32x8(), {4, 1, 1});  // 1000 -> 1024 rows, 256 per rank
  ASSERT_TRUE(set.ok());
  const LocalTensor& last = Find((*set)[3], "embedding.word_embeddings.weight");
  EXPECT_EQ(last.shape, (std::vector<uint64_t>{256, 128}));
  ASSERT_EQ(last.padding.size(), 1u);
  EXPECT_EQ(last.padding[0].start, (std::vector<uint64_t>{232, 0}));
  EXPECT_EQ(last.padding[0].fill, PaddingFill::kRepeatLastRow);
  EXPECT_EQ(Find((*set)[3], "output_layer.weight").pieces[0].canonical, "lm_head.weight");
}

TEST(MegatronLayout, PipelineStagesRenumberLayersAndHoldEmbeddingAndHead) {
  auto set = GenerateMegatronLayouts(Llama32x8(4), {1, 2, 1});
  ASSERT_TRUE(set.ok());
  const RankLayout& stage1 = (*set)[1];
  EXPECT_EQ(Find(stage1, "decoder.layers.0.self_attention.linear_proj.weight").pieces[0].canonical,
            "model.layers.2.self_attn.o_proj.weight");
  EXPECT_FALSE(Has(stage1, "decoder.layers.2.self_attention.linear_proj.weight"));
  EXPECT_FALSE(Has(stage1, "embedding.word_embeddings.weight"));
  EXPECT_TRUE(Has(stage1, "output_layer.weight"));
  EXPECT_TRUE(Has(stage1, "decoder.final_layernorm.weight"));
  EXPECT_FALSE(Has((*set)[0], "output_layer.weight"));
}

TEST(MegatronLayout, TiedEmbeddingsHaveNoOutputLayerWithoutPipelineAndACopyWithIt) {
  auto one = GenerateMegatronLayouts(Llama32x8(2, true), {2, 1, 1});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(Has((*one)[0], "output_layer.weight"));
  auto two = GenerateMegatronLayouts(Llama32x8(2, true), {2, 2, 1});
  ASSERT_TRUE(two.ok());
  const LocalTensor& out = Find((*two)[3], "output_layer.weight");
  EXPECT_EQ(out.pieces[0].canonical, "model.embed_tokens.weight");
  EXPECT_FALSE(out.pieces[0].owner);
}

TEST(MegatronLayout, ExpertParallelRanksHoldContiguousExpertsAndReplicateTheRest) {
  auto set = GenerateMegatronLayouts(Qwen3Moe(), {2, 1, 2});  // rank = tp + 2 * ep
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const RankLayout& ep1 = (*set)[2];
  EXPECT_EQ(ep1.parallel.at("ep_rank"), 1u);
  EXPECT_EQ(Find(ep1, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight").pieces[0].canonical,
            "model.layers.0.mlp.experts.4.gate_proj.weight");
  EXPECT_FALSE(Has(ep1, "decoder.layers.0.mlp.experts.local_experts.4.linear_fc1.weight"));
  EXPECT_TRUE(Has(ep1, "decoder.layers.1.mlp.linear_fc1.weight"));  // mlp_only_layers: dense
  EXPECT_TRUE(Has(ep1, "decoder.layers.0.pre_mlp_layernorm.weight"));
  EXPECT_TRUE(Has(ep1, "decoder.layers.0.self_attention.q_layernorm.weight"));
  EXPECT_FALSE(Find(ep1, "decoder.layers.0.self_attention.linear_qkv.weight").pieces[0].owner);
  EXPECT_FALSE(Find(ep1, "decoder.layers.0.mlp.router.weight").pieces[0].owner);
  EXPECT_TRUE(Find(ep1, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight").pieces[0].owner);
}

TEST(VllmLayout, QkvProjHoldsTheRanksQThenKThenVHeads) {
  auto set = GenerateVllmLayouts(Llama32x8(), {4, 1, 1}, DType::kBF16);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(HeadOrder(Find((*set)[0], "model.layers.0.self_attn.qkv_proj.weight"), 4),
            "q0 q1 q2 q3 q4 q5 q6 q7 k0 k1 v0 v1");
}

TEST(VllmLayout, KeyValueHeadsAreReplicatedWhenTpExceedsThemAndOwnedOnce) {
  auto set = GenerateVllmLayouts(Llama32x8(), {16, 1, 1}, DType::kBF16);  // each kv head on 2 ranks
  ASSERT_TRUE(set.ok());
  for (uint32_t r : {4u, 5u}) {
    const LocalTensor& qkv = Find((*set)[r], "model.layers.0.self_attn.qkv_proj.weight");
    EXPECT_EQ(qkv.shape, (std::vector<uint64_t>{(2 + 2) * 4, 128}));
    EXPECT_EQ(HeadOrder(qkv, 4), r == 4 ? "q8 q9 k2 v2" : "q10 q11 k2 v2");
    EXPECT_EQ(qkv.pieces[1].owner, r == 4);
  }
}

TEST(VllmLayout, KeepsGlobalLayerNamesAndPutsPipelineRemaindersOnSecondToLastStages) {
  EXPECT_EQ(VllmStageLayers(5, 0, 3), (std::pair<uint64_t, uint64_t>{0, 2}));
  EXPECT_EQ(VllmStageLayers(5, 1, 3), (std::pair<uint64_t, uint64_t>{2, 4}));
  EXPECT_EQ(VllmStageLayers(5, 2, 3), (std::pair<uint64_t, uint64_t>{4, 5}));
  EXPECT_EQ(VllmStageLayers(7, 0, 4), (std::pair<uint64_t, uint64_t>{0, 2}));
  EXPECT_EQ(VllmStageLayers(7, 3, 4), (std::pair<uint64_t, uint64_t>{6, 7}));
  auto set = GenerateVllmLayouts(Llama32x8(5, true), {1, 3, 1}, DType::kBF16);
  ASSERT_TRUE(set.ok());
  EXPECT_TRUE(Has((*set)[2], "model.layers.4.mlp.gate_up_proj.weight"));
  EXPECT_FALSE(Has((*set)[2], "lm_head.weight"));
  EXPECT_FALSE(Find((*set)[2], "model.embed_tokens.weight").pieces[0].owner);  // tied head's own copy
  EXPECT_FALSE(Has((*set)[1], "model.embed_tokens.weight"));
}

TEST(VllmLayout, VocabularyIsPaddedTo64WithZeroRows) {
  auto set = GenerateVllmLayouts(Llama32x8(), {2, 1, 1}, DType::kBF16);  // 1000 -> 1024, 512 per rank
  ASSERT_TRUE(set.ok());
  const LocalTensor& head = Find((*set)[1], "lm_head.weight");
  EXPECT_EQ(head.shape, (std::vector<uint64_t>{512, 128}));
  EXPECT_EQ(head.pieces[0].extent, (std::vector<uint64_t>{488, 128}));
  EXPECT_EQ(head.padding[0].fill, PaddingFill::kZero);
}

TEST(VllmLayout, FusedExpertsAreTpShardedOrSplitInBlocksWithExpertParallelism) {
  auto tp = GenerateVllmLayouts(Qwen3Moe(), {4, 1, 1}, DType::kBF16);
  ASSERT_TRUE(tp.ok()) << tp.status().ToString();
  const LocalTensor& w13 = Find((*tp)[1], "model.layers.0.mlp.experts.w13_weight");
  EXPECT_EQ(w13.shape, (std::vector<uint64_t>{8, 16, 64}));
  EXPECT_EQ(w13.pieces[2].local_start, (std::vector<uint64_t>{1, 0, 0}));
  EXPECT_EQ(w13.pieces[2].canonical, "model.layers.0.mlp.experts.1.gate_proj.weight");
  EXPECT_EQ(w13.pieces[2].canonical_start, (std::vector<uint64_t>{8, 0}));
  auto ep = GenerateVllmLayouts(Qwen3Moe(), {4, 1, 4}, DType::kBF16);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(Find((*ep)[1], "model.layers.0.mlp.experts.w2_weight").shape, (std::vector<uint64_t>{2, 64, 32}));
  EXPECT_EQ(Find((*ep)[1], "model.layers.0.mlp.experts.w2_weight").pieces[0].canonical,
            "model.layers.0.mlp.experts.2.down_proj.weight");
}

TEST(VllmLayout, ServingDtypeMakesEveryPieceConvert) {
  auto set = GenerateVllmLayouts(Llama32x8(), {2, 1, 1}, DType::kF32);
  ASSERT_TRUE(set.ok());
  for (const LocalTensor& t : (*set)[0].tensors) {
    EXPECT_EQ(t.dtype, DType::kF32);
    for (const Piece& p : t.pieces) EXPECT_EQ(p.transform, PieceTransform::kConvert);
  }
}

void ExpectRefused(const Result<LayoutSet>& r, const std::string& words) {
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
}

TEST(LayoutGenerators, RefuseParallelSizesTheModelCannotBeSplitInto) {
  ExpectRefused(GenerateMegatronLayouts(Llama32x8(), {3, 1, 1}), "num_attention_heads 32 is not divisible by --tp 3");
  ExpectRefused(GenerateMegatronLayouts(Llama32x8(3), {1, 2, 1}), "num_hidden_layers 3 is not divisible by --pp 2");
  ExpectRefused(GenerateMegatronLayouts(Llama32x8(), {1, 1, 2}), "needs a mixture-of-experts model");
  ExpectRefused(GenerateMegatronLayouts(Qwen3Moe(), {1, 1, 3}), "num_experts 8 is not divisible by --ep 3");
  ExpectRefused(GenerateMegatronLayouts(Qwen3Moe(), {0, 1, 1}), "at least 1");
  const ModelSpec odd_kv = Model(R"({"model_type": "llama", "hidden_size": 96, "num_attention_heads": 12,
      "num_key_value_heads": 6, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 100})");
  ExpectRefused(GenerateMegatronLayouts(odd_kv, {4, 1, 1}), "num_key_value_heads 6 must be a multiple or a divisor of --tp 4");
  ExpectRefused(GenerateVllmLayouts(odd_kv, {4, 1, 1}, DType::kBF16), "num_key_value_heads 6 must be a multiple or a divisor");
  ExpectRefused(GenerateVllmLayouts(Qwen3Moe(4), {8, 1, 1}, DType::kBF16), "--tp 8 exceeds num_experts 4");
  ExpectRefused(GenerateVllmLayouts(Qwen3Moe(), {4, 1, 2}, DType::kBF16), "--ep 2 must be 1 or equal --tp 4");
  ExpectRefused(GenerateVllmLayouts(Llama32x8(), {1, 3, 1}, DType::kBF16), "--pp 3 exceeds num_hidden_layers 2");
}

TEST(HfConfig, ReadsQwenVariantsAndRefusesWhatItCannotLayOut) {
  const ModelSpec qwen2 = Model(R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 96, "num_hidden_layers": 1, "vocab_size": 50, "tie_word_embeddings": true})");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_bias);
  EXPECT_TRUE(qwen2.tied_embeddings);
  const Catalog c = CanonicalCatalog(qwen2);
  EXPECT_TRUE(std::any_of(c.begin(), c.end(), [](const CatalogEntry& e) { return e.name == "model.layers.0.self_attn.k_proj.bias"; }));
  EXPECT_FALSE(std::any_of(c.begin(), c.end(), [](const CatalogEntry& e) { return e.name == "lm_head.weight"; }));
  const ModelSpec moe = Qwen3Moe();
  EXPECT_EQ(moe.head_dim, 16u);
  EXPECT_EQ(moe.moe_layer, (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(ParseHfConfig(R"({"model_type": "mixtral"})", "c").status().code(), StatusCode::kUnsupported);
  Status missing = ParseHfConfig(R"({"model_type": "llama", "hidden_size": 64})", "c").status();
  EXPECT_NE(missing.message().find("missing \"num_attention_heads\""), std::string::npos) << missing.message();
}

}  // namespace
}  // namespace dcr
