// Producers 1..M-1 of a push (runtime/push.h): join the coordinator, stream their own part
// when told, stage, and advance their baseline only on the coordinator's commit decision.
#include "base/timing.h"
#include "protocol/baseline_state.h"
#include "runtime/push.h"
#include "runtime/relay_tree.h"

namespace dcr {
namespace {

class CoordinatorLink {
 public:
  CoordinatorLink(ZmqSocket socket, uint32_t producer, int timeout_ms)
      : socket_(std::move(socket)), producer_(producer), timeout_ms_(timeout_ms) {}

  Status Send(Json j) {
    j["producer"] = producer_;
    return socket_.Send({HeaderFrame(j)});
  }
  // Waits for a message of `type` (or a "decision", which may end the transfer at any time).
  Result<Json> Wait(const std::string& type, int timeout_ms = -1) {
    if (timeout_ms < 0) timeout_ms = timeout_ms_;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      Message m;
      DCR_ASSIGN_OR_RETURN(bool got, socket_.Receive(&m, 100));
      if (!got || m.empty()) continue;
      DCR_ASSIGN_OR_RETURN(Json h, ParseHeader(m[0], socket_.endpoint()));
      const std::string t = h["type"].get<std::string>();
      if (t == type || t == "decision") return h;
    }
    return IoError("coordinator " + socket_.endpoint() + " sent no '" + type + "' within " + std::to_string(timeout_ms / 1000) + " s");
  }

 private:
  ZmqSocket socket_;
  uint32_t producer_;
  int timeout_ms_;
};

Status Aborted(const Version& base) {
  return Internal("the coordinator aborted the transfer; the baseline stays at " + base.ToString());
}

}  // namespace

Result<PushReport> RunFollower(const PushOptions& o) {
  const auto t_total = Clock::now();
  if (o.coordinator.empty()) return InvalidArgument("--coordinator is required for producer " + std::to_string(o.producer));
  DCR_ASSIGN_OR_RETURN(BaselineState baseline, BaselineState::Open(o.baseline_dir, o.producer, o.producers));
  DCR_ASSIGN_OR_RETURN(Checkpoint next, Checkpoint::Open(o.new_checkpoint));
  if (CatalogDigest64(next.catalog()) != baseline.catalog_digest())  // another model: refused before any transfer
    return Mismatch(o.new_checkpoint + " has another catalog (tensor names, dtypes or shapes) than the baseline " +
                    o.baseline_dir + " was seeded with; nothing was sent");
  DCR_ASSIGN_OR_RETURN(ZmqSocket socket, ZmqSocket::Connect(o.coordinator, 0, /*queue_until_connected=*/true));
  DCR_RETURN_IF_ERROR(socket.SetLinger(2000));  // "failed" and "advanced" must outlive the process
  CoordinatorLink link(std::move(socket), o.producer, o.timeout_ms);

  // Join (retried until the coordinator is up), learning the decisions of our staged transfers.
  Json join{{"type", "join"}, {"producers", o.producers}, {"version", VersionJson(baseline.version())}, {"staged", Json::array()}};
  for (uint64_t t : baseline.staged_transfers()) join["staged"].push_back(Hex64(t));
  Json joined;
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
  for (;;) {
    (void)link.Send(join);
    auto r = link.Wait("joined", 100);
    if (r.ok() && (*r)["type"] == "joined") {
      joined = *r;
      break;
    }
    if (Clock::now() > deadline) return IoError("coordinator " + o.coordinator + " did not answer the join");
  }
  for (uint64_t t : baseline.staged_transfers()) {
    const Json& d = joined["decisions"].value(Hex64(t), Json::object());
    if (d.value("state", "") == "commit") {
      DCR_RETURN_IF_ERROR(baseline.CommitStaged(t));
    } else {
      DCR_RETURN_IF_ERROR(baseline.DropStaged(t));
    }
  }
  DCR_ASSIGN_OR_RETURN(Version base, ParseVersion(joined, "base"));
  DCR_RETURN_IF_ERROR(link.Send({{"type", "ready"}, {"version", VersionJson(baseline.version())}}));
  if (baseline.version() != base)
    return WrongBase("this producer's baseline is at " + baseline.version().ToString() + ", the coordinator's at " + base.ToString());

  DCR_ASSIGN_OR_RETURN(Json start, link.Wait("start"));
  if (start["type"] == "decision") return Aborted(base);
  DCR_ASSIGN_OR_RETURN(uint64_t transfer, ParseHex64(start, "transfer"));
  const auto receivers = start["receivers"].get<std::vector<std::string>>();
  if (receivers.empty()) return Corrupt("start without receivers");
  const std::string root = receivers[TreeRoot(o.producer, receivers.size())];

  PushReport report;
  report.base = base;
  report.transfer = transfer;
  StreamOptions stream = o.stream;
  if (start.value("plain", false)) stream.encode.context = EncodeOptions::Context::kNever;  // a receiver holds a layout
  auto streamed = StreamPart(baseline, next, transfer, root, stream);
  if (!streamed.ok()) {
    (void)link.Send({{"type", "failed"}, {"error", streamed.status().ToString()}});
    return streamed.status();
  }
  const StreamResult& mine = *streamed;
  Json done{{"type", "done"}, {"payloads", Json::array()}, {"digests", Json::object()}, {"changed", mine.changed},
            {"elements", mine.elements}, {"dense_bytes", mine.dense_bytes}, {"wire_bytes", mine.wire_bytes},
            {"sent_bytes", mine.sent_bytes}, {"resends", mine.resends}, {"stream_seconds", mine.stream_seconds}};
  for (const auto& p : mine.payloads) done["payloads"].push_back(p.sequence);
  for (const auto& [name, d] : mine.target_digests) done["digests"][name] = d.ToHex();
  DCR_RETURN_IF_ERROR(link.Send(done));
  DCR_ASSIGN_OR_RETURN(Json stage, link.Wait("stage"));
  if (stage["type"] == "decision") return Aborted(base);
  DCR_ASSIGN_OR_RETURN(Version target, ParseVersion(stage, "target"));
  auto t_stage = Clock::now();
  if (Status s = baseline.Stage(transfer, next, target, mine.target_digests); !s.ok()) {
    (void)link.Send({{"type", "failed"}, {"error", s.ToString()}});
    return s;
  }
  report.stage_seconds = SecondsSince(t_stage);
  DCR_RETURN_IF_ERROR(link.Send({{"type", "staged"}}));

  // The coordinator flushes (up to 2 timeouts) before it decides.
  DCR_ASSIGN_OR_RETURN(Json decision, link.Wait("decision", 3 * o.timeout_ms));
  if (decision.value("state", "") != "commit") {
    DCR_RETURN_IF_ERROR(baseline.DropStaged(transfer));
    return Aborted(base);
  }
  DCR_RETURN_IF_ERROR(baseline.CommitStaged(transfer));
  // Confirmed by the coordinator's "bye", so the message is not lost when this process exits.
  for (int i = 0; i < 30; ++i) {
    (void)link.Send({{"type", "advanced"}});
    auto bye = link.Wait("bye", 100);
    if (bye.ok() && (*bye)["type"] == "bye") break;
  }
  report.committed = true;
  report.version = target;
  report.changed = mine.changed, report.elements = mine.elements, report.dense_bytes = mine.dense_bytes;
  report.wire_bytes = mine.wire_bytes, report.sent_bytes = mine.sent_bytes, report.resends = mine.resends;
  report.payloads = mine.payloads.size();
  report.encode_seconds = mine.encode_seconds, report.stream_seconds = mine.stream_seconds;
  report.total_seconds = SecondsSince(t_total);
  return report;
}

}  // namespace dcr
