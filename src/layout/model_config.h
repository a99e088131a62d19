// Llama/Qwen-style model descriptions read from a Hugging Face config.json, and the canonical
// (Hugging Face safetensors) tensor catalog they imply.
//
// Supported model_type values: llama, mistral, qwen2, qwen3 (dense) and qwen3_moe. Others are
// refused with kUnsupported (their tensor names or fusions differ).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"

namespace dcr {

struct ModelSpec {
  std::string model_type;
  uint64_t hidden = 0;              // H
  uint64_t heads = 0;               // n_q
  uint64_t kv_heads = 0;            // n_kv
  uint64_t head_dim = 0;            // d
  uint64_t intermediate = 0;        // I of dense MLP layers
  uint64_t layers = 0;              // L
  uint64_t vocab = 0;               // V
  bool tied_embeddings = false;     // lm_head shares model.embed_tokens.weight
  bool qkv_bias = false;            // q/k/v projections have biases
  bool o_bias = false;              // o_proj has a bias
  bool qk_norm = false;             // per-head q_norm / k_norm (Qwen3)
  uint64_t experts = 0;             // E (0 = dense)
  uint64_t moe_intermediate = 0;    // I of one expert
  std::vector<bool> moe_layer;      // per layer: uses the experts (else a dense MLP)
  DType dtype = DType::kBF16;       // the checkpoint's dtype

  bool is_moe() const { return experts > 0; }
};

// Parses config.json text. Missing or inconsistent fields are kInvalidArgument naming the field.
Result<ModelSpec> ParseHfConfig(std::string_view json_text, const std::string& origin);
Result<ModelSpec> ReadHfConfig(const std::string& path);

// The canonical tensors of the model, sorted by name ("model.layers.3.self_attn.q_proj.weight",
// ...). A tied model has no lm_head.weight.
Catalog CanonicalCatalog(const ModelSpec& model);

// "model.layers.<i>."
std::string HfLayerPrefix(uint64_t layer);

}  // namespace dcr
