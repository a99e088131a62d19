#include "runtime/receiver.h"

#include <deque>
#include <map>
#include <set>
#include <vector>

#include "base/timing.h"
#include "codec/payload_codec.h"
#include "protocol/baseline_state.h"
#include "protocol/replica_state.h"
#include "runtime/messages.h"
#include "runtime/relay_forwarder.h"

namespace dcr {
namespace {

using PayloadKey = std::pair<uint32_t, uint32_t>;  // (producer, sequence)

// Per-transfer metrics; reset by prepare.
struct TransferContext {
  uint64_t id = 0;
  Clock::time_point started;
  uint64_t payloads = 0, duplicates = 0, rejected = 0, changed = 0, bytes_in = 0;
  double apply_seconds = 0;
  std::string failure;  // first payload that could not be applied: the vote is no
};

struct PendingFlush {
  Frame route;
  uint64_t req = 0;
  std::set<PayloadKey> expected;
  Digest128 target;
  Clock::time_point deadline;
};

class ReceiverLoop {
 public:
  ReceiverLoop(ReplicaState state, ZmqSocket router, const ReceiverOptions& o)
      : state_(std::move(state)),
        router_(std::move(router)),
        options_(o),
        forwarder_(o.forward_retry_ms, [this](const std::string& line) { Log(line); }) {}

  Status Run(const std::atomic<bool>& stop) {
    Log("serving " + options_.state_dir + " at " + state_.version().ToString() + " on " + options_.listen);
    while (!stop.load()) {
      std::vector<const ZmqSocket*> sockets{&router_};
      for (const ZmqSocket* s : forwarder_.sockets()) sockets.push_back(s);
      DCR_ASSIGN_OR_RETURN(std::vector<bool> ready, PollReadable(sockets, apply_queue_.empty() ? 100 : 0));
      Message m;
      if (ready[0]) {
        // Drain what is queued, but keep the loop responsive to child replies.
        for (int i = 0; i < 64; ++i) {
          DCR_ASSIGN_OR_RETURN(bool got, router_.Receive(&m, 0));
          if (!got) break;
          HandleRequest(m);
        }
      }
      for (size_t i = 1; i < ready.size(); ++i)
        if (ready[i]) DCR_RETURN_IF_ERROR(forwarder_.Drain(i - 1));
      ApplyNextStaged();
      forwarder_.ResendOverdue();
      CheckFlush();
    }
    Log("stopping (SIGTERM); state stays at " + state_.version().ToString() +
        (state_.pending() ? " with transfer " + Hex64(state_.pending()->transfer_id) + " pending" : ""));
    return Status::Ok();
  }

 private:
  void Log(const std::string& line) {
    std::fprintf(options_.log, "dcr serve [%s]: %s\n", options_.listen.c_str(), line.c_str());
    std::fflush(options_.log);
  }

  void Reply(const Frame& route, const Json& j) {
    Status s = router_.Send({route, HeaderFrame(j)});
    if (!s.ok()) Log("reply dropped: " + s.ToString());
  }

  // A message whose JSON has fields of the wrong type is refused, never fatal.
  void HandleRequest(const Message& m) {
    try {
      HandleRequestUnchecked(m);
    } catch (const Json::exception& e) {
      Log(std::string("malformed message refused: ") + e.what());
      if (m.size() >= 2) Reply(m[0], ErrorReply(0, Corrupt(std::string("malformed message: ") + e.what())));
    }
  }

  void HandleRequestUnchecked(const Message& m) {
    if (m.size() < 2) return;
    const Frame& route = m[0];
    auto header = ParseHeader(m[1], "a client");
    if (!header.ok()) {
      Log(header.status().ToString());
      return;
    }
    const Json& h = *header;
    const uint64_t req = h.value("req", uint64_t{0});
    const std::string type = h["type"].get<std::string>();
    Status s;
    if (type == "payload") {
      if (m.size() != 3) s = Corrupt("payload message without its payload frame");
      else return OnPayload(route, req, h, m[2]);
    } else if (type == "status") {
      return Reply(route, StatusJson(req));
    } else if (type == "prepare") {
      s = OnPrepare(h);
      if (s.ok()) {
        Json r = OkReply(req);
        r["version"] = VersionJson(state_.version());
        // Placement through a serving layout needs plain payloads (context mode reads
        // contiguous canonical old bits): the coordinator then has every producer encode plain.
        r["plain_only"] = state_.has_layout();
        return Reply(route, r);
      }
    } else if (type == "flush") {
      s = OnFlush(route, req, h);
      if (s.ok()) return;  // answered later by CheckFlush
    } else if (type == "commit") {
      s = OnCommit(h);
    } else if (type == "abort") {
      s = OnAbort(h);
    } else {
      s = InvalidArgument("unknown message type '" + type + "'");
    }
    if (!s.ok()) Log(type + " refused: " + s.ToString());
    Json r = s.ok() ? OkReply(req) : ErrorReply(req, s);
    r["version"] = VersionJson(state_.version());
    Reply(route, r);
  }

  Json StatusJson(uint64_t req) {
    Json r = OkReply(req);
    r["version"] = VersionJson(state_.version());
    r["digest"] = state_.committed_digest().ToHex();
    r["state_dir"] = options_.state_dir;
    r["listen"] = options_.listen;
    if (const auto& p = state_.pending()) {
      r["pending"] = {{"transfer", Hex64(p->transfer_id)}, {"voted", p->voted},
                      {"applied_payloads", p->applied_payloads}, {"running_digest", state_.running_digest().ToHex()}};
    }
    r["last_refit"] = last_refit_;
    r["refits"] = refits_;
    return r;
  }

  Status OnPrepare(const Json& h) {
    DCR_ASSIGN_OR_RETURN(uint64_t transfer, ParseHex64(h, "transfer"));
    DCR_ASSIGN_OR_RETURN(Version base, ParseVersion(h, "base"));
    DCR_ASSIGN_OR_RETURN(uint64_t catalog, ParseHex64(h, "catalog"));
    if (!h.contains("receivers") || !h["receivers"].is_array() || !h.contains("index") || !h.contains("arity"))
      return Corrupt("prepare without receivers, index and arity");
    std::vector<std::string> receivers = h["receivers"].get<std::vector<std::string>>();
    const size_t me = h["index"].get<size_t>(), arity = h["arity"].get<size_t>();
    if (me >= receivers.size() || arity == 0) return Corrupt("prepare with index or arity out of range");
    if (catalog != CatalogDigest64(state_.catalog()))
      return Mismatch("the transfer's catalog (names, dtypes, shapes) differs from the replica in " + options_.state_dir);
    DCR_RETURN_IF_ERROR(state_.Begin(transfer, base));
    if (ctx_.id != transfer) {  // anything still queued belongs to a transfer Begin just abandoned
      if (flush_) Reply(flush_->route, ErrorReply(flush_->req, WrongBase("the flushed transfer was replaced")));
      flush_.reset();
      apply_queue_.clear();
      staged_.clear();
      ctx_ = TransferContext{};
      ctx_.id = transfer;
      ctx_.started = Clock::now();
    }
    forwarder_.SetTree(transfer, std::move(receivers), me, arity);
    Log("prepared transfer " + Hex64(transfer) + " from " + base.ToString());
    return Status::Ok();
  }

  void OnPayload(const Frame& route, uint64_t req, const Json& h, const Frame& bytes) {
    Json r{{"type", "reply"}, {"req", req}, {"producer", h.value("producer", 0u)}, {"seq", h.value("seq", 0u)},
           {"transfer", h.value("transfer", std::string())}};
    auto fail = [&](const Status& s) {
      ++ctx_.rejected;
      Log("payload " + std::to_string(h.value("producer", 0u)) + "/" + std::to_string(h.value("seq", 0u)) +
          " rejected: " + s.ToString());
      Json e = ErrorReply(req, s);
      e["producer"] = r["producer"];
      e["seq"] = r["seq"];
      e["transfer"] = r["transfer"];
      if (resend_) e["resend"] = true;
      Reply(route, e);
    };
    const auto& pending = state_.pending();
    auto transfer = ParseHex64(h, "transfer");
    if (!transfer.ok()) return fail(transfer.status());
    if (!pending || pending->transfer_id != *transfer)
      return fail(WrongBase("transfer " + Hex64(*transfer) + " is not prepared here (" + state_.version().ToString() + ")"));
    // Checksum and structure before anything else: a payload damaged in transit is refused
    // here and the sender resends it.
    PayloadLayout layout;
    if (Status s = ParsePayload(bytes, &layout); !s.ok()) {
      resend_ = true;  // damaged in transit (or by the sender): the identical bytes are asked for again
      fail(s);
      resend_ = false;
      return;
    }
    const PayloadKey key{layout.identity.producer_id, layout.identity.sequence};
    if (layout.identity.transfer_id != *transfer || key.first != h.value("producer", 0u) || key.second != h.value("seq", 0u))
      return fail(Corrupt("payload identity does not match its message header"));
    ctx_.bytes_in += bytes.size();
    if (auto queued = staged_.find(key); queued != staged_.end()) {  // a resend of a payload still queued
      if (*queued->second != bytes)
        return fail(Corrupt("payload " + std::to_string(key.first) + "/" + std::to_string(key.second) + " of transfer " +
                            Hex64(*transfer) + " resent with different bytes"));
      ++ctx_.duplicates;
      r["ok"] = true;
      r["duplicate"] = true;
      return Reply(route, r);
    }
    if (state_.HasApplied(key.first, key.second)) {
      auto dup = state_.ApplyPayload(bytes);  // refuses other bytes under the same identity
      if (!dup.ok()) return fail(dup.status());
      ++ctx_.duplicates;
      r["ok"] = true;
      r["duplicate"] = true;
      return Reply(route, r);
    }
    if (pending->voted) return fail(InvalidArgument("transfer already voted; payload not expected"));
    // Staged ACK: the payload is verified and held; from here this node is responsible for
    // applying it and for delivering it to its subtree.
    r["ok"] = true;
    Reply(route, r);
    auto shared = std::make_shared<const Frame>(bytes);
    forwarder_.Forward(key, shared);
    staged_[key] = shared;
    apply_queue_.push_back({key, std::move(shared)});
  }

  // Applies the oldest staged payload. The loop applies one payload per turn, so ACKs and
  // forwarding of later payloads wait for at most one apply.
  void ApplyNextStaged() {
    if (apply_queue_.empty()) return;
    auto [key, bytes] = std::move(apply_queue_.front());
    apply_queue_.pop_front();
    staged_.erase(key);
    auto t0 = Clock::now();
    auto outcome = state_.ApplyPayload(*bytes);
    ctx_.apply_seconds += SecondsSince(t0);
    if (!outcome.ok()) {
      if (ctx_.failure.empty()) ctx_.failure = outcome.status().ToString();
      Log("payload " + std::to_string(key.first) + "/" + std::to_string(key.second) +
          " could not be applied: " + outcome.status().ToString());
      return;
    }
    ++ctx_.payloads;
    ctx_.changed += outcome->changed;
  }

  Status OnFlush(const Frame& route, uint64_t req, const Json& h) {
    DCR_ASSIGN_OR_RETURN(uint64_t transfer, ParseHex64(h, "transfer"));
    const auto& pending = state_.pending();
    if (!pending || pending->transfer_id != transfer)
      return WrongBase("flush of transfer " + Hex64(transfer) + " which is not pending here");
    PendingFlush f;
    f.route = route;
    f.req = req;
    DCR_ASSIGN_OR_RETURN(f.target, ParseDigest(h, "target_digest"));
    if (!h.contains("expected") || !h["expected"].is_array()) return Corrupt("flush without expected payloads");
    for (const Json& e : h["expected"]) {
      if (!e.is_array() || e.size() != 2) return Corrupt("flush: malformed expected entry");
      f.expected.insert({e[0].get<uint32_t>(), e[1].get<uint32_t>()});
    }
    f.deadline = Clock::now() + std::chrono::milliseconds(h.value("wait_ms", 10000));
    if (flush_) Reply(flush_->route, ErrorReply(flush_->req, InvalidArgument("superseded by a newer flush")));
    flush_ = std::move(f);
    return Status::Ok();
  }

  void CheckFlush() {
    if (!flush_) return;
    PendingFlush& f = *flush_;
    const auto& pending = state_.pending();
    // Runs every loop turn (after every apply): while fewer payloads are applied than expected the
    // flush cannot be complete, so the O(expected) scan below waits for a count that can match,
    // a failure or the deadline.
    const size_t applied = pending ? pending->applied_payloads : 0;
    if (applied < f.expected.size() && ctx_.failure.empty() && Clock::now() < f.deadline) return;
    std::vector<PayloadKey> missing;
    for (const PayloadKey& k : f.expected)
      if (!state_.HasApplied(k.first, k.second)) missing.push_back(k);
    const bool complete = missing.empty() && pending && pending->applied_payloads == f.expected.size();
    if (!complete && ctx_.failure.empty() && Clock::now() < f.deadline) return;
    Json r = OkReply(f.req);
    r["applied"] = pending ? pending->applied_payloads : 0;
    r["expected"] = f.expected.size();
    r["digest"] = state_.running_digest().ToHex();
    r["payloads_received"] = ctx_.payloads + ctx_.duplicates;
    r["forwarded_bytes"] = forwarder_.forwarded_bytes();
    r["reforwarded_bytes"] = forwarder_.reforwarded_bytes();
    std::string reason;
    if (!ctx_.failure.empty()) reason = ctx_.failure;
    else if (!missing.empty()) reason = std::to_string(missing.size()) + " expected payloads missing (first: " +
                                      std::to_string(missing[0].first) + "/" + std::to_string(missing[0].second) + ")";
    else if (!complete) reason = "payloads applied that the flush did not expect";
    else if (state_.running_digest() != f.target) reason = "state digest " + state_.running_digest().ToHex() +
                                                          " is not the expected " + f.target.ToHex();
    if (reason.empty()) {
      if (Status s = state_.Vote(); !s.ok()) reason = "cannot record the vote: " + s.ToString();
    }
    r["vote"] = reason.empty();
    if (!reason.empty()) r["reason"] = reason;
    Log(reason.empty() ? "voted yes for transfer " + Hex64(ctx_.id) : "voted no: " + reason);
    Reply(f.route, r);
    flush_.reset();
  }

  Status OnCommit(const Json& h) {
    DCR_ASSIGN_OR_RETURN(uint64_t transfer, ParseHex64(h, "transfer"));
    DCR_ASSIGN_OR_RETURN(Version next, ParseVersion(h, "version"));
    const auto& pending = state_.pending();
    if (!pending || pending->transfer_id != transfer) {
      if (state_.version() == next) return Status::Ok();  // a repeated commit
      return WrongBase("commit of transfer " + Hex64(transfer) + " which is not pending here (" +
                       state_.version().ToString() + ")");
    }
    if (!pending->voted) return InvalidArgument("commit of transfer " + Hex64(transfer) + " before this receiver voted");
    // The version is recomputed from what this replica holds: a coordinator that names another
    // version is refused.
    const Version mine = NextVersion(state_.version(), transfer, state_.running_digest());
    if (mine != next) return Corrupt("commit names " + next.ToString() + " but this replica computes " + mine.ToString());
    DCR_RETURN_IF_ERROR(state_.Commit(next));
    EndTransfer("commit");
    return Status::Ok();
  }

  Status OnAbort(const Json& h) {
    DCR_ASSIGN_OR_RETURN(uint64_t transfer, ParseHex64(h, "transfer"));
    const auto& pending = state_.pending();
    if (!pending || pending->transfer_id != transfer) return Status::Ok();
    DCR_RETURN_IF_ERROR(state_.Abort());
    EndTransfer("abort");
    return Status::Ok();
  }

  void EndTransfer(const char* outcome) {
    apply_queue_.clear();
    staged_.clear();
    flush_.reset();
    last_refit_ = {{"event", "refit"},
                   {"outcome", outcome},
                   {"transfer", Hex64(ctx_.id)},
                   {"version", VersionJson(state_.version())},
                   {"payloads", ctx_.payloads},
                   {"duplicates", ctx_.duplicates},
                   {"rejected", ctx_.rejected},
                   {"changed", ctx_.changed},
                   {"bytes_in", ctx_.bytes_in},
                   {"forwarded_bytes", forwarder_.forwarded_bytes()},
                   {"reforwarded_bytes", forwarder_.reforwarded_bytes()},
                   {"apply_seconds", ctx_.apply_seconds},
                   {"seconds", ctx_.id ? SecondsSince(ctx_.started) : 0.0}};
    ++refits_;
    std::fprintf(options_.log, "%s\n", last_refit_.dump().c_str());
    std::fflush(options_.log);
    forwarder_.Clear();
    ctx_ = TransferContext{};
  }

  ReplicaState state_;
  ZmqSocket router_;
  ReceiverOptions options_;
  RelayForwarder forwarder_;
  TransferContext ctx_;
  std::optional<PendingFlush> flush_;
  Json last_refit_ = Json::object();
  uint64_t refits_ = 0;
  bool resend_ = false;  // set while refusing a payload that failed its checksum or structure checks
  // Payloads ACKed and forwarded but not applied yet, oldest first, and the same by identity.
  std::deque<std::pair<PayloadKey, std::shared_ptr<const Frame>>> apply_queue_;
  std::map<PayloadKey, std::shared_ptr<const Frame>> staged_;
};

}  // namespace

Status RunReceiver(const ReceiverOptions& options, const std::atomic<bool>& stop) {
  DCR_ASSIGN_OR_RETURN(ReplicaState state, ReplicaState::Open(options.state_dir, options.threads));
  DCR_ASSIGN_OR_RETURN(ZmqSocket router, ZmqSocket::Bind(options.listen));
  ReceiverLoop loop(std::move(state), std::move(router), options);
  return loop.Run(stop);
}

}  // namespace dcr
