// `dcr demo`: the whole offline cycle on a generated trajectory. A replica starts from the
// first snapshot; every later snapshot reaches it only as a delta (diff -> apply), and after
// each step the replica is checked bit-identical to the snapshot.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/commands.h"
#include "cli/report.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "synth/trajectory.h"

namespace dcr::cli {
namespace {

namespace fs = std::filesystem;

struct DemoArgs {
  std::string dir;
  bool keep = false;
  int steps_per_rate = 2;
  int threads = 0;
  SynthModelConfig model;
  uint64_t seed = 7;
};

Status FilesEqual(const std::string& a, const std::string& b) {
  DCR_ASSIGN_OR_RETURN(MappedFile fa, MappedFile::Open(a));
  DCR_ASSIGN_OR_RETURN(MappedFile fb, MappedFile::Open(b));
  if (fa.size() != fb.size() || std::memcmp(fa.bytes().data(), fb.bytes().data(), fa.size()) != 0)
    return Internal(a + " and " + b + " are not byte-identical");
  return Status::Ok();
}

Status RunDemoSteps(const DemoArgs& a, const std::string& dir) {
  const double rates[] = {1e-6, 3e-6, 1e-5};
  SynthTrajectory traj(a.model, {a.seed, rates[0]});
  auto snap = [&](int k) { return dir + "/step_" + std::to_string(k) + ".safetensors"; };
  const std::string replica = dir + "/replica.safetensors";
  DCR_RETURN_IF_ERROR(traj.WriteSnapshot(snap(0)));
  fs::copy_file(snap(0), replica, fs::copy_options::overwrite_existing);
  std::printf("dcr demo: %llu-parameter BF16 model (%u layers, hidden %u), %d steps, in %s\n",
              static_cast<unsigned long long>(traj.num_parameters()), a.model.layers, a.model.hidden,
              3 * a.steps_per_rate, dir.c_str());
  std::printf("A replica starts from step 0 and receives every later step only as a delta.\n\n");
  std::printf("%4s %7s %9s %11s %11s %8s %8s %10s %9s  %s\n", "step", "lr", "changed", "dense", "wire", "smaller",
              "B/chg", "encode", "apply", "replica");
  uint64_t dense_total = 0, wire_total = 0;
  int k = 0;
  for (double lr : rates) {
    traj.set_learning_rate(lr);
    for (int s = 0; s < a.steps_per_rate; ++s) {
      traj.Step();
      ++k;
      DCR_RETURN_IF_ERROR(traj.WriteSnapshot(snap(k)));
      const std::string delta_path = dir + "/step_" + std::to_string(k) + ".dcr";
      DiffStats ds;
      {
        DCR_ASSIGN_OR_RETURN(Checkpoint base, Checkpoint::Open(snap(k - 1)));
        DCR_ASSIGN_OR_RETURN(Checkpoint next, Checkpoint::Open(snap(k)));
        DiffOptions o;
        o.threads = a.threads;
        DCR_ASSIGN_OR_RETURN(ds, DiffCheckpoints(base, next, delta_path, o));
      }
      ApplyStats as;
      {
        DCR_ASSIGN_OR_RETURN(DeltaReader delta, DeltaReader::Open(delta_path));
        DCR_ASSIGN_OR_RETURN(Checkpoint target, Checkpoint::Open(replica, MappedFile::Mode::kReadWrite));
        ApplyOptions o;
        o.threads = a.threads;
        DCR_ASSIGN_OR_RETURN(as, ApplyDelta(delta, target, o));
      }
      {
        DCR_ASSIGN_OR_RETURN(Checkpoint r, Checkpoint::Open(replica));
        DCR_ASSIGN_OR_RETURN(Checkpoint n, Checkpoint::Open(snap(k)));
        DCR_ASSIGN_OR_RETURN(auto diff, FirstDifference(r, n));
        if (diff) return Internal("replica differs from step " + std::to_string(k) + " in tensor '" + diff->tensor + "'");
      }
      DCR_RETURN_IF_ERROR(FilesEqual(replica, snap(k)));
      dense_total += ds.dense_bytes;
      wire_total += ds.wire_bytes;
      double pct = 100.0 * static_cast<double>(ds.changed_elements) / static_cast<double>(ds.total_elements);
      std::printf("%4d %7.0e %8.3f%% %11s %11s %7.1fx %8.2f %8.1fms %7.1fms  bit-exact\n", k, lr, pct,
                  HumanBytes(static_cast<double>(ds.dense_bytes)).c_str(), HumanBytes(static_cast<double>(ds.wire_bytes)).c_str(),
                  static_cast<double>(ds.dense_bytes) / static_cast<double>(ds.wire_bytes),
                  static_cast<double>(ds.wire_bytes) / static_cast<double>(std::max<uint64_t>(1, ds.changed_elements)),
                  1e3 * ds.encode_seconds, 1e3 * (as.verify_seconds + as.apply_seconds));
    }
  }
  std::printf("\n%d refits: %s of dense checkpoints sent as %s of deltas (%.1fx fewer bytes); "
              "replica bit-identical (verify + cmp) after every step.\n",
              k, HumanBytes(static_cast<double>(dense_total)).c_str(), HumanBytes(static_cast<double>(wire_total)).c_str(),
              static_cast<double>(dense_total) / static_cast<double>(wire_total));
  std::printf("encode = diff + encode; apply = payload verification + in-place apply + fsync "
              "(the O(model) base-digest check is excluded).\n");
  return Status::Ok();
}

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
  Status s = RunDemoSteps(a, dir);
  if (made_temp && !a.keep) fs::remove_all(dir);
  if (!s.ok()) return ReportError("demo", s);
  return kExitOk;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<DemoArgs>();
  auto* demo = app.add_subcommand("demo", "Run the diff -> apply -> verify cycle on a generated trajectory.");
  demo->footer(
      "Generates a small Llama-style BF16 model, trains it synthetically (Adam-like steps at learning\n"
      "rates 1e-6, 3e-6, 1e-5), and refits a replica from each step's delta, checking it bit-exact.");
  demo->add_option("--dir", args->dir, "working directory (default: a temporary one, removed afterwards)");
  demo->add_flag("--keep", args->keep, "keep the temporary directory");
  demo->add_option("--steps-per-rate", args->steps_per_rate, "optimizer steps at each learning rate")->check(CLI::Range(1, 1000));
  demo->add_option("--layers", args->model.layers, "transformer layers")->check(CLI::Range(1, 256));
  demo->add_option("--hidden", args->model.hidden, "hidden size (multiple of 8)")->check(CLI::Range(8, 16384));
  demo->add_option("--vocab", args->model.vocab, "vocabulary size")->check(CLI::Range(1, 1 << 20));
  demo->add_option("--seed", args->seed, "random seed");
  demo->add_option("--threads", args->threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber);
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
