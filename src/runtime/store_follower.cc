// `dcr serve --store`: the receiver side of a refit through an object store (store_refit.h).
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/timing.h"
#include "protocol/baseline_state.h"
#include "protocol/replica_state.h"
#include "runtime/store_heartbeat.h"
#include "runtime/store_lineage.h"
#include "runtime/store_records.h"
#include "runtime/store_refit.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

// A fetched object that fails its manifest check is fetched again this many times.
constexpr int kFetchAttempts = 3;
// A payload the manifest lists but the store does not hold is looked for this many polls.
constexpr int kMissingPolls = 25;

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  return buf;
}

// <host>-<16 hex of the state dir's absolute path>: stable across restarts of one replica.
std::string DefaultName(const std::string& state_dir) {
  std::string host;
  for (char c : HostName()) host += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  const std::string abs = fs::absolute(state_dir).lexically_normal().string();
  return host.substr(0, 40) + "-" + Hex64(XXH3_64bits(abs.data(), abs.size()));
}

class Follower {
 public:
  Follower(const StoreReceiverOptions& o, ObjectStore& store, ReplicaState replica, std::string name)
      : o_(o), store_(store), replica_(std::move(replica)), name_(std::move(name)),
        heartbeat_(store, Registration{name_, replica_.version(), Pending(), 0, HostName()}, o.heartbeat_ms, o.log) {}

  // What a step did: kBusy (progress; step again at once), kWaiting (for objects to appear),
  // kCurrent (at the store's head with nothing open).
  enum class Progress { kBusy, kWaiting, kCurrent };

  // One bounded step of the protocol. Errors other than kIoError mean the replica cannot follow
  // this store (not on its lineage, chain collected, …).
  Result<Progress> Step() {
    if (replica_.pending() && replica_.pending()->voted) return AwaitDecision(*replica_.pending());
    DCR_ASSIGN_OR_RETURN(auto head, GetRecord<HeadRecord>(store_, HeadKey(), ParseHead));
    if (!head) return Progress::kWaiting;  // nothing published yet
    const Version v = replica_.version();
    if (head->version.number > v.number) {
      DCR_RETURN_IF_ERROR(CatchUpOneLink(v));
      return Progress::kBusy;
    }
    if (head->version.number < v.number) {
      // The coordinator publishes the decision before head.json: right after committing on the
      // decision, the head may still name the base. Anything else is a store behind the replica.
      DCR_ASSIGN_OR_RETURN(auto d, GetRecord<TransferRecord>(store_, DecisionKey(replica_.last_transfer()), ParseTransferRecord));
      if (d && d->state == TransferRecord::State::kCommit && d->target == v) return Progress::kWaiting;
    }
    if (head->version != v)
      return WrongBase(replica_.dir() + " is at " + v.ToString() + " but the store " + store_.url() + " is at " +
                       head->version.ToString() + ": this replica is not on the store's lineage");
    if (!head->open || refused_.count(head->open)) {
      if (replica_.pending()) {
        DCR_RETURN_IF_ERROR(AbortPending("the transfer is no longer open"));
        return Progress::kBusy;
      }
      return head->open ? Progress::kWaiting : Progress::kCurrent;
    }
    DCR_RETURN_IF_ERROR(FollowOpen(head->open));
    return Progress::kWaiting;
  }

 private:
  void Say(const std::string& line) {
    std::fprintf(o_.log, "dcr serve [store]: %s\n", line.c_str());
    std::fflush(o_.log);
  }
  uint64_t Pending() const { return replica_.pending() ? replica_.pending()->transfer_id : 0; }
  void Publish() { heartbeat_.Update(replica_.version(), Pending()); }

  // A voted transfer waits for decision.json; if that has been collected, the chain says what
  // was decided (the link after our base names the committed transfer, if any).
  Result<Progress> AwaitDecision(const PendingTransfer& p) {
    DCR_ASSIGN_OR_RETURN(auto d, GetRecord<TransferRecord>(store_, DecisionKey(p.transfer_id), ParseTransferRecord));
    if (!d) {
      DCR_ASSIGN_OR_RETURN(auto head, GetRecord<HeadRecord>(store_, HeadKey(), ParseHead));
      if (!head || head->open == p.transfer_id) return Progress::kWaiting;  // still being decided
      if (head->version == p.base) {
        d = TransferRecord{p.transfer_id, TransferRecord::State::kAbort, p.base, {}, "the store's head is still at the base"};
      } else {
        DCR_ASSIGN_OR_RETURN(auto link, GetRecord<ChainLink>(store_, ChainKey(p.base.number + 1), ParseChainLink));
        if (!link)
          return NotFound(store_.url() + ": neither a decision for transfer " + Hex64(p.transfer_id) + " nor the chain link after " +
                          p.base.ToString());
        d = link->transfer == p.transfer_id
                ? TransferRecord{p.transfer_id, TransferRecord::State::kCommit, p.base, link->target, ""}
                : TransferRecord{p.transfer_id, TransferRecord::State::kAbort, p.base, {}, "another transfer was committed"};
      }
    }
    return Settle(*d);
  }

  Result<Progress> Settle(const TransferRecord& d) {
    if (d.state == TransferRecord::State::kCommit) {
      DCR_RETURN_IF_ERROR(replica_.Commit(d.target));
      Say("committed " + d.target.ToString() + " (transfer " + Hex64(d.transfer) + ")");
    } else if (d.state == TransferRecord::State::kAbort) {
      DCR_RETURN_IF_ERROR(replica_.Abort());
      refused_.insert(d.transfer);
      Say("transfer " + Hex64(d.transfer) + " aborted (" + d.reason + "): back at " + replica_.version().ToString());
    }
    ResetTransfer();
    Publish();
    return Progress::kBusy;
  }

  Status AbortPending(const std::string& why) {
    Say("rolling back transfer " + Hex64(Pending()) + ": " + why);
    DCR_RETURN_IF_ERROR(replica_.Abort());
    ResetTransfer();
    Publish();
    return Status::Ok();
  }

  void ResetTransfer() {
    manifest_.reset();
    missing_polls_.clear();
    t_started_ = Clock::now();
    fetched_bytes_ = 0;
  }

  // Fetches one payload and applies it. Bytes that do not match the manifest entry (when there
  // is one), or that the replica refuses as damaged, are fetched again: kFetchAttempts fetches in
  // all, 50·n ms apart.
  Status FetchAndApply(uint64_t t, uint32_t producer, uint32_t seq, const ManifestPayload* expect) {
    const std::string key = PayloadKey(t, producer, seq);
    for (int attempt = 1;; ++attempt) {
      DCR_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, store_.Get(key));
      fetched_bytes_ += bytes.size();
      Status s;
      if (expect && (bytes.size() != expect->size || XXH3_64bits(bytes.data(), bytes.size()) != expect->xxh3)) {
        s = Corrupt(std::to_string(bytes.size()) + " bytes that do not match the manifest (" + std::to_string(expect->size) +
                    " bytes, xxh3 " + Hex64(expect->xxh3) + ")");
      } else {
        auto r = replica_.ApplyPayload(bytes);
        if (r.ok()) return Status::Ok();
        s = r.status();
      }
      if (s.code() != StatusCode::kCorrupt || attempt >= kFetchAttempts)
        return s.WithContext(store_.url() + " " + key + (attempt > 1 ? " (" + std::to_string(attempt) + " fetches)" : ""));
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
    }
  }

  // Applies the whole committed transfer into the next version and commits it.
  Status CatchUpOneLink(const Version& v) {
    DCR_ASSIGN_OR_RETURN(auto link, GetRecord<ChainLink>(store_, ChainKey(v.number + 1), ParseChainLink));
    if (!link)
      return NotFound(replica_.dir() + " is at " + v.ToString() + " but " + store_.url() + " no longer holds the chain link into v" +
                      std::to_string(v.number + 1) + " (collected: register receivers to pin their chain); remove " +
                      replica_.dir() + " to catch up from the newest anchor");
    if (link->base != v)
      return WrongBase(replica_.dir() + " is at " + v.ToString() + " but the store's chain continues from " + link->base.ToString() +
                       ": this replica is not on the store's lineage");
    DCR_ASSIGN_OR_RETURN(auto manifest, GetRecord<Manifest>(store_, ManifestKey(link->transfer), ParseManifest));
    if (!manifest) return NotFound(store_.url() + ": transfer " + Hex64(link->transfer) + " of chain link " + ChainKey(v.number + 1) + " has no manifest");
    ResetTransfer();
    DCR_RETURN_IF_ERROR(replica_.Begin(link->transfer, v));
    for (const ManifestPayload& p : manifest->payloads) {
      if (replica_.HasApplied(p.producer, p.sequence)) continue;
      if (Status s = FetchAndApply(link->transfer, p.producer, p.sequence, &p); !s.ok()) {
        (void)AbortPending(s.message());
        return s.WithContext("catching up through transfer " + Hex64(link->transfer));
      }
    }
    DCR_RETURN_IF_ERROR(replica_.Commit(link->target));
    Say("caught up to " + link->target.ToString() + " (transfer " + Hex64(link->transfer) + ", " + std::to_string(manifest->payloads.size()) +
        " payloads, " + std::to_string(fetched_bytes_) + " bytes, " + std::to_string(SecondsSince(t_started_)) + " s)");
    ResetTransfer();
    Publish();
    return Status::Ok();
  }

  // One pass over an open transfer: begin it, apply the payloads published so far, and vote
  // once the manifest is there and everything it lists is applied.
  Status FollowOpen(uint64_t t) {
    if (!replica_.pending()) {
      DCR_ASSIGN_OR_RETURN(auto open, GetRecord<OpenRecord>(store_, OpenKey(t), ParseOpen));
      if (!open) return Status::Ok();  // head.json may be ahead of open.json's visibility
      if (open->base != replica_.version()) return Status::Ok();  // head moved meanwhile; the next step sees it
      ResetTransfer();
      DCR_RETURN_IF_ERROR(replica_.Begin(t, open->base));
      Publish();
      Say("following transfer " + Hex64(t) + " from " + open->base.ToString());
    } else if (Pending() != t) {
      return AbortPending("transfer " + Hex64(t) + " is open instead");
    }
    DCR_ASSIGN_OR_RETURN(auto decided, GetRecord<TransferRecord>(store_, DecisionKey(t), ParseTransferRecord));
    if (decided && decided->state == TransferRecord::State::kAbort) return Settle(*decided).status();
    if (!manifest_) {
      DCR_ASSIGN_OR_RETURN(manifest_, GetRecord<Manifest>(store_, ManifestKey(t), ParseManifest));
      if (manifest_ && (manifest_->transfer != t || manifest_->base != replica_.version()))
        return VoteNo(t, WrongBase("the manifest names transfer " + Hex64(manifest_->transfer) + " from " + manifest_->base.ToString()));
    }
    std::map<std::pair<uint32_t, uint32_t>, const ManifestPayload*> listed;
    if (manifest_)
      for (const ManifestPayload& p : manifest_->payloads) listed[{p.producer, p.sequence}] = &p;
    DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, store_.List(PayloadsPrefix(t)));
    for (const ObjectInfo& obj : objects) {
      uint32_t producer = 0, seq = 0;
      if (!ParsePayloadName(obj.key.substr(PayloadsPrefix(t).size()), &producer, &seq) || replica_.HasApplied(producer, seq)) continue;
      if (manifest_ && !listed.count({producer, seq})) continue;  // not part of the transfer: never applied
      if (!manifest_) {
        // Before the manifest, a payload that fails its checks may still be being written (a
        // store that shows objects before they are complete): it is tried again next poll, and
        // judged only against the manifest.
        (void)FetchAndApply(t, producer, seq, nullptr);
        continue;
      }
      if (Status s = FetchAndApply(t, producer, seq, listed.at({producer, seq})); !s.ok()) return VoteNo(t, s);
    }
    if (!manifest_) return Status::Ok();
    for (const auto& [id, p] : listed) {
      if (replica_.HasApplied(id.first, id.second)) continue;
      // Listed but not visible yet: fetched directly; absent for too long is a no vote.
      Status s = FetchAndApply(t, id.first, id.second, p);
      if (s.ok()) continue;
      if (s.code() != StatusCode::kNotFound || ++missing_polls_[id] >= kMissingPolls) return VoteNo(t, s);
      return Status::Ok();
    }
    if (replica_.running_digest() != manifest_->target_digest)
      return VoteNo(t, Corrupt("state digest " + replica_.running_digest().ToHex() + " after every payload is not the manifest's " +
                               manifest_->target_digest.ToHex()));
    DCR_RETURN_IF_ERROR(replica_.Vote());
    DCR_RETURN_IF_ERROR(PutJson(store_, VoteKey(t, name_),
                                ToJson(VoteRecord{name_, t, true, manifest_->payloads.size(), replica_.running_digest().ToHex(), ""})));
    Say("voted yes on transfer " + Hex64(t) + " (" + std::to_string(manifest_->payloads.size()) + " payloads, " +
        std::to_string(fetched_bytes_) + " bytes fetched, " + std::to_string(SecondsSince(t_started_)) + " s)");
    Publish();
    return Status::Ok();
  }

  // A receiver that has not voted may abort on its own: it rolls back, then says why.
  Status VoteNo(uint64_t t, const Status& why) {
    DCR_RETURN_IF_ERROR(AbortPending(why.ToString()));
    refused_.insert(t);
    return PutJson(store_, VoteKey(t, name_), ToJson(VoteRecord{name_, t, false, 0, replica_.version().id.ToHex(), why.message(), why.code()}));
  }

  const StoreReceiverOptions& o_;
  ObjectStore& store_;
  ReplicaState replica_;
  std::string name_;
  Heartbeat heartbeat_;
  std::set<uint64_t> refused_;  // transfers voted no on (or aborted): not begun again
  std::optional<Manifest> manifest_;
  std::map<std::pair<uint32_t, uint32_t>, int> missing_polls_;
  Clock::time_point t_started_ = Clock::now();
  uint64_t fetched_bytes_ = 0;
};

// Seeds an empty state dir from the newest anchor at or below the head.
Status SeedFromAnchor(ObjectStore& store, const StoreReceiverOptions& o, const std::atomic<bool>& stop) {
  std::optional<HeadRecord> head;
  for (bool said = false; !stop.load();) {
    auto got = GetRecord<HeadRecord>(store, HeadKey(), ParseHead);
    if (!got.ok() && got.status().code() != StatusCode::kIoError) return got.status();
    if (got.ok() && *got) {
      head = *got;
      break;
    }
    if (!got.ok()) {
      std::fprintf(o.log, "dcr serve [store]: %s (retrying)\n", got.status().ToString().c_str());
    } else if (!said) {
      std::fprintf(o.log, "dcr serve [store]: %s holds no model yet; waiting for the first push\n", store.url().c_str());
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms));
  }
  if (!head) return Status::Ok();
  DCR_ASSIGN_OR_RETURN(std::vector<AnchorRecord> anchors, ListAnchors(store));
  const AnchorRecord* pick = nullptr;
  for (const AnchorRecord& a : anchors)
    if (a.version.number <= head->version.number) pick = &a;
  if (!pick) return NotFound(store.url() + ": no anchor at or below the head " + head->version.ToString());
  const std::string tmp = fs::absolute(o.state_dir).lexically_normal().string() + ".anchor.tmp";
  std::fprintf(o.log, "dcr serve [store]: seeding %s from anchor %s (%llu bytes)\n", o.state_dir.c_str(),
               pick->version.ToString().c_str(), static_cast<unsigned long long>(pick->size));
  std::fflush(o.log);
  const auto t0 = Clock::now();
  Status s;
  std::error_code ec;
  // A model that does not digest to its anchor.json is fetched again (Init wrote nothing then).
  for (int attempt = 1; attempt <= kFetchAttempts; ++attempt) {
    s = store.GetFile(AnchorModelKey(pick->version.number), tmp);
    if (s.ok()) s = ReplicaState::Init(o.state_dir, tmp, o.threads, o.layout, ReplicaSeed{pick->version, pick->digest, pick->last_transfer});
    fs::remove(tmp, ec);
    if (s.code() != StatusCode::kCorrupt) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
  }
  if (!s.ok()) return s.WithContext("seeding " + o.state_dir + " from anchor " + pick->version.ToString());
  std::fprintf(o.log, "dcr serve [store]: seeded %s at %s in %.2f s\n", o.state_dir.c_str(), pick->version.ToString().c_str(), SecondsSince(t0));
  return Status::Ok();
}

}  // namespace

Status RunStoreReceiver(const StoreReceiverOptions& o, const std::atomic<bool>& stop) {
  const std::string name = o.name.empty() ? DefaultName(o.state_dir) : o.name;
  DCR_RETURN_IF_ERROR(CheckReceiverName(name));
  DCR_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> store, OpenObjectStore(o.store_url, o.store));
  if (!fs::exists(fs::path(o.state_dir) / kReplicaStateFile)) {
    if (!o.init.empty()) {
      std::fprintf(o.log, "dcr serve [store]: seeding %s from %s\n", o.state_dir.c_str(), o.init.c_str());
      DCR_RETURN_IF_ERROR(ReplicaState::Init(o.state_dir, o.init, o.threads, o.layout));
    } else {
      DCR_RETURN_IF_ERROR(SeedFromAnchor(*store, o, stop));
      if (stop.load()) return Status::Ok();
    }
  }
  DCR_ASSIGN_OR_RETURN(ReplicaState replica, ReplicaState::Open(o.state_dir, o.threads));
  // The store must hold this model (once it holds anything).
  for (bool said = false; !stop.load();) {
    auto got = GetRecord<StoreInfo>(*store, StoreInfoKey(), ParseStoreInfo);
    if (!got.ok() && got.status().code() != StatusCode::kIoError) return got.status();
    if (!got.ok()) {  // unreachable: waited out like every other step
      std::fprintf(o.log, "dcr serve [store]: %s (retrying)\n", got.status().ToString().c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms * 5));
      continue;
    }
    const std::optional<StoreInfo>& info = *got;
    if (info) {
      if (info->catalog != CatalogDigest64(replica.catalog()))
        return Mismatch(store->url() + " holds another model (catalog " + Hex64(info->catalog) + ") than " + o.state_dir +
                        " (catalog " + Hex64(CatalogDigest64(replica.catalog())) + ")");
      break;
    }
    if (!said) std::fprintf(o.log, "dcr serve [store]: %s holds no model yet; waiting for the first push\n", store->url().c_str());
    said = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms));
  }
  std::fprintf(o.log, "dcr serve [store]: %s at %s follows %s as %s\n", o.state_dir.c_str(), replica.version().ToString().c_str(),
               store->url().c_str(), name.c_str());
  std::fflush(o.log);
  Follower follower(o, *store, std::move(replica), name);
  while (!stop.load()) {
    auto step = follower.Step();
    if (!step.ok()) {
      // A store that cannot be reached is waited out; anything else means this replica cannot follow.
      if (step.status().code() != StatusCode::kIoError) return step.status();
      std::fprintf(o.log, "dcr serve [store]: %s (retrying)\n", step.status().ToString().c_str());
      std::fflush(o.log);
      std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms * 5));
      continue;
    }
    if (*step == Follower::Progress::kCurrent && o.exit_when_current) break;
    if (*step != Follower::Progress::kBusy) std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms));
  }
  return Status::Ok();
}

}  // namespace dcr
