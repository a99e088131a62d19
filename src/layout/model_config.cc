#include "layout/model_config.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dcr {
namespace {

using Json = nlohmann::json;

Result<uint64_t> Positive(const Json& j, const char* key, const std::string& origin) {
  if (!j.contains(key)) return InvalidArgument(origin + ": missing \"" + key + "\"");
  if (!j[key].is_number_unsigned() || j[key].get<uint64_t>() == 0)
    return InvalidArgument(origin + ": \"" + key + "\" must be a positive integer");
  return j[key].get<uint64_t>();
}

Result<bool> Flag(const Json& j, const char* key, bool fallback, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return InvalidArgument(origin + ": \"" + key + "\" must be true or false");
  return j[key].get<bool>();
}

}  // namespace

std::string HfLayerPrefix(uint64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

Result<ModelSpec> ParseHfConfig(std::string_view text, const std::string& origin) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(origin + ": not a JSON object");
  ModelSpec m;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    return InvalidArgument(origin + ": missing \"model_type\"");
  m.model_type = j["model_type"].get<std::string>();
  const bool moe = m.model_type == "qwen3_moe";
  if (m.model_type != "llama" && m.model_type != "mistral" && m.model_type != "qwen2" && m.model_type != "qwen3" && !moe)
    return Unsupported(origin + ": model_type \"" + m.model_type +
                       "\" is not supported (supported: llama, mistral, qwen2, qwen3, qwen3_moe)");
  DCR_ASSIGN_OR_RETURN(m.hidden, Positive(j, "hidden_size", origin));
  DCR_ASSIGN_OR_RETURN(m.heads, Positive(j, "num_attention_heads", origin));
  DCR_ASSIGN_OR_RETURN(m.layers, Positive(j, "num_hidden_layers", origin));
  DCR_ASSIGN_OR_RETURN(m.vocab, Positive(j, "vocab_size", origin));
  DCR_ASSIGN_OR_RETURN(m.intermediate, Positive(j, "intermediate_size", origin));
  m.kv_heads = m.heads;
  if (j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()) {
    DCR_ASSIGN_OR_RETURN(m.kv_heads, Positive(j, "num_key_value_heads", origin));
  }
  if (m.heads % m.kv_heads != 0)
    return InvalidArgument(origin + ": num_attention_heads (" + std::to_string(m.heads) +
                           ") must be a multiple of num_key_value_heads (" + std::to_string(m.kv_heads) + ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    DCR_ASSIGN_OR_RETURN(m.head_dim, Positive(j, "head_dim", origin));
  } else {
    if (m.hidden % m.heads != 0)
      return InvalidArgument(origin + ": hidden_size is not a multiple of num_attention_heads and no head_dim is given");
    m.head_dim = m.hidden / m.heads;
  }
  DCR_ASSIGN_OR_RETURN(m.tied_embeddings, Flag(j, "tie_word_embeddings", false, origin));
  DCR_ASSIGN_OR_RETURN(bool attention_bias, Flag(j, "attention_bias", false, origin));
  DCR_ASSIGN_OR_RETURN(bool mlp_bias, Flag(j, "mlp_bias", false, origin));
  if (mlp_bias) return Unsupported(origin + ": mlp_bias is not supported");
  // Qwen2 always has q/k/v biases and no o_proj bias; Llama's and Qwen3's attention_bias covers all four.
  m.qkv_bias = m.model_type == "qwen2" || attention_bias;
  m.o_bias = m.model_type != "qwen2" && attention_bias;
  m.qk_norm = m.model_type == "qwen3" || moe;
  std::string dtype = "bfloat16";
  for (const char* key : {"torch_dtype", "dtype"})
    if (j.contains(key) && j[key].is_string()) dtype = j[key].get<std::string>();
  if (dtype == "bfloat16") m.dtype = DType::kBF16;
  else if (dtype == "float16") m.dtype = DType::kF16;
  else if (dtype == "float32") m.dtype = DType::kF32;
  else return Unsupported(origin + ": torch_dtype \"" + dtype + "\" (supported: bfloat16, float16, float32)");
  m.moe_layer.assign(m.layers, false);
  if (moe) {
    DCR_ASSIGN_OR_RETURN(m.experts, Positive(j, "num_experts", origin));
    DCR_ASSIGN_OR_RETURN(m.moe_intermediate, Positive(j, "moe_intermediate_size", origin));
    uint64_t step = 1;
    if (j.contains("decoder_sparse_step")) {
      DCR_ASSIGN_OR_RETURN(step, Positive(j, "decoder_sparse_step", origin));
    }
    std::vector<uint64_t> dense_only;
    if (j.contains("mlp_only_layers")) {
      if (!j["mlp_only_layers"].is_array()) return InvalidArgument(origin + ": \"mlp_only_layers\" must be an array");
      for (const Json& v : j["mlp_only_layers"]) {
        if (!v.is_number_unsigned()) return InvalidArgument(origin + ": \"mlp_only_layers\" must hold layer indices");
        dense_only.push_back(v.get<uint64_t>());
      }
    }
    // Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    for (uint64_t i = 0; i < m.layers; ++i)
      m.moe_layer[i] = std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end() && (i + 1) % step == 0;
  }
  return m;
}

Result<ModelSpec> ReadHfConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseHfConfig(ss.str(), path);
}

Catalog CanonicalCatalog(const ModelSpec& m) {
  Catalog c;
  auto add = [&](std::string name, std::vector<uint64_t> shape) { c.push_back({std::move(name), m.dtype, std::move(shape)}); };
  const uint64_t H = m.hidden, d = m.head_dim, q = m.heads * d, kv = m.kv_heads * d;
  add("model.embed_tokens.weight", {m.vocab, H});
  add("model.norm.weight", {H});
  if (!m.tied_embeddings) add("lm_head.weight", {m.vocab, H});
  for (uint64_t i = 0; i < m.layers; ++i) {
    const std::string p = HfLayerPrefix(i);
    add(p + "input_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
    add(p + "self_attn.q_proj.weight", {q, H});
    add(p + "self_attn.k_proj.weight", {kv, H});
    add(p + "self_attn.v_proj.weight", {kv, H});
    add(p + "self_attn.o_proj.weight", {H, q});
    if (m.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    if (m.o_bias) add(p + "self_attn.o_proj.bias", {H});
    if (m.qk_norm) {
      add(p + "self_attn.q_norm.weight", {d});
      add(p + "self_attn.k_norm.weight", {d});
    }
    if (m.moe_layer[i]) {
      add(p + "mlp.gate.weight", {m.experts, H});
      for (uint64_t e = 0; e < m.experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {m.moe_intermediate, H});
        add(x + "up_proj.weight", {m.moe_intermediate, H});
        add(x + "down_proj.weight", {H, m.moe_intermediate});
      }
    } else {
      add(p + "mlp.gate_proj.weight", {m.intermediate, H});
      add(p + "mlp.up_proj.weight", {m.intermediate, H});
      add(p + "mlp.down_proj.weight", {H, m.intermediate});
    }
  }
  std::sort(c.begin(), c.end(), [](const CatalogEntry& a, const CatalogEntry& b) { return a.name < b.name; });
  return c;
}

}  // namespace dcr
