// Test data and helpers of the protocol tests (protocol_test.cc, delta_determinism_test.cc; also
// OpenOrDie and Apply for delta_refusal_test.cc): a checkpoint of mixed dtypes with special
// values, empty tensors and a scalar, a "next" one that changes some elements of most tensors,
// and a pair of them written to a temporary directory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"

namespace dcr::protocol_test {

namespace fs = std::filesystem;

using test::ReadAll;
using test::TempDir;
using test::Tensors;

inline void Put(std::vector<uint8_t>& b, size_t i, uint32_t w, uint64_t v) { std::memcpy(b.data() + i * w, &v, w); }
inline uint64_t Get(const std::vector<uint8_t>& b, size_t i, uint32_t w) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + i * w, w);
  return v;
}

inline Tensors MakeBase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensors t;
  t.Add("attn.q.weight", DType::kBF16, {64, 48});
  t.Add("attn.bias", DType::kF32, {100});
  t.Add("big.weight", DType::kBF16, {300, 257});
  t.Add("dense.weight", DType::kF32, {40, 40});
  t.Add("empty.weight", DType::kF32, {0, 8});
  t.Add("ffn.w", DType::kF16, {33, 17});
  t.Add("fp8.e4m3", DType::kF8E4M3, {300});
  t.Add("fp8.e5m2", DType::kF8E5M2, {77});
  t.Add("frozen.weight", DType::kBF16, {128});
  t.Add("head.f64", DType::kF64, {37});
  t.Add("int.i8", DType::kI8, {50});
  t.Add("int.i16", DType::kI16, {20});
  t.Add("int.i32", DType::kI32, {13});
  t.Add("int.i64", DType::kI64, {9});
  t.Add("int.u16", DType::kU16, {20});
  t.Add("int.u32", DType::kU32, {13});
  t.Add("int.u64", DType::kU64, {9});
  t.Add("int.u8", DType::kU8, {50});
  t.Add("mask.bool", DType::kBool, {40});
  t.Add("scalar.step", DType::kI64, {});
  for (size_t i = 0; i < t.list.size(); ++i) {
    for (auto& b : t.storage[i]) b = static_cast<uint8_t>(rng());
    if (t.list[i].dtype == DType::kBool)
      for (auto& b : t.storage[i]) b &= 1;
  }
  // Special values in the base: +0.0, a NaN with payload, +inf, the smallest subnormal, -0.0.
  auto& bias = t.Bytes("attn.bias");
  const uint32_t specials[] = {0x00000000, 0x7fc00001, 0x7f800000, 0x00000001, 0x80000000, 0x7fc00001};
  for (size_t i = 0; i < 6; ++i) Put(bias, i, 4, specials[i]);
  return t;
}

// Changes ~2% of the elements of most tensors (low-bit flips, as one-ulp steps give), 40% of
// dense.weight, runs in big.weight, special-value transitions in attn.bias, and the scalar.
inline Tensors MakeNext(const Tensors& base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensors t = base;
  for (size_t i = 0; i < t.list.size(); ++i) {
    const std::string& name = t.list[i].name;
    if (name == "frozen.weight") continue;
    const uint32_t w = DTypeWidth(t.list[i].dtype);
    const size_t n = t.storage[i].size() / w;
    const double p = name == "dense.weight" ? 0.4 : 0.02;
    std::bernoulli_distribution coin(p);
    for (size_t e = 0; e < n; ++e) {
      bool run = name == "big.weight" && (e % 5000) < 60;
      if (!coin(rng) && !run) continue;
      uint64_t v = Get(t.storage[i], e, w);
      uint64_t mask = t.list[i].dtype == DType::kBool ? 1 : (1ull << (1 + rng() % 3)) - 1;
      Put(t.storage[i], e, w, v ^ mask);
    }
    // Every tensor but the frozen one changes at least its last element.
    if (n > 0) Put(t.storage[i], n - 1, w, Get(base.storage[i], n - 1, w) ^ 1);
  }
  auto& bias = t.Bytes("attn.bias");
  // +0 -> -0, NaN payload 1 -> 2, +inf -> -inf, subnormal 1 -> 2, -0 -> +0, NaN unchanged.
  const uint32_t specials[] = {0x80000000, 0x7fc00002, 0xff800000, 0x00000002, 0x00000000, 0x7fc00001};
  for (size_t i = 0; i < 6; ++i) Put(bias, i, 4, specials[i]);
  Put(t.Bytes("scalar.step"), 0, 8, Get(base.Bytes("scalar.step"), 0, 8) + 1);
  return t;
}

inline uint64_t CountChanged(const Tensors& a, const Tensors& b) {
  uint64_t n = 0;
  for (size_t i = 0; i < a.list.size(); ++i) {
    const uint32_t w = DTypeWidth(a.list[i].dtype);
    for (size_t e = 0; e < a.storage[i].size() / w; ++e) n += Get(a.storage[i], e, w) != Get(b.storage[i], e, w);
  }
  return n;
}

inline Checkpoint OpenOrDie(const std::string& path, MappedFile::Mode mode = MappedFile::Mode::kReadOnly) {
  auto c = Checkpoint::Open(path, mode);
  if (!c.ok()) Fatal(__FILE__, __LINE__, c.status().ToString());
  return std::move(c).value();
}

// Every tensor of `c` holds exactly the bytes of `want`.
inline void ExpectHolds(const Checkpoint& c, Tensors& want) {
  want.Bind();
  ASSERT_EQ(c.tensors().size(), want.list.size());
  for (size_t i = 0; i < want.list.size(); ++i) {
    const TensorRef* r = c.Find(want.list[i].name);
    ASSERT_NE(r, nullptr);
    ASSERT_EQ(r->bytes.size(), want.storage[i].size());
    EXPECT_TRUE(std::equal(r->bytes.begin(), r->bytes.end(), want.storage[i].begin(), want.storage[i].end()))
        << want.list[i].name;
  }
}

// Applies the delta file `delta` in place to the checkpoint at `target`.
inline Result<ApplyStats> Apply(const std::string& delta, const std::string& target) {
  auto r = DeltaReader::Open(delta);
  if (!r.ok()) return r.status();
  auto t = Checkpoint::Open(target, MappedFile::Mode::kReadWrite);
  if (!t.ok()) return t.status();
  return ApplyDelta(*r, *t, ApplyOptions{});
}

// Writes base.safetensors and next.safetensors and returns the paths' directory.
struct Pair {
  TempDir dir{"dcr_protocol_test_"};
  Tensors base = MakeBase(1), next = MakeNext(base, 2);
  std::string base_path = dir / "base.safetensors", next_path = dir / "next.safetensors";
  Pair() {
    if (!WriteSafetensors(base_path, base.Bind()).ok() || !WriteSafetensors(next_path, next.Bind()).ok())
      Fatal(__FILE__, __LINE__, "cannot write test checkpoints");
  }
  Result<DiffStats> Diff(const std::string& out, DiffOptions opt = {}) {
    Checkpoint b = OpenOrDie(base_path), n = OpenOrDie(next_path);
    return DiffCheckpoints(b, n, out, opt);
  }
  // Diffs the base against the next checkpoint into `out` and opens the result.
  Result<DeltaReader> DiffAndOpen(const std::string& out, DiffOptions opt = {}) {
    auto s = Diff(out, std::move(opt));
    if (!s.ok()) return s.status();
    return DeltaReader::Open(out);
  }
  // Copies the base checkpoint to `target` and applies `delta` to the copy.
  Result<ApplyStats> ApplyToBaseCopy(const std::string& delta, const std::string& target) const {
    fs::copy_file(base_path, target);
    return Apply(delta, target);
  }
};

}  // namespace dcr::protocol_test
