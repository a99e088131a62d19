#include "layout/generators.h"
#include "layout/rank_builder.h"

namespace dcr {
namespace {

std::string N(uint64_t v) { return std::to_string(v); }

Status CheckMegatronSizes(const ModelSpec& m, const ParallelSizes& s) {
  const std::string tp = "--tp " + N(s.tp);
  if (s.tp == 0 || s.pp == 0 || s.ep == 0) return InvalidArgument("parallel sizes must be at least 1");
  if (m.heads % s.tp)
    return InvalidArgument("num_attention_heads " + N(m.heads) + " is not divisible by " + tp +
                           " (Megatron-Core splits query heads evenly over tensor-parallel ranks)");
  if (m.kv_heads % s.tp && s.tp % m.kv_heads)
    return InvalidArgument("num_key_value_heads " + N(m.kv_heads) + " must be a multiple or a divisor of " + tp);
  if (((m.heads + 2 * m.kv_heads) * m.head_dim) % s.tp)
    return InvalidArgument("the fused QKV rows (" + N((m.heads + 2 * m.kv_heads) * m.head_dim) + ") are not divisible by " + tp);
  bool dense = false;
  for (bool moe : m.moe_layer) dense |= !moe;
  if (dense && m.intermediate % s.tp)
    return InvalidArgument("intermediate_size " + N(m.intermediate) + " is not divisible by " + tp);
  if (s.ep > 1 && !m.is_moe())
    return InvalidArgument("--ep " + N(s.ep) + " needs a mixture-of-experts model (num_experts); this model is dense");
  if (m.is_moe() && m.experts % s.ep)
    return InvalidArgument("num_experts " + N(m.experts) + " is not divisible by --ep " + N(s.ep));
  if (m.is_moe() && m.moe_intermediate % s.tp)
    return InvalidArgument("moe_intermediate_size " + N(m.moe_intermediate) + " is not divisible by the expert tensor-parallel size " + tp);
  if (m.layers % s.pp)
    return InvalidArgument("num_hidden_layers " + N(m.layers) + " is not divisible by --pp " + N(s.pp) +
                           " (Megatron-Core's even pipeline split)");
  return Status::Ok();
}

}  // namespace

Result<LayoutSet> GenerateMegatronLayouts(const ModelSpec& m, const ParallelSizes& s) {
  DCR_RETURN_IF_ERROR(CheckMegatronSizes(m, s));
  const Catalog canonical = CanonicalCatalog(m);
  const uint64_t t = s.tp, H = m.hidden, d = m.head_dim;
  const uint64_t divisor = kMegatronVocabDivisor * t;
  const uint64_t vocab_rows = (m.vocab + divisor - 1) / divisor * divisor / t;
  const uint64_t stage_layers = m.layers / s.pp, q_cols = m.heads * d / t;
  const uint64_t qkv_rows = (m.heads + 2 * m.kv_heads) * d / t, q_per_group = m.heads / m.kv_heads;
  const uint64_t world = t * s.pp * s.ep;
  LayoutSet set(world);
  for (uint32_t pr = 0; pr < s.pp; ++pr)
    for (uint32_t er = 0; er < s.ep; ++er)
      for (uint32_t tr = 0; tr < s.tp; ++tr) {
        const uint32_t rank = static_cast<uint32_t>(tr + t * (er + s.ep * pr));
        const bool dp_owner = er == 0, replica_owner = dp_owner && tr == 0;
        RankBuilder b(canonical, m.dtype);
        if (pr == 0) {
          b.Tensor("embedding.word_embeddings.weight", {vocab_rows, H});
          b.VocabRows("model.embed_tokens.weight", tr * vocab_rows, vocab_rows, dp_owner, PaddingFill::kRepeatLastRow);
        }
        if (pr + 1 == s.pp) {
          b.Tensor("decoder.final_layernorm.weight", {H});
          b.Full("model.norm.weight", replica_owner);
          if (!m.tied_embeddings || s.pp > 1) {
            // Tied with pp > 1: the last stage keeps its own copy of the embedding (all-reduced).
            b.Tensor("output_layer.weight", {vocab_rows, H});
            b.VocabRows(m.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", tr * vocab_rows, vocab_rows,
                        dp_owner && !m.tied_embeddings, PaddingFill::kRepeatLastRow);
          }
        }
        for (uint64_t j = 0; j < stage_layers; ++j) {
          const uint64_t i = pr * stage_layers + j;
          const std::string hf = HfLayerPrefix(i), mc = "decoder.layers." + N(j) + ".";
          const std::string attn = mc + "self_attention.";
          b.Tensor(attn + "linear_qkv.layer_norm_weight", {H});
          b.Full(hf + "input_layernorm.weight", replica_owner);
          // Global fused order: per key/value group, its query heads, then its k head, then its v head.
          for (const char* kind : {"weight", "bias"}) {
            const bool weight = kind[0] == 'w';
            if (!weight && !m.qkv_bias) continue;
            std::vector<RowSegment> order;
            for (uint64_t g = 0; g < m.kv_heads; ++g) {
              order.push_back({hf + "self_attn.q_proj." + kind, g * q_per_group * d, q_per_group * d, dp_owner});
              order.push_back({hf + "self_attn.k_proj." + kind, g * d, d, dp_owner});
              order.push_back({hf + "self_attn.v_proj." + kind, g * d, d, dp_owner});
            }
            b.Tensor(attn + "linear_qkv." + kind, weight ? std::vector<uint64_t>{qkv_rows, H} : std::vector<uint64_t>{qkv_rows});
            b.ConcatRows(order, tr * qkv_rows, qkv_rows);
          }
          b.Tensor(attn + "linear_proj.weight", {H, q_cols});
          b.Cols(hf + "self_attn.o_proj.weight", tr * q_cols, q_cols, 0, dp_owner);
          if (m.o_bias) {
            b.Tensor(attn + "linear_proj.bias", {H});  // row-parallel bias: full on every rank
            b.Full(hf + "self_attn.o_proj.bias", replica_owner);
          }
          if (m.qk_norm) {
            b.Tensor(attn + "q_layernorm.weight", {d});
            b.Full(hf + "self_attn.q_norm.weight", replica_owner);
            b.Tensor(attn + "k_layernorm.weight", {d});
            b.Full(hf + "self_attn.k_norm.weight", replica_owner);
          }
          if (!m.moe_layer[i]) {
            const uint64_t I = m.intermediate / t;
            b.Tensor(mc + "mlp.linear_fc1.layer_norm_weight", {H});
            b.Full(hf + "post_attention_layernorm.weight", replica_owner);
            b.Tensor(mc + "mlp.linear_fc1.weight", {2 * I, H});
            b.ConcatRows({{hf + "mlp.gate_proj.weight", tr * I, I, dp_owner}, {hf + "mlp.up_proj.weight", tr * I, I, dp_owner}},
                         0, 2 * I);
            b.Tensor(mc + "mlp.linear_fc2.weight", {H, I});
            b.Cols(hf + "mlp.down_proj.weight", tr * I, I, 0, dp_owner);
            continue;
          }
          const uint64_t I = m.moe_intermediate / t, local_experts = m.experts / s.ep;
          b.Tensor(mc + "pre_mlp_layernorm.weight", {H});
          b.Full(hf + "post_attention_layernorm.weight", replica_owner);
          b.Tensor(mc + "mlp.router.weight", {m.experts, H});
          b.Full(hf + "mlp.gate.weight", replica_owner);
          for (uint64_t k = 0; k < local_experts; ++k) {
            const std::string x = hf + "mlp.experts." + N(er * local_experts + k) + ".";
            const std::string local = mc + "mlp.experts.local_experts." + N(k) + ".";
            b.Tensor(local + "linear_fc1.weight", {2 * I, H});
            b.ConcatRows({{x + "gate_proj.weight", tr * I, I, true}, {x + "up_proj.weight", tr * I, I, true}}, 0, 2 * I);
            b.Tensor(local + "linear_fc2.weight", {H, I});
            b.Cols(x + "down_proj.weight", tr * I, I, 0, true);
          }
        }
        set[rank] = b.Finish(LayoutRole::kTrain, "megatron-core", rank, static_cast<uint32_t>(world),
                             {{"tp", s.tp}, {"pp", s.pp}, {"ep", s.ep}, {"tp_rank", tr}, {"pp_rank", pr}, {"ep_rank", er}});
      }
  if (Status v = ValidateLayoutSet(set); !v.ok()) return Internal("generated Megatron-Core layout is invalid: " + v.message());
  return set;
}

}  // namespace dcr
