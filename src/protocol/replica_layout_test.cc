// A receiver replica held in a vLLM-style serving layout (ReplicaState's layout mode): canonical
// plain-mode payloads of a base -> target transfer are placed into the shards in place, so that
// after Commit every rank's shard file is byte-identical to the shards `dcr shard` makes of the
// target, after Abort or crash recovery byte-identical to those of the base, and the running
// canonical digest is the target's.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "layout/generators.h"
#include "layout/layout_json.h"
#include "protocol/layout_digest.h"
#include "protocol/payload_plan.h"
#include "protocol/replica_state.h"
#include "protocol/replica_test_support.h"
#include "synth/trajectory.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    ::dcr::Status s_ = (expr);                              \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)

const char* const kLlama = R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300})";
const char* const kQwenTied = R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300,
    "tie_word_embeddings": true})";

Checkpoint OpenCheckpoint(const std::string& path) {
  auto c = Checkpoint::Open(path);
  if (!c.ok()) Fatal(__FILE__, __LINE__, c.status().ToString());
  return std::move(c).value();
}

// A serving layout, the canonical base and target one optimizer step apart, their serving shards
// (the references), and the transfer's payloads: plain mode from producers 0 and 1 alternately,
// XOR and overwrite segments, small enough that a transfer has many payloads.
struct LayoutScenario {
  std::unique_ptr<test::TempDir> tmp;
  ModelSpec spec;
  LayoutSet serve;
  std::string base, target, layout_dir, base_shards, target_shards;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<uint8_t> context_payload;  // context mode, producer 2
  size_t segments = 0;
  uint64_t changed = 0;
  Version base_version, next;
  uint64_t transfer = 0;
  Digest128 target_digest;
};

LayoutScenario MakeScenario(const char* config, const std::string& model_type, ParallelSizes sizes, DType dtype) {
  LayoutScenario s;
  s.tmp = std::make_unique<test::TempDir>("dcr_replica_layout_" + model_type + "_");
  auto spec = ParseHfConfig(config, model_type);
  if (!spec.ok()) Fatal(__FILE__, __LINE__, spec.status().ToString());
  s.spec = *spec;
  auto serve = GenerateVllmLayouts(s.spec, sizes, dtype);
  if (!serve.ok()) Fatal(__FILE__, __LINE__, serve.status().ToString());
  s.serve = *serve;
  SynthTrajectory traj(SynthParamsForCatalog(CanonicalCatalog(s.spec)), {29, 2e-5});
  s.base = *s.tmp / "base.safetensors";
  s.target = *s.tmp / "target.safetensors";
  s.layout_dir = *s.tmp / "layout";
  s.base_shards = *s.tmp / "base_shards";
  s.target_shards = *s.tmp / "target_shards";
  Status st = traj.WriteSnapshot(s.base);
  traj.Step();
  if (st.ok()) st = traj.WriteSnapshot(s.target);
  if (st.ok()) st = WriteLayoutDir(s.layout_dir, s.serve);
  const Checkpoint base = OpenCheckpoint(s.base), target = OpenCheckpoint(s.target);
  if (st.ok()) st = WriteShards(s.serve, base, s.base_shards, 2);
  if (st.ok()) st = WriteShards(s.serve, target, s.target_shards, 2);
  if (!st.ok()) Fatal(__FILE__, __LINE__, st.ToString());

  s.base_version = InitialVersion(DigestCheckpoint(base, 2).total);
  s.transfer = LiveTransferId(s.base_version, 0);
  s.target_digest = DigestCheckpoint(target, 2).total;
  s.next = NextVersion(s.base_version, s.transfer, s.target_digest);
  const PayloadPlan plan = PlanPayloads(base.tensors(), 32 << 10);
  uint32_t seq[2] = {0, 0};
  EncodedPayload out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const uint32_t producer = static_cast<uint32_t>(s.payloads.size() % 2);
    const ValueKind kind = i % 3 == 1 ? ValueKind::kOverwrite : ValueKind::kXor;
    EncodePlannedPayload(plan[i], base.tensors(), target.tensors(), kind, EncodeOptions{}, {s.transfer, producer, seq[producer]},
                         &out);
    if (out.bytes.empty()) continue;
    ++seq[producer];
    s.changed += out.changed;
    PayloadLayout layout;
    if (!ParsePayload(out.bytes, &layout).ok() || layout.mode != CodecMode::kPlain) Fatal(__FILE__, __LINE__, "bad payload");
    s.segments += layout.segments.size();
    s.payloads.push_back(out.bytes);
  }
  EncodePlannedPayload(plan[0], base.tensors(), target.tensors(), ValueKind::kXor,
                       EncodeOptions{.context = EncodeOptions::Context::kAlways}, {s.transfer, 2, 0}, &out);
  s.context_payload = out.bytes;
  return s;
}

// Llama GQA, tp 2: norms replicated on both ranks, vocabulary padded.
const LayoutScenario& Tp2() {
  static LayoutScenario s = MakeScenario(kLlama, "llama", {2, 1, 1}, DType::kBF16);
  return s;
}
// Qwen2 with tied embeddings, tp 2 pp 2: the last stage holds a copy of embed_tokens for its
// lm_head, norms replicated.
const LayoutScenario& TiedTp2Pp2() {
  static LayoutScenario s = MakeScenario(kQwenTied, "qwen2", {2, 2, 1}, DType::kBF16);
  return s;
}
// Llama, tp 4 (key/value heads replicated), served in F32: every copy converts, exactly.
const LayoutScenario& F32Tp4() {
  static LayoutScenario s = MakeScenario(kLlama, "llama", {4, 1, 1}, DType::kF32);
  return s;
}

// Every shard of the replica in `dir` is byte-identical to the same file in `reference`.
::testing::AssertionResult SameShards(const LayoutScenario& sc, const std::string& dir, const std::string& reference) {
  for (const RankLayout& l : sc.serve) {
    const auto a = test::ReadAll(fs::path(dir) / kReplicaShardsDir / ShardFileName(l.rank));
    const auto b = test::ReadAll(fs::path(reference) / ShardFileName(l.rank));
    if (a.empty() || a != b) return ::testing::AssertionFailure() << "rank " << l.rank << " differs from " << reference;
  }
  return ::testing::AssertionSuccess();
}

std::map<std::string, std::vector<uint8_t>> Snapshot(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = test::ReadAll(e.path());
  return files;
}

struct Fixture {
  const LayoutScenario& sc;
  test::TempDir tmp{"dcr_replica_layout_test_"};
  std::string dir = tmp / "replica";
  explicit Fixture(const LayoutScenario& s) : sc(s) {
    Status st = ReplicaState::Init(dir, sc.base, 2, sc.layout_dir);
    if (!st.ok()) ADD_FAILURE() << st.ToString();
  }
  ReplicaState Open() const {
    auto r = ReplicaState::Open(dir, 2);
    if (!r.ok()) Fatal(__FILE__, __LINE__, r.status().ToString());
    return std::move(r).value();
  }
};

void ApplyAll(ReplicaState& r, const LayoutScenario& sc) {
  for (const auto& p : sc.payloads) {
    auto o = r.ApplyPayload(p);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_FALSE(o->duplicate);
  }
}

Digest128 ShardDigest(const ReplicaState& r) {
  auto d = DigestThroughLayout(*r.layout(), r.shards()->bytes(), 1);
  if (!d.ok()) Fatal(__FILE__, __LINE__, d.status().ToString());
  return d->total;
}

TEST(ReplicaLayout, InitHoldsTheBaseShardsAtTheCanonicalVersionZero) {
  for (const LayoutScenario* sc : {&Tp2(), &TiedTp2Pp2(), &F32Tp4()}) {
    Fixture f(*sc);
    EXPECT_TRUE(SameShards(*sc, f.dir, sc->base_shards));
    for (const RankLayout& l : sc->serve)
      EXPECT_EQ(test::ReadAll(fs::path(f.dir) / kReplicaLayoutDir / LayoutFileName(l.rank)),
                test::ReadAll(fs::path(sc->layout_dir) / LayoutFileName(l.rank)));
    EXPECT_FALSE(fs::exists(f.dir + "/" + kReplicaWeightsFile));
    const auto state = test::ReadAll(f.dir + "/state.json");
    EXPECT_NE(std::string(state.begin(), state.end()).find("\"layout\":true"), std::string::npos);
    ReplicaState r = f.Open();
    EXPECT_TRUE(r.has_layout());
    ASSERT_NE(r.layout(), nullptr);
    EXPECT_EQ(*r.layout(), sc->serve);
    EXPECT_EQ(r.catalog(), OpenCheckpoint(sc->base).catalog());
    EXPECT_EQ(r.version(), sc->base_version);
    EXPECT_EQ(r.committed_digest(), sc->base_version.id);
    EXPECT_EQ(ShardDigest(r), sc->base_version.id);
    EXPECT_EQ(ReplicaState::Init(f.dir, sc->base, 1, sc->layout_dir).code(), StatusCode::kInvalidArgument);
  }
}

TEST(ReplicaLayout, InitRefusesAnotherModelAndRoundingOwnersBeforeWriting) {
  const LayoutScenario& sc = Tp2();
  test::TempDir tmp("dcr_replica_layout_refuse_");
  // The tied model's layout names other tensors.
  Status s = ReplicaState::Init(tmp / "a", sc.base, 1, TiedTp2Pp2().layout_dir);
  EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.ToString();
  EXPECT_TRUE(fs::is_empty(tmp / "a"));
  // F16 rounds BF16: the shards could not be digested canonically.
  auto f16 = GenerateVllmLayouts(sc.spec, {2, 1, 1}, DType::kF16);
  ASSERT_TRUE(f16.ok());
  ASSERT_OK(WriteLayoutDir(tmp / "f16", *f16));
  s = ReplicaState::Init(tmp / "b", sc.base, 1, tmp / "f16");
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("canonical tensor '"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("vote on canonical digests"), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_empty(tmp / "b"));
  EXPECT_EQ(ReplicaState::Init(tmp / "c", sc.base, 1, tmp / "nothing").code(), StatusCode::kNotFound);
}

TEST(ReplicaLayout, EveryPlainPayloadThenCommitGivesTheTargetShardsBitForBit) {
  for (const LayoutScenario* sc : {&Tp2(), &TiedTp2Pp2(), &F32Tp4()}) {
    ASSERT_GE(sc->payloads.size(), 8u);
    Fixture f(*sc);
    {
      ReplicaState r = f.Open();
      ASSERT_OK(r.Begin(sc->transfer, sc->base_version));
      uint64_t changed = 0;
      for (const auto& p : sc->payloads) {
        auto o = r.ApplyPayload(p);
        ASSERT_TRUE(o.ok()) << o.status().ToString();
        changed += o->changed;
      }
      EXPECT_EQ(changed, sc->changed);
      EXPECT_TRUE(r.ApplyPayload(sc->payloads[1])->duplicate);
      EXPECT_EQ(r.running_digest(), sc->target_digest);
      EXPECT_EQ(ShardDigest(r), sc->target_digest);
      ASSERT_OK(r.Vote());
      ASSERT_OK(r.Commit(sc->next));
      EXPECT_FALSE(fs::exists(f.dir + "/journal"));
    }
    EXPECT_TRUE(SameShards(*sc, f.dir, sc->target_shards));
    ReplicaState r = f.Open();
    EXPECT_EQ(r.version(), sc->next);
    EXPECT_EQ(r.committed_digest(), sc->target_digest);
    EXPECT_EQ(ShardDigest(r), sc->target_digest);
  }
}

TEST(ReplicaLayout, AbortRestoresTheBaseShardsBitForBit) {
  for (const LayoutScenario* sc : {&TiedTp2Pp2(), &F32Tp4()}) {
    Fixture f(*sc);
    ReplicaState r = f.Open();
    ASSERT_OK(r.Begin(sc->transfer, sc->base_version));
    ApplyAll(r, *sc);
    ASSERT_OK(r.Vote());
    ASSERT_OK(r.Abort());
    EXPECT_EQ(r.running_digest(), sc->base_version.id);
    EXPECT_TRUE(SameShards(*sc, f.dir, sc->base_shards));
    EXPECT_FALSE(fs::exists(f.dir + "/journal"));
  }
}

TEST(ReplicaLayout, ContextModeAndStepPayloadsAreUnsupportedAndWriteNothing) {
  const LayoutScenario& sc = Tp2();
  Fixture f(sc);
  ReplicaState r = f.Open();
  ASSERT_OK(r.Begin(sc.transfer, sc.base_version));
  ASSERT_TRUE(r.ApplyPayload(sc.payloads[0]).ok());
  const auto before = Snapshot(f.dir);
  auto o = r.ApplyPayload(sc.context_payload);
  EXPECT_EQ(o.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(o.status().message().find("needs plain payloads"), std::string::npos) << o.status().message();
  EXPECT_TRUE(Snapshot(f.dir) == before);
  // A plain-mode payload whose values are steps (value form 1, header byte 34; re-signed) needs
  // canonical old bits too.
  std::vector<uint8_t> steps = sc.payloads[1];
  steps[34] = static_cast<uint8_t>(ValueForm::kSteps);
  const uint64_t sum = XXH3_64bits(steps.data(), steps.size() - 8);
  std::memcpy(steps.data() + steps.size() - 8, &sum, 8);
  o = r.ApplyPayload(steps);
  EXPECT_EQ(o.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(o.status().message().find("values coded as steps"), std::string::npos) << o.status().message();
  EXPECT_TRUE(Snapshot(f.dir) == before);
  EXPECT_EQ(r.pending()->applied_payloads, 1u);
  for (size_t i = 1; i < sc.payloads.size(); ++i) ASSERT_TRUE(r.ApplyPayload(sc.payloads[i]).ok());
  ASSERT_OK(r.Commit(sc.next));
  EXPECT_TRUE(SameShards(sc, f.dir, sc.target_shards));
}

// ---------------------------------------------------------------------------------------------
// Crash recovery in layout mode (test::CrashChild re-executes this binary on the hidden test
// below; the child reads the payloads the parent saved, so it builds nothing).

const LayoutScenario& CrashScenario() { return TiedTp2Pp2(); }

std::string SavePayloads(const LayoutScenario& sc) {
  const std::string dir = *sc.tmp / "payloads";
  if (!fs::exists(dir)) {
    fs::create_directories(dir);
    for (size_t i = 0; i < sc.payloads.size(); ++i) test::WriteAll(fs::path(dir) / std::to_string(1000 + i), sc.payloads[i]);
    test::WriteAll(fs::path(dir) / "next", sc.next.id.ToHex());
  }
  return dir;
}

// Plans: "commit" = Begin, every payload, Vote, Commit; "abort" = the same but Abort; "open" =
// Open only (recovery).
TEST(ReplicaLayoutCrashChild, DISABLED_RunPlan) {
  const char* dir = std::getenv("DCR_REPLICA_CHILD_DIR");
  const char* plan = std::getenv("DCR_REPLICA_CHILD_PLAN");
  const char* payloads = std::getenv("DCR_REPLICA_CHILD_PAYLOADS");
  ASSERT_TRUE(dir != nullptr && plan != nullptr && payloads != nullptr);
  auto r = ReplicaState::Open(dir, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (std::string(plan) == "open") return;
  const Version base = r->version();
  const uint64_t transfer = LiveTransferId(base, 0);
  ASSERT_OK(r->Begin(transfer, base));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(payloads))
    if (e.path().filename() != "next") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& p : files) ASSERT_TRUE(r->ApplyPayload(test::ReadAll(p)).ok());
  ASSERT_OK(r->Vote());
  const auto hex = test::ReadAll(fs::path(payloads) / "next");
  Version next{{}, base.number + 1};
  ASSERT_TRUE(Digest128::FromHex(std::string(hex.begin(), hex.end()), &next.id));
  ASSERT_OK(std::string(plan) == "commit" ? r->Commit(next) : r->Abort());
}

::testing::AssertionResult CrashChild(const std::string& dir, const std::string& plan, const std::string& crash_at) {
  return test::CrashChild("ReplicaLayoutCrashChild.DISABLED_RunPlan", dir, plan, crash_at,
                          {{"DCR_REPLICA_CHILD_PAYLOADS", SavePayloads(CrashScenario())}});
}

// Not voted: the shards are exactly the base's, with no journal; re-applying every payload (so
// nothing was placed twice) and committing gives exactly the target's.
void ExpectBaseThenTarget(const Fixture& f) {
  ReplicaState r = f.Open();
  EXPECT_FALSE(r.pending().has_value());
  EXPECT_EQ(r.version(), f.sc.base_version);
  EXPECT_TRUE(SameShards(f.sc, f.dir, f.sc.base_shards));
  EXPECT_FALSE(fs::exists(f.dir + "/journal"));
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
  ApplyAll(r, f.sc);
  ASSERT_OK(r.Commit(f.sc.next));
  EXPECT_TRUE(SameShards(f.sc, f.dir, f.sc.target_shards));
}

TEST(ReplicaLayoutCrash, CrashesBeforeTheVoteRecoverToTheBaseShards) {
  const size_t n = CrashScenario().payloads.size(), segs = CrashScenario().segments;
  const std::pair<const char*, size_t> cases[] = {
      {"replica.undo_written", 1},        {"replica.undo_written", n / 2},    {"replica.undo_written", n},
      {"replica.segment_applied", 1},     {"replica.segment_applied", segs / 2}, {"replica.segment_applied", segs},
      {"replica.applied", 1},             {"replica.applied", n / 2},         {"replica.applied", n},
      {"replica.done_written", n / 2},    {"replica.done_written", n},
  };
  for (const auto& [point, hit] : cases) {
    const std::string at = std::string(point) + ":" + std::to_string(hit);
    SCOPED_TRACE(at);
    Fixture f(CrashScenario());
    ASSERT_TRUE(CrashChild(f.dir, "commit", at));
    ExpectBaseThenTarget(f);
  }
}

TEST(ReplicaLayoutCrash, VotedCommitAbortAndRecoveryCrashes) {
  const LayoutScenario& sc = CrashScenario();
  {  // voted, then the coordinator decides commit
    Fixture f(sc);
    ASSERT_TRUE(CrashChild(f.dir, "commit", "replica.voted:1"));
    ReplicaState r = f.Open();
    ASSERT_TRUE(r.pending().has_value() && r.pending()->voted);
    EXPECT_EQ(r.running_digest(), sc.target_digest);
    EXPECT_TRUE(SameShards(sc, f.dir, sc.target_shards));
    ASSERT_OK(r.Commit(sc.next));
    EXPECT_EQ(f.Open().version(), sc.next);
  }
  {  // state.json written, journal not yet removed
    Fixture f(sc);
    ASSERT_TRUE(CrashChild(f.dir, "commit", "replica.state_written:1"));
    EXPECT_EQ(f.Open().version(), sc.next);
    EXPECT_TRUE(SameShards(sc, f.dir, sc.target_shards));
  }
  {  // abort cut short after the rollback; then a crash in recovery's own rollback
    Fixture f(sc);
    ASSERT_TRUE(CrashChild(f.dir, "abort", "replica.rolled_back:1"));
    ASSERT_TRUE(CrashChild(f.dir, "open", "replica.rolled_back:1"));
    ExpectBaseThenTarget(f);
  }
  {  // voted with a partial payload: only that payload is rolled back
    Fixture f(sc);
    ASSERT_TRUE(CrashChild(f.dir, "commit", "replica.applied:3"));
    test::WriteAll(f.dir + "/journal/voted", std::string_view(""));
    ReplicaState r = f.Open();
    ASSERT_TRUE(r.pending().has_value() && r.pending()->voted);
    EXPECT_EQ(r.pending()->applied_payloads, 2u);
    EXPECT_EQ(r.running_digest(), ShardDigest(r));
    ASSERT_OK(r.Abort());
    ExpectBaseThenTarget(f);
  }
}

}  // namespace
}  // namespace dcr
