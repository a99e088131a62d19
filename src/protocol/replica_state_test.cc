#include "protocol/replica_state.h"

#include <cstdlib>
#include <filesystem>
#include <set>

#include "format/safetensors.h"
#include "protocol/replica_test_support.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
using test::Holds;
using test::Scenario;
using test::TempDir;

#define ASSERT_OK(expr)                                   \
  do {                                                    \
    ::dcr::Status s_ = (expr);                            \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)
#define EXPECT_OK(expr)                                   \
  do {                                                    \
    ::dcr::Status s_ = (expr);                            \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)

const Scenario& Shared() {
  static Scenario* s = new Scenario(test::MakeScenario());
  return *s;
}

// A replica directory seeded with the scenario's base.
struct Fixture {
  TempDir tmp{"dcr_replica_test_"};
  Scenario sc = Shared();
  std::string dir = tmp / "replica";
  Fixture() {
    Status s = WriteSafetensors(tmp / "base.safetensors", sc.base.Bind());
    if (s.ok()) s = ReplicaState::Init(dir, tmp / "base.safetensors", 2);
    if (!s.ok()) ADD_FAILURE() << s.ToString();
  }
  ReplicaState Open() {
    auto r = ReplicaState::Open(dir, 2);
    if (!r.ok()) Fatal(__FILE__, __LINE__, r.status().ToString());
    return std::move(r).value();
  }
  std::vector<std::string> JournalFiles() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir + "/journal", ec)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<uint8_t> Weights() const { return test::ReadAll(dir + "/weights.safetensors"); }
};

PayloadIdentity IdOf(std::span<const uint8_t> p) { return *PeekPayloadIdentity(p); }

void ApplyAll(ReplicaState& r, const Scenario& sc) {
  for (const auto& p : sc.payloads) {
    auto o = r.ApplyPayload(p);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_FALSE(o->duplicate);
  }
}

TEST(ReplicaState, InitThenOpenHoldsTheCheckpointAtVersionZeroWithItsDigest) {
  Fixture f;
  auto base = Checkpoint::Open(f.tmp / "base.safetensors");
  ASSERT_TRUE(base.ok());
  const Digest128 digest = DigestCheckpoint(*base, 1).total;
  ReplicaState r = f.Open();
  EXPECT_EQ(r.version(), InitialVersion(digest));
  EXPECT_EQ(r.version(), f.sc.base_version);
  EXPECT_EQ(r.committed_digest(), digest);
  EXPECT_EQ(r.running_digest(), digest);
  EXPECT_EQ(r.last_transfer(), 0u);
  EXPECT_FALSE(r.pending().has_value());
  EXPECT_TRUE(Holds(r.weights(), f.sc.base));
  EXPECT_EQ(DigestCheckpoint(r.weights(), 1).total, digest);
  // `dcr verify DIR` opens the directory as a checkpoint.
  auto as_dir = Checkpoint::Open(f.dir);
  ASSERT_TRUE(as_dir.ok()) << as_dir.status().ToString();
  EXPECT_EQ(DigestCheckpoint(*as_dir, 1).total, digest);
  EXPECT_EQ(ReplicaState::Init(f.dir, f.tmp / "base.safetensors", 1).code(), StatusCode::kInvalidArgument);
  auto none = ReplicaState::Open(f.tmp / "nothing", 1);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find(f.tmp / "nothing"), std::string::npos);
}

TEST(ReplicaState, InitFromAShardedCheckpointHasTheSameVersion) {
  Fixture f;
  ASSERT_OK(WriteShardedCheckpoint(f.tmp / "sharded", f.sc.base.Bind(), 4096));
  ASSERT_OK(ReplicaState::Init(f.tmp / "r2", f.tmp / "sharded", 1));
  auto r = ReplicaState::Open(f.tmp / "r2", 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->version(), f.sc.base_version);
  EXPECT_TRUE(Holds(r->weights(), f.sc.base));
}

TEST(ReplicaState, EveryPayloadThenCommitGivesTheTargetAndThePersistedVersion) {
  Fixture f;
  ASSERT_GE(f.sc.payloads.size(), 6u);
  std::set<std::pair<CodecMode, ValueKind>> kinds;  // every mode and value kind is exercised
  for (const auto& p : f.sc.payloads) {
    PayloadLayout layout;
    ASSERT_OK(ParsePayload(p, &layout));
    for (const auto& seg : layout.segments) kinds.insert({layout.mode, seg.kind});
  }
  EXPECT_EQ(kinds.size(), 4u);
  {
    ReplicaState r = f.Open();
    ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
    uint64_t changed = 0;
    for (const auto& p : f.sc.payloads) {
      auto o = r.ApplyPayload(p);
      ASSERT_TRUE(o.ok()) << o.status().ToString();
      changed += o->changed;
      EXPECT_TRUE(r.HasApplied(IdOf(p).producer_id, IdOf(p).sequence));
    }
    EXPECT_EQ(changed, f.sc.changed);
    EXPECT_EQ(r.pending()->applied_payloads, f.sc.payloads.size());
    EXPECT_EQ(r.running_digest(), f.sc.target_digest);
    EXPECT_EQ(r.committed_digest(), f.sc.base_version.id);
    ASSERT_OK(r.Vote());
    ASSERT_OK(r.Commit(f.sc.next));
    EXPECT_TRUE(Holds(r.weights(), f.sc.target));
    EXPECT_FALSE(r.pending().has_value());
    EXPECT_FALSE(fs::exists(f.dir + "/journal"));
  }
  ReplicaState r = f.Open();
  EXPECT_EQ(r.version(), f.sc.next);
  EXPECT_EQ(r.last_transfer(), f.sc.transfer);
  EXPECT_EQ(r.committed_digest(), f.sc.target_digest);
  EXPECT_EQ(DigestCheckpoint(r.weights(), 1).total, f.sc.target_digest);
  EXPECT_TRUE(Holds(r.weights(), f.sc.target));
  // The next transfer must start from the new version.
  EXPECT_EQ(r.Begin(f.sc.transfer, f.sc.base_version).code(), StatusCode::kWrongBase);
}

TEST(ReplicaState, AbortRestoresTheBaseExactly) {
  Fixture f;
  const auto before = f.Weights();
  ReplicaState r = f.Open();
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
  ApplyAll(r, f.sc);
  ASSERT_OK(r.Vote());
  ASSERT_OK(r.Abort());
  EXPECT_TRUE(Holds(r.weights(), f.sc.base));
  EXPECT_FALSE(r.pending().has_value());
  EXPECT_EQ(r.running_digest(), f.sc.base_version.id);
  EXPECT_FALSE(fs::exists(f.dir + "/journal"));
  EXPECT_EQ(f.Weights(), before);
  EXPECT_OK(r.Abort());  // nothing pending: no-op
}

TEST(ReplicaState, DuplicatePayloadsAreAppliedOnce) {
  Fixture f;
  ReplicaState r = f.Open();
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
  ApplyAll(r, f.sc);
  for (const auto& p : f.sc.payloads) {  // XOR and context-mode payloads among them
    auto o = r.ApplyPayload(p);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_TRUE(o->duplicate);
    EXPECT_EQ(o->changed, 0u);
  }
  EXPECT_OK(r.Begin(f.sc.transfer, f.sc.base_version));  // idempotent PREPARE keeps the progress
  EXPECT_EQ(r.pending()->applied_payloads, f.sc.payloads.size());
  EXPECT_TRUE(Holds(r.weights(), f.sc.target));
  ASSERT_OK(r.Commit(f.sc.next));
  EXPECT_TRUE(Holds(r.weights(), f.sc.target));
}

TEST(ReplicaState, SameIdentityWithOtherBytesIsCorruptAndWritesNothing) {
  Fixture f;
  ReplicaState r = f.Open();
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
  ASSERT_TRUE(r.ApplyPayload(f.sc.payloads[0]).ok());
  test::Tensors other = f.sc.target;
  other.storage[2][5] ^= 0x5a;
  auto imposter = test::OnePayload(f.sc.base, other, 2, 0, 333, ValueKind::kOverwrite, false, IdOf(f.sc.payloads[0]));
  ASSERT_FALSE(imposter.empty());
  const auto before = f.Weights();
  const auto journal = f.JournalFiles();
  auto o = r.ApplyPayload(imposter);
  EXPECT_EQ(o.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(o.status().message().find("resent with different bytes"), std::string::npos) << o.status().message();
  EXPECT_EQ(f.Weights(), before);
  EXPECT_EQ(f.JournalFiles(), journal);
}

TEST(ReplicaState, RefusedPayloadsWriteNothing) {
  Fixture f;
  ReplicaState r = f.Open();
  EXPECT_EQ(r.ApplyPayload(f.sc.payloads[0]).status().code(), StatusCode::kInvalidArgument);  // nothing pending
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
  const auto before = f.Weights();
  const auto journal = f.JournalFiles();
  ASSERT_EQ(journal, std::vector<std::string>{"transfer.json"});
  for (const auto& p : f.sc.payloads) {  // one flipped byte anywhere
    for (size_t at : {p.size() / 2, size_t{30}, p.size() - 1}) {
      auto bad = p;
      bad[at] ^= 0x10;
      EXPECT_EQ(r.ApplyPayload(bad).status().code(), StatusCode::kCorrupt);
    }
  }
  PayloadIdentity id = IdOf(f.sc.payloads[0]);
  const auto& s = f.sc;
  test::Tensors base = s.base, target = s.target;
  auto other = test::OnePayload(base, target, 0, 0, 600, ValueKind::kXor, false, {id.transfer_id + 1, 0, 0});
  auto wrong = r.ApplyPayload(other);
  EXPECT_EQ(wrong.status().code(), StatusCode::kWrongBase) << wrong.status().ToString();
  // Segments that do not fit the catalog: another dtype, an element range past the end.
  test::Tensors fake_b, fake_t;
  std::mt19937_64 rng(7);
  fake_b.Add("x", DType::kF32, {2560}, rng);
  fake_t = fake_b;
  fake_t.storage[0][4] ^= 1;
  EXPECT_EQ(r.ApplyPayload(test::OnePayload(fake_b, fake_t, 0, 0, 640, ValueKind::kXor, false, {id.transfer_id, 9, 0}))
                .status().code(),
            StatusCode::kCorrupt);
  fake_b.list[0].dtype = fake_t.list[0].dtype = DType::kBF16;
  fake_t.storage[0][2 * 2500] ^= 1;
  EXPECT_EQ(r.ApplyPayload(test::OnePayload(fake_b, fake_t, 0, 2000, 3000, ValueKind::kXor, true, {id.transfer_id, 9, 1}))
                .status().code(),
            StatusCode::kCorrupt);
  EXPECT_EQ(f.Weights(), before);
  EXPECT_EQ(f.JournalFiles(), journal);
  EXPECT_EQ(r.pending()->applied_payloads, 0u);
  ApplyAll(r, f.sc);  // the good payloads still apply
  ASSERT_OK(r.Commit(f.sc.next));
  EXPECT_TRUE(Holds(r.weights(), f.sc.target));
}

TEST(ReplicaState, BeginFromAnotherVersionIsWrongBaseAndWritesNothing) {
  Fixture f;
  ReplicaState r = f.Open();
  const Version stale{Digest128{1, 2}, 7};
  Status s = r.Begin(f.sc.transfer, stale);
  EXPECT_EQ(s.code(), StatusCode::kWrongBase);
  EXPECT_NE(s.message().find(f.dir), std::string::npos);
  EXPECT_NE(s.message().find(stale.ToString()), std::string::npos);
  EXPECT_NE(s.message().find(f.sc.base_version.ToString()), std::string::npos);
  EXPECT_FALSE(fs::exists(f.dir + "/journal"));
  EXPECT_FALSE(r.pending().has_value());
  EXPECT_TRUE(Holds(r.weights(), f.sc.base));
}

TEST(ReplicaState, BeginAbortsAnUnvotedTransferAndRefusesWhileVoted) {
  Fixture f;
  ReplicaState r = f.Open();
  ASSERT_OK(r.Begin(f.sc.transfer + 1, f.sc.base_version));
  const auto& s = f.sc;
  test::Tensors base = s.base, target = s.target;
  auto p = test::OnePayload(base, target, 1, 0, 1500, ValueKind::kXor, false, {f.sc.transfer + 1, 0, 0});
  ASSERT_TRUE(r.ApplyPayload(p).ok());
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));  // aborts transfer + 1
  EXPECT_TRUE(Holds(r.weights(), f.sc.base));
  EXPECT_EQ(r.pending()->transfer_id, f.sc.transfer);
  EXPECT_EQ(r.pending()->applied_payloads, 0u);
  ApplyAll(r, f.sc);
  ASSERT_OK(r.Vote());
  Status busy = r.Begin(f.sc.transfer + 2, f.sc.base_version);
  EXPECT_EQ(busy.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(busy.message().find("awaiting decision"), std::string::npos) << busy.message();
  // A commit naming other bits is refused; the transfer stays pending.
  EXPECT_EQ(r.Commit(NextVersion(f.sc.base_version, f.sc.transfer, Digest128{3, 4})).code(), StatusCode::kCorrupt);
  ASSERT_TRUE(r.pending().has_value());
  ASSERT_OK(r.Commit(f.sc.next));
  EXPECT_TRUE(Holds(r.weights(), f.sc.target));
}

// ---------------------------------------------------------------------------------------------
// Crash recovery (test::CrashChild re-executes this binary on the hidden test below).

// Plans: "commit" = Begin, every payload, Vote, Commit; "abort" = the same but Abort; "open" =
// Open only (recovery).
TEST(ReplicaCrashChild, DISABLED_RunPlan) {
  const char* dir = std::getenv("DCR_REPLICA_CHILD_DIR");
  const char* plan = std::getenv("DCR_REPLICA_CHILD_PLAN");
  ASSERT_TRUE(dir != nullptr && plan != nullptr);
  auto r = ReplicaState::Open(dir, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  if (std::string(plan) == "open") return;
  const Scenario& sc = Shared();
  ASSERT_OK(r->Begin(sc.transfer, sc.base_version));
  ApplyAll(*r, sc);
  ASSERT_OK(r->Vote());
  ASSERT_OK(std::string(plan) == "commit" ? r->Commit(sc.next) : r->Abort());
}

::testing::AssertionResult CrashChild(const std::string& dir, const std::string& plan, const std::string& crash_at) {
  return test::CrashChild("ReplicaCrashChild.DISABLED_RunPlan", dir, plan, crash_at);
}

// The replica is exactly at the base with no journal and no temp files; re-applying every payload
// (so nothing was XORed twice) then gives exactly the target.
void ExpectBaseThenTarget(Fixture& f) {
  ReplicaState r = f.Open();
  EXPECT_FALSE(r.pending().has_value());
  EXPECT_EQ(r.version(), f.sc.base_version);
  EXPECT_TRUE(Holds(r.weights(), f.sc.base));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(f.dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"state.json", "weights.safetensors"}));
  ASSERT_OK(r.Begin(f.sc.transfer, f.sc.base_version));
  ApplyAll(r, f.sc);
  ASSERT_OK(r.Commit(f.sc.next));
  EXPECT_TRUE(Holds(r.weights(), f.sc.target));
}

enum class After { kBase, kVotedThenCommit, kVotedThenAbort, kCommitted };

TEST(ReplicaCrash, EveryCrashPointRecoversToBaseOrVotedOrCommitted) {
  const size_t n = Shared().payloads.size(), segs = Shared().segments;
  struct Case {
    const char* point;
    size_t hit;
    const char* plan;
    After after;
  };
  const Case cases[] = {
      {"replica.undo_written", 1, "commit", After::kBase},        {"replica.undo_written", 2, "commit", After::kBase},
      {"replica.undo_written", n, "commit", After::kBase},        {"replica.segment_applied", 1, "commit", After::kBase},
      {"replica.segment_applied", segs / 2, "commit", After::kBase},
      {"replica.segment_applied", segs, "commit", After::kBase},  {"replica.applied", 1, "commit", After::kBase},
      {"replica.applied", n, "commit", After::kBase},             {"replica.done_written", 1, "commit", After::kBase},
      {"replica.done_written", n - 1, "commit", After::kBase},    {"replica.done_written", n, "commit", After::kBase},
      {"replica.voted", 1, "commit", After::kVotedThenCommit},    {"replica.voted", 1, "abort", After::kVotedThenAbort},
      {"replica.state_written", 1, "commit", After::kCommitted},  {"replica.rolled_back", 1, "abort", After::kBase},
  };
  for (const Case& c : cases) {
    const std::string at = std::string(c.point) + ":" + std::to_string(c.hit);
    SCOPED_TRACE(at);
    Fixture f;
    ASSERT_TRUE(CrashChild(f.dir, c.plan, at));
    if (c.after == After::kBase) {
      ExpectBaseThenTarget(f);
      continue;
    }
    ReplicaState r = f.Open();
    if (c.after == After::kCommitted) {
      EXPECT_FALSE(r.pending().has_value());
      EXPECT_FALSE(fs::exists(f.dir + "/journal"));
      EXPECT_EQ(r.version(), f.sc.next);
      EXPECT_TRUE(Holds(r.weights(), f.sc.target));
      continue;
    }
    ASSERT_TRUE(r.pending().has_value());
    EXPECT_TRUE(r.pending()->voted);
    EXPECT_EQ(r.pending()->applied_payloads, n);
    EXPECT_EQ(r.running_digest(), f.sc.target_digest);
    EXPECT_TRUE(Holds(r.weights(), f.sc.target));
    if (c.after == After::kVotedThenCommit) {
      ASSERT_OK(r.Commit(f.sc.next));
      EXPECT_EQ(f.Open().version(), f.sc.next);
      EXPECT_TRUE(Holds(r.weights(), f.sc.target));
    } else {
      ASSERT_OK(r.Abort());
      ExpectBaseThenTarget(f);
    }
  }
}

TEST(ReplicaCrash, CrashDuringRecoveryThenOpenEndsAtTheExactBase) {
  Fixture f;
  ASSERT_TRUE(CrashChild(f.dir, "commit", "replica.applied:3"));
  ASSERT_TRUE(CrashChild(f.dir, "open", "replica.rolled_back:1"));  // recovery's own rollback
  EXPECT_TRUE(fs::exists(f.dir + "/journal/transfer.json"));
  test::WriteAll(f.dir + "/journal/.0-9.undo.tmp.12345", std::string_view("partial"));
  test::WriteAll(f.dir + "/.state.json.tmp.12345", std::string_view("partial"));
  ExpectBaseThenTarget(f);
}

TEST(ReplicaCrash, AbortCutShortAfterRemovingTheNewestUndoRecordStillEndsAtTheBase) {
  Fixture f;
  ASSERT_TRUE(CrashChild(f.dir, "abort", "replica.rolled_back:1"));
  const PayloadIdentity last = IdOf(f.sc.payloads.back());
  ASSERT_TRUE(fs::remove(f.dir + "/journal/" + std::to_string(last.producer_id) + "-" + std::to_string(last.sequence) + ".undo"));
  ExpectBaseThenTarget(f);
}

TEST(ReplicaCrash, VotedJournalWithAPartialPayloadRollsBackOnlyThatPayload) {
  Fixture f;
  ASSERT_TRUE(CrashChild(f.dir, "commit", "replica.applied:3"));
  test::WriteAll(f.dir + "/journal/voted", std::string_view(""));
  const PayloadIdentity third = IdOf(f.sc.payloads[2]);
  for (int reopen = 0; reopen < 2; ++reopen) {  // recovery is idempotent
    ReplicaState r = f.Open();
    ASSERT_TRUE(r.pending().has_value());
    EXPECT_TRUE(r.pending()->voted);
    EXPECT_EQ(r.pending()->applied_payloads, 2u);
    EXPECT_TRUE(r.HasApplied(IdOf(f.sc.payloads[1]).producer_id, IdOf(f.sc.payloads[1]).sequence));
    EXPECT_FALSE(r.HasApplied(third.producer_id, third.sequence));
    EXPECT_EQ(r.running_digest(), DigestCheckpoint(r.weights(), 1).total);
    EXPECT_FALSE(fs::exists(f.dir + "/journal/" + std::to_string(third.producer_id) + "-" + std::to_string(third.sequence) + ".undo"));
  }
  ReplicaState r = f.Open();
  EXPECT_EQ(r.ApplyPayload(f.sc.payloads[2]).status().code(), StatusCode::kInvalidArgument);  // voted: no new payloads
  EXPECT_TRUE(r.ApplyPayload(f.sc.payloads[0])->duplicate);
  EXPECT_EQ(r.Commit(f.sc.next).code(), StatusCode::kCorrupt);  // its bits are not the target's
  ASSERT_OK(r.Abort());
  ExpectBaseThenTarget(f);
}

TEST(ReplicaCrash, ACorruptUndoRecordIsReportedAndNothingIsRestored) {
  Fixture f;
  ASSERT_TRUE(CrashChild(f.dir, "commit", "replica.applied:2"));
  const PayloadIdentity second = IdOf(f.sc.payloads[1]);
  const std::string undo = f.dir + "/journal/" + std::to_string(second.producer_id) + "-" + std::to_string(second.sequence) + ".undo";
  auto bytes = test::ReadAll(undo);
  ASSERT_GT(bytes.size(), 60u);
  bytes[50] ^= 1;
  test::WriteAll(undo, bytes);
  const auto before = f.Weights();
  auto r = ReplicaState::Open(f.dir, 1);
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find(undo), std::string::npos) << r.status().message();
  EXPECT_EQ(f.Weights(), before);
}

}  // namespace
}  // namespace dcr
