#include <filesystem>
#include <map>
#include <thread>

#include "base/crash_point.h"
#include "base/timing.h"
#include "protocol/baseline_state.h"
#include "protocol/state_digest.h"
#include "runtime/decision_log.h"
#include "runtime/peers.h"
#include "runtime/push.h"
#include "runtime/relay_tree.h"

namespace dcr {
namespace {

using State = TransferRecord::State;

void Say(const PushOptions& o, const std::string& line) {
  std::fprintf(o.log, "dcr push [coordinator]: %s\n", line.c_str());
  std::fflush(o.log);
}

// The other producers, as seen through the coordinator's ROUTER socket.
class Followers {
 public:
  Followers(ZmqSocket* router, uint32_t producers, int timeout_ms) : router_(router), n_(producers), timeout_ms_(timeout_ms) {}

  // Waits until every follower has sent a message of `type`; a "failed" message from any of
  // them is an error. Returns the messages by producer index.
  Result<std::map<uint32_t, Json>> Collect(const std::string& type, const DecisionLog* log) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    // Messages of later steps may arrive early (a follower does not wait between "join" and
    // "ready"): everything received is kept in the inbox by type.
    while (inbox_[type].size() + 1 < n_) {
      if (Clock::now() > deadline)
        return IoError("producers did not all send '" + type + "' within " + std::to_string(timeout_ms_ / 1000) + " s (" +
                       std::to_string(inbox_[type].size() + 1) + " of " + std::to_string(n_) + ")");
      Message m;
      DCR_ASSIGN_OR_RETURN(bool any, router_->Receive(&m, 50));
      if (!any || m.size() < 2) continue;
      auto h = ParseHeader(m[1], "a producer");
      if (!h.ok()) continue;
      const uint32_t p = (*h).value("producer", 0u);
      if (p == 0 || p >= n_) continue;
      const std::string t = (*h)["type"].get<std::string>();
      if (t == "join") {  // (re)joins are answered whenever they come: a follower may retry
        if ((*h).value("producers", 0u) != n_)
          return InvalidArgument("producer " + std::to_string(p) + " runs as one of " + std::to_string((*h).value("producers", 0u)) +
                                 " producers, the coordinator as one of " + std::to_string(n_));
        routes_[p] = m[0];
        DCR_RETURN_IF_ERROR(AnswerJoin(m[0], *h, log));
      }
      // A follower exits after "advanced", so it waits for this answer (its last message could
      // otherwise be lost with its socket).
      if (t == "advanced") (void)router_->Send({m[0], HeaderFrame({{"type", "bye"}})});
      if (t == "failed") return Internal("producer " + std::to_string(p) + " failed: " + (*h).value("error", ""));
      inbox_[t][p] = std::move(*h);
    }
    return inbox_[type];
  }

  void Broadcast(const Json& j) {
    for (const auto& [p, route] : routes_) (void)router_->Send({route, HeaderFrame(j)});
  }
  void set_base(const Version& v) { base_ = v; }

 private:
  Status AnswerJoin(const Frame& route, const Json& h, const DecisionLog* log) {
    Json r{{"type", "joined"}, {"base", VersionJson(base_)}, {"decisions", Json::object()}};
    if (h.contains("staged") && h["staged"].is_array())
      for (const Json& s : h["staged"]) {
        if (!s.is_string()) continue;
        Json probe{{"t", s}};
        DCR_ASSIGN_OR_RETURN(uint64_t t, ParseHex64(probe, "t"));
        DCR_ASSIGN_OR_RETURN(auto rec, log->Find(t));
        Json d{{"state", rec ? TransferStateName(rec->state) : "abort"}};
        if (rec && rec->state == State::kCommit) d["target"] = VersionJson(rec->target);
        r["decisions"][Hex64(t)] = d;
      }
    return router_->Send({route, HeaderFrame(r)});
  }

  ZmqSocket* router_;
  uint32_t n_;
  int timeout_ms_;
  Version base_;
  std::map<uint32_t, Frame> routes_;
  std::map<std::string, std::map<uint32_t, Json>> inbox_;  // by message type, by producer
};

// Brings every receiver to a committed version: pending transfers get the logged decision.
Status SettleReceivers(PeerSet& receivers, DecisionLog& log, const PushOptions& o, std::vector<Version>* versions) {
  auto status = receivers.CallAll({{"type", "status"}}, o.timeout_ms);
  std::vector<std::optional<Json>> decisions(receivers.size());
  for (size_t i = 0; i < receivers.size(); ++i) {
    if (!status[i]) return IoError("receiver " + receivers.endpoint(i) + " did not answer within " + std::to_string(o.timeout_ms / 1000) + " s");
    const Json& s = *status[i];
    if (!s.contains("pending")) continue;
    DCR_ASSIGN_OR_RETURN(uint64_t t, ParseHex64(s["pending"], "transfer"));
    DCR_ASSIGN_OR_RETURN(auto rec, log.Find(t));
    if (rec && rec->state == State::kCommit) {
      decisions[i] = Json{{"type", "commit"}, {"transfer", Hex64(t)}, {"version", VersionJson(rec->target)}};
    } else {
      if (!rec || rec->state == State::kStarted) {
        DCR_ASSIGN_OR_RETURN(Version base, ParseVersion(s, "version"));
        DCR_RETURN_IF_ERROR(log.Record({t, State::kAbort, base, {}, "never decided"}));
      }
      decisions[i] = Json{{"type", "abort"}, {"transfer", Hex64(t)}};
    }
    Say(o, "receiver " + receivers.endpoint(i) + " had transfer " + Hex64(t) + " pending: sending the recorded decision (" +
               (*decisions[i])["type"].get<std::string>() + ")");
  }
  auto settled = receivers.Call(decisions, o.timeout_ms);
  versions->clear();
  for (size_t i = 0; i < receivers.size(); ++i) {
    const Json* r = settled[i] ? &*settled[i] : &*status[i];
    if (decisions[i] && !settled[i]) return IoError("receiver " + receivers.endpoint(i) + " did not acknowledge the decision");
    if (decisions[i]) DCR_RETURN_IF_ERROR(ReplyStatus(*r, receivers.endpoint(i)));
    DCR_ASSIGN_OR_RETURN(Version v, ParseVersion(*r, "version"));
    versions->push_back(v);
  }
  return Status::Ok();
}

}  // namespace

Result<PushReport> RunCoordinator(const PushOptions& o) {
  const auto t_total = Clock::now();
  PushReport report;
  if (o.receivers.empty()) return InvalidArgument("no receivers given (--receivers)");
  DCR_ASSIGN_OR_RETURN(BaselineState baseline, BaselineState::Open(o.baseline_dir, 0, o.producers));
  DCR_ASSIGN_OR_RETURN(DecisionLog log, DecisionLog::Open(o.baseline_dir));
  DCR_RETURN_IF_ERROR(ResolveStaged(baseline, log));
  DCR_ASSIGN_OR_RETURN(Checkpoint next, Checkpoint::Open(o.new_checkpoint));
  if (CatalogDigest64(next.catalog()) != baseline.catalog_digest())  // another model: refused before any transfer
    return Mismatch(o.new_checkpoint + " has another catalog (tensor names, dtypes or shapes) than the baseline " +
                    o.baseline_dir + " was seeded with; nothing was sent");
  const Version base = baseline.version();
  report.base = base;

  std::optional<ZmqSocket> router;
  if (o.producers > 1) {
    if (o.coordinator.empty()) return InvalidArgument("--coordinator is required with more than one producer");
    DCR_ASSIGN_OR_RETURN(ZmqSocket r, ZmqSocket::Bind(o.coordinator));
    DCR_RETURN_IF_ERROR(r.SetLinger(2000));  // a decision broadcast just before exit still arrives
    router.emplace(std::move(r));
  }
  Followers followers(router ? &*router : nullptr, o.producers, o.timeout_ms);
  followers.set_base(base);
  if (router) {
    Say(o, "waiting for " + std::to_string(o.producers - 1) + " producers on " + o.coordinator);
    DCR_RETURN_IF_ERROR(followers.Collect("join", &log).status());
    DCR_ASSIGN_OR_RETURN(auto ready, followers.Collect("ready", &log));
    for (const auto& [p, j] : ready) {
      DCR_ASSIGN_OR_RETURN(Version v, ParseVersion(j, "version"));
      if (v != base) {
        followers.Broadcast({{"type", "decision"}, {"state", "abort"}});
        return WrongBase("producer " + std::to_string(p) + "'s baseline is at " + v.ToString() + ", producer 0's at " + base.ToString());
      }
    }
  }

  DCR_ASSIGN_OR_RETURN(PeerSet receivers, PeerSet::Connect(o.receivers));
  std::vector<Version> versions;
  if (Status s = SettleReceivers(receivers, log, o, &versions); !s.ok()) {
    followers.Broadcast({{"type", "decision"}, {"state", "abort"}});
    return s;
  }
  for (size_t i = 0; i < versions.size(); ++i)
    if (versions[i] != base) {
      followers.Broadcast({{"type", "decision"}, {"state", "abort"}});
      return WrongBase("receiver " + o.receivers[i] + " is at " + versions[i].ToString() + " but the baseline is at " +
                       base.ToString() + "; nothing was sent (a receiver must hold the base version to accept a transfer)");
    }

  DCR_ASSIGN_OR_RETURN(uint64_t attempt, log.AttemptsFrom(base));
  const uint64_t transfer = LiveTransferId(base, attempt);
  report.transfer = transfer;
  DCR_RETURN_IF_ERROR(log.Record({transfer, State::kStarted, base, {}, ""}));

  // From here on every failure aborts the transfer everywhere.
  std::thread stager;  // stages producer 0's next baseline while the flush runs
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{stager};
  auto abort = [&](const Status& why) -> Status {
    if (stager.joinable()) stager.join();
    Say(o, "aborting transfer " + Hex64(transfer) + ": " + why.ToString());
    Status logged = log.Record({transfer, State::kAbort, base, {}, why.ToString()});
    followers.Broadcast({{"type", "decision"}, {"state", "abort"}, {"transfer", Hex64(transfer)}});
    receivers.CallAll({{"type", "abort"}, {"transfer", Hex64(transfer)}}, std::min(o.timeout_ms, 5000));
    (void)baseline.DropStaged(transfer);
    if (!logged.ok()) return logged;
    return why.WithContext("transfer " + Hex64(transfer) + " aborted; every baseline and receiver stays at " + base.ToString());
  };

  std::vector<std::optional<Json>> prepares;
  for (size_t i = 0; i < o.receivers.size(); ++i)
    prepares.push_back(Json{{"type", "prepare"}, {"transfer", Hex64(transfer)}, {"base", VersionJson(base)},
                            {"catalog", Hex64(CatalogDigest64(next.catalog()))}, {"receivers", o.receivers},
                            {"index", i}, {"arity", o.arity}});
  auto prepared = receivers.Call(prepares, o.timeout_ms);
  StreamOptions stream = o.stream;
  bool plain_only = false;
  for (size_t i = 0; i < prepared.size(); ++i) {
    if (!prepared[i]) return abort(IoError("receiver " + o.receivers[i] + " did not answer prepare"));
    if (Status s = ReplyStatus(*prepared[i], o.receivers[i]); !s.ok()) return abort(s);
    plain_only |= prepared[i]->value("plain_only", false);
  }
  // One encoding serves every receiver: if any holds a serving layout, everyone gets plain.
  if (plain_only) stream.encode.context = EncodeOptions::Context::kNever;
  Say(o, "transfer " + Hex64(transfer) + " prepared on " + std::to_string(o.receivers.size()) + " receivers");
  followers.Broadcast({{"type", "start"}, {"transfer", Hex64(transfer)}, {"receivers", o.receivers}, {"arity", o.arity},
                       {"plain", plain_only}});

  // Stream our own part.
  const std::string root = o.receivers[TreeRoot(0, o.receivers.size())];
  auto streamed = StreamPart(baseline, next, transfer, root, stream);
  if (!streamed.ok()) return abort(streamed.status());
  StreamResult& mine = *streamed;
  std::vector<std::vector<uint32_t>> expected(o.producers);
  std::map<std::string, Digest128> digests = mine.target_digests;
  for (const auto& p : mine.payloads) expected[0].push_back(p.sequence);
  report.changed = mine.changed, report.elements = mine.elements, report.dense_bytes = mine.dense_bytes;
  report.wire_bytes = mine.wire_bytes, report.sent_bytes = mine.sent_bytes, report.resends = mine.resends;
  report.encode_seconds = mine.encode_seconds, report.stream_seconds = mine.stream_seconds;
  if (router) {
    auto done = followers.Collect("done", &log);
    if (!done.ok()) return abort(done.status());
    for (const auto& [p, j] : *done) {
      const auto malformed = [&, p = p] { return abort(Corrupt("producer " + std::to_string(p) + " sent a malformed 'done'")); };
      if (!j.contains("payloads") || !j["payloads"].is_array() || !j.contains("digests") || !j["digests"].is_object()) return malformed();
      for (const Json& s : j["payloads"]) {
        if (!s.is_number_unsigned()) return malformed();
        expected[p].push_back(s.get<uint32_t>());
      }
      for (const auto& [name, hex] : j["digests"].items()) {
        Digest128 d;
        if (!hex.is_string() || !Digest128::FromHex(hex.get<std::string>(), &d)) return malformed();
        digests[name] = d;
      }
      report.changed += j.value("changed", uint64_t{0});
      report.elements += j.value("elements", uint64_t{0});
      report.dense_bytes += j.value("dense_bytes", uint64_t{0});
      report.wire_bytes += j.value("wire_bytes", uint64_t{0});
      report.sent_bytes += j.value("sent_bytes", uint64_t{0});
      report.resends += j.value("resends", uint64_t{0});
      report.stream_seconds = std::max(report.stream_seconds, j.value("stream_seconds", 0.0));
    }
  }
  const Catalog catalog = next.catalog();
  std::vector<Digest128> per_tensor;
  for (const CatalogEntry& e : catalog) {
    auto it = digests.find(e.name);
    if (it == digests.end()) return abort(Internal("no producer reported tensor '" + e.name + "'"));
    per_tensor.push_back(it->second);
  }
  const Digest128 target_digest = CombineDigests(catalog, per_tensor);
  const Version target = NextVersion(base, transfer, target_digest);

  // Every producer stages its next baseline (its prepared state) while the receivers flush.
  followers.Broadcast({{"type", "stage"}, {"transfer", Hex64(transfer)}, {"target", VersionJson(target)}});
  Status stage_status;
  double stage_seconds = 0;
  stager = std::thread([&] {
    auto t0 = Clock::now();
    stage_status = baseline.Stage(transfer, next, target, mine.target_digests);
    stage_seconds = SecondsSince(t0);
  });

  // Flush + vote.
  auto t_flush = Clock::now();
  Json flush{{"type", "flush"}, {"transfer", Hex64(transfer)}, {"target_digest", target_digest.ToHex()},
             {"wait_ms", o.timeout_ms}, {"expected", Json::array()}};
  for (uint32_t p = 0; p < o.producers; ++p)
    for (uint32_t s : expected[p]) {
      flush["expected"].push_back({p, s});
      ++report.payloads;
    }
  auto votes = receivers.CallAll(flush, o.timeout_ms + std::min(o.timeout_ms, 2000));
  report.flush_seconds = SecondsSince(t_flush);
  std::string no;
  for (size_t i = 0; i < votes.size(); ++i) {
    ReceiverFlush rf;
    rf.endpoint = o.receivers[i];
    if (!votes[i]) {
      rf.reason = "no answer to flush";
    } else {
      Status s = ReplyStatus(*votes[i], o.receivers[i]);
      rf.vote = s.ok() && votes[i]->value("vote", false);
      rf.applied = votes[i]->value("applied", uint64_t{0});
      rf.digest = votes[i]->value("digest", "");
      rf.forwarded_bytes = votes[i]->value("forwarded_bytes", uint64_t{0});
      rf.reason = s.ok() ? votes[i]->value("reason", "") : s.message();
    }
    if (!rf.vote && no.empty()) no = "receiver " + rf.endpoint + " voted no: " + rf.reason;
    report.receivers.push_back(rf);
  }
  stager.join();
  report.stage_seconds = stage_seconds;
  if (!stage_status.ok()) return abort(stage_status.WithContext("staging producer 0's next baseline"));
  if (router) {
    auto staged = followers.Collect("staged", &log);
    if (!staged.ok()) return abort(staged.status());
  }
  if (!no.empty()) return abort(Internal(no));

  // The decision, durable before anyone acts on it.
  auto t_commit = Clock::now();
  DCR_RETURN_IF_ERROR(log.Record({transfer, State::kCommit, base, target, ""}));
  CrashPoint("coordinator.decided");
  Say(o, "transfer " + Hex64(transfer) + " committed: " + target.ToString());
  followers.Broadcast({{"type", "decision"}, {"state", "commit"}, {"transfer", Hex64(transfer)}, {"target", VersionJson(target)}});
  DCR_RETURN_IF_ERROR(baseline.CommitStaged(transfer));
  auto acks = receivers.CallAll({{"type", "commit"}, {"transfer", Hex64(transfer)}, {"version", VersionJson(target)}}, o.timeout_ms);
  for (size_t i = 0; i < acks.size(); ++i) {
    Status s = acks[i] ? ReplyStatus(*acks[i], o.receivers[i]) : IoError(o.receivers[i] + ": no answer");
    if (!s.ok())
      report.warnings.push_back("receiver has not acknowledged the commit (" + s.message() +
                                "); the decision is recorded and it learns it at the next push");
  }
  if (router) {
    auto advanced = followers.Collect("advanced", &log);
    if (!advanced.ok())
      report.warnings.push_back("not every producer confirmed its baseline (" + advanced.status().message() +
                                "); a producer learns the decision when it next joins");
  }
  report.commit_seconds = SecondsSince(t_commit);
  report.committed = true;
  report.version = target;
  report.total_seconds = SecondsSince(t_total);
  return report;
}

Json PushReport::ToJson() const {
  Json j{{"committed", committed}, {"transfer", Hex64(transfer)}, {"base", VersionJson(base)}, {"version", VersionJson(version)},
         {"changed_elements", changed}, {"total_elements", elements}, {"dense_bytes", dense_bytes}, {"wire_bytes", wire_bytes},
         {"sent_bytes", sent_bytes}, {"payloads", payloads}, {"resends", resends},
         {"seconds", {{"encode", encode_seconds}, {"stream", stream_seconds}, {"stage", stage_seconds},
                      {"flush", flush_seconds}, {"commit", commit_seconds}, {"total", total_seconds}}}};
  j["receivers"] = Json::array();
  for (const auto& r : receivers)
    j["receivers"].push_back({{"endpoint", r.endpoint}, {"vote", r.vote}, {"applied", r.applied}, {"digest", r.digest},
                              {"forwarded_bytes", r.forwarded_bytes}});
  j["warnings"] = warnings;
  if (via_store)
    j["store"] = {{"requests", store_requests}, {"retries", store_retries}, {"bytes_put", store_bytes_put}, {"bytes_got", store_bytes_got}};
  return j;
}

}  // namespace dcr
