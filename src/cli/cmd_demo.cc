// `dcr demo`: the live system on one machine. Generates a synthetic BF16 training trajectory,
// starts N receivers (`dcr serve`) and M producers (`dcr push --producer I/M`) as separate
// processes talking ZeroMQ over loopback TCP, refits every step through the relay tree with the
// joint commit, checks every receiver bit-identical to the snapshot after each commit, and
// compares with a dense refit (every element sent) through the same path.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "base/timing.h"
#include "cli/child_process.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "format/checkpoint.h"
#include "runtime/messages.h"
#include "runtime/peers.h"
#include "synth/trajectory.h"

namespace dcr::cli {
namespace {

namespace fs = std::filesystem;

struct DemoArgs {
  std::string dir;
  bool keep = false;
  int steps_per_rate = 2;
  int receivers = 4, producers = 2;
  SynthModelConfig model;
  uint64_t seed = 7;
};

// A loopback TCP port that is free now, for a receiver or coordinator to bind moments later:
// taken at random from below the kernel's ephemeral range, so that no connection another process
// opens meanwhile (every connect takes an ephemeral port, and tests run beside the demo) can take
// it first, as it could take a port that bind(0) had handed out. Falls back to bind(0) when that
// range leaves no room below it.
Result<int> FreePort() {
  int ephemeral_low = 32768;
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    int lo = 0, hi = 0;
    if (range >> lo >> hi && lo > 0) ephemeral_low = lo;
  }
  constexpr int kLowest = 10000;  // above the well-known and most registered services' ports
  const bool below = ephemeral_low - kLowest >= 1000;
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return ErrnoError("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (below) {
      const unsigned span = static_cast<unsigned>(ephemeral_low - kLowest);
      a.sin_port = htons(static_cast<uint16_t>(kLowest + static_cast<int>(rng() % span)));
    }
    socklen_t len = sizeof(a);
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                       ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    ::close(fd);
    if (bound) return static_cast<int>(ntohs(a.sin_port));
    if (!below) return ErrnoError("bind an ephemeral port");
  }
  return IoError("no free loopback port below " + std::to_string(ephemeral_low) + " after 64 tries");
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

class Demo {
 public:
  Demo(const DemoArgs& a, std::string dir) : a_(a), dir_(std::move(dir)) {}

  Status Run() {
    SynthTrajectory traj(a_.model, {a_.seed, 1e-6});
    DCR_RETURN_IF_ERROR(traj.WriteSnapshot(Snap(0)));
    std::printf("dcr demo: %llu-parameter BF16 model (%u layers, hidden %u) in %s\n",
                static_cast<unsigned long long>(traj.num_parameters()), a_.model.layers, a_.model.hidden, dir_.c_str());
    DCR_RETURN_IF_ERROR(StartReceivers());
    std::printf("%d receivers (relay tree, arity 2) and %d producers as separate processes on loopback TCP.\n",
                a_.receivers, a_.producers);

    // Reference: a dense refit (every element as an overwrite) of step 0 through the same path.
    // The first push also seeds the producers' baselines, so the second one is the one timed.
    DCR_RETURN_IF_ERROR(Push(Snap(0), /*dense=*/true).status());
    DCR_ASSIGN_OR_RETURN(Json dense, Push(Snap(0), /*dense=*/true));
    const double dense_s = dense["seconds"]["total"].get<double>();
    DCR_RETURN_IF_ERROR(CheckReceivers(0));
    std::printf("dense refit through the same path: %s on the wire, %.3f s\n\n",
                HumanBytes(dense["wire_bytes"].get<double>()).c_str(), dense_s);
    std::printf("%4s %7s %9s %10s %10s %8s %9s %8s  %s\n", "step", "lr", "changed", "dense", "wire", "smaller", "refit", "speedup",
                "receivers");
    const double rates[] = {1e-6, 3e-6, 1e-5};
    int k = 0;
    double total_s = 0;
    for (double lr : rates) {
      traj.set_learning_rate(lr);
      for (int s = 0; s < a_.steps_per_rate; ++s) {
        traj.Step();
        ++k;
        DCR_RETURN_IF_ERROR(traj.WriteSnapshot(Snap(k)));
        DCR_ASSIGN_OR_RETURN(Json r, Push(Snap(k), false));
        DCR_RETURN_IF_ERROR(CheckReceivers(k));
        const double t = r["seconds"]["total"].get<double>();
        total_s += t;
        const double changed = r["changed_elements"].get<double>(), total = r["total_elements"].get<double>();
        const double dense_b = r["dense_bytes"].get<double>(), wire_b = r["wire_bytes"].get<double>();
        std::printf("%4d %7.0e %8.3f%% %10s %10s %7.1fx %8.3fs %7.1fx  %d bit-exact\n", k, lr, 100 * changed / total,
                    HumanBytes(dense_b).c_str(), HumanBytes(wire_b).c_str(), dense_b / wire_b, t, dense_s / t, a_.receivers);
      }
    }
    std::printf("\n%d refits, each committed jointly on %d receivers and verified bit-identical to its snapshot.\n", k,
                a_.receivers);
    std::printf("refit = diff + encode + stream through the tree + journaled apply + flush/vote + commit;\n"
                "speedup = dense refit time / refit time (mean refit %.3f s).%s\n", total_s / k,
                a_.keep || !a_.dir.empty() ? (" Receiver logs: " + dir_ + "/r*.log.").c_str() : "");
    StopReceivers();
    return Status::Ok();
  }

  ~Demo() { StopReceivers(); }

 private:
  std::string Snap(int k) const { return dir_ + "/step_" + std::to_string(k) + ".safetensors"; }

  Status StartReceivers() {
    for (int i = 0; i < a_.receivers; ++i) {
      DCR_ASSIGN_OR_RETURN(int port, FreePort());
      const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
      const std::string state = dir_ + "/r" + std::to_string(i);
      const std::string log = dir_ + "/r" + std::to_string(i) + ".log";
      DCR_ASSIGN_OR_RETURN(ChildProcess p, ChildProcess::SpawnSelf({"serve", "--state", state, "--listen", endpoint, "--init", Snap(0)}, log, log));
      receivers_.push_back(std::move(p));
      endpoints_.push_back(endpoint);
      states_.push_back(state);
    }
    // Every receiver answers a status request within 60 s; one that exits meanwhile (its port
    // taken, say) fails the demo at once rather than at the deadline.
    DCR_ASSIGN_OR_RETURN(PeerSet peers, PeerSet::Connect(endpoints_));
    std::vector<std::optional<Json>> pending(endpoints_.size(), Json{{"type", "status"}});
    for (int second = 0;; ++second) {
      const auto replies = peers.Call(pending, 1000);
      bool all = true;
      for (size_t i = 0; i < replies.size(); ++i) {
        if (replies[i]) pending[i].reset();
        if (!pending[i]) continue;
        all = false;
        const std::string log = dir_ + "/r" + std::to_string(i) + ".log";
        if (int code = 0; receivers_[i].Exited(&code))
          return IoError("receiver " + endpoints_[i] + " exited at start (code " + std::to_string(code) + "); see " + log);
        if (second >= 60) return IoError("receiver " + endpoints_[i] + " did not answer within 60 s; see " + log);
      }
      if (all) return Status::Ok();
    }
  }

  void StopReceivers() {
    for (ChildProcess& p : receivers_) p.Terminate(5000);
    receivers_.clear();
  }

  // One refit: producers 1..M-1 in the background, producer 0 (the coordinator) with --json.
  Result<Json> Push(const std::string& snapshot, bool dense) {
    if (coordinator_.empty()) {
      DCR_ASSIGN_OR_RETURN(int port, FreePort());
      coordinator_ = "tcp://127.0.0.1:" + std::to_string(port);
    }
    const std::string out = dir_ + "/push.json", log = dir_ + "/push.log";
    fs::remove(out);
    std::vector<ChildProcess> procs;
    for (int p = a_.producers - 1; p >= 0; --p) {
      const std::string id = std::to_string(p) + "/" + std::to_string(a_.producers);
      std::vector<std::string> args{"push", "--producer", id, "--baseline", dir_ + "/p" + std::to_string(p), "--init", Snap(0),
                                    "--new", snapshot, "--coordinator", coordinator_, "--timeout", "60"};
      if (p == 0) args.insert(args.end(), {"--receivers", Join(endpoints_), "--json"});
      if (dense) args.push_back("--dense");
      DCR_ASSIGN_OR_RETURN(ChildProcess c, ChildProcess::SpawnSelf(args, p == 0 ? out : log, log));
      procs.push_back(std::move(c));
    }
    for (size_t i = 0; i < procs.size(); ++i) {
      DCR_ASSIGN_OR_RETURN(int rc, procs[i].Wait(120000));
      if (rc != 0) return Internal("a producer failed (exit " + std::to_string(rc) + "); see " + log);
    }
    std::ifstream in(out);
    Json j = Json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.value("committed", false)) return Internal("producer 0 printed no committed result in " + out);
    return j;
  }

  // Every receiver holds exactly the snapshot's bits, and all report the same version.
  Status CheckReceivers(int k) {
    DCR_ASSIGN_OR_RETURN(Checkpoint snap, Checkpoint::Open(Snap(k)));
    for (const std::string& s : states_) {
      DCR_ASSIGN_OR_RETURN(Checkpoint r, Checkpoint::Open(s));
      DCR_ASSIGN_OR_RETURN(auto diff, FirstDifference(r, snap));
      if (diff) return Internal("receiver " + s + " differs from step " + std::to_string(k) + " in tensor '" + diff->tensor + "'");
    }
    DCR_ASSIGN_OR_RETURN(PeerSet peers, PeerSet::Connect(endpoints_));
    auto replies = peers.CallAll({{"type", "status"}}, 10000);
    for (size_t i = 0; i < replies.size(); ++i) {
      if (!replies[i] || !replies[0]) return IoError("receiver " + endpoints_[i] + " did not answer status");
      if ((*replies[i])["version"] != (*replies[0])["version"] || (*replies[i])["digest"] != (*replies[0])["digest"])
        return Internal("receivers " + endpoints_[0] + " and " + endpoints_[i] + " report different versions");
    }
    return Status::Ok();
  }

  DemoArgs a_;
  std::string dir_, coordinator_;
  std::vector<ChildProcess> receivers_;
  std::vector<std::string> endpoints_, states_;
};

int RunDemo(const DemoArgs& a) {
  std::string dir = a.dir;
  bool made_temp = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/dcr-demo-XXXXXX";
    if (!::mkdtemp(tmpl)) return ReportError("demo", ErrnoError("mkdtemp"));
    dir = tmpl;
    made_temp = true;
  } else {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return ReportError("demo", IoError("create " + dir + ": " + ec.message()));
  }
  Status s;
  {
    Demo demo(a, dir);
    s = demo.Run();
  }
  if (made_temp && !a.keep && s.ok()) fs::remove_all(dir);
  if (!s.ok()) {
    std::fprintf(stderr, "dcr demo: logs kept in %s\n", dir.c_str());
    return ReportError("demo", s);
  }
  return kExitOk;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<DemoArgs>();
  auto* demo = app.add_subcommand("demo", "Run the live refit system on one machine: receivers, producers, joint commits.");
  demo->footer(
      "Generates a small Llama-style BF16 model and trains it synthetically (Adam-like steps at learning\n"
      "rates 1e-6, 3e-6, 1e-5). Starts --receivers `dcr serve` processes and --producers `dcr push`\n"
      "processes on loopback TCP, refits every step through the relay tree with the joint commit, and\n"
      "checks every receiver bit-identical to the step's snapshot after each commit. A dense refit (every\n"
      "element sent through the same path) is the reference for the speedup column.");
  demo->add_option("--dir", args->dir, "working directory (default: a temporary one, removed afterwards)");
  demo->add_flag("--keep", args->keep, "keep the temporary directory");
  demo->add_option("--steps-per-rate", args->steps_per_rate, "optimizer steps at each learning rate")->check(CLI::Range(1, 1000));
  demo->add_option("--receivers", args->receivers, "receiver processes")->check(CLI::Range(1, 64));
  demo->add_option("--producers", args->producers, "producer processes")->check(CLI::Range(1, 16));
  demo->add_option("--layers", args->model.layers, "transformer layers")->check(CLI::Range(1, 256));
  demo->add_option("--hidden", args->model.hidden, "hidden size (multiple of 8)")->check(CLI::Range(8, 16384));
  demo->add_option("--vocab", args->model.vocab, "vocabulary size")->check(CLI::Range(1, 1 << 20));
  demo->add_option("--seed", args->seed, "random seed");
  demo->callback([=] {
    if (args->model.hidden % args->model.heads != 0) {
      *exit_code = ReportError("demo", InvalidArgument("--hidden must be a multiple of 8"));
      return;
    }
    args->model.intermediate = args->model.hidden * 8 / 3 / 8 * 8;
    *exit_code = RunDemo(*args);
  });
}

}  // namespace dcr::cli
