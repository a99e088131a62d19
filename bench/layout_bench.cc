// Layout-aware apply cost against model size (DESIGN.md §5: placement and apply are O(changed
// elements)). Two Llama-style models, the second ~10x larger (wider tensors, same tensor count),
// each served with a vLLM-style TP-4 layout held in memory, receive deltas with the same number of
// changed elements at random positions. Apply runs with the base digest supplied (the receiver's
// steady state, DESIGN.md §7), so the only O(model) step, the full base recomputation, is absent.
//
//   BM_LayoutApply/<scale>     one apply (verify + place) into the model of that scale
//   BM_LayoutApplyScaling      both models in alternation, measured in the same run
//
// Counters:
//   changes_per_second  changed canonical elements applied per second
//   model_elements      canonical elements of the model
//   large_over_small    apply time of the 10x model / apply time of the small one (target <= 1.5)
//   size_ratio          canonical elements of the large model / of the small one
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "layout/generators.h"
#include "protocol/layout_apply.h"
#include "protocol/layout_diff.h"
#include "protocol/layout_digest.h"

namespace dcr {
namespace {

constexpr uint64_t kChanges = 1 << 17;

using Clock = std::chrono::steady_clock;

ModelSpec Spec(int scale) {
  ModelSpec m;
  m.model_type = "llama";
  m.layers = 2;
  m.hidden = scale == 1 ? 256 : 768;
  m.heads = scale == 1 ? 4 : 12;
  m.kv_heads = scale == 1 ? 2 : 4;
  m.head_dim = 64;
  m.intermediate = scale == 1 ? 768 : 2304;
  m.vocab = scale == 1 ? 8192 : 28672;
  m.moe_layer.assign(m.layers, false);
  return m;
}

// Every rank's local tensors in memory.
struct Shards {
  std::vector<std::vector<std::vector<uint8_t>>> storage;
  MutableShardBytes bytes;

  Shards(const LayoutSet& set, const std::vector<std::span<const uint8_t>>& canonical) {
    storage.resize(set.size());
    bytes.resize(set.size());
    for (size_t r = 0; r < set.size(); ++r)
      for (const LocalTensor& t : set[r].tensors) {
        auto& s = storage[r].emplace_back(t.num_elements() * DTypeWidth(t.dtype));
        FillLocalTensor(set[r], t, canonical, s);
      }
    for (size_t r = 0; r < set.size(); ++r)
      for (auto& s : storage[r]) bytes[r].emplace_back(s);
  }
  ShardBytes readable() const {
    ShardBytes out(bytes.size());
    for (size_t r = 0; r < bytes.size(); ++r) out[r].assign(bytes[r].begin(), bytes[r].end());
    return out;
  }
};

class Receiver {
 public:
  explicit Receiver(int scale) {
    const ModelSpec spec = Spec(scale);
    const Catalog catalog = CanonicalCatalog(spec);
    // Canonical base: training-like BF16 weights; new: kChanges random elements flipped by 1 ulp.
    std::vector<std::vector<uint8_t>> base(catalog.size()), next;
    std::mt19937_64 rng(scale);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (size_t c = 0; c < catalog.size(); ++c) {
      base[c].resize(*ShapeElements(catalog[c].shape) * 2);
      for (size_t i = 0; i < base[c].size(); i += 2) {
        float f = dist(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint16_t b = static_cast<uint16_t>(u >> 16);
        std::memcpy(&base[c][i], &b, 2);
      }
      elements_ += base[c].size() / 2;
    }
    next = base;
    std::uniform_int_distribution<uint64_t> pick(0, elements_ - 1);
    for (uint64_t k = 0; k < kChanges; ++k) {
      uint64_t e = pick(rng);
      size_t c = 0;
      while (e >= next[c].size() / 2) e -= next[c].size() / 2, ++c;
      next[c][2 * e] ^= 1;
    }
    auto view = [](const std::vector<std::vector<uint8_t>>& v) {
      std::vector<std::span<const uint8_t>> out(v.begin(), v.end());
      return out;
    };
    // Deltas base -> new and new -> base from single-rank training shards.
    const LayoutSet train = *GenerateMegatronLayouts(spec, {1, 1, 1});
    dir_ = std::filesystem::temp_directory_path() / ("dcr_layout_bench_" + std::to_string(::getpid()) + "_" + std::to_string(scale));
    std::filesystem::create_directories(dir_);
    {
      Shards tb(train, view(base)), tn(train, view(next));
      LayoutDiffOptions o;
      o.threads = 1;
      const auto fwd = DiffLayoutShards(train, tb.readable(), tn.readable(), (dir_ / "forward.dcr").string(), o);
      const auto bwd = DiffLayoutShards(train, tn.readable(), tb.readable(), (dir_ / "backward.dcr").string(), o);
      if (!fwd.ok() || !bwd.ok()) Fatal(__FILE__, __LINE__, "delta creation failed");
      changes_ = fwd->changed_elements;
    }
    forward_.emplace(std::move(DeltaReader::Open((dir_ / "forward.dcr").string())).value());
    backward_.emplace(std::move(DeltaReader::Open((dir_ / "backward.dcr").string())).value());
    serve_ = *GenerateVllmLayouts(spec, {4, 1, 1}, DType::kBF16);
    shards_ = std::make_unique<Shards>(serve_, view(base));
    base_digest_ = DigestThroughLayout(serve_, shards_->readable(), 1)->tensors;
    // One verified round trip records the new state's digests.
    LayoutApplyOptions o;
    o.threads = 1;
    auto there = ApplyLayoutDelta(*forward_, serve_, shards_->bytes, o);
    if (!there.ok()) Fatal(__FILE__, __LINE__, there.status().ToString());
    new_digest_ = there->target_tensor_digests;
    at_new_ = true;
    ApplyOnce();
  }
  ~Receiver() { std::filesystem::remove_all(dir_); }

  // Applies the delta that takes the shards to the other state.
  LayoutApplyStats ApplyOnce() {
    LayoutApplyOptions o;
    o.threads = 1;
    o.known_base = at_new_ ? &new_digest_ : &base_digest_;
    auto r = ApplyLayoutDelta(at_new_ ? *backward_ : *forward_, serve_, shards_->bytes, o);
    if (!r.ok()) Fatal(__FILE__, __LINE__, r.status().ToString());
    at_new_ = !at_new_;
    return *r;
  }
  uint64_t elements() const { return elements_; }
  uint64_t changes() const { return changes_; }

 private:
  std::filesystem::path dir_;
  LayoutSet serve_;
  std::unique_ptr<Shards> shards_;
  std::optional<DeltaReader> forward_, backward_;
  std::vector<Digest128> base_digest_, new_digest_;
  bool at_new_ = false;
  uint64_t elements_ = 0, changes_ = 0;
};

Receiver& Get(int scale) {
  static std::map<int, std::unique_ptr<Receiver>> cache;
  auto& slot = cache[scale];
  if (!slot) slot = std::make_unique<Receiver>(scale);
  return *slot;
}

void BM_LayoutApply(benchmark::State& state) {
  Receiver& r = Get(static_cast<int>(state.range(0)));
  double verify = 0, place = 0;
  for (auto _ : state) {
    const LayoutApplyStats s = r.ApplyOnce();
    verify += s.verify_seconds;
    place += s.apply_seconds;
  }
  state.counters["verify_ms"] = benchmark::Counter(1e3 * verify, benchmark::Counter::kAvgIterations);
  state.counters["place_ms"] = benchmark::Counter(1e3 * place, benchmark::Counter::kAvgIterations);
  state.counters["changes_per_second"] =
      benchmark::Counter(static_cast<double>(r.changes()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["model_elements"] = static_cast<double>(r.elements());
}
BENCHMARK(BM_LayoutApply)->Arg(1)->Arg(10)->Unit(benchmark::kMillisecond);

void BM_LayoutApplyScaling(benchmark::State& state) {
  Receiver& small = Get(1);
  Receiver& large = Get(10);
  double small_s = 0, large_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    small.ApplyOnce();
    auto t1 = Clock::now();
    large.ApplyOnce();
    auto t2 = Clock::now();
    small_s += std::chrono::duration<double>(t1 - t0).count();
    large_s += std::chrono::duration<double>(t2 - t1).count();
  }
  state.counters["large_over_small"] = small_s > 0 ? large_s / small_s : 0;
  state.counters["size_ratio"] = static_cast<double>(large.elements()) / static_cast<double>(small.elements());
  state.counters["changes"] = static_cast<double>(large.changes());
}
BENCHMARK(BM_LayoutApplyScaling)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace dcr

BENCHMARK_MAIN();
