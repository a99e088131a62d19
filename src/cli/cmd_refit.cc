// `dcr serve`, `dcr push`, `dcr status`: the live refit (runtime/).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/report.h"
#include "protocol/baseline_state.h"
#include "protocol/replica_state.h"
#include "runtime/peers.h"
#include "runtime/push.h"
#include "runtime/receiver.h"
#include "runtime/store_refit.h"
#include "runtime/store_status.h"
#include "transport/zmq_socket.h"

namespace dcr::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool HasState(const std::string& dir, const char* file) { return fs::exists(fs::path(dir) / file); }

// A comma list of payload sequence numbers (fault-injection flags).
Status ParseSequences(const std::string& list, const char* flag, std::set<uint32_t>* out) {
  for (const std::string& s : SplitList(list)) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument(std::string(flag) + " takes payload sequence numbers, got '" + s + "'");
    out->insert(static_cast<uint32_t>(std::stoul(s)));
  }
  return Status::Ok();
}

// Options of the S3 backend, shared by serve and push (--store s3://…).
struct StoreArgs {
  std::string endpoint, region;
  bool virtual_host = false;
  uint64_t part_mib = 16;
  int parallelism = 4;
  StoreOptions ToOptions() const {
    StoreOptions o;
    o.endpoint = endpoint;
    o.region = region;
    o.virtual_host_style = virtual_host;
    o.part_bytes = part_mib << 20;
    o.multipart_threshold = std::max<uint64_t>(o.part_bytes, 64ull << 20);
    o.parallelism = parallelism;
    return o;
  }
};

void AddStoreOptions(CLI::App* app, StoreArgs* a) {
  app->add_option("--s3-endpoint", a->endpoint, "S3: endpoint URL, e.g. http://127.0.0.1:4569 (default: AWS for the region)");
  app->add_option("--s3-region", a->region, "S3: region (default: $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1)");
  app->add_flag("--s3-virtual-host", a->virtual_host, "S3: virtual-host style addressing (BUCKET.host) instead of path style");
  app->add_option("--s3-part-mib", a->part_mib, "S3: multipart part and ranged-GET size in MiB")->capture_default_str()->check(CLI::Range(5, 4096));
  app->add_option("--s3-parallel", a->parallelism, "S3: concurrent part uploads / ranged GETs per object")->capture_default_str()->check(CLI::Range(1, 64));
}

struct ServeArgs {
  std::string state, listen, init, layout, store, name;
  int threads = 0, retry_ms = 5000, poll_ms = 200;
  bool once = false;
  StoreArgs s3;
};

int RunStoreServe(const ServeArgs& a) {
  StoreReceiverOptions o;
  o.store_url = a.store;
  o.store = a.s3.ToOptions();
  o.state_dir = a.state;
  o.name = a.name;
  o.init = a.init;
  o.layout = a.layout;
  o.threads = a.threads;
  o.poll_ms = std::max(a.poll_ms, 10);
  o.exit_when_current = a.once;
  Status s = RunStoreReceiver(o, g_stop);
  return s.ok() ? kExitOk : ReportError("serve", s);
}

int RunServe(const ServeArgs& a) {
  if (!a.layout.empty() && a.init.empty())
    return ReportError("serve", InvalidArgument("--layout is used when seeding a state dir: give --init CKPT too"));
  if (a.listen.empty() == a.store.empty())
    return ReportError("serve", InvalidArgument("give exactly one of --listen (relay tree) and --store (object store)"));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  if (!a.store.empty()) return RunStoreServe(a);
  if (!a.init.empty() && !HasState(a.state, "state.json")) {
    std::fprintf(stderr, "dcr serve: seeding %s from %s\n", a.state.c_str(), a.init.c_str());
    if (Status s = ReplicaState::Init(a.state, a.init, a.threads, a.layout); !s.ok()) return ReportError("serve", s);
  }
  ReceiverOptions o;
  o.state_dir = a.state;
  o.listen = a.listen;
  o.threads = a.threads;
  o.forward_retry_ms = a.retry_ms;
  Status s = RunReceiver(o, g_stop);
  return s.ok() ? kExitOk : ReportError("serve", s);
}

struct PushArgs {
  std::string baseline, init, next, receivers, producer = "0/1", coordinator, corrupt, missing, store;
  size_t arity = 2, window = 8;
  double timeout = 30, vote_timeout = 60, live_seconds = 10;
  uint64_t anchor_every = 10, keep_anchors = 2;
  int uploads = 4;
  StoreArgs s3;
  int threads = 0;
  uint64_t chunk_kib = 32 << 10;
  bool json = false, dense = false, plain = false, duplicate = false;
};

int RunPush(const PushArgs& a) {
  PushOptions o;
  unsigned i = 0, m = 0;
  char slash = 0;
  std::istringstream ps(a.producer);
  if (!(ps >> i >> slash >> m) || slash != '/' || m == 0 || i >= m || ps.peek() != std::char_traits<char>::eof())
    return ReportError("push", InvalidArgument("--producer must be I/M with 0 <= I < M, got '" + a.producer + "'"));
  o.producer = i, o.producers = m;
  o.baseline_dir = a.baseline;
  o.new_checkpoint = a.next;
  o.receivers = SplitList(a.receivers);
  o.coordinator = a.coordinator;
  o.arity = a.arity;
  o.timeout_ms = static_cast<int>(a.timeout * 1000);
  o.stream.threads = a.threads;
  o.stream.chunk_bytes = a.chunk_kib << 10;
  o.stream.dense = a.dense;
  o.stream.window = a.window;
  o.stream.deadline_ms = o.timeout_ms;
  o.stream.encode.context = a.plain ? EncodeOptions::Context::kNever : EncodeOptions::Context::kWhenSmaller;
  o.stream.duplicate_sends = a.duplicate;
  std::set<uint32_t> missing;
  if (Status s = ParseSequences(a.corrupt, "--inject-corrupt", &o.stream.corrupt_first_send); !s.ok()) return ReportError("push", s);
  if (Status s = ParseSequences(a.missing, "--inject-missing", &missing); !s.ok()) return ReportError("push", s);
  if (!a.store.empty() && (m != 1 || !a.receivers.empty() || !a.coordinator.empty()))
    return ReportError("push", Unsupported("--store works with one producer and no --receivers/--coordinator (receivers "
                                           "register in the store); several producers through a store are not supported yet"));
  if (a.store.empty() && !missing.empty()) return ReportError("push", InvalidArgument("--inject-missing needs --store"));
  if (!a.init.empty() && !HasState(a.baseline, "baseline.json")) {
    std::fprintf(stderr, "dcr push: seeding baseline %s from %s (producer %u/%u)\n", a.baseline.c_str(), a.init.c_str(), i, m);
    if (Status s = BaselineState::Init(a.baseline, a.init, i, m, a.threads); !s.ok()) return ReportError("push", s);
  }
  Result<PushReport> r = Internal("not run");
  try {
    if (!a.store.empty()) {
      StorePushOptions so;
      so.store_url = a.store;
      so.store = a.s3.ToOptions();
      so.baseline_dir = a.baseline;
      so.new_checkpoint = a.next;
      so.anchor_every = a.anchor_every;
      so.keep_anchors = a.keep_anchors;
      so.vote_timeout_ms = static_cast<int>(a.vote_timeout * 1000);
      so.live_ms = static_cast<int>(a.live_seconds * 1000);
      so.threads = a.threads;
      so.uploads = a.uploads;
      so.chunk_bytes = o.stream.chunk_bytes;
      so.encode = o.stream.encode;
      so.dense = a.dense;
      so.corrupt = o.stream.corrupt_first_send;
      so.missing = missing;
      r = RunStorePush(so);
    } else {
      r = i == 0 ? RunCoordinator(o) : RunFollower(o);
    }
  } catch (const Json::exception& e) {  // a peer sent a field of the wrong type
    r = Corrupt(std::string("malformed message from a peer: ") + e.what());
  }
  ShutdownTransport();  // delivers the last messages (decisions, "advanced") before exiting
  if (!r.ok()) return ReportError("push", r.status());
  for (const std::string& w : r->warnings) std::fprintf(stderr, "dcr push: warning: %s\n", w.c_str());
  if (a.json) {
    std::printf("%s\n", r->ToJson().dump().c_str());
  } else {
    std::printf("committed %s (transfer %s): %llu of %llu elements changed, %s on the wire for %s dense, %.3f s\n",
                r->version.ToString().c_str(), Hex64(r->transfer).c_str(),
                static_cast<unsigned long long>(r->changed), static_cast<unsigned long long>(r->elements),
                HumanBytes(static_cast<double>(r->wire_bytes)).c_str(), HumanBytes(static_cast<double>(r->dense_bytes)).c_str(),
                r->total_seconds);
  }
  return kExitOk;
}

int RunStoreStatus(const std::string& url, const StoreArgs& s3) {
  auto store = OpenObjectStore(url, s3.ToOptions());
  if (!store.ok()) return ReportError("status", store.status());
  auto j = DescribeStore(**store);
  if (!j.ok()) return ReportError("status", j.status());
  std::printf("%s\n", j->dump().c_str());
  return kExitOk;
}

int RunStatus(const std::vector<std::string>& endpoints, double timeout) {
  auto peers = PeerSet::Connect(endpoints);
  if (!peers.ok()) return ReportError("status", peers.status());
  auto replies = peers->CallAll({{"type", "status"}}, static_cast<int>(timeout * 1000));
  int rc = kExitOk;
  for (size_t i = 0; i < replies.size(); ++i) {
    if (!replies[i]) {
      std::fprintf(stderr, "dcr status: error: %s did not answer within %.1f s\n", endpoints[i].c_str(), timeout);
      rc = kExitIo;
      continue;
    }
    Json j = *replies[i];
    j.erase("req");
    j.erase("type");
    j.erase("ok");
    std::printf("%s\n", j.dump().c_str());
  }
  return rc;
}

}  // namespace

void RegisterRefitCommands(CLI::App& app, int* exit_code) {
  auto serve_args = std::make_shared<ServeArgs>();
  CLI::App* serve = app.add_subcommand("serve", "Run a receiver: hold one replica and apply live refits in place.");
  serve->footer(
      "The state dir holds weights.safetensors (updated in place), state.json (the committed version\n"
      "and digests) and, during a transfer, journal/ (the old bits of every element a payload touches,\n"
      "written before the payload is applied). A receiver killed at any instant restarts into the exact\n"
      "base, or into a voted transfer that awaits the coordinator's decision; never a half-applied one.\n"
      "`dcr verify DIR CKPT`, `dcr digest DIR` and `dcr inspect DIR` read a state dir like a checkpoint.\n"
      "SIGTERM or SIGINT stop it cleanly. Layout: docs/state-dirs.md; protocol: docs/refit.md.\n"
      "With --store (instead of --listen) it follows an object store: it registers as receivers/NAME.json\n"
      "(which pins the chain it still needs against garbage collection: delete that object to release\n"
      "a replica for good), applies each open transfer's payloads as they appear, votes through the\n"
      "store and commits on its decision object. S3 credentials: $AWS_ACCESS_KEY_ID,\n"
      "$AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN. Objects and protocol: docs/store.md.");
  serve->add_option("--state", serve_args->state, "State directory of this replica")->required();
  serve->add_option("--listen", serve_args->listen, "Relay tree: endpoint to listen on, e.g. tcp://127.0.0.1:7001");
  serve->add_option("--store", serve_args->store,
                    "Object store to follow instead of listening: file://DIR or s3://BUCKET[/PREFIX]. An empty state\n"
                    "dir is seeded from the newest anchor (or --init), caught up through the chain, then follows");
  serve->add_option("--name", serve_args->name, "Store: this receiver's registration name (default: host and state dir hash)");
  serve->add_option("--poll-ms", serve_args->poll_ms, "Store: poll interval")->capture_default_str();
  serve->add_flag("--once", serve_args->once, "Store: exit once at the store's head with no transfer open (catch up only)");
  AddStoreOptions(serve, &serve_args->s3);
  serve->add_option("--init", serve_args->init, "Seed an empty state dir from this checkpoint (version 0)");
  serve->add_option("--layout", serve_args->layout,
                    "With --init: hold the replica in this serving layout (a `dcr layout generate` dir): the shards\n"
                    "of every rank are kept in DIR/shards and refits are placed into them (plain payloads)");
  serve->add_option("--threads", serve_args->threads, "Threads for digests (0 = all)");
  serve->add_option("--retry-ms", serve_args->retry_ms, "Resend a forwarded payload not acknowledged within this time")->capture_default_str();
  serve->callback([serve_args, exit_code] { *exit_code = RunServe(*serve_args); });

  auto push_args = std::make_shared<PushArgs>();
  CLI::App* push = app.add_subcommand("push", "Run a producer: send NEW to the receivers as a delta, with a joint commit.");
  push->footer(
      "One push is one refit: diff NEW against the baseline, stream payloads through the relay tree\n"
      "(receiver I of N roots producer P's tree when I = P mod N; each node forwards to its --arity\n"
      "children), flush, collect every receiver's vote, record the decision durably in the baseline\n"
      "dir of producer 0, then commit everywhere and advance the baseline. Any failure aborts: every\n"
      "receiver rolls back to the base and the baselines stay where they were.\n"
      "Several producers: start `--producer 0/M --receivers ... --coordinator tcp://HOST:PORT` (the\n"
      "coordinator binds that endpoint) and `--producer I/M --coordinator tcp://HOST:PORT` for\n"
      "I = 1..M-1 (they connect to it and learn the transfer and the receivers from it). Producer I\n"
      "owns the tensors whose catalog index is I mod M; its baseline dir holds only those.\n"
      "--json prints the new version, element and byte counts and stage timings as one JSON object.\n"
      "With --store (one producer): payloads, a manifest, the decision and the chain link are published\n"
      "as objects; the push waits for the votes of the live receivers registered at the base\n"
      "(--live-seconds, --vote-timeout). The first push to an empty store publishes the baseline as the\n"
      "first anchor; --anchor-every N adds one at every Nth version; --keep-anchors bounds how many stay.");
  push->add_option("--baseline", push_args->baseline, "This producer's baseline directory")->required();
  push->add_option("--init", push_args->init, "Seed an empty baseline dir from this checkpoint (version 0)");
  push->add_option("--new", push_args->next, "The new checkpoint (safetensors file or sharded dir)")->required();
  push->add_option("--receivers", push_args->receivers, "Comma-separated receiver endpoints (producer 0 only)");
  push->add_option("--store", push_args->store,
                   "Publish through an object store instead of a relay tree: file://DIR or s3://BUCKET[/PREFIX]");
  push->add_option("--anchor-every", push_args->anchor_every, "Store: publish a full anchor at every version number divisible by this (0: first only)")->capture_default_str();
  push->add_option("--keep-anchors", push_args->keep_anchors, "Store: anchors kept by garbage collection")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  push->add_option("--vote-timeout", push_args->vote_timeout, "Store: seconds live receivers get to vote before the transfer aborts")->capture_default_str();
  push->add_option("--live-seconds", push_args->live_seconds, "Store: receivers whose heartbeat is older than this are not waited for")->capture_default_str();
  push->add_option("--uploads", push_args->uploads, "Store: payload uploads in flight")->capture_default_str()->check(CLI::Range(1, 64));
  push->add_option("--inject-missing", push_args->missing, "Testing (store): list these payload sequences in the manifest but never publish them");
  AddStoreOptions(push, &push_args->s3);
  push->add_option("--producer", push_args->producer, "I/M: this producer's index and the producer count")->capture_default_str();
  push->add_option("--coordinator", push_args->coordinator, "Coordinator endpoint (bound by producer 0, joined by the others)");
  push->add_option("--arity", push_args->arity, "Children per node of the relay tree")->capture_default_str();
  push->add_option("--timeout", push_args->timeout, "Seconds to wait for any peer before aborting")->capture_default_str();
  push->add_option("--threads", push_args->threads, "Encoder threads (0 = all)");
  push->add_option("--chunk-kib", push_args->chunk_kib, "Dense KiB covered by one payload at most (payloads are cut to about equal size, as few as this allows)")->capture_default_str()->check(CLI::Range(1, 1 << 22));
  push->add_option("--window", push_args->window, "Unacknowledged payloads in flight")->capture_default_str();
  push->add_flag("--plain", push_args->plain, "Plain codec mode only (default: context mode where smaller)");
  push->add_flag("--dense", push_args->dense, "Send every element (a full-checkpoint refit through the same path, for comparison)");
  push->add_flag("--json", push_args->json, "Print the result as JSON");
  push->add_option("--inject-corrupt", push_args->corrupt, "Testing: damage the first send of these payload sequences (comma list)");
  push->add_flag("--inject-duplicate", push_args->duplicate, "Testing: send every payload twice");
  push->callback([push_args, exit_code] { *exit_code = RunPush(*push_args); });

  auto endpoints = std::make_shared<std::vector<std::string>>();
  auto timeout = std::make_shared<double>(5);
  auto status_store = std::make_shared<std::string>();
  auto status_s3 = std::make_shared<StoreArgs>();
  CLI::App* status = app.add_subcommand(
      "status", "Print each receiver's version, digest, pending transfer and last refit as JSON, or a store's state.");
  status->footer(
      "With --store URL instead of endpoints: one JSON object with the store's head, the open transfer's\n"
      "progress (payloads published, manifest, votes), anchors, the chain's extent and every registered\n"
      "receiver with its version, pending transfer and heartbeat age (docs/store.md).");
  status->add_option("endpoints", *endpoints, "Receiver endpoints");
  status->add_option("--timeout", *timeout, "Seconds to wait for each answer")->capture_default_str();
  status->add_option("--store", *status_store, "A refit store (file://DIR or s3://BUCKET[/PREFIX]) instead of receivers");
  AddStoreOptions(status, status_s3.get());
  status->callback([endpoints, timeout, status_store, status_s3, exit_code] {
    if (endpoints->empty() == status_store->empty()) {
      *exit_code = ReportError("status", InvalidArgument("give receiver endpoints or --store URL (one of them)"));
      return;
    }
    *exit_code = status_store->empty() ? RunStatus(*endpoints, *timeout) : RunStoreStatus(*status_store, *status_s3);
  });
}

}  // namespace dcr::cli
