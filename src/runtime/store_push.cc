// `dcr push --store`: the producer side of a refit through an object store (store_refit.h).
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "base/crash_point.h"
#include "base/thread_pool.h"
#include "base/timing.h"
#include "protocol/baseline_state.h"
#include "protocol/ownership.h"
#include "protocol/payload_plan.h"
#include "runtime/decision_log.h"
#include "runtime/payload_encoder.h"
#include "runtime/store_lineage.h"
#include "runtime/store_records.h"
#include "runtime/store_refit.h"

namespace dcr {
namespace {

using State = TransferRecord::State;

// Votes and registrations are listed this often while the push waits (each poll is 2 LISTs and
// one GET per registration).
constexpr int kVotePollMs = 50;

void Say(const StorePushOptions& o, const std::string& line) {
  std::fprintf(o.log, "dcr push [store]: %s\n", line.c_str());
  std::fflush(o.log);
}

Digest128 BaselineDigest(const BaselineState& b) {
  std::vector<Digest128> per;
  for (const CatalogEntry& e : b.baseline().catalog()) per.push_back(b.tensor_digests().at(e.name));
  return CombineDigests(b.baseline().catalog(), per);
}

// Publishes `decision` for the open transfer and moves head.json past it (a commit also gets
// its chain link, before head.json names its target).
Status PublishDecision(ObjectStore& store, const TransferRecord& decision, HeadRecord* head) {
  DCR_RETURN_IF_ERROR(PutJson(store, DecisionKey(decision.transfer), TransferRecordJson(decision)));
  if (decision.state == State::kCommit) {
    DCR_RETURN_IF_ERROR(PutJson(store, ChainKey(decision.target.number), ToJson(ChainLink{decision.base, decision.target, decision.transfer})));
    head->version = decision.target;
    head->last_transfer = decision.transfer;
  }
  head->open = 0;
  return PutJson(store, HeadKey(), ToJson(*head));
}

// An empty store gets the baseline as its first anchor; otherwise the store must hold this
// model's lineage, and a transfer a crashed push left open is settled with the decision log's
// verdict (never decided: aborted). Returns the head, which must then be the baseline's version.
Result<HeadRecord> PrepareStore(ObjectStore& store, const BaselineState& baseline, DecisionLog& log, const StorePushOptions& o) {
  DCR_ASSIGN_OR_RETURN(auto info, GetRecord<StoreInfo>(store, StoreInfoKey(), ParseStoreInfo));
  if (!info) {
    // store.json is written last: a first push that crashed before it simply starts over.
    Say(o, "empty store " + store.url() + ": publishing " + baseline.version().ToString() + " as the first anchor");
    const AnchorRecord anchor{baseline.version(), BaselineDigest(baseline), baseline.last_transfer(),
                              static_cast<uint64_t>(std::filesystem::file_size(baseline.baseline().path()))};
    DCR_RETURN_IF_ERROR(PublishAnchor(store, baseline.baseline().path(), anchor));
    DCR_RETURN_IF_ERROR(PutJson(store, HeadKey(), ToJson(HeadRecord{baseline.version(), baseline.last_transfer(), 0})));
    DCR_RETURN_IF_ERROR(PutJson(store, StoreInfoKey(), ToJson(StoreInfo{baseline.catalog_digest(), o.anchor_every})));
    info = StoreInfo{baseline.catalog_digest(), o.anchor_every};
  }
  if (info->catalog != baseline.catalog_digest())
    return Mismatch(store.url() + " holds another model (catalog " + Hex64(info->catalog) + ") than the baseline " +
                    baseline.dir() + " (catalog " + Hex64(baseline.catalog_digest()) + "); nothing was published");
  DCR_ASSIGN_OR_RETURN(auto head, GetRecord<HeadRecord>(store, HeadKey(), ParseHead));
  if (!head) return Corrupt(store.url() + ": store.json without head.json");
  if (head->open) {
    const uint64_t t = head->open;
    DCR_ASSIGN_OR_RETURN(auto published, GetRecord<TransferRecord>(store, DecisionKey(t), ParseTransferRecord));
    DCR_ASSIGN_OR_RETURN(auto logged, log.Find(t));
    TransferRecord decision;
    if (published) {
      decision = *published;
    } else if (logged && logged->state != State::kStarted) {
      decision = *logged;
    } else {
      decision = {t, State::kAbort, head->version, {}, "never decided (the push that started it ended early)"};
      DCR_RETURN_IF_ERROR(log.Record(decision));
    }
    Say(o, "transfer " + Hex64(t) + " was left open: publishing its recorded decision (" + TransferStateName(decision.state) + ")");
    DCR_RETURN_IF_ERROR(PublishDecision(store, decision, &*head));
  }
  if (head->version != baseline.version())
    return WrongBase("the store " + store.url() + " is at " + head->version.ToString() + " but the baseline " + baseline.dir() +
                     " is at " + baseline.version().ToString() + "; nothing was published (one baseline per store lineage)");
  return *head;
}

struct Published {
  std::vector<ManifestPayload> payloads;
  uint64_t changed = 0, wire_bytes = 0;
};

// Publishes every payload while later ones are still being encoded: `o.uploads` threads take
// encoded payloads in order and Put them. The first failure stops the rest.
Result<Published> PublishPayloads(ObjectStore& store, PayloadEncoder& encoder, uint64_t transfer, const StorePushOptions& o) {
  Published out;
  std::mutex mu;
  Status failed;
  auto upload = [&] {
    for (;;) {
      StreamedPayload p;
      Status encoder_status;
      {
        std::lock_guard lock(mu);
        if (!failed.ok()) return;
      }
      if (!encoder.Pop(&p, &encoder_status)) {
        std::lock_guard lock(mu);
        if (!encoder_status.ok() && failed.ok()) failed = encoder_status;
        return;
      }
      const Frame& bytes = *p.bytes;
      ManifestPayload m{0, p.sequence, bytes.size(), XXH3_64bits(bytes.data(), bytes.size())};
      Status s;
      if (o.corrupt.count(p.sequence)) {
        Frame bad(bytes);
        bad[bad.size() / 2] ^= 0x40;
        s = store.Put(PayloadKey(transfer, 0, p.sequence), bad);
      } else if (!o.missing.count(p.sequence)) {
        s = store.Put(PayloadKey(transfer, 0, p.sequence), bytes);
      }
      std::lock_guard lock(mu);
      if (!s.ok()) {
        if (failed.ok()) failed = s;
        return;
      }
      out.payloads.push_back(m);
      out.changed += p.changed;
      out.wire_bytes += bytes.size();
    }
  };
  std::vector<std::thread> uploaders;
  for (int i = 0; i < std::max(o.uploads, 1); ++i) uploaders.emplace_back(upload);
  for (auto& t : uploaders) t.join();
  if (!failed.ok()) return failed;
  std::sort(out.payloads.begin(), out.payloads.end(),
            [](const ManifestPayload& a, const ManifestPayload& b) { return a.sequence < b.sequence; });
  return out;
}

// Waits until every live receiver (heartbeat within live_ms) at the base has voted yes;
// `previous` is the transfer that produced the base (0 for none). A no vote, or a live receiver
// silent past the vote timeout, is an error naming it.
Status AwaitVotes(ObjectStore& store, uint64_t transfer, const Version& base, uint64_t previous, const StorePushOptions& o,
                  PushReport* report) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.vote_timeout_ms);
  std::map<std::string, VoteRecord> votes;
  for (;;) {
    DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> vote_objects, store.List(VotesPrefix(transfer)));
    for (const ObjectInfo& v : vote_objects) {
      if (votes.count(v.key)) continue;
      DCR_ASSIGN_OR_RETURN(auto vote, GetRecord<VoteRecord>(store, v.key, ParseVote));
      if (!vote) continue;
      if (vote->transfer != transfer) return Corrupt(store.url() + " " + v.key + ": a vote for transfer " + Hex64(vote->transfer));
      if (!vote->yes) return Status(vote->code, "receiver " + vote->receiver + " voted no: " + vote->reason);
      votes[v.key] = *vote;
    }
    std::vector<std::string> waiting;
    DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> regs, store.List(RegistrationsPrefix()));
    const int64_t now = UnixMillis();
    for (const ObjectInfo& r : regs) {
      DCR_ASSIGN_OR_RETURN(auto reg, GetRecord<Registration>(store, r.key, ParseRegistration));
      if (!reg || now - reg->heartbeat_ms > o.live_ms) continue;
      // At the base, or about to be: a receiver still committing the transfer that made the base
      // (it polls), or already applying this one.
      if (reg->version != base && reg->pending != transfer && (!previous || reg->pending != previous)) continue;
      if (!votes.count(VoteKey(transfer, reg->receiver))) waiting.push_back(reg->receiver);
    }
    if (waiting.empty()) break;
    if (Clock::now() > deadline) {
      std::string names;
      for (const std::string& w : waiting) names += (names.empty() ? "" : ", ") + w;
      return IoError("live receivers did not vote within " + std::to_string(o.vote_timeout_ms / 1000) + " s: " + names);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kVotePollMs));
  }
  for (const auto& [key, v] : votes) {
    ReceiverFlush rf;
    rf.endpoint = v.receiver;
    rf.vote = v.yes;
    rf.applied = v.applied;
    rf.digest = v.digest;
    report->receivers.push_back(rf);
  }
  return Status::Ok();
}

}  // namespace

Result<PushReport> RunStorePush(const StorePushOptions& o) {
  const auto t_total = Clock::now();
  PushReport report;
  const int threads = o.threads > 0 ? o.threads : HardwareThreads();
  DCR_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> store, OpenObjectStore(o.store_url, o.store));
  DCR_ASSIGN_OR_RETURN(BaselineState baseline, BaselineState::Open(o.baseline_dir, 0, 1));
  DCR_ASSIGN_OR_RETURN(DecisionLog log, DecisionLog::Open(o.baseline_dir));
  DCR_RETURN_IF_ERROR(ResolveStaged(baseline, log));
  DCR_ASSIGN_OR_RETURN(Checkpoint next, Checkpoint::Open(o.new_checkpoint));
  if (CatalogDigest64(next.catalog()) != baseline.catalog_digest())
    return Mismatch(o.new_checkpoint + " has another catalog (tensor names, dtypes or shapes) than the baseline " +
                    o.baseline_dir + " was seeded with; nothing was published");
  DCR_ASSIGN_OR_RETURN(HeadRecord head, PrepareStore(*store, baseline, log, o));
  const Version base = baseline.version();
  report.base = base;

  // The plan and the base tensors, before anything is published.
  const std::vector<uint32_t> owned = OwnedTensors(next.catalog(), 0, 1);
  DCR_ASSIGN_OR_RETURN(const std::vector<TensorRef> base_tensors, baseline.TensorsByCatalogIndex(next.catalog()));
  const PayloadPlan plan = PlanPayloads(next.tensors(), owned, std::max<uint64_t>(o.chunk_bytes, 8));
  std::vector<Digest128> digests(next.tensors().size());
  for (uint32_t t : owned) {
    digests[t] = baseline.tensor_digests().at(next.tensors()[t].name());
    report.elements += next.tensors()[t].num_elements();
    report.dense_bytes += next.tensors()[t].bytes.size();
  }
  DCR_ASSIGN_OR_RETURN(uint64_t attempt, log.AttemptsFrom(base));
  const uint64_t transfer = LiveTransferId(base, attempt);
  report.transfer = transfer;
  DCR_RETURN_IF_ERROR(log.Record({transfer, State::kStarted, base, {}, ""}));

  // From here on every failure aborts the transfer (recorded, then published).
  auto abort = [&](const Status& why) -> Status {
    Say(o, "aborting transfer " + Hex64(transfer) + ": " + why.ToString());
    const TransferRecord decision{transfer, State::kAbort, base, {}, why.ToString()};
    DCR_RETURN_IF_ERROR(log.Record(decision));
    Status published = PublishDecision(*store, decision, &head);
    (void)baseline.DropStaged(transfer);
    if (!published.ok())
      return published.WithContext("transfer " + Hex64(transfer) + " aborted (" + why.message() +
                                   ") but the decision could not be published; the next push publishes it");
    return why.WithContext("transfer " + Hex64(transfer) + " aborted; the store and the baseline stay at " + base.ToString());
  };

  const uint64_t catalog_digest = CatalogDigest64(next.catalog());
  if (Status s = PutJson(*store, OpenKey(transfer), ToJson(OpenRecord{transfer, base, catalog_digest})); !s.ok()) return abort(s);
  head.open = transfer;
  if (Status s = PutJson(*store, HeadKey(), ToJson(head)); !s.ok()) return abort(s);
  Say(o, "transfer " + Hex64(transfer) + " open from " + base.ToString());

  // Payloads: encoded and uploaded concurrently.
  const auto t_publish = Clock::now();
  Manifest manifest;
  {
    PayloadEncoder encoder(plan, base_tensors, next.tensors(), transfer, 0, {threads, o.encode, o.dense}, digests);
    auto published = PublishPayloads(*store, encoder, transfer, o);
    if (!published.ok()) return abort(published.status().WithContext("publishing payloads"));
    manifest.payloads = std::move(published->payloads);
    report.changed = published->changed;
    report.wire_bytes = report.sent_bytes = published->wire_bytes;
    report.encode_seconds = encoder.encode_seconds();
    digests = encoder.digests();
  }
  report.payloads = manifest.payloads.size();
  std::map<std::string, Digest128> target_digests;
  for (uint32_t t : owned) target_digests[next.tensors()[t].name()] = digests[t];
  const Digest128 target_digest = CombineDigests(next.catalog(), digests);
  const Version target = NextVersion(base, transfer, target_digest);
  manifest.transfer = transfer, manifest.base = base, manifest.target = target, manifest.target_digest = target_digest;
  manifest.changed = report.changed, manifest.elements = report.elements, manifest.dense_bytes = report.dense_bytes;
  manifest.wire_bytes = report.wire_bytes;
  if (Status s = PutJson(*store, ManifestKey(transfer), ToJson(manifest)); !s.ok()) return abort(s);
  report.stream_seconds = SecondsSince(t_publish);
  Say(o, "transfer " + Hex64(transfer) + ": " + std::to_string(manifest.payloads.size()) + " payloads and the manifest published");

  // The next baseline is staged while the receivers apply and vote.
  Status stage_status;
  std::thread stager([&] {
    auto t0 = Clock::now();
    stage_status = baseline.Stage(transfer, next, target, target_digests);
    report.stage_seconds = SecondsSince(t0);
  });
  auto t_votes = Clock::now();
  Status voted = AwaitVotes(*store, transfer, base, baseline.last_transfer(), o, &report);
  report.flush_seconds = SecondsSince(t_votes);
  stager.join();
  if (!stage_status.ok()) return abort(stage_status.WithContext("staging the next baseline"));
  if (!voted.ok()) return abort(voted);

  // The decision, durable before anyone is told.
  auto t_commit = Clock::now();
  const TransferRecord decision{transfer, State::kCommit, base, target, ""};
  DCR_RETURN_IF_ERROR(log.Record(decision));
  CrashPoint("store.decided");
  if (Status s = PublishDecision(*store, decision, &head); !s.ok())
    return s.WithContext("transfer " + Hex64(transfer) + " is committed in the decision log but not yet in the store; the next push publishes it");
  Say(o, "transfer " + Hex64(transfer) + " committed: " + target.ToString());
  DCR_RETURN_IF_ERROR(baseline.CommitStaged(transfer));
  report.committed = true;
  report.version = target;

  // Lineage: an anchor at every multiple of the interval, then garbage collection. Failures here
  // leave the commit intact; they are reported as warnings.
  if (o.anchor_every && target.number % o.anchor_every == 0) {
    const AnchorRecord anchor{target, target_digest, transfer,
                              static_cast<uint64_t>(std::filesystem::file_size(baseline.baseline().path()))};
    if (Status s = PublishAnchor(*store, baseline.baseline().path(), anchor); !s.ok())
      report.warnings.push_back("anchor " + target.ToString() + " not published: " + s.ToString());
    else
      Say(o, "anchor " + target.ToString() + " published");
  }
  if (auto gc = CollectGarbage(*store, head, o.keep_anchors, o.log); !gc.ok())
    report.warnings.push_back("garbage collection failed: " + gc.status().ToString());
  report.commit_seconds = SecondsSince(t_commit);
  report.total_seconds = SecondsSince(t_total);
  const StoreCounters c = store->counters();
  report.via_store = true;
  report.store_requests = c.requests, report.store_retries = c.retries;
  report.store_bytes_put = c.bytes_put, report.store_bytes_got = c.bytes_got;
  return report;
}

}  // namespace dcr
