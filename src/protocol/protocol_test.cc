// Protocol tests, part 1: checkpoint digests and the delta round trip (DiffCheckpoints ->
// DeltaReader -> ApplyDelta gives exactly the new bits), including determinism across thread
// counts and chunk sizes. Refusals are in delta_refusal_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "format/checkpoint.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "protocol/payload_plan.h"
#include "protocol/state_digest.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

using test::ReadAll;
using test::TempDir;
using test::Tensors;

// ---------------------------------------------------------------------------------------------
// Test data: a checkpoint of mixed dtypes with special values, empty tensors and a scalar, and a
// "next" checkpoint that changes some elements of most tensors.

void Put(std::vector<uint8_t>& b, size_t i, uint32_t w, uint64_t v) { std::memcpy(b.data() + i * w, &v, w); }
uint64_t Get(const std::vector<uint8_t>& b, size_t i, uint32_t w) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + i * w, w);
  return v;
}

Tensors MakeBase(uint64_t seed) {
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
Tensors MakeNext(const Tensors& base, uint64_t seed) {
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

uint64_t CountChanged(const Tensors& a, const Tensors& b) {
  uint64_t n = 0;
  for (size_t i = 0; i < a.list.size(); ++i) {
    const uint32_t w = DTypeWidth(a.list[i].dtype);
    for (size_t e = 0; e < a.storage[i].size() / w; ++e) n += Get(a.storage[i], e, w) != Get(b.storage[i], e, w);
  }
  return n;
}

Checkpoint OpenOrDie(const std::string& path, MappedFile::Mode mode = MappedFile::Mode::kReadOnly) {
  auto c = Checkpoint::Open(path, mode);
  if (!c.ok()) Fatal(__FILE__, __LINE__, c.status().ToString());
  return std::move(c).value();
}

// Every tensor of `c` holds exactly the bytes of `want`.
void ExpectHolds(const Checkpoint& c, Tensors& want) {
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
Result<ApplyStats> Apply(const std::string& delta, const std::string& target) {
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

// ---------------------------------------------------------------------------------------------
// State digest

TEST(StateDigest, CheckpointDigestIsTheSameForEveryThreadCountAndShardLayout) {
  TempDir dir{"dcr_protocol_test_"};
  Tensors t = MakeBase(5);
  t.Add("huge.u8", DType::kU8, {(1u << 22) + 12345});  // spans two digest slices
  std::mt19937_64 rng(6);
  for (auto& b : t.Bytes("huge.u8")) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(WriteSafetensors(dir / "one.safetensors", t.Bind()).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(dir / "sharded", t.list, 4096).ok());
  Checkpoint one = OpenOrDie(dir / "one.safetensors"), sharded = OpenOrDie(dir / "sharded");
  const CheckpointDigest d1 = DigestCheckpoint(one, 1);
  for (int threads : {2, 4}) {
    CheckpointDigest d = DigestCheckpoint(one, threads);
    EXPECT_EQ(d.total, d1.total);
    EXPECT_EQ(d.tensors, d1.tensors);
  }
  CheckpointDigest ds = DigestCheckpoint(sharded, 3);
  EXPECT_EQ(ds.total, d1.total);
  EXPECT_EQ(ds.tensors, d1.tensors);
  // Each tensor digest is the plain sum over its elements; the total combines them with the catalog.
  for (size_t i = 0; i < one.tensors().size(); ++i) {
    const TensorRef& r = one.tensors()[i];
    uint32_t w = DTypeWidth(r.dtype());
    EXPECT_EQ(d1.tensors[i], DigestElements(TensorKey(r.name()), r.bytes, w, 0)) << r.name();
    if (r.num_elements() == 0) {
      EXPECT_EQ(d1.tensors[i], Digest128{});
    }
  }
  EXPECT_EQ(d1.total, CombineDigests(one.catalog(), d1.tensors));
}

TEST(StateDigest, CombinedDigestDependsOnTheCatalog) {
  const std::vector<Digest128> tensors = {{1, 2}, {3, 4}};
  const Catalog cat = {{"a", DType::kF32, {2, 3}}, {"b", DType::kBF16, {}}};
  const Digest128 d = CombineDigests(cat, tensors);
  auto with = [&](auto edit) {
    Catalog c = cat;
    edit(c);
    return CombineDigests(c, tensors);
  };
  EXPECT_NE(with([](Catalog& c) { c[0].name = "a2"; }), d);
  EXPECT_NE(with([](Catalog& c) { c[0].shape = {3, 2}; }), d);
  EXPECT_NE(with([](Catalog& c) { c[0].shape = {6}; }), d);
  EXPECT_NE(with([](Catalog& c) { c[0].dtype = DType::kI32; }), d);
  EXPECT_NE(CombineDigests(cat, {{1, 2}, {3, 5}}), d);
  EXPECT_EQ(CombineDigests(cat, tensors), d);
}

// ---------------------------------------------------------------------------------------------
// Delta round trip

TEST(DeltaRoundTrip, MixedDTypesSpecialValuesAndEmptyTensorsApplyBitExactly) {
  Pair p;
  auto stats = p.Diff(p.dir / "d.dcr");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const uint64_t want_changed = CountChanged(p.base, p.next);
  EXPECT_EQ(stats->changed_elements, want_changed);
  EXPECT_EQ(stats->wire_bytes, fs::file_size(p.dir / "d.dcr"));

  auto r = DeltaReader::Open(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DeltaHeader& h = r->header();
  EXPECT_EQ(h.tensors.size(), p.base.list.size());
  EXPECT_EQ(h.changed_elements(), want_changed);
  EXPECT_EQ(h.base_digest, DigestCheckpoint(OpenOrDie(p.base_path), 1).total);
  EXPECT_EQ(h.target_digest, DigestCheckpoint(OpenOrDie(p.next_path), 1).total);
  EXPECT_EQ(h.target_digest, stats->target_digest);
  // Unchanged and empty tensors have no segment; every tensor's tags are its digests' low bits.
  for (size_t i = 0; i < h.payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    for (const auto& seg : d.segments) {
      EXPECT_NE(h.tensors[seg.spec.tensor_index].entry.name, "frozen.weight");
      EXPECT_NE(h.tensors[seg.spec.tensor_index].entry.name, "empty.weight");
    }
  }
  const CheckpointDigest bd = DigestCheckpoint(OpenOrDie(p.base_path), 1);
  EXPECT_EQ(h.format_version, kDeltaFormatVersion);
  for (size_t t = 0; t < h.tensors.size(); ++t)
    EXPECT_EQ(h.tensors[t].base_tag, DigestTag(bd.tensors[t], h.base_tag_bits())) << h.tensors[t].entry.name;

  auto applied = p.ApplyToBaseCopy(p.dir / "d.dcr", p.dir / "target.safetensors");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->changed_elements, want_changed);
  EXPECT_EQ(applied->target_digest, h.target_digest);
  // The whole file, header included, is now the next checkpoint's file.
  EXPECT_EQ(ReadAll(p.dir / "target.safetensors"), ReadAll(p.next_path));
  Checkpoint target = OpenOrDie(p.dir / "target.safetensors");
  ExpectHolds(target, p.next);
  EXPECT_EQ(DigestCheckpoint(target, 2).total, h.target_digest);
}

TEST(DeltaRoundTrip, ShardedTargetReceivesExactlyTheNewBits) {
  Pair p;
  ASSERT_TRUE(p.Diff(p.dir / "d.dcr").ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "target", p.base.Bind(), 8192).ok());
  ASSERT_GT(OpenOrDie(p.dir / "target").num_files(), 2u);
  auto applied = Apply(p.dir / "d.dcr", p.dir / "target");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  Checkpoint target = OpenOrDie(p.dir / "target");
  EXPECT_TRUE(target.sharded());
  ExpectHolds(target, p.next);
  auto diff = FirstDifference(target, OpenOrDie(p.next_path));
  ASSERT_TRUE(diff.ok());
  EXPECT_FALSE(diff->has_value());
}

TEST(DeltaRoundTrip, ShardedAndSingleFileCheckpointsGiveTheSameDeltaFile) {
  Pair p;
  ASSERT_TRUE(p.Diff(p.dir / "single.dcr").ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "base_sh", p.base.Bind(), 10000).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "next_sh", p.next.Bind(), 3000).ok());
  Checkpoint b = OpenOrDie(p.dir / "base_sh"), n = OpenOrDie(p.dir / "next_sh");
  ASSERT_TRUE(DiffCheckpoints(b, n, p.dir / "sharded.dcr", DiffOptions{}).ok());
  EXPECT_EQ(ReadAll(p.dir / "single.dcr"), ReadAll(p.dir / "sharded.dcr"));
}

TEST(DeltaDeterminism, FileIsByteIdenticalForOneTwoAndFourThreadsAndAnyChunkSize) {
  Pair p;
  for (uint64_t chunk_bytes : {kDefaultChunkBytes, uint64_t{4096}, uint64_t{256}, uint64_t{8}}) {
    std::vector<uint8_t> first;
    for (int threads : {1, 2, 4}) {
      DiffOptions opt;
      opt.threads = threads;
      opt.chunk_bytes = chunk_bytes;
      std::string out = p.dir / ("d_" + std::to_string(chunk_bytes) + "_" + std::to_string(threads) + ".dcr");
      auto s = p.Diff(out, opt);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      auto bytes = ReadAll(out);
      if (threads == 1) {
        first = bytes;
        continue;
      }
      EXPECT_EQ(bytes, first) << "chunk " << chunk_bytes << " threads " << threads;
    }
  }
}

// One payload of at least kConcurrentDiffMinElements elements: with two threads, both diff its
// segments, largest first, each into the segment's own slot (EncodePlannedPayload); and a value
// section decodes beside the location section (DecodePayload). The file must be the one one
// thread writes, and apply.
TEST(DeltaDeterminism, ALargePayloadSplitAcrossTwoThreadsIsByteIdenticalAndApplies) {
  using Context = EncodeOptions::Context;
  TempDir dir{"dcr_protocol_test_"};
  std::mt19937_64 rng(77);
  Tensors base;
  base.Add("a.weight", DType::kBF16, {600, 1000}, rng);
  base.Add("b.weight", DType::kBF16, {300, 1000}, rng);
  base.Add("c.weight", DType::kF32, {200, 1000}, rng);
  base.Add("d.bias", DType::kBF16, {1000}, rng);  // small ones, taken last by whichever thread is free
  base.Add("e.bias", DType::kF32, {3000}, rng);
  Tensors next = base;
  for (size_t t = 0; t < next.list.size(); ++t) {
    const uint32_t w = DTypeWidth(next.list[t].dtype);
    std::vector<uint8_t>& bytes = next.storage[t];
    for (size_t i = 0; i < bytes.size() / w; ++i)
      if (rng() % 100 < 4) Put(bytes, i, w, Get(bytes, i, w) ^ (1 + rng() % 7));
  }
  const std::string base_path = dir / "base.safetensors", next_path = dir / "next.safetensors";
  ASSERT_TRUE(WriteSafetensors(base_path, base.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(next_path, next.Bind()).ok());
  ASSERT_GE(uint64_t{600000 + 300000 + 200000 + 1000 + 3000}, kConcurrentDiffMinElements);
  for (Context context : {Context::kNever, Context::kWhenSmaller}) {
    std::vector<std::vector<uint8_t>> files;
    for (int threads : {1, 2}) {
      DiffOptions opt;
      opt.threads = threads;
      opt.encode.context = context;
      const std::string out = dir / ("d" + std::to_string(threads) + ".dcr");
      Checkpoint b = OpenOrDie(base_path), n = OpenOrDie(next_path);
      auto s = DiffCheckpoints(b, n, out, opt);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_EQ(s->payloads, 1u);
      ASSERT_GE(s->changed_elements, kConcurrentSectionsMinChanges);
      files.push_back(ReadAll(out));
      const std::string target = dir / ("t" + std::to_string(threads) + ".safetensors");
      fs::copy_file(base_path, target, fs::copy_options::overwrite_existing);
      {
        auto delta = DeltaReader::Open(out);
        ASSERT_TRUE(delta.ok()) << delta.status().ToString();
        Checkpoint t = OpenOrDie(target, MappedFile::Mode::kReadWrite);
        ApplyOptions ao;
        ao.threads = threads;
        auto a = ApplyDelta(*delta, t, ao);
        ASSERT_TRUE(a.ok()) << a.status().ToString();
      }
      ExpectHolds(OpenOrDie(target), next);
    }
    EXPECT_EQ(files[0], files[1]) << "context " << static_cast<int>(context);
  }
}

// The owner's pause after each diff piece (SetDiffPiecePauseForTests) while in scope; none after.
class DiffPiecePause {
 public:
  explicit DiffPiecePause(int microseconds) { Set(microseconds); }
  ~DiffPiecePause() { SetDiffPiecePauseForTests(0); }
  void Set(int microseconds) const { SetDiffPiecePauseForTests(microseconds); }
};

// Two threads diff a payload's segments in pieces, and a thread left without segments takes
// pieces of the other's (EncodePlannedPayload). A payload of one segment is so shared from the
// start, and one whose first segment has no change (the calling thread takes it, the helper the
// small one behind it, then pieces of the first) must not count that segment for the band fit
// (Finish checks every counted element belongs to a segment with changes). The bytes must be
// one thread's. Whether pieces are taken depends on the helper's timing: the owner pauses after
// each piece, and the encode is repeated until some are taken.
TEST(PayloadEncode, PiecesTakenFromTheOtherThreadsSegmentGiveOneThreadsBytes) {
  using Context = EncodeOptions::Context;
  const DiffPiecePause pause(200);
  std::mt19937_64 rng(79);
  for (const bool first_unchanged : {false, true}) {
    Tensors base;
    base.Add("a.weight", DType::kBF16, {1200, 1000}, rng);
    if (first_unchanged) base.Add("b.bias", DType::kBF16, {5000}, rng);
    Tensors next = base;
    for (size_t t = first_unchanged ? 1 : 0; t < next.list.size(); ++t)
      for (size_t i = 0; i < next.storage[t].size() / 2; ++i)
        if (rng() % 100 < 3) Put(next.storage[t], i, 2, Get(next.storage[t], i, 2) ^ (1 + rng() % 7));
    TempDir dir{"dcr_protocol_test_"};
    ASSERT_TRUE(WriteSafetensors(dir / "base.safetensors", base.Bind()).ok());
    ASSERT_TRUE(WriteSafetensors(dir / "next.safetensors", next.Bind()).ok());
    const Checkpoint base_file = OpenOrDie(dir / "base.safetensors"), next_file = OpenOrDie(dir / "next.safetensors");
    const PayloadPlan plan = PlanPayloads(base_file.tensors(), uint64_t{1} << 30);
    ASSERT_EQ(plan.size(), 1u);
    ASSERT_GE(uint64_t{1200000}, kConcurrentDiffMinElements);
    for (Context context : {Context::kNever, Context::kWhenSmaller}) {
      const std::string what = std::string(first_unchanged ? "first segment unchanged" : "one segment") +
                               ", context " + std::to_string(static_cast<int>(context));
      EncodeOptions options;
      options.context = context;
      EncodedPayload want;
      EncodePlannedPayload(plan[0], base_file.tensors(), next_file.tensors(), ValueKind::kXor, options, {1, 0, 0},
                           &want, 1);
      ASSERT_FALSE(want.bytes.empty()) << what;
      const uint64_t stolen_before = DiffPiecesStolenForTests();
      for (int attempt = 0; attempt < 20 && DiffPiecesStolenForTests() == stolen_before; ++attempt) {
        EncodedPayload got;
        EncodePlannedPayload(plan[0], base_file.tensors(), next_file.tensors(), ValueKind::kXor, options, {1, 0, 0},
                             &got, 2);
        EXPECT_EQ(got.changed, want.changed) << what;
        EXPECT_EQ(got.bytes, want.bytes) << what;
        EXPECT_EQ(got.digest_deltas, want.digest_deltas) << what;
      }
      EXPECT_GT(DiffPiecesStolenForTests(), stolen_before) << what << ": no piece was taken in 20 encodes";
    }
  }
}

// Random payloads (1-5 tensors of 1 to 900 K elements, BF16 or F32, some unchanged, 1-8 %
// changed in the others), with random owner pauses that vary which pieces are taken: two
// threads give one thread's bytes, change counts and digests, plain and context.
TEST(PayloadEncode, RandomPayloadsOnTwoThreadsGiveOneThreadsBytes) {
  using Context = EncodeOptions::Context;
  std::mt19937_64 rng(80);
  TempDir dir{"dcr_protocol_test_"};
  DiffPiecePause pause(0);
  for (int round = 0; round < 24; ++round) {
    Tensors base;
    const int tensors = 1 + static_cast<int>(rng() % 5);
    for (int t = 0; t < tensors; ++t) {
      const uint64_t n = rng() % 3 == 0 ? 1 + rng() % 5000 : 1 + rng() % 900000;
      base.Add("t" + std::to_string(t), rng() % 4 == 0 ? DType::kF32 : DType::kBF16, {n}, rng);
    }
    Tensors next = base;
    for (size_t t = 0; t < next.list.size(); ++t) {
      const uint64_t percent = rng() % 4 == 0 ? 0 : 1 + rng() % 8;
      const uint32_t w = DTypeWidth(next.list[t].dtype);
      for (size_t i = 0; i < next.storage[t].size() / w; ++i)
        if (rng() % 100 < percent) next.storage[t][i * w] ^= static_cast<uint8_t>(1 + rng() % 7);
    }
    ASSERT_TRUE(WriteSafetensors(dir / "base.safetensors", base.Bind()).ok());
    ASSERT_TRUE(WriteSafetensors(dir / "next.safetensors", next.Bind()).ok());
    const Checkpoint b = OpenOrDie(dir / "base.safetensors"), n = OpenOrDie(dir / "next.safetensors");
    const PayloadPlan plan = PlanPayloads(b.tensors(), uint64_t{1} << 30);
    pause.Set(rng() % 3 == 0 ? static_cast<int>(rng() % 50) : 0);
    for (Context context : {Context::kNever, Context::kWhenSmaller})
      for (size_t p = 0; p < plan.size(); ++p) {
        EncodeOptions options;
        options.context = context;
        EncodedPayload one, two;
        EncodePlannedPayload(plan[p], b.tensors(), n.tensors(), ValueKind::kXor, options, {1, 0, 0}, &one, 1);
        EncodePlannedPayload(plan[p], b.tensors(), n.tensors(), ValueKind::kXor, options, {1, 0, 0}, &two, 2);
        const std::string what = "round " + std::to_string(round) + ", context " + std::to_string(static_cast<int>(context));
        EXPECT_EQ(two.changed, one.changed) << what;
        EXPECT_EQ(two.bytes, one.bytes) << what;
        EXPECT_EQ(two.digest_deltas, one.digest_deltas) << what;
      }
  }
}

// A thread's payload builder is reused from payload to payload (EncodePlannedPayload): a payload
// with nothing changed must leave nothing behind for the next one on its thread. (It left the
// value tallies of its two diff threads registered, and the next two-thread payload counted
// them twice: a failed check, which ended `dcr bench codec` on a pair of equal files followed
// by another pair.)
TEST(PayloadEncode, AnUnchangedPayloadLeavesNothingBehindOnItsThread) {
  using Context = EncodeOptions::Context;
  std::mt19937_64 rng(78);
  Tensors base;
  base.Add("a.weight", DType::kBF16, {600, 1000}, rng);
  base.Add("b.weight", DType::kBF16, {500, 1000}, rng);
  Tensors next = base;
  for (size_t t = 0; t < next.list.size(); ++t)
    for (size_t i = 0; i < next.storage[t].size() / 2; ++i)
      if (rng() % 100 < 4) Put(next.storage[t], i, 2, Get(next.storage[t], i, 2) ^ (1 + rng() % 7));
  TempDir dir{"dcr_protocol_test_"};
  ASSERT_TRUE(WriteSafetensors(dir / "base.safetensors", base.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "next.safetensors", next.Bind()).ok());
  const Checkpoint base_file = OpenOrDie(dir / "base.safetensors"), next_file = OpenOrDie(dir / "next.safetensors");
  const std::vector<TensorRef>& b = base_file.tensors();
  const std::vector<TensorRef>& n = next_file.tensors();
  const PayloadPlan plan = PlanPayloads(b, uint64_t{1} << 30);
  ASSERT_EQ(plan.size(), 1u);
  ASSERT_GE(uint64_t{1100000}, kConcurrentDiffMinElements);
  for (Context context : {Context::kNever, Context::kWhenSmaller})
    for (int threads : {1, 2}) {
      EncodeOptions options;
      options.context = context;
      const std::string what = "context " + std::to_string(static_cast<int>(context)) + ", " +
                               std::to_string(threads) + " threads";
      EncodedPayload want, unchanged, got;
      std::thread([&] { EncodePlannedPayload(plan[0], b, n, ValueKind::kXor, options, {1, 0, 0}, &want, threads); })
          .join();
      ASSERT_FALSE(want.bytes.empty()) << what;
      std::thread([&] {  // a fresh thread: its builder's first payload changes nothing
        EncodePlannedPayload(plan[0], b, b, ValueKind::kXor, options, {1, 0, 0}, &unchanged, threads);
        EncodePlannedPayload(plan[0], b, n, ValueKind::kXor, options, {1, 0, 0}, &got, threads);
      }).join();
      EXPECT_EQ(unchanged.changed, 0u) << what;
      EXPECT_TRUE(unchanged.bytes.empty()) << what;
      EXPECT_EQ(got.changed, want.changed) << what;
      EXPECT_EQ(got.bytes, want.bytes) << what;
    }
}

TEST(DeltaRoundTrip, SmallChunksSplitTensorsIntoManyPayloadsAndStillApplyExactly) {
  Pair p;
  DiffOptions opt;
  opt.chunk_bytes = 256;  // at most 256 dense bytes per payload
  auto s = p.Diff(p.dir / "d.dcr", opt);
  ASSERT_TRUE(s.ok());
  auto r = DeltaReader::Open(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok());
  const DeltaHeader& h = r->header();
  EXPECT_GT(h.payloads.size(), 200u);
  EXPECT_EQ(s->payloads, h.payloads.size());
  std::map<uint32_t, int> payloads_per_tensor;
  uint64_t changed = 0;
  for (size_t i = 0; i < h.payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    EXPECT_EQ(d.identity.sequence, h.payloads[i].sequence);
    EXPECT_EQ(d.changed(), h.payloads[i].changed);
    changed += d.changed();
    uint64_t dense = 0;
    for (const auto& seg : d.segments) {
      dense += seg.spec.count * DTypeWidth(seg.spec.dtype);
      payloads_per_tensor[seg.spec.tensor_index]++;
    }
    EXPECT_LE(dense, 256u) << "payload " << i;
    if (i > 0) {
      EXPECT_GT(h.payloads[i].sequence, h.payloads[i - 1].sequence);
    }
  }
  EXPECT_EQ(changed, CountChanged(p.base, p.next));
  int most = 0;
  for (auto& [tensor, n] : payloads_per_tensor) most = std::max(most, n);
  EXPECT_GT(most, 50);  // big.weight alone is cut into hundreds of payloads
  ASSERT_TRUE(p.ApplyToBaseCopy(p.dir / "d.dcr", p.dir / "t.safetensors").ok());
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.next_path));
}

// With the default payload size every small tensor shares one payload.
TEST(DeltaRoundTrip, SmallTensorsShareOnePayload) {
  Pair p;
  auto r = p.DiffAndOpen(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->header().payloads.size(), 1u);
  DecodedPayload d;
  ASSERT_TRUE(DecodeTablePayload(*r, 0, &d).ok());
  EXPECT_EQ(d.segments.size(), p.base.list.size() - 2);  // all but frozen.weight and empty.weight
}

TEST(DeltaRoundTrip, EveryDecodedChangeTakesTheBaseBitsToTheNextBits) {
  Pair p;
  DiffOptions opt;
  opt.chunk_bytes = 1024;
  auto r = p.DiffAndOpen(p.dir / "d.dcr", opt);
  ASSERT_TRUE(r.ok());
  Checkpoint base = OpenOrDie(p.base_path), next = OpenOrDie(p.next_path);
  uint64_t seen = 0;
  for (size_t i = 0; i < r->header().payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    for (const auto& seg : d.segments) {
      const TensorRef& b = base.tensors()[seg.spec.tensor_index];
      const TensorRef& n = next.tensors()[seg.spec.tensor_index];
      const uint32_t w = DTypeWidth(b.dtype());
      ForEachChange(seg, b.bytes, [&](uint64_t idx, uint64_t o, uint64_t nb) {
        uint64_t want_old = 0, want_new = 0;
        std::memcpy(&want_old, b.bytes.data() + idx * w, w);
        std::memcpy(&want_new, n.bytes.data() + idx * w, w);
        EXPECT_EQ(o, want_old);
        EXPECT_EQ(nb, want_new);
        EXPECT_NE(o, nb);
        ++seen;
      });
    }
  }
  EXPECT_EQ(seen, CountChanged(p.base, p.next));
}

TEST(DeltaRoundTrip, OverwriteKindAppliesBitExactly) {
  Pair p;
  DiffOptions opt;
  opt.kind = ValueKind::kOverwrite;
  opt.chunk_bytes = 2048;
  auto r = p.DiffAndOpen(p.dir / "ow.dcr", opt);
  ASSERT_TRUE(r.ok());
  auto x = p.DiffAndOpen(p.dir / "xor.dcr");
  ASSERT_TRUE(x.ok());
  for (size_t i = 0; i < r->header().payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    for (const auto& seg : d.segments) EXPECT_EQ(seg.spec.kind, ValueKind::kOverwrite);
  }
  EXPECT_EQ(r->header().target_digest, x->header().target_digest);
  EXPECT_NE(ReadAll(p.dir / "ow.dcr"), ReadAll(p.dir / "xor.dcr"));

  auto applied = p.ApplyToBaseCopy(p.dir / "ow.dcr", p.dir / "t.safetensors");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.next_path));
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "sh", p.base.Bind(), 5000).ok());
  ASSERT_TRUE(Apply(p.dir / "ow.dcr", p.dir / "sh").ok());
  ExpectHolds(OpenOrDie(p.dir / "sh"), p.next);
}

TEST(DeltaRoundTrip, IdenticalCheckpointsGiveADeltaWithoutPayloadsThatLeavesTheTargetAsIs) {
  Pair p;
  Checkpoint b = OpenOrDie(p.base_path);
  auto s = DiffCheckpoints(b, b, p.dir / "none.dcr", DiffOptions{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->changed_elements, 0u);
  EXPECT_EQ(s->payloads, 0u);
  auto r = DeltaReader::Open(p.dir / "none.dcr");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->header().payloads.empty());
  EXPECT_EQ(r->header().base_digest, r->header().target_digest);
  ASSERT_TRUE(p.ApplyToBaseCopy(p.dir / "none.dcr", p.dir / "t.safetensors").ok());
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.base_path));
}

TEST(DeltaRoundTrip, TransferIdDefaultsToTheBaseDigestHashAndEveryPayloadCarriesIt) {
  Pair p;
  auto r = p.DiffAndOpen(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header().transfer_id, DefaultTransferId(DigestCheckpoint(OpenOrDie(p.base_path), 1).total));
  DiffOptions opt;
  opt.transfer_id = 0x0123456789abcdefull;
  auto e = p.DiffAndOpen(p.dir / "e.dcr", opt);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->header().transfer_id, 0x0123456789abcdefull);
  ASSERT_FALSE(e->header().payloads.empty());
  for (size_t i = 0; i < e->header().payloads.size(); ++i) {
    auto id = PeekPayloadIdentity(e->PayloadBytes(i));
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(id->transfer_id, 0x0123456789abcdefull);
    EXPECT_EQ(id->producer_id, 0u);
  }
}

TEST(DeltaRoundTrip, ProgressIsReportedUpToTheTotal) {
  Pair p;
  DiffOptions opt;
  opt.chunk_bytes = 4096;
  uint64_t last_done = 0, total = 0;
  int calls = 0;
  opt.progress = [&](uint64_t done, uint64_t t) {
    EXPECT_GE(done, last_done);
    last_done = done, total = t, ++calls;
  };
  auto s = p.Diff(p.dir / "d.dcr", opt);
  ASSERT_TRUE(s.ok());
  EXPECT_GT(calls, 0);
  EXPECT_EQ(last_done, total);
  EXPECT_EQ(total, s->dense_bytes);
}

TEST(DeltaDiff, CatalogMismatchIsRefusedAndNoFileIsWritten) {
  Pair p;
  Tensors other = MakeBase(1);
  other.list[0].shape = {48, 64};
  ASSERT_TRUE(WriteSafetensors(p.dir / "other.safetensors", other.Bind()).ok());
  Checkpoint b = OpenOrDie(p.base_path), o = OpenOrDie(p.dir / "other.safetensors");
  auto s = DiffCheckpoints(b, o, p.dir / "d.dcr", DiffOptions{});
  EXPECT_EQ(s.status().code(), StatusCode::kMismatch);
  EXPECT_NE(s.status().message().find("attn.q.weight"), std::string::npos) << s.status().message();
  EXPECT_FALSE(fs::exists(p.dir / "d.dcr"));
}

// ---------------------------------------------------------------------------------------------
// Context mode: payloads whose locations are coded per class of the old value (decoding reads
// the target's old bits).

// Old bytes of a segment from `c`, as a receiver supplies them.
BaseLookup LookupIn(const Checkpoint& c) {
  return [&c](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    if (s.tensor_index >= c.tensors().size()) return Corrupt("tensor index out of range");
    const TensorRef& t = c.tensors()[s.tensor_index];
    const uint64_t w = DTypeWidth(t.dtype()), n = t.num_elements();
    if (s.dtype != t.dtype() || s.start > n || s.count > n - s.start) return Corrupt("segment does not fit");
    return t.bytes.subspan(s.start * w, s.count * w);
  };
}

bool SameBytes(std::span<const uint8_t> a, std::span<const uint8_t> b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

TEST(DeltaContext, AlwaysAndWhenSmallerApplyBitExactlyAndAreByteIdenticalForOneTwoAndFourThreads) {
  using Context = EncodeOptions::Context;
  Pair p;
  const uint64_t want_changed = CountChanged(p.base, p.next);
  for (uint64_t chunk_bytes : {kDefaultChunkBytes, uint64_t{4096}, uint64_t{256}}) {
    const std::string tag = "chunk " + std::to_string(chunk_bytes);
    std::map<Context, std::string> files;
    for (Context context : {Context::kNever, Context::kAlways, Context::kWhenSmaller}) {
      const std::string what = tag + " context " + std::to_string(static_cast<int>(context));
      std::vector<uint8_t> first;
      for (int threads : {1, 2, 4}) {
        DiffOptions opt;
        opt.threads = threads;
        opt.chunk_bytes = chunk_bytes;
        opt.encode.context = context;
        const std::string out = p.dir / ("c" + std::to_string(static_cast<int>(context)) + "_" +
                                         std::to_string(chunk_bytes) + "_" + std::to_string(threads) + ".dcr");
        auto s = p.Diff(out, opt);
        ASSERT_TRUE(s.ok()) << what << ": " << s.status().ToString();
        EXPECT_EQ(s->changed_elements, want_changed) << what;
        auto bytes = ReadAll(out);
        if (threads == 1) {
          first = bytes;
          files[context] = out;
          continue;
        }
        EXPECT_EQ(bytes, first) << what << " threads " << threads;
      }
      const std::string target = p.dir / ("t" + std::to_string(static_cast<int>(context)) + "_" + std::to_string(chunk_bytes) + ".safetensors");
      auto applied = p.ApplyToBaseCopy(files[context], target);
      ASSERT_TRUE(applied.ok()) << what << ": " << applied.status().ToString();
      EXPECT_EQ(applied->changed_elements, want_changed) << what;
      EXPECT_EQ(ReadAll(target), ReadAll(p.next_path)) << what;
    }

    // One plan for every mode: payload by payload the same changes, and kWhenSmaller's payload is
    // byte for byte the plain or the kAlways one.
    auto never = DeltaReader::Open(files[Context::kNever]);
    auto always = DeltaReader::Open(files[Context::kAlways]);
    auto smaller = DeltaReader::Open(files[Context::kWhenSmaller]);
    ASSERT_TRUE(never.ok() && always.ok() && smaller.ok()) << tag;
    const size_t np = never->header().payloads.size();
    ASSERT_EQ(always->header().payloads.size(), np) << tag;
    ASSERT_EQ(smaller->header().payloads.size(), np) << tag;
    EXPECT_EQ(always->header().base_digest, never->header().base_digest);
    EXPECT_EQ(always->header().target_digest, never->header().target_digest);
    EXPECT_EQ(smaller->header().target_digest, never->header().target_digest);
    EXPECT_NE(ReadAll(files[Context::kAlways]), ReadAll(files[Context::kNever])) << tag;
    Checkpoint base = OpenOrDie(p.base_path);
    const BaseLookup lookup = LookupIn(base);
    size_t context_payloads = 0;
    for (size_t i = 0; i < np; ++i) {
      const auto pn = never->PayloadBytes(i), pa = always->PayloadBytes(i), ps = smaller->PayloadBytes(i);
      EXPECT_TRUE(SameBytes(ps, pn) || SameBytes(ps, pa)) << tag << " payload " << i;
      PayloadLayout la;
      ASSERT_TRUE(ParsePayload(pa, &la).ok());
      DecodedPayload dn, da;
      ASSERT_TRUE(DecodeTablePayload(*never, i, &dn).ok());
      Status st = DecodeTablePayload(*always, i, &da, lookup);
      ASSERT_TRUE(st.ok()) << tag << " payload " << i << ": " << st.ToString();
      EXPECT_EQ(da.mode, la.mode);
      ASSERT_EQ(da.segments.size(), dn.segments.size());
      for (size_t k = 0; k < da.segments.size(); ++k) {
        EXPECT_EQ(da.segments[k].spec.tensor_index, dn.segments[k].spec.tensor_index);
        EXPECT_EQ(da.segments[k].spec.start, dn.segments[k].spec.start);
        EXPECT_EQ(AsVector(da.segments[k].changes.positions), AsVector(dn.segments[k].changes.positions)) << tag << " payload " << i;
        EXPECT_EQ(AsVector(da.segments[k].changes.values), AsVector(dn.segments[k].changes.values)) << tag << " payload " << i;
      }
      if (la.mode == CodecMode::kContextSplitRice) {
        ++context_payloads;
        // Without the old bits (a tool that only reads the delta) it cannot be decoded.
        DecodedPayload none;
        EXPECT_EQ(DecodeTablePayload(*always, i, &none).code(), StatusCode::kUnsupported);
      }
    }
    // kAlways falls back to plain only for payloads whose band code exceeds the location limit.
    EXPECT_GT(context_payloads, np / 2) << tag;
  }
}

TEST(DeltaContext, OverwriteKindOnAShardedTargetAppliesBitExactly) {
  Pair p;
  DiffOptions opt;
  opt.kind = ValueKind::kOverwrite;
  opt.chunk_bytes = 2048;
  opt.encode.context = EncodeOptions::Context::kAlways;
  ASSERT_TRUE(p.Diff(p.dir / "ctx_ow.dcr", opt).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "sh", p.base.Bind(), 5000).ok());
  ASSERT_GT(OpenOrDie(p.dir / "sh").num_files(), 2u);
  auto applied = Apply(p.dir / "ctx_ow.dcr", p.dir / "sh");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  ExpectHolds(OpenOrDie(p.dir / "sh"), p.next);
  auto again = p.ApplyToBaseCopy(p.dir / "ctx_ow.dcr", p.dir / "t.safetensors");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.next_path));
}

}  // namespace
}  // namespace dcr
