// Test support for replica_state_test and replica_layout_test: a deterministic base -> target
// transfer (several tensors of different widths, XOR and overwrite segments, plain and
// context-mode payloads from two producers) that a re-executed child process can rebuild bit for
// bit, and the re-executed crash child itself.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "protocol/state_digest.h"
#include "protocol/version.h"
#include "testing/tensor_set.h"

namespace dcr::test {

struct Scenario {
  Tensors base, target;
  std::vector<std::vector<uint8_t>> payloads;
  size_t segments = 0;   // over all payloads
  uint64_t changed = 0;  // elements that differ between base and target
  Version base_version;
  uint64_t transfer = 0;
  Digest128 target_digest;
  Version next;
};

inline Digest128 DigestOf(Tensors& t) {
  t.Bind();
  Catalog catalog;
  std::vector<Digest128> digests;
  for (const auto& e : t.list) {
    catalog.push_back({e.name, e.dtype, e.shape});
    digests.push_back(DigestElements(TensorKey(e.name), e.data, DTypeWidth(e.dtype), 0));
  }
  return CombineDigests(catalog, digests);
}

// One payload of `transfer` from `producer`: tensor `tensor` [start, start + count) of base vs
// next, as `kind`, in plain or context mode.
inline std::vector<uint8_t> OnePayload(Tensors& base, Tensors& next, uint32_t tensor, uint64_t start, uint64_t count,
                                       ValueKind kind, bool context, PayloadIdentity id) {
  EncodeOptions o;
  o.context = context ? EncodeOptions::Context::kAlways : EncodeOptions::Context::kNever;
  PayloadBuilder b(o);
  const DType dt = base.list[tensor].dtype;
  const uint32_t w = DTypeWidth(dt);
  std::span<const uint8_t> bs(base.storage[tensor]), ns(next.storage[tensor]);
  b.AddDiff({tensor, dt, kind, start, count}, bs.subspan(start * w, count * w), ns.subspan(start * w, count * w));
  std::vector<uint8_t> out;
  if (b.segments() > 0) b.Finish(id, &out);
  return out;
}

inline Scenario MakeScenario() {
  Scenario s;
  std::mt19937_64 rng(20240611);
  // Catalog order is by name; the names below are already sorted.
  s.base.Add("a.bf16", DType::kBF16, {40, 64}, rng);
  s.base.Add("b.f32", DType::kF32, {1500}, rng);
  s.base.Add("c.u8", DType::kU8, {333}, rng);
  s.base.Add("d.f16", DType::kF16, {7}, rng);  // unchanged
  s.base.Add("e.f64", DType::kF64, {3, 50}, rng);
  // Weight-like high bytes (few exponent classes), so that context-mode location codes pay off.
  for (size_t e = 0; e < s.base.storage[0].size(); e += 2) s.base.storage[0][e + 1] = 0x3c | (rng() & 0x80);
  for (size_t e = 0; e < s.base.storage[1].size(); e += 4) s.base.storage[1][e + 3] = 0x3d | (rng() & 0x80);
  s.target = s.base;
  for (size_t i = 0; i < s.target.list.size(); ++i) {
    if (s.target.list[i].name == "d.f16") continue;
    const uint32_t w = DTypeWidth(s.target.list[i].dtype);
    auto& bytes = s.target.storage[i];
    for (size_t e = 0; e < bytes.size() / w; ++e) {
      if (rng() % 100 >= 15) continue;
      if (w == 2) bytes[e * 2] ^= static_cast<uint8_t>(1 + rng() % 0x7f);  // BF16/F16: low mantissa bits
      else for (uint32_t b = 0; b < w; ++b) bytes[e * w + b] = static_cast<uint8_t>(rng());
      s.changed += !std::equal(bytes.begin() + e * w, bytes.begin() + (e + 1) * w, s.base.storage[i].begin() + e * w);
    }
  }
  s.base_version = InitialVersion(DigestOf(s.base));
  s.transfer = LiveTransferId(s.base_version, 0);
  s.target_digest = DigestOf(s.target);
  s.next = NextVersion(s.base_version, s.transfer, s.target_digest);

  // Producer 0 sends plain payloads, producer 1 context-mode ones; two segments per payload.
  constexpr uint64_t kChunk = 300;
  PayloadBuilder builders[2] = {PayloadBuilder(EncodeOptions{}),
                                PayloadBuilder(EncodeOptions{.context = EncodeOptions::Context::kAlways})};
  uint32_t seq[2] = {0, 0};
  auto finish = [&](int p) {
    s.segments += builders[p].segments();
    s.payloads.emplace_back();
    builders[p].Finish({s.transfer, static_cast<uint32_t>(p), seq[p]++}, &s.payloads.back());
  };
  size_t chunk = 0;
  for (uint32_t t = 0; t < s.base.list.size(); ++t) {
    const DType dt = s.base.list[t].dtype;
    const uint32_t w = DTypeWidth(dt);
    const uint64_t n = s.base.storage[t].size() / w;
    for (uint64_t start = 0; start < n; start += kChunk, ++chunk) {
      const uint64_t count = std::min(kChunk, n - start);
      const int p = static_cast<int>(chunk % 2);
      const ValueKind kind = chunk % 3 == 1 ? ValueKind::kOverwrite : ValueKind::kXor;
      std::span<const uint8_t> b(s.base.storage[t]), x(s.target.storage[t]);
      builders[p].AddDiff({t, dt, kind, start, count}, b.subspan(start * w, count * w), x.subspan(start * w, count * w));
      if (builders[p].segments() == 2) finish(p);
    }
  }
  for (int p = 0; p < 2; ++p)
    if (builders[p].segments() > 0) finish(p);
  return s;
}

// Every tensor of `c` holds exactly the bytes of `want`.
inline ::testing::AssertionResult Holds(const Checkpoint& c, const Tensors& want) {
  if (c.tensors().size() != want.list.size()) return ::testing::AssertionFailure() << "tensor count differs";
  for (size_t i = 0; i < want.list.size(); ++i) {
    const TensorRef* r = c.Find(want.list[i].name);
    if (r == nullptr) return ::testing::AssertionFailure() << "no tensor " << want.list[i].name;
    if (!std::equal(r->bytes.begin(), r->bytes.end(), want.storage[i].begin(), want.storage[i].end()))
      return ::testing::AssertionFailure() << "tensor " << want.list[i].name << " differs";
  }
  return ::testing::AssertionSuccess();
}

// Crash recovery tests. DCR_CRASH_AT is read once per process, so every crash runs in a fresh
// process: this test binary re-executed on the hidden (DISABLED_) test `child_test`, which reads
// DCR_REPLICA_CHILD_DIR and DCR_REPLICA_CHILD_PLAN, runs the plan and dies by SIGKILL at the crash
// point. Extra environment variables for the child are passed in `env` (name, value). True iff
// the child died by SIGKILL.
inline ::testing::AssertionResult CrashChild(const std::string& child_test, const std::string& dir, const std::string& plan,
                                             const std::string& crash_at,
                                             const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const std::string filter = "--gtest_filter=" + child_test;
  const pid_t pid = ::fork();
  if (pid < 0) return ::testing::AssertionFailure() << "fork failed";
  if (pid == 0) {
    ::setenv("DCR_CRASH_AT", crash_at.c_str(), 1);
    ::setenv("DCR_REPLICA_CHILD_DIR", dir.c_str(), 1);
    ::setenv("DCR_REPLICA_CHILD_PLAN", plan.c_str(), 1);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    if (FILE* null = std::fopen("/dev/null", "w")) ::dup2(fileno(null), 1);
    ::execl("/proc/self/exe", "crash_child", filter.c_str(), "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return ::testing::AssertionFailure() << "waitpid failed";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << plan << " with DCR_CRASH_AT=" << crash_at << " was not killed (status "
                                       << status << ")";
}

}  // namespace dcr::test
