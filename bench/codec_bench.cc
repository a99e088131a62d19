// Codec throughput on training-like BF16 data, against a plain two-stream scan measured in the
// same run (DESIGN.md §9: throughput in bytes/s of canonical data, and ratios to a reference).
//
//   BM_DiffEncode/<per-mille>   diff + encode 64 MiB of BF16 in payload-sized pieces (plain mode)
//   BM_DecodeApply/<per-mille>  verify + decode those payloads and XOR them into a replica
//   BM_DiffEncodeContext, BM_DecodeApplyContext: the same in banded context mode (kAlways)
//   BM_TwoStreamScan            read both 64 MiB buffers, count differing 64-bit words
//   BM_*ContextOnTarget/<target>/<per-mille>: context mode forced onto each SIMD target this CPU
//                               runs, for the band kernels' effect (e.g. AVX3_DL's table lookup
//                               against AVX3's compares) as a ratio in one process
//
// The argument is the change density in per mille (5 = 0.5 %, 300 = 30 %). Changes sit at
// random positions and are mostly +-1 ulp (XOR masks 0x1, 0x3, 0x7), as in real training
// (shared/data/trajectories/README.md). Counters:
//   bytes_per_second   dense BF16 bytes per second (one copy of the tensor per iteration)
//   vs_scan            seconds per iteration / the scan's seconds per iteration (1 = as fast as
//                      merely reading both buffers once; lower is better)
//   wire_B_per_change  encoded payload bytes per changed element
//   density            fraction of elements changed
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codec/payload_codec.h"
#include "codec/simd_masks.h"
#include "synth/trajectory.h"

namespace dcr {
namespace {

constexpr uint64_t kDenseBytes = 64ull << 20;               // one BF16 tensor of 32 Mi elements
constexpr uint64_t kElements = kDenseBytes / 2;
constexpr uint64_t kPieceBytes = 16ull << 20;               // dense bytes per payload
constexpr uint64_t kPieceElements = kPieceBytes / 2;

using Clock = std::chrono::steady_clock;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Weights ~ N(0, 0.02) rounded to BF16, as a trainer publishes them.
const std::vector<uint8_t>& Base() {
  static const std::vector<uint8_t> base = [] {
    std::vector<uint8_t> b(kDenseBytes);
    std::mt19937_64 rng(42);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (uint64_t i = 0; i < kElements; ++i) {
      uint16_t v = Fp32ToBf16(dist(rng));
      std::memcpy(&b[2 * i], &v, 2);
    }
    return b;
  }();
  return base;
}

struct Pair {
  std::vector<uint8_t> next;
  uint64_t changed = 0;
};

// Base with ~per_mille/1000 of its elements changed: 60 % XOR 0x1, 20 % 0x3, 10 % 0x7,
// 10 % a random low-byte mask.
const Pair& WithChanges(int per_mille) {
  static std::map<int, std::unique_ptr<Pair>> cache;
  auto& slot = cache[per_mille];
  if (slot) return *slot;
  slot = std::make_unique<Pair>();
  slot->next = Base();
  uint64_t rng = 0x5eed0000u + static_cast<uint64_t>(per_mille);
  // An element changes when a uniform 32-bit draw falls below the threshold.
  const uint64_t threshold = static_cast<uint64_t>(per_mille) * (1ull << 32) / 1000;
  for (uint64_t i = 0; i < kElements; ++i) {
    uint64_t r = SplitMix64(&rng);
    if ((r & 0xffffffffu) >= threshold) continue;
    uint32_t kind = static_cast<uint32_t>(r >> 32) % 10;
    uint16_t mask = kind < 6 ? 0x1 : kind < 8 ? 0x3 : kind < 9 ? 0x7 : static_cast<uint16_t>(1 + (r >> 40) % 255);
    uint16_t v;
    std::memcpy(&v, &slot->next[2 * i], 2);
    v ^= mask;
    std::memcpy(&slot->next[2 * i], &v, 2);
    ++slot->changed;
  }
  return *slot;
}

// The reference: read both buffers once, count differing 64-bit words.
uint64_t TwoStreamScan(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  const uint64_t* x = reinterpret_cast<const uint64_t*>(a.data());
  const uint64_t* y = reinterpret_cast<const uint64_t*>(b.data());
  const size_t n = a.size() / 8;
  uint64_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += x[i] != y[i];
  return differ;
}

// Seconds per scan of the two 64 MiB buffers: the best of several runs, measured once.
double ScanSeconds() {
  static const double seconds = [] {
    const auto& base = Base();
    const auto& next = WithChanges(10).next;
    double best = 1e9;
    for (int r = 0; r < 7; ++r) {
      auto t0 = Clock::now();
      uint64_t d = TwoStreamScan(base, next);
      benchmark::DoNotOptimize(d);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  }();
  return seconds;
}

// Encodes base -> next as one payload per piece.
std::vector<std::vector<uint8_t>> Encode(const std::vector<uint8_t>& base, const std::vector<uint8_t>& next,
                                         PayloadBuilder* builder, uint64_t* changed) {
  std::vector<std::vector<uint8_t>> payloads;
  *changed = 0;
  uint32_t seq = 0;
  for (uint64_t start = 0; start < kElements; start += kPieceElements) {
    const uint64_t count = std::min(kPieceElements, kElements - start);
    SegmentSpec spec{0, DType::kBF16, ValueKind::kXor, start, count};
    const uint64_t c = builder->AddDiff(spec, std::span(base).subspan(2 * start, 2 * count),
                                        std::span(next).subspan(2 * start, 2 * count));
    ++seq;
    if (c == 0) continue;
    *changed += c;
    payloads.emplace_back();
    builder->Finish({1, 0, seq - 1}, &payloads.back());
  }
  return payloads;
}

void Report(benchmark::State& state, double seconds, uint64_t changed, uint64_t wire) {
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kDenseBytes));
  state.counters["vs_scan"] = iters > 0 ? seconds / iters / ScanSeconds() : 0;
  state.counters["density"] = static_cast<double>(changed) / static_cast<double>(kElements);
  if (changed) state.counters["wire_B_per_change"] = static_cast<double>(wire) / static_cast<double>(changed);
}

EncodeOptions Options(bool context) {
  EncodeOptions o;
  o.context = context ? EncodeOptions::Context::kAlways : EncodeOptions::Context::kNever;
  return o;
}

template <bool kContext>
void BM_DiffEncodeT(benchmark::State& state) {
  const auto& base = Base();
  const Pair& pair = WithChanges(static_cast<int>(state.range(0)));
  ScanSeconds();
  PayloadBuilder builder(Options(kContext));
  uint64_t changed = 0, wire = 0;
  auto t0 = Clock::now();
  for (auto _ : state) {
    auto payloads = Encode(base, pair.next, &builder, &changed);
    wire = 0;
    for (const auto& p : payloads) wire += p.size();
    benchmark::DoNotOptimize(payloads.data());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (changed != pair.changed) state.SkipWithError("encoder found a different number of changes");
  Report(state, seconds, changed, wire);
}

template <bool kContext>
void BM_DecodeApplyT(benchmark::State& state) {
  const auto& base = Base();
  const Pair& pair = WithChanges(static_cast<int>(state.range(0)));
  ScanSeconds();
  PayloadBuilder builder(Options(kContext));
  uint64_t changed = 0, wire = 0;
  const auto payloads = Encode(base, pair.next, &builder, &changed);
  for (const auto& p : payloads) wire += p.size();
  // XOR deltas are involutions: each iteration takes the replica base -> next or next -> base,
  // so no copy is needed between iterations.
  std::vector<uint8_t> replica = base;
  DecodedPayload decoded;
  // Context mode decodes against the old bits of the transition it codes: always `base` here,
  // while the replica alternates.
  const BaseLookup old_bits = [&base](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    return std::span<const uint8_t>(base).subspan(2 * s.start, 2 * s.count);
  };
  bool ok = true;
  auto t0 = Clock::now();
  for (auto _ : state) {
    for (const auto& p : payloads) {
      ok &= DecodePayload(p, &decoded, kContext ? old_bits : BaseLookup{}).ok();
      for (const auto& seg : decoded.segments) ok &= ApplySegment(seg, replica).ok();
    }
    benchmark::DoNotOptimize(replica.data());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto& expect = state.iterations() % 2 ? pair.next : base;
  if (!ok) state.SkipWithError("decode or apply failed");
  else if (replica != expect) state.SkipWithError("replica is not bit-exact");
  Report(state, seconds, changed, wire);
}

void BM_TwoStreamScan(benchmark::State& state) {
  const auto& base = Base();
  const auto& next = WithChanges(10).next;
  uint64_t differ = 0;
  auto t0 = Clock::now();
  for (auto _ : state) {
    differ = TwoStreamScan(base, next);
    benchmark::DoNotOptimize(differ);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kDenseBytes));
  state.counters["vs_scan"] = seconds / static_cast<double>(state.iterations()) / ScanSeconds();
  state.counters["differing_words"] = static_cast<double>(differ);
}

BENCHMARK(BM_TwoStreamScan)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_DiffEncode(benchmark::State& state) { BM_DiffEncodeT<false>(state); }
void BM_DecodeApply(benchmark::State& state) { BM_DecodeApplyT<false>(state); }
void BM_DiffEncodeContext(benchmark::State& state) { BM_DiffEncodeT<true>(state); }
void BM_DecodeApplyContext(benchmark::State& state) { BM_DecodeApplyT<true>(state); }

BENCHMARK(BM_DiffEncode)->ArgName("per_mille")->Arg(5)->Arg(10)->Arg(50)->Arg(300)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeApply)->ArgName("per_mille")->Arg(5)->Arg(10)->Arg(50)->Arg(300)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DiffEncodeContext)->ArgName("per_mille")->Arg(5)->Arg(50)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeApplyContext)->ArgName("per_mille")->Arg(5)->Arg(50)->Unit(benchmark::kMillisecond)->UseRealTime();

// Context mode with every kernel on `target` (a Highway target bit), then the best target again.
template <bool kEncode>
void BM_ContextOnTarget(benchmark::State& state, int64_t target) {
  ForceSimdTarget(target);
  if (kEncode)
    BM_DiffEncodeT<true>(state);
  else
    BM_DecodeApplyT<true>(state);
  ForceSimdTarget(0);
}

}  // namespace
}  // namespace dcr

int main(int argc, char** argv) {
  for (int64_t target : dcr::CompiledSimdTargets()) {
    const std::string name = dcr::SimdTargetName(target);
    benchmark::RegisterBenchmark(("BM_DiffEncodeContextOnTarget/" + name).c_str(), dcr::BM_ContextOnTarget<true>, target)
        ->ArgName("per_mille")->Arg(5)->Arg(50)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("BM_DecodeApplyContextOnTarget/" + name).c_str(), dcr::BM_ContextOnTarget<false>, target)
        ->ArgName("per_mille")->Arg(5)->Arg(50)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
