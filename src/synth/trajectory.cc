#include "synth/trajectory.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "format/checkpoint.h"

namespace dcr {
namespace {

// Elements per chunk: the unit of parallel work, and of random streams.
constexpr uint64_t kChunkElements = uint64_t{1} << 16;

// One chunk's random stream (splitmix64), seeded from the trajectory's seed, the tensor's name,
// the chunk and the optimizer step, so that chunks may run on any thread in any order.
class ChunkRandom {
 public:
  ChunkRandom(uint64_t seed, uint64_t name_hash, uint64_t chunk, uint64_t step)
      : state_(Mix(Mix(Mix(seed ^ 0x6a09e667f3bcc909ull) ^ name_hash) ^ chunk) ^ step) {}
  uint64_t Next() { return Mix(state_ += 0x9e3779b97f4a7c15ull); }
  // About N(0, 1) from one draw: the sum of its four 16-bit quarters as uniforms in [0, 1)
  // (Irwin-Hall, variance 1/3), centred and scaled to unit variance; nothing beyond 3.5 sigma.
  // The gradients' noise only needs to be roughly normal: the moments average it over steps.
  // One draw and a few adds, where std::normal_distribution over mt19937_64 rejected and took logs.
  float Normal() {
    const uint64_t r = Next();
    uint64_t sum = (r & 0x0000ffff0000ffffull) + ((r >> 16) & 0x0000ffff0000ffffull);
    sum = (sum & 0xffffffffull) + (sum >> 32);  // < 2^18
    return (static_cast<float>(sum) * 0x1.0p-16f - 2.0f) * kUnitScale;
  }

 private:
  static constexpr float kUnitScale = 1.7320508f;  // sqrt(3)
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

constexpr uint64_t kInitStep = ~uint64_t{0};  // the stream of initial weights

struct AdamConstants {
  float b1, b2, rate, inv_c1, inv_c2, eps;  // inv_c: 1 / (1 - beta^t)
};

// Moments and weights of n elements after gradients g. Inlined with a constant n, a loop the
// compiler vectorizes (the arrays do not overlap).
inline void AdamUpdate(float* __restrict m, float* __restrict v, float* __restrict w, const float* __restrict g, size_t n,
                       const AdamConstants k) {
  for (size_t j = 0; j < n; ++j) {
    m[j] = k.b1 * m[j] + (1 - k.b1) * g[j];
    v[j] = k.b2 * v[j] + (1 - k.b2) * g[j] * g[j];
    w[j] -= k.rate * (m[j] * k.inv_c1) / (std::sqrt(v[j] * k.inv_c2) + k.eps);
  }
}

// Calls fn(param index, first element, end element) for every chunk of every parameter, on
// `threads` threads.
template <typename Params, typename Fn>
void ForEachChunk(const Params& params, int threads, Fn&& fn) {
  std::vector<std::pair<size_t, uint64_t>> chunks;  // (param, first element)
  for (size_t t = 0; t < params.size(); ++t)
    for (uint64_t i = 0; i < params[t].w.size(); i += kChunkElements) chunks.emplace_back(t, i);
  const Status s = ParallelFor(chunks.size(), threads, [&](size_t c) {
    const auto [t, first] = chunks[c];
    fn(t, first, std::min<uint64_t>(first + kChunkElements, params[t].w.size()));
    return Status::Ok();
  });
  DCR_CHECK(s.ok());
}

}  // namespace

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
    : options_(options) {
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
  Initialize();
  AdamSteps(options_.warmup_steps, 0.0);
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
    : options_(options) {
  for (const SynthParamSpec& p : params) AddParam(p.name, p.shape, p.init_std, p.init_mean);
  std::sort(params_.begin(), params_.end(), [](const Param& a, const Param& b) { return a.name < b.name; });
  Initialize();
  AdamSteps(options_.warmup_steps, 0.0);
}

void SynthTrajectory::AddParam(std::string name, std::vector<uint64_t> shape, float init_std, float init_mean) {
  Param p{std::move(name), std::move(shape), init_mean, init_std, {}, {}, {}};
  uint64_t n = 1;
  for (auto d : p.shape) n *= d;
  p.w.resize(n);
  p.m.assign(n, 0.0f);
  p.v.assign(n, 0.0f);
  params_.push_back(std::move(p));
}

void SynthTrajectory::Initialize() {
  ForEachChunk(params_, options_.threads, [&](size_t t, uint64_t first, uint64_t end) {
    Param& p = params_[t];
    ChunkRandom random(options_.seed, XXH3_64bits(p.name.data(), p.name.size()), first / kChunkElements, kInitStep);
    for (uint64_t i = first; i < end; ++i) p.w[i] = p.init_mean + p.init_std * random.Normal();
  });
}

uint64_t SynthTrajectory::num_parameters() const {
  uint64_t n = 0;
  for (const auto& p : params_) n += p.w.size();
  return n;
}

void SynthTrajectory::AdamSteps(int steps, double lr) {
  // Per step: bias corrections 1 - beta^t (t counts from 1) and the bias's phase.
  struct StepConstants {
    uint64_t t;
    float inv_c1, inv_c2;
    double phase;
  };
  std::vector<StepConstants> at(static_cast<size_t>(steps));
  for (auto& c : at) {
    c.t = static_cast<uint64_t>(++adam_t_);
    c.inv_c1 = static_cast<float>(1 / (1.0 - std::pow(options_.beta1, adam_t_)));
    c.inv_c2 = static_cast<float>(1 / (1.0 - std::pow(options_.beta2, adam_t_)));
    c.phase = 0.1 * adam_t_;
  }
  // Gradients: a per-tensor scale times noise with a slowly varying per-element bias
  // 0.3 sin(0.001 i + 0.1 t), so that moments build up the way they do in training. The sine is
  // held for kBiasRun elements (0.016 rad) and advanced by a rotation from its exact value at the
  // chunk's start: per element, the rotation's dependent multiplies took longer than the rest.
  constexpr uint64_t kBiasRun = 16;
  const double cos_d = std::cos(0.001 * kBiasRun), sin_d = std::sin(0.001 * kBiasRun);
  const float scale = 1e-3f, b1 = static_cast<float>(options_.beta1), b2 = static_cast<float>(options_.beta2);
  const float eps = static_cast<float>(options_.eps), rate = static_cast<float>(lr);
  // All the steps of one chunk before the next chunk: its moments stay in cache across them.
  ForEachChunk(params_, options_.threads, [&](size_t t, uint64_t first, uint64_t end) {
    Param& p = params_[t];
    const uint64_t name_hash = XXH3_64bits(p.name.data(), p.name.size());
    float* w = p.w.data();
    float* m = p.m.data();
    float* v = p.v.data();
    for (const StepConstants& c : at) {
      const float inv_c1 = c.inv_c1, inv_c2 = c.inv_c2;
      ChunkRandom random(options_.seed, name_hash, first / kChunkElements, c.t);
      double sin_i = std::sin(0.001 * static_cast<double>(first) + c.phase);
      double cos_i = std::cos(0.001 * static_cast<double>(first) + c.phase);
      for (uint64_t run = first; run < end; run += kBiasRun) {
        const float bias = 0.3f * static_cast<float>(sin_i);
        // The draws first, then the update (vectorized for whole runs).
        const size_t n = static_cast<size_t>(std::min(kBiasRun, end - run));
        float g[kBiasRun];
        for (size_t j = 0; j < n; ++j) g[j] = scale * (random.Normal() + bias);
        if (n == kBiasRun) {
          AdamUpdate(m + run, v + run, w + run, g, kBiasRun, {b1, b2, rate, inv_c1, inv_c2, eps});
        } else {
          AdamUpdate(m + run, v + run, w + run, g, n, {b1, b2, rate, inv_c1, inv_c2, eps});
        }
        const double next_sin = sin_i * cos_d + cos_i * sin_d;
        cos_i = cos_i * cos_d - sin_i * sin_d;
        sin_i = next_sin;
      }
    }
  });
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
