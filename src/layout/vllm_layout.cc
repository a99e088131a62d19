#include "layout/generators.h"
#include "layout/rank_builder.h"

namespace dcr {
namespace {

std::string N(uint64_t v) { return std::to_string(v); }

Status CheckVllmSizes(const ModelSpec& m, const ParallelSizes& s, uint64_t padded_vocab, DType local_dtype) {
  const std::string tp = "--tp " + N(s.tp);
  if (s.tp == 0 || s.pp == 0 || s.ep == 0) return InvalidArgument("parallel sizes must be at least 1");
  if (local_dtype != m.dtype && local_dtype != DType::kBF16 && local_dtype != DType::kF16 && local_dtype != DType::kF32)
    return InvalidArgument("serving dtype " + std::string(DTypeName(local_dtype)) + " is not one of BF16, F16, F32");
  if (m.heads % s.tp)
    return InvalidArgument("num_attention_heads " + N(m.heads) + " is not divisible by " + tp);
  if (m.kv_heads % s.tp && s.tp % m.kv_heads)
    return InvalidArgument("num_key_value_heads " + N(m.kv_heads) + " must be a multiple or a divisor of " + tp +
                           " (vLLM replicates key/value heads only when tp is a multiple of them)");
  bool dense = false;
  for (bool moe : m.moe_layer) dense |= !moe;
  if (dense && m.intermediate % s.tp)
    return InvalidArgument("intermediate_size " + N(m.intermediate) + " is not divisible by " + tp);
  if (padded_vocab % s.tp)
    return InvalidArgument("the padded vocabulary (" + N(padded_vocab) + " rows) is not divisible by " + tp);
  if (s.pp > m.layers)
    return InvalidArgument("--pp " + N(s.pp) + " exceeds num_hidden_layers " + N(m.layers));
  if (s.ep > 1 && !m.is_moe())
    return InvalidArgument("--ep " + N(s.ep) + " needs a mixture-of-experts model (num_experts); this model is dense");
  if (!m.is_moe()) return Status::Ok();
  if (s.tp > m.experts)
    return InvalidArgument(tp + " exceeds num_experts " + N(m.experts) + " (vLLM's Qwen3-MoE refuses tp > num_experts)");
  if (s.ep != 1 && s.ep != s.tp)
    return InvalidArgument("--ep " + N(s.ep) + " must be 1 or equal " + tp +
                           " (vLLM's expert-parallel size is tp x dp, and a serving layout describes one replica)");
  if (s.ep > 1 && m.experts % s.ep)
    return InvalidArgument("num_experts " + N(m.experts) + " is not divisible by --ep " + N(s.ep) +
                           " (vLLM's placement of remainder experts varies by version)");
  if (s.ep == 1 && m.moe_intermediate % s.tp)
    return InvalidArgument("moe_intermediate_size " + N(m.moe_intermediate) + " is not divisible by " + tp);
  return Status::Ok();
}

}  // namespace

std::pair<uint64_t, uint64_t> VllmStageLayers(uint64_t layers, uint32_t stage, uint32_t stages) {
  std::vector<uint64_t> parts(stages, layers / stages);
  for (uint64_t i = 2; i < layers % stages + 2; ++i) ++parts[stages - i];  // remainder: second-to-last first
  uint64_t first = 0;
  for (uint32_t k = 0; k < stage; ++k) first += parts[k];
  return {first, first + parts[stage]};
}

Result<LayoutSet> GenerateVllmLayouts(const ModelSpec& m, const ParallelSizes& s, DType local_dtype) {
  const uint64_t padded_vocab = (m.vocab + kVllmVocabPadding - 1) / kVllmVocabPadding * kVllmVocabPadding;
  DCR_RETURN_IF_ERROR(CheckVllmSizes(m, s, padded_vocab, local_dtype));
  const Catalog canonical = CanonicalCatalog(m);
  const uint64_t t = s.tp, H = m.hidden, d = m.head_dim;
  const uint64_t vocab_rows = padded_vocab / t, q_heads = m.heads / t;
  const uint64_t world = t * s.pp;
  LayoutSet set(world);
  for (uint32_t pr = 0; pr < s.pp; ++pr)
    for (uint32_t tr = 0; tr < s.tp; ++tr) {
      const uint32_t rank = static_cast<uint32_t>(pr * t + tr);
      const bool first = pr == 0, last = pr + 1 == s.pp, replica_owner = tr == 0;
      RankBuilder b(canonical, local_dtype);
      if (first || (m.tied_embeddings && last)) {
        // Tied with pp > 1: the last stage holds its own embed_tokens for the tied lm_head.
        b.Tensor("model.embed_tokens.weight", {vocab_rows, H});
        b.VocabRows("model.embed_tokens.weight", tr * vocab_rows, vocab_rows, first, PaddingFill::kZero);
      }
      if (last) {
        b.Tensor("model.norm.weight", {H});
        b.Full("model.norm.weight", replica_owner);
        if (!m.tied_embeddings) {
          b.Tensor("lm_head.weight", {vocab_rows, H});
          b.VocabRows("lm_head.weight", tr * vocab_rows, vocab_rows, true, PaddingFill::kZero);
        }
      }
      // Key/value heads of this rank: a block when tp <= n_kv, else one head replicated tp / n_kv times.
      uint64_t kv_first = 0, kv_count = 0;
      bool kv_owner = true;
      if (m.kv_heads >= t) {
        kv_count = m.kv_heads / t;
        kv_first = tr * kv_count;
      } else {
        const uint64_t replicas = t / m.kv_heads;
        kv_count = 1;
        kv_first = tr / replicas;
        kv_owner = tr % replicas == 0;
      }
      const uint64_t qkv_rows = (q_heads + 2 * kv_count) * d;
      const auto [layer_first, layer_end] = VllmStageLayers(m.layers, pr, s.pp);
      for (uint64_t i = layer_first; i < layer_end; ++i) {
        const std::string p = HfLayerPrefix(i);
        b.Tensor(p + "input_layernorm.weight", {H});
        b.Full(p + "input_layernorm.weight", replica_owner);
        b.Tensor(p + "post_attention_layernorm.weight", {H});
        b.Full(p + "post_attention_layernorm.weight", replica_owner);
        for (const char* kind : {"weight", "bias"}) {
          const bool weight = kind[0] == 'w';
          if (!weight && !m.qkv_bias) continue;
          b.Tensor(p + "self_attn.qkv_proj." + kind, weight ? std::vector<uint64_t>{qkv_rows, H} : std::vector<uint64_t>{qkv_rows});
          b.ConcatRows({{p + "self_attn.q_proj." + kind, tr * q_heads * d, q_heads * d, true},
                        {p + "self_attn.k_proj." + kind, kv_first * d, kv_count * d, kv_owner},
                        {p + "self_attn.v_proj." + kind, kv_first * d, kv_count * d, kv_owner}},
                       0, qkv_rows);
        }
        b.Tensor(p + "self_attn.o_proj.weight", {H, q_heads * d});
        b.Cols(p + "self_attn.o_proj.weight", tr * q_heads * d, q_heads * d, 0, true);
        if (m.o_bias) {
          b.Tensor(p + "self_attn.o_proj.bias", {H});
          b.Full(p + "self_attn.o_proj.bias", replica_owner);
        }
        if (m.qk_norm) {
          b.Tensor(p + "self_attn.q_norm.weight", {d});
          b.Full(p + "self_attn.q_norm.weight", replica_owner);
          b.Tensor(p + "self_attn.k_norm.weight", {d});
          b.Full(p + "self_attn.k_norm.weight", replica_owner);
        }
        if (!m.moe_layer[i]) {
          const uint64_t I = m.intermediate / t;
          b.Tensor(p + "mlp.gate_up_proj.weight", {2 * I, H});
          b.ConcatRows({{p + "mlp.gate_proj.weight", tr * I, I, true}, {p + "mlp.up_proj.weight", tr * I, I, true}}, 0, 2 * I);
          b.Tensor(p + "mlp.down_proj.weight", {H, I});
          b.Cols(p + "mlp.down_proj.weight", tr * I, I, 0, true);
          continue;
        }
        b.Tensor(p + "mlp.gate.weight", {m.experts, H});
        b.Full(p + "mlp.gate.weight", replica_owner);
        // Without expert parallelism every rank holds every expert, TP-sharded; with it (ep = tp)
        // each rank holds a contiguous block of whole experts.
        const bool ep = s.ep > 1;
        const uint64_t local_experts = ep ? m.experts / t : m.experts, I = ep ? m.moe_intermediate : m.moe_intermediate / t;
        const uint64_t expert0 = ep ? tr * local_experts : 0, row0 = ep ? 0 : tr * I;
        b.Tensor(p + "mlp.experts.w13_weight", {local_experts, 2 * I, H});
        for (uint64_t k = 0; k < local_experts; ++k) {
          const std::string x = p + "mlp.experts." + N(expert0 + k) + ".";
          b.ConcatRows({{x + "gate_proj.weight", row0, I, true}, {x + "up_proj.weight", row0, I, true}}, 0, 2 * I, {k});
        }
        b.Tensor(p + "mlp.experts.w2_weight", {local_experts, H, I});
        for (uint64_t k = 0; k < local_experts; ++k)
          b.Cols(p + "mlp.experts." + N(expert0 + k) + ".down_proj.weight", row0, I, 0, true, {k});
      }
      set[rank] = b.Finish(LayoutRole::kServe, "vllm", rank, static_cast<uint32_t>(world),
                           {{"tp", s.tp}, {"pp", s.pp}, {"ep", s.ep}, {"tp_rank", tr}, {"pp_rank", pr}});
    }
  if (Status v = ValidateLayoutSet(set); !v.ok()) return Internal("generated vLLM layout is invalid: " + v.message());
  return set;
}

}  // namespace dcr
