#include "synth/trajectory.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/checkpoint.h"

namespace dcr {

uint16_t Fp32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float Bf16ToFp32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Weight init spread: the real BF16 trajectories (shared/data/trajectories) have median |w| of
// 0.03, i.e. sigma ~0.045 for a normal; the ulp at that magnitude sets the change rate per step.
constexpr float kWeightStd = 0.045f;

SynthTrajectory::SynthTrajectory(const SynthModelConfig& m, const SynthTrajectoryOptions& options)
    : options_(options), rng_(options.seed) {
  const uint64_t h = m.hidden, head_dim = m.hidden / m.heads, kv = m.kv_heads * head_dim;
  auto add = [&](std::string name, std::vector<uint64_t> shape, float init_std, float init_mean) {
    AddParam(std::move(name), std::move(shape), init_std, init_mean);
  };
  add("model.embed_tokens.weight", {m.vocab, h}, kWeightStd, 0.0f);
  for (uint32_t l = 0; l < m.layers; ++l) {
    std::string pre = "model.layers." + std::to_string(l) + ".";
    add(pre + "input_layernorm.weight", {h}, 0.05f, 1.0f);
    add(pre + "self_attn.q_proj.weight", {h, h}, kWeightStd, 0.0f);
    add(pre + "self_attn.k_proj.weight", {kv, h}, kWeightStd, 0.0f);
    add(pre + "self_attn.v_proj.weight", {kv, h}, kWeightStd, 0.0f);
    add(pre + "self_attn.o_proj.weight", {h, h}, kWeightStd, 0.0f);
    add(pre + "post_attention_layernorm.weight", {h}, 0.05f, 1.0f);
    add(pre + "mlp.gate_proj.weight", {m.intermediate, h}, kWeightStd, 0.0f);
    add(pre + "mlp.up_proj.weight", {m.intermediate, h}, kWeightStd, 0.0f);
    add(pre + "mlp.down_proj.weight", {h, m.intermediate}, kWeightStd, 0.0f);
  }
  add("model.norm.weight", {h}, 0.05f, 1.0f);
  add("lm_head.weight", {m.vocab, h}, kWeightStd, 0.0f);
  std::sort(params_.begin(), params_.end(), [](const Param& a, const Param& b) { return a.name < b.name; });
  for (int i = 0; i < options_.warmup_steps; ++i) AdamStep(0.0);
}

std::vector<SynthParamSpec> SynthParamsForCatalog(const Catalog& catalog) {
  std::vector<SynthParamSpec> specs;
  for (const CatalogEntry& c : catalog) {
    const bool norm = c.name.find("norm") != std::string::npos;
    specs.push_back({c.name, c.shape, norm ? 1.0f : 0.0f, norm ? 0.05f : kWeightStd});
  }
  return specs;
}

SynthTrajectory::SynthTrajectory(const std::vector<SynthParamSpec>& params, const SynthTrajectoryOptions& options)
    : options_(options), rng_(options.seed) {
  for (const SynthParamSpec& p : params) AddParam(p.name, p.shape, p.init_std, p.init_mean);
  std::sort(params_.begin(), params_.end(), [](const Param& a, const Param& b) { return a.name < b.name; });
  for (int i = 0; i < options_.warmup_steps; ++i) AdamStep(0.0);
}

void SynthTrajectory::AddParam(std::string name, std::vector<uint64_t> shape, float init_std, float init_mean) {
  Param p{std::move(name), std::move(shape), {}, {}, {}};
  uint64_t n = 1;
  for (auto d : p.shape) n *= d;
  std::normal_distribution<float> dist(init_mean, init_std);
  p.w.resize(n);
  for (auto& x : p.w) x = dist(rng_);
  p.m.assign(n, 0.0f);
  p.v.assign(n, 0.0f);
  params_.push_back(std::move(p));
}

uint64_t SynthTrajectory::num_parameters() const {
  uint64_t n = 0;
  for (const auto& p : params_) n += p.w.size();
  return n;
}

void SynthTrajectory::AdamStep(double lr) {
  ++adam_t_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double c1 = 1.0 - std::pow(b1, adam_t_), c2 = 1.0 - std::pow(b2, adam_t_);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (auto& p : params_) {
    // Gradients: a per-tensor scale times noise with a slowly varying per-element bias, so
    // moments build up the way they do in training.
    const float scale = 1e-3f;
    for (size_t i = 0; i < p.w.size(); ++i) {
      float g = scale * (noise(rng_) + 0.3f * std::sin(0.001f * static_cast<float>(i) + 0.1f * adam_t_));
      p.m[i] = static_cast<float>(b1 * p.m[i] + (1 - b1) * g);
      p.v[i] = static_cast<float>(b2 * p.v[i] + (1 - b2) * g * g);
      double upd = (p.m[i] / c1) / (std::sqrt(p.v[i] / c2) + options_.eps);
      p.w[i] = static_cast<float>(p.w[i] - lr * upd);
    }
  }
}

std::vector<TensorToWrite> SynthTrajectory::Snapshot(std::vector<std::vector<uint16_t>>* storage) const {
  std::vector<TensorToWrite> out;
  storage->resize(params_.size());
  for (size_t t = 0; t < params_.size(); ++t) {
    auto& s = (*storage)[t];
    s.resize(params_[t].w.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = Fp32ToBf16(params_[t].w[i]);
    out.push_back({params_[t].name, DType::kBF16, params_[t].shape,
                   {reinterpret_cast<const uint8_t*>(s.data()), s.size() * 2}, false});
  }
  return out;
}

Status SynthTrajectory::WriteSnapshot(const std::string& path) const {
  std::vector<std::vector<uint16_t>> storage;
  return WriteSafetensors(path, Snapshot(&storage));
}

Status SynthTrajectory::WriteShardedSnapshot(const std::string& dir, uint64_t max_shard_bytes) const {
  std::vector<std::vector<uint16_t>> storage;
  return WriteShardedCheckpoint(dir, Snapshot(&storage), max_shard_bytes);
}

}  // namespace dcr
