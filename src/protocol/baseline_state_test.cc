// The producer's side of the protocol: tensor ownership, the payload planner and encoder over an
// owned subset (payload_plan.h), and the durable baseline directory (baseline_state.h), including
// crashes at its crash points (the test binary re-executes itself as the crashing child).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/durable_file.h"
#include "format/checkpoint.h"
#include "protocol/baseline_dir.h"
#include "protocol/baseline_state.h"
#include "protocol/ownership.h"
#include "protocol/payload_plan.h"
#include "protocol/state_digest.h"
#include "protocol/version.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

using test::ReadAll;
using test::TempDir;
using test::Tensors;

// ---------------------------------------------------------------------------------------------
// Test data: a full checkpoint of mixed dtypes (with an empty tensor and a scalar) and a "next"
// one that changes ~3% of the elements of every tensor but one.

Tensors MakeFull(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensors t;
  t.Add("a.bias", DType::kF32, {100}, rng);
  t.Add("b.weight", DType::kBF16, {64, 80}, rng);
  t.Add("c.empty", DType::kF32, {0, 4}, rng);
  t.Add("d.fp16", DType::kF16, {33, 17}, rng);
  t.Add("e.frozen", DType::kBF16, {128}, rng);
  t.Add("f.int8", DType::kI8, {50}, rng);
  t.Add("g.scalar", DType::kI64, {}, rng);
  return t;
}

Tensors MakeNext(const Tensors& base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensors t = base;
  for (size_t i = 0; i < t.list.size(); ++i) {
    if (t.list[i].name == "e.frozen") continue;
    const uint32_t w = DTypeWidth(t.list[i].dtype);
    const size_t n = t.storage[i].size() / w;
    std::bernoulli_distribution coin(0.03);
    for (size_t e = 0; e < n; ++e)
      if (coin(rng) || e + 1 == n) t.storage[i][e * w] ^= static_cast<uint8_t>(1 + rng() % 3);
  }
  return t;
}

void WriteCheckpoint(const std::string& path, Tensors& t) { ASSERT_TRUE(WriteSafetensors(path, t.Bind()).ok()); }

Checkpoint OpenOrDie(const std::string& path) {
  auto c = Checkpoint::Open(path);
  if (!c.ok()) Fatal(__FILE__, __LINE__, c.status().ToString());
  return std::move(c).value();
}

BaselineState OpenBaselineOrDie(const std::string& dir, uint32_t producer, uint32_t producers) {
  auto s = BaselineState::Open(dir, producer, producers);
  if (!s.ok()) Fatal(__FILE__, __LINE__, s.status().ToString());
  return std::move(s).value();
}

std::vector<std::string> Names(const Checkpoint& c) {
  std::vector<std::string> n;
  for (const auto& t : c.tensors()) n.push_back(t.name());
  return n;
}

std::vector<uint8_t> Bytes(const TensorRef& t) { return {t.bytes.begin(), t.bytes.end()}; }

// Every owned tensor of `state` is bit-identical to the same tensor of `full`.
void ExpectBitsOf(const BaselineState& state, const Checkpoint& full) {
  const auto owned = OwnedTensors(full.catalog(), state.producer(), state.producers());
  ASSERT_EQ(state.baseline().tensors().size(), owned.size());
  for (size_t i = 0; i < owned.size(); ++i) {
    const TensorRef& b = state.baseline().tensors()[i];
    const TensorRef& f = full.tensors()[owned[i]];
    EXPECT_EQ(b.name(), f.name());
    EXPECT_EQ(b.dtype(), f.dtype());
    EXPECT_EQ(b.info->shape, f.info->shape);
    EXPECT_TRUE(Bytes(b) == Bytes(f)) << "tensor " << b.name();
  }
}

// The owned tensors' digests of `full`, by name.
std::map<std::string, Digest128> OwnedDigests(const Checkpoint& full, uint32_t producer, uint32_t producers) {
  const CheckpointDigest d = DigestCheckpoint(full, 1);
  std::map<std::string, Digest128> out;
  for (uint32_t t : OwnedTensors(full.catalog(), producer, producers)) out[full.tensors()[t].name()] = d.tensors[t];
  return out;
}

// The names of the plain files in `dir` and its staged/ folder ("staged/<name>").
std::set<std::string> Files(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), dir).string());
  return out;
}

// A scenario: a full base checkpoint, a next one, and the transfer that goes from one to the other.
struct Scenario {
  TempDir tmp{"dcr_baseline_"};
  Tensors base_t = MakeFull(11), next_t = MakeNext(base_t, 12);
  std::string base_path = tmp / "base.safetensors", next_path = tmp / "next.safetensors";
  Scenario() {
    WriteCheckpoint(base_path, base_t);
    WriteCheckpoint(next_path, next_t);
  }
  std::string Dir(uint32_t producer) const { return tmp / ("p" + std::to_string(producer)); }
  Version V0() const { return InitialVersion(DigestCheckpoint(OpenOrDie(base_path), 1).total); }
  uint64_t Transfer(uint64_t attempt = 0) const { return LiveTransferId(V0(), attempt); }
  Version Target(uint64_t attempt = 0) const {
    return NextVersion(V0(), Transfer(attempt), DigestCheckpoint(OpenOrDie(next_path), 1).total);
  }
};

// ---------------------------------------------------------------------------------------------
// Ownership and planning.

TEST(Ownership, TensorTBelongsToProducerTModProducersAndTheSetsPartitionTheCatalog) {
  Catalog catalog(10);
  for (size_t i = 0; i < catalog.size(); ++i) catalog[i].name = "t" + std::to_string(i);
  for (uint32_t m : {1u, 2u, 3u, 10u, 13u}) {
    std::vector<int> owners(catalog.size(), 0);
    for (uint32_t p = 0; p < m; ++p) {
      const auto owned = OwnedTensors(catalog, p, m);
      EXPECT_TRUE(std::is_sorted(owned.begin(), owned.end()));
      for (uint32_t t : owned) {
        EXPECT_EQ(t % m, p);
        ++owners[t];
      }
    }
    for (int n : owners) EXPECT_EQ(n, 1) << m << " producers";
  }
  EXPECT_EQ(OwnedTensors(catalog, 2, 3), (std::vector<uint32_t>{2, 5, 8}));
}

TEST(PayloadPlan, AllTensorsOverloadEqualsListingEveryIndex) {
  Scenario s;
  Checkpoint c = OpenOrDie(s.base_path);
  std::vector<uint32_t> all(c.tensors().size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  for (uint64_t cap : {8ull, 100ull, 1000ull, 1ull << 20})
    EXPECT_EQ(PlanPayloads(c.tensors(), cap), PlanPayloads(c.tensors(), all, cap));
}

TEST(PayloadPlan, OwnedSubsetIsCoveredExactlyOnceInOrderWithinCapacity) {
  Scenario s;
  Checkpoint c = OpenOrDie(s.base_path);
  const auto& ts = c.tensors();
  for (uint32_t m : {1u, 2u, 3u})
    for (uint32_t p = 0; p < m; ++p)
      for (uint64_t cap : {8ull, 64ull, 1000ull, 1ull << 20}) {
        const auto owned = OwnedTensors(c.catalog(), p, m);
        const PayloadPlan plan = PlanPayloads(ts, owned, cap);
        std::map<uint32_t, uint64_t> next_start;  // per tensor: the next uncovered element
        uint32_t last_tensor = 0;
        bool first = true;
        for (const auto& payload : plan) {
          ASSERT_FALSE(payload.empty());
          uint64_t bytes = 0;
          for (const PlannedSegment& seg : payload) {
            ASSERT_TRUE(std::binary_search(owned.begin(), owned.end(), seg.tensor)) << seg.tensor;
            ASSERT_TRUE(first || seg.tensor >= last_tensor);
            first = false;
            last_tensor = seg.tensor;
            EXPECT_EQ(seg.start, next_start[seg.tensor]);
            EXPECT_GT(seg.count, 0u);
            next_start[seg.tensor] = seg.start + seg.count;
            bytes += seg.count * DTypeWidth(ts[seg.tensor].dtype());
          }
          EXPECT_LE(bytes, cap);
        }
        // Empty tensors get no segment; every other owned tensor is covered to its end.
        const auto nonempty = std::count_if(owned.begin(), owned.end(), [&](uint32_t t) { return ts[t].num_elements() > 0; });
        EXPECT_EQ(next_start.size(), static_cast<size_t>(nonempty));
        for (uint32_t t : owned) EXPECT_EQ(next_start[t], ts[t].num_elements()) << ts[t].name();
      }
  EXPECT_TRUE(PlanPayloads(ts, {}, 64).empty());
}

// A plan has as many payloads as greedy cuts at the capacity make (a full payload closed when the
// next element no longer fits), each but the last holding more than their mean size (or than the
// capacity less 8 bytes, where that is less) but at most 8 bytes more, and the last no more and
// not much less: a 39 MB model at 32 MiB is two payloads of about 19.5 MB, not 33.5 and 5.3.
TEST(PayloadPlan, PayloadsAreAsManyAsGreedyCutsMakeAndOfAboutEqualSize) {
  std::mt19937_64 rng(3);
  const DType dtypes[] = {DType::kBF16, DType::kF32, DType::kF64, DType::kU8};
  for (int trial = 0; trial < 300; ++trial) {
    Catalog catalog;
    const size_t tensors = 1 + rng() % 12;
    for (size_t t = 0; t < tensors; ++t) {
      const uint64_t rows = rng() % 4 == 0 ? 0 : 1 + rng() % 60;  // some empty
      catalog.push_back({"t" + std::to_string(100 + t), dtypes[rng() % 4], {rows, 1 + rng() % 40}});
    }
    const uint64_t capacity = 8 + rng() % 3000;
    // Greedy cuts at the capacity, counted as the planner's contract states them.
    size_t greedy = 0;
    uint64_t fill = capacity, total = 0;
    for (const CatalogEntry& e : catalog) {
      const uint64_t w = DTypeWidth(e.dtype);
      for (uint64_t n = e.shape[0] * e.shape[1]; n > 0; --n) {
        if (capacity - fill < w) ++greedy, fill = 0;
        fill += w, total += w;
      }
    }
    const PayloadPlan plan = PlanPayloads(catalog, capacity);
    ASSERT_EQ(plan.size(), greedy) << "trial " << trial;
    if (plan.empty()) continue;
    const uint64_t mean = (total + plan.size() - 1) / plan.size();
    uint64_t covered = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      uint64_t bytes = 0;
      for (const PlannedSegment& seg : plan[i]) bytes += seg.count * DTypeWidth(catalog[seg.tensor].dtype);
      covered += bytes;
      EXPECT_LE(bytes, capacity) << "trial " << trial << " payload " << i;
      // Within 8 bytes above the mean (cut at the mean + 8), the last within 9 per payload below.
      const uint64_t p = plan.size();
      if (i + 1 < p) {
        EXPECT_GT(bytes, std::min(mean, capacity - 8)) << "trial " << trial << " payload " << i;
        EXPECT_LE(bytes, mean + 8) << "trial " << trial << " payload " << i;
      } else if (mean + 8 <= capacity) {
        EXPECT_LE(bytes, mean) << "trial " << trial << " the last payload";
        EXPECT_GE(bytes + 9 * (p - 1), mean) << "trial " << trial << " the last payload";
      }
    }
    EXPECT_EQ(covered, total) << "trial " << trial;
  }
}

// Producers encode their owned tensors from their baselines; applying every producer's payloads
// to the base gives exactly the next bits, and base digests + deltas give the next digests.
TEST(PayloadPlan, ProducersEncodingTheirOwnedTensorsTogetherTakeTheBaseToTheNextBits) {
  Scenario s;
  Checkpoint base = OpenOrDie(s.base_path), next = OpenOrDie(s.next_path);
  const CheckpointDigest base_digest = DigestCheckpoint(base, 1), next_digest = DigestCheckpoint(next, 1);
  std::vector<std::vector<uint8_t>> applied;
  for (const auto& t : base.tensors()) applied.push_back(Bytes(t));
  std::vector<Digest128> target = base_digest.tensors;
  const uint32_t m = 3;
  for (uint32_t p = 0; p < m; ++p) {
    ASSERT_TRUE(BaselineState::Init(s.Dir(p), s.base_path, p, m, 2).ok());
    BaselineState state = OpenBaselineOrDie(s.Dir(p), p, m);
    auto by_index = state.TensorsByCatalogIndex(next.catalog());
    ASSERT_TRUE(by_index.ok()) << by_index.status().ToString();
    const PayloadPlan plan = PlanPayloads(*by_index, OwnedTensors(next.catalog(), p, m), 256);
    EXPECT_EQ(plan, PlanPayloads(base.tensors(), OwnedTensors(base.catalog(), p, m), 256));
    for (uint32_t seq = 0; seq < plan.size(); ++seq) {
      EncodedPayload out;
      EncodePlannedPayload(plan[seq], *by_index, next.tensors(), ValueKind::kXor, {}, {42, p, seq}, &out);
      if (out.changed == 0) {
        EXPECT_TRUE(out.bytes.empty());
        continue;
      }
      DecodedPayload d;
      ASSERT_TRUE(DecodePayload(out.bytes, &d).ok());
      EXPECT_EQ(d.identity, (PayloadIdentity{42, p, seq}));
      EXPECT_EQ(d.changed(), out.changed);
      for (const auto& seg : d.segments) {
        EXPECT_EQ(seg.spec.tensor_index % m, p);
        ASSERT_TRUE(ApplySegment(seg, applied[seg.spec.tensor_index]).ok());
      }
      for (const auto& [t, delta] : out.digest_deltas) target[t] += delta;
    }
  }
  for (size_t t = 0; t < applied.size(); ++t) {
    EXPECT_TRUE(applied[t] == Bytes(next.tensors()[t])) << next.tensors()[t].name();
    EXPECT_EQ(target[t], next_digest.tensors[t]) << next.tensors()[t].name();
  }
}

// ---------------------------------------------------------------------------------------------
// Init and Open.

TEST(BaselineInit, OwnedSetsPartitionTheCatalogAndEveryProducerRecordsTheSameVersionZero) {
  Scenario s;
  Checkpoint full = OpenOrDie(s.base_path);
  const Version v0 = s.V0();
  for (uint32_t m : {1u, 3u, 10u}) {  // 10 > 7 tensors: some producers own nothing
    TempDir dirs("dcr_baseline_init_");
    std::map<std::string, int> owners;
    for (uint32_t p = 0; p < m; ++p) {
      const std::string dir = dirs / std::to_string(p);
      ASSERT_TRUE(BaselineState::Init(dir, s.base_path, p, m, 2).ok());
      BaselineState state = OpenBaselineOrDie(dir, p, m);
      EXPECT_EQ(state.version(), v0);
      EXPECT_EQ(state.last_transfer(), 0u);
      EXPECT_EQ(state.catalog_digest(), CatalogDigest64(full.catalog()));
      EXPECT_EQ(state.producer(), p);
      EXPECT_EQ(state.producers(), m);
      ExpectBitsOf(state, full);
      EXPECT_EQ(state.tensor_digests(), OwnedDigests(full, p, m));
      EXPECT_TRUE(state.Verify(2).ok());
      EXPECT_TRUE(state.staged_transfers().empty());
      for (const auto& n : Names(state.baseline())) ++owners[n];
    }
    ASSERT_EQ(owners.size(), full.tensors().size()) << m << " producers";
    for (const auto& [n, k] : owners) EXPECT_EQ(k, 1) << n;
  }
}

TEST(BaselineInit, RefusesADirectoryThatHoldsABaselineOrForeignFilesAndBadProducerNumbers) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
  const auto before = ReadAll(fs::path(s.Dir(0)) / kBaselineJson);
  Status again = BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("already holds a baseline"), std::string::npos) << again.message();
  EXPECT_EQ(ReadAll(fs::path(s.Dir(0)) / kBaselineJson), before);

  fs::create_directories(s.Dir(1));
  test::WriteAll(fs::path(s.Dir(1)) / "notes.txt", std::string_view("mine"));
  Status foreign = BaselineState::Init(s.Dir(1), s.base_path, 1, 2, 1);
  EXPECT_EQ(foreign.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.message().find("notes.txt"), std::string::npos) << foreign.message();
  EXPECT_TRUE(fs::exists(fs::path(s.Dir(1)) / "notes.txt"));

  EXPECT_EQ(BaselineState::Init(s.Dir(2), s.base_path, 2, 2, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BaselineState::Init(s.Dir(2), s.base_path, 0, 0, 1).code(), StatusCode::kInvalidArgument);
}

TEST(BaselineInit, LeftoversOfAnInterruptedInitAreReplaced) {
  Scenario s;
  fs::create_directories(fs::path(s.Dir(0)) / "staged");
  test::WriteAll(fs::path(s.Dir(0)) / "baseline-0000000000000000.safetensors", std::string_view("partial"));
  test::WriteAll(fs::path(s.Dir(0)) / ".baseline.json.tmp.123", std::string_view("{"));
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 1, 1).ok());
  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 1);
  ExpectBitsOf(state, OpenOrDie(s.base_path));
  EXPECT_EQ(Files(s.Dir(0)), (std::set<std::string>{"baseline.json", "baseline-0000000000000000.safetensors"}));
}

TEST(BaselineOpen, RefusesOtherProducerNumbersNamingBoth) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(1), s.base_path, 1, 3, 1).ok());
  auto wrong = BaselineState::Open(s.Dir(1), 2, 4);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("producer 1 of 3"), std::string::npos) << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("producer 2 of 4"), std::string::npos) << wrong.status().message();
  EXPECT_EQ(BaselineState::Open(s.tmp / "absent", 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(BaselineOpen, CorruptJsonOrMissingTensorsFileIsReportedAsCorrupt) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 1, 1).ok());
  const fs::path json = fs::path(s.Dir(0)) / kBaselineJson;
  const auto good = ReadAll(json);
  test::WriteAll(json, std::string_view("{\"format\":1}"));
  EXPECT_EQ(BaselineState::Open(s.Dir(0), 0, 1).status().code(), StatusCode::kCorrupt);
  test::WriteAll(json, good);
  fs::remove(fs::path(s.Dir(0)) / "baseline-0000000000000000.safetensors");
  EXPECT_EQ(BaselineState::Open(s.Dir(0), 0, 1).status().code(), StatusCode::kCorrupt);
}

TEST(BaselineOpen, RemovesOrphanTensorsFilesTemporariesAndStagesOfAnotherBase) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
  const auto initial = Files(s.Dir(0));
  {
    BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
    Checkpoint next = OpenOrDie(s.next_path);
    ASSERT_TRUE(state.Stage(s.Transfer(0), next, s.Target(0), OwnedDigests(next, 0, 2)).ok());
  }
  // A stage based on another version, an orphan tensors file (stage interrupted before its json)
  // and a temporary file.
  std::string json_name;
  for (const auto& f : Files(s.Dir(0)))
    if (f.starts_with("staged/")) json_name = f;
  ASSERT_FALSE(json_name.empty());
  const auto raw = ReadAll(fs::path(s.Dir(0)) / json_name);
  std::string text(raw.begin(), raw.end());
  const std::string v0 = s.V0().id.ToHex();
  ASSERT_NE(text.find(v0), std::string::npos);
  text.replace(text.find(v0), v0.size(), std::string(32, 'a'));
  test::WriteAll(fs::path(s.Dir(0)) / json_name, std::string_view(text));
  test::WriteAll(fs::path(s.Dir(0)) / "baseline-00000000000000ab.safetensors", std::string_view("orphan"));
  test::WriteAll(fs::path(s.Dir(0)) / ".baseline.json.tmp.99", std::string_view("tmp"));
  test::WriteAll(fs::path(s.Dir(0)) / "staged" / ".x.json.tmp.99", std::string_view("tmp"));

  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
  EXPECT_TRUE(state.staged_transfers().empty());
  EXPECT_EQ(Files(s.Dir(0)), initial);
  ExpectBitsOf(state, OpenOrDie(s.base_path));
}

// ---------------------------------------------------------------------------------------------
// Stage, commit, drop.

TEST(BaselineStage, StageThenCommitAdvancesVersionAndBitsAndPersistsAcrossReopen) {
  Scenario s;
  Checkpoint base = OpenOrDie(s.base_path), next = OpenOrDie(s.next_path);
  for (uint32_t p = 0; p < 3; ++p) {
    ASSERT_TRUE(BaselineState::Init(s.Dir(p), s.base_path, p, 3, 2).ok());
    BaselineState state = OpenBaselineOrDie(s.Dir(p), p, 3);
    const uint64_t transfer = s.Transfer();
    ASSERT_TRUE(state.Stage(transfer, next, s.Target(), OwnedDigests(next, p, 3)).ok());
    EXPECT_EQ(state.staged_transfers(), std::vector<uint64_t>{transfer});
    EXPECT_EQ(state.version(), s.V0());  // staging changes nothing current
    ExpectBitsOf(state, base);

    ASSERT_TRUE(state.CommitStaged(transfer).ok());
    EXPECT_EQ(state.version(), s.Target());
    EXPECT_EQ(state.version().number, 1u);
    EXPECT_EQ(state.last_transfer(), transfer);
    ExpectBitsOf(state, next);
    EXPECT_EQ(state.tensor_digests(), OwnedDigests(next, p, 3));
    EXPECT_TRUE(state.Verify(1).ok());
    EXPECT_TRUE(state.staged_transfers().empty());
    EXPECT_TRUE(state.CommitStaged(transfer).ok());  // idempotent

    BaselineState reopened = OpenBaselineOrDie(s.Dir(p), p, 3);
    EXPECT_EQ(reopened.version(), s.Target());
    EXPECT_EQ(reopened.last_transfer(), transfer);
    ExpectBitsOf(reopened, next);
    EXPECT_EQ(reopened.tensor_digests(), OwnedDigests(next, p, 3));
    EXPECT_TRUE(reopened.CommitStaged(transfer).ok());
    // Only the current baseline remains.
    std::set<std::string> files = Files(s.Dir(p));
    EXPECT_EQ(files.size(), 2u);
    EXPECT_EQ(files.count(kBaselineJson), 1u);
  }
}

TEST(BaselineStage, DropStagedLeavesTheOldBaselineBitIdentical) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
  const auto files = Files(s.Dir(0));
  std::map<std::string, std::vector<uint8_t>> before;
  for (const auto& f : files) before[f] = ReadAll(fs::path(s.Dir(0)) / f);
  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
  Checkpoint next = OpenOrDie(s.next_path);
  const uint64_t t0 = s.Transfer(0), t1 = s.Transfer(1);
  ASSERT_TRUE(state.Stage(t0, next, s.Target(0), OwnedDigests(next, 0, 2)).ok());
  ASSERT_TRUE(state.Stage(t1, next, s.Target(1), OwnedDigests(next, 0, 2)).ok());
  std::vector<uint64_t> both = {t0, t1};
  std::sort(both.begin(), both.end());
  EXPECT_EQ(state.staged_transfers(), both);
  ASSERT_TRUE(state.DropStaged(t0).ok());
  EXPECT_EQ(state.staged_transfers(), std::vector<uint64_t>{t1});
  ASSERT_TRUE(state.DropStaged(t1).ok());
  EXPECT_TRUE(state.DropStaged(t1).ok());  // absent: Ok
  EXPECT_EQ(state.CommitStaged(t1).code(), StatusCode::kNotFound);
  EXPECT_TRUE(state.staged_transfers().empty());
  EXPECT_EQ(state.version(), s.V0());
  EXPECT_EQ(Files(s.Dir(0)), files);
  for (const auto& f : files) EXPECT_EQ(ReadAll(fs::path(s.Dir(0)) / f), before[f]) << f;
  BaselineState reopened = OpenBaselineOrDie(s.Dir(0), 0, 2);
  EXPECT_EQ(reopened.version(), s.V0());
  ExpectBitsOf(reopened, OpenOrDie(s.base_path));
  EXPECT_EQ(state.DropStaged(0).code(), StatusCode::kInvalidArgument);  // the committed seed
}

TEST(BaselineStage, CommittingOneOfTwoStagedTransfersRemovesTheOther) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 1, 1).ok());
  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 1);
  Checkpoint next = OpenOrDie(s.next_path);
  ASSERT_TRUE(state.Stage(s.Transfer(0), next, s.Target(0), OwnedDigests(next, 0, 1)).ok());
  ASSERT_TRUE(state.Stage(s.Transfer(1), next, s.Target(1), OwnedDigests(next, 0, 1)).ok());
  ASSERT_TRUE(state.CommitStaged(s.Transfer(1)).ok());
  EXPECT_EQ(state.version(), s.Target(1));
  EXPECT_TRUE(state.staged_transfers().empty());
  EXPECT_EQ(Files(s.Dir(0)).size(), 2u);
  EXPECT_EQ(state.CommitStaged(s.Transfer(0)).code(), StatusCode::kNotFound);
}

TEST(BaselineStage, MismatchedNextCatalogIsRefusedNamingTheTensorAndChangesNothing) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
  const auto files = Files(s.Dir(0));
  const auto json = ReadAll(fs::path(s.Dir(0)) / kBaselineJson);
  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
  Checkpoint good_next = OpenOrDie(s.next_path);
  const auto digests = OwnedDigests(good_next, 0, 2);
  // Producer 0 of 2 owns a.bias (index 0), c.empty, e.frozen, g.scalar.
  ASSERT_EQ(Names(state.baseline()), (std::vector<std::string>{"a.bias", "c.empty", "e.frozen", "g.scalar"}));

  auto expect_refused = [&](Tensors t, const std::string& tensor) {
    const std::string path = s.tmp / "bad.safetensors";
    WriteCheckpoint(path, t);
    Checkpoint bad = OpenOrDie(path);
    Status st = state.Stage(s.Transfer(), bad, s.Target(), digests);
    EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.ToString();
    EXPECT_NE(st.message().find(tensor), std::string::npos) << st.message();
    EXPECT_EQ(Files(s.Dir(0)), files);
    EXPECT_EQ(ReadAll(fs::path(s.Dir(0)) / kBaselineJson), json);
    EXPECT_TRUE(state.staged_transfers().empty());
  };
  Tensors shape = s.next_t;
  shape.list[4].shape = {64, 2};  // e.frozen: 128 elements, other shape
  expect_refused(shape, "'e.frozen'");
  Tensors dtype = s.next_t;
  dtype.list[0].dtype = DType::kI32;  // a.bias: same width, other dtype
  expect_refused(dtype, "'a.bias'");
  Tensors missing = s.next_t;
  missing.list.erase(missing.list.begin() + 6);
  missing.storage.erase(missing.storage.begin() + 6);
  expect_refused(missing, "'g.scalar'");
  Tensors other = s.next_t;  // owned tensors fine, but a tensor of producer 1 differs
  other.list[1].shape = {80, 64};
  expect_refused(other, "catalog digest");

  EXPECT_EQ(state.version(), s.V0());
  ExpectBitsOf(state, OpenOrDie(s.base_path));
}

TEST(BaselineStage, WrongTargetNumberOrDigestSetIsRefused) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
  Checkpoint next = OpenOrDie(s.next_path);
  auto digests = OwnedDigests(next, 0, 2);
  Version skip = s.Target();
  skip.number = 2;
  EXPECT_EQ(state.Stage(s.Transfer(), next, skip, digests).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state.Stage(0, next, s.Target(), digests).code(), StatusCode::kInvalidArgument);
  auto fewer = digests;
  fewer.erase("a.bias");
  EXPECT_EQ(state.Stage(s.Transfer(), next, s.Target(), fewer).code(), StatusCode::kInvalidArgument);
  auto more = digests;
  more["b.weight"] = Digest128{1, 2};
  EXPECT_EQ(state.Stage(s.Transfer(), next, s.Target(), more).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(state.staged_transfers().empty());
}

TEST(BaselineStage, TensorsByCatalogIndexRefusesAnotherCatalog) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(1), s.base_path, 1, 2, 1).ok());
  BaselineState state = OpenBaselineOrDie(s.Dir(1), 1, 2);
  Catalog catalog = OpenOrDie(s.base_path).catalog();
  auto ok = state.TensorsByCatalogIndex(catalog);
  ASSERT_TRUE(ok.ok());
  for (size_t t = 0; t < catalog.size(); ++t) {
    EXPECT_EQ((*ok)[t].info != nullptr, t % 2 == 1);
    if (t % 2 == 1) {
      EXPECT_EQ((*ok)[t].name(), catalog[t].name);
    }
  }
  catalog[3].shape = {17, 33};
  EXPECT_EQ(state.TensorsByCatalogIndex(catalog).status().code(), StatusCode::kMismatch);
}

// ---------------------------------------------------------------------------------------------
// Crashes. The child is this binary re-executed with a gtest filter selecting
// BaselineCrashChild.Run and the environment telling it what to do, so DCR_CRASH_AT is read
// fresh in a process that never reached a crash point before.

// Runs in the child: opens DIR (producer 0 of 2) and stages and/or commits the transfer.
TEST(BaselineCrashChild, Run) {
  const char* dir = std::getenv("DCR_TEST_BASELINE_DIR");
  const char* next_path = std::getenv("DCR_TEST_BASELINE_NEXT");
  const char* op = std::getenv("DCR_TEST_BASELINE_OP");
  if (dir == nullptr || next_path == nullptr || op == nullptr) GTEST_SKIP() << "only run as a crash child";
  BaselineState state = OpenBaselineOrDie(dir, 0, 2);
  Checkpoint next = OpenOrDie(next_path);
  const uint64_t transfer = LiveTransferId(state.version(), 0);
  const Version target = NextVersion(state.version(), transfer, DigestCheckpoint(next, 1).total);
  if (std::strchr(op, 's') != nullptr) {
    ASSERT_TRUE(state.Stage(transfer, next, target, OwnedDigests(next, 0, 2)).ok());
  }
  if (std::strchr(op, 'c') != nullptr) {
    ASSERT_TRUE(state.CommitStaged(transfer).ok());
  }
}

// Re-executes this binary as the child with DCR_CRASH_AT=`crash_at`; returns its wait status.
int RunChild(const std::string& dir, const std::string& next_path, const std::string& op, const std::string& crash_at) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("DCR_TEST_BASELINE_DIR", dir.c_str(), 1);
    setenv("DCR_TEST_BASELINE_NEXT", next_path.c_str(), 1);
    setenv("DCR_TEST_BASELINE_OP", op.c_str(), 1);
    if (crash_at.empty())
      unsetenv("DCR_CRASH_AT");
    else
      setenv("DCR_CRASH_AT", crash_at.c_str(), 1);
    const char* argv[] = {"baseline_state_test", "--gtest_filter=BaselineCrashChild.Run", nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(argv));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

struct CrashCase {
  const char* op;        // what the child does: "s" stage, "c" commit, "sc" both
  const char* crash_at;  // DCR_CRASH_AT
  bool staged_by_parent;
  bool expect_new;  // after the crash, the baseline is the new version
};

TEST(BaselineCrash, AKilledStageOrCommitLeavesExactlyTheOldOrTheNewBaselineAndCommitCompletes) {
  const CrashCase cases[] = {
      {"s", "baseline.staged:1", false, false},
      {"sc", "baseline.staged:1", false, false},
      {"sc", "baseline.committed:1", false, true},
      {"c", "baseline.committed:1", true, true},
  };
  for (const CrashCase& c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " + c.crash_at);
    Scenario s;
    Checkpoint base = OpenOrDie(s.base_path), next = OpenOrDie(s.next_path);
    ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
    const uint64_t transfer = s.Transfer();
    if (c.staged_by_parent) {
      BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
      ASSERT_TRUE(state.Stage(transfer, next, s.Target(), OwnedDigests(next, 0, 2)).ok());
    }
    const int status = RunChild(s.Dir(0), s.next_path, c.op, c.crash_at);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;

    BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
    if (c.expect_new) {
      EXPECT_EQ(state.version(), s.Target());
      EXPECT_EQ(state.last_transfer(), transfer);
      ExpectBitsOf(state, next);
      EXPECT_EQ(state.tensor_digests(), OwnedDigests(next, 0, 2));
      EXPECT_TRUE(state.staged_transfers().empty());
      EXPECT_EQ(Files(s.Dir(0)).size(), 2u);  // recovery removed the old tensors file and the stage
    } else {
      EXPECT_EQ(state.version(), s.V0());
      EXPECT_EQ(state.last_transfer(), 0u);
      ExpectBitsOf(state, base);
      EXPECT_EQ(state.tensor_digests(), OwnedDigests(base, 0, 2));
      EXPECT_EQ(state.staged_transfers(), std::vector<uint64_t>{transfer});
    }
    EXPECT_TRUE(state.Verify(1).ok());
    // The coordinator decided COMMIT: committing (again) completes it.
    ASSERT_TRUE(state.CommitStaged(transfer).ok());
    EXPECT_EQ(state.version(), s.Target());
    ExpectBitsOf(state, next);
    BaselineState reopened = OpenBaselineOrDie(s.Dir(0), 0, 2);
    EXPECT_EQ(reopened.version(), s.Target());
    ExpectBitsOf(reopened, next);
    EXPECT_TRUE(reopened.Verify(1).ok());
    EXPECT_EQ(Files(s.Dir(0)).size(), 2u);
  }
}

TEST(BaselineCrash, AChildThatIsNotKilledCompletesTheCommit) {
  Scenario s;
  ASSERT_TRUE(BaselineState::Init(s.Dir(0), s.base_path, 0, 2, 1).ok());
  const int status = RunChild(s.Dir(0), s.next_path, "sc", "");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  BaselineState state = OpenBaselineOrDie(s.Dir(0), 0, 2);
  EXPECT_EQ(state.version(), s.Target());
  ExpectBitsOf(state, OpenOrDie(s.next_path));
}

}  // namespace
}  // namespace dcr
