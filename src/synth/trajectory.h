// Synthetic training trajectories: fp32 master weights of a small Llama-style model, updated by
// an Adam-like optimizer on random gradients, published as BF16 snapshots (round to nearest
// even) exactly as a mixed-precision trainer publishes them. Deterministic for a given seed.
// Used by `dcr demo`, tests and benchmarks when real trajectories are not at hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/checkpoint.h"
#include "format/safetensors.h"

namespace dcr {

struct SynthModelConfig {
  uint32_t layers = 2;
  uint32_t hidden = 256;
  uint32_t intermediate = 688;
  uint32_t vocab = 2048;
  uint32_t heads = 8;
  uint32_t kv_heads = 2;
};

struct SynthTrajectoryOptions {
  uint64_t seed = 1;
  double learning_rate = 3e-6;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  // Optimizer steps taken before the first snapshot (moments only, weights unchanged), so that
  // Adam's moments are past their bias-corrected start-up, as in a run that is under way.
  int warmup_steps = 20;
  // Threads for initialization and steps (0 = all hardware threads). The trajectory is the same
  // with any number: every chunk of a tensor draws from its own random stream.
  int threads = 0;
};

// IEEE binary32 -> bfloat16 with round-to-nearest-even; NaNs stay NaN (quiet).
uint16_t Fp32ToBf16(float f);
float Bf16ToFp32(uint16_t b);

// One parameter of a custom model, initialized ~ N(init_mean, init_std).
struct SynthParamSpec {
  std::string name;
  std::vector<uint64_t> shape;
  float init_mean = 0.0f, init_std = 0.02f;
};

// Specs for every tensor of `catalog`: names containing "norm" start near 1 (RMSNorm weights),
// the rest near 0.
std::vector<SynthParamSpec> SynthParamsForCatalog(const Catalog& catalog);

class SynthTrajectory {
 public:
  SynthTrajectory(const SynthModelConfig& model, const SynthTrajectoryOptions& options);
  // A trajectory over the given parameters (any names and shapes, names unique).
  SynthTrajectory(const std::vector<SynthParamSpec>& params, const SynthTrajectoryOptions& options);

  // One optimizer step on the fp32 master weights.
  void Step() { AdamSteps(1, options_.learning_rate); ++step_; }
  int step() const { return step_; }
  void set_learning_rate(double lr) { options_.learning_rate = lr; }
  uint64_t num_parameters() const;
  // The current BF16 snapshot, tensors sorted by name.
  Status WriteSnapshot(const std::string& path) const;
  // The current BF16 snapshot as a sharded checkpoint directory.
  Status WriteShardedSnapshot(const std::string& dir, uint64_t max_shard_bytes) const;
  // The current BF16 snapshot, tensors sorted by name, viewing `storage`.
  std::vector<TensorToWrite> Snapshot(std::vector<std::vector<uint16_t>>* storage) const;

 private:
  struct Param {
    std::string name;
    std::vector<uint64_t> shape;
    float init_mean = 0.0f, init_std = 0.0f;
    std::vector<float> w, m, v;
  };
  // `steps` optimizer steps at learning rate lr.
  void AdamSteps(int steps, double lr);
  void AddParam(std::string name, std::vector<uint64_t> shape, float init_std, float init_mean);
  // Draws every parameter's initial weights (after the constructor has added them all).
  void Initialize();

  SynthTrajectoryOptions options_;
  std::vector<Param> params_;
  int step_ = 0;
  int adam_t_ = 0;  // optimizer steps including warm-up, for bias correction
};

}  // namespace dcr
