// `dcr bench codec [FILES...]`: codec figures per consecutive checkpoint pair, each next to a
// plain two-stream memory scan of the same data measured in the same run.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/cache_evict.h"
#include "base/thread_pool.h"
#include "base/timing.h"
#include "codec/simd_masks.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "synth/trajectory.h"

namespace dcr::cli {
namespace {

namespace fs = std::filesystem;

struct BenchArgs {
  std::vector<std::string> files;
  std::string codec = "both";
  int threads = 0;
  int repeat = 3;
  bool json = false;
  bool cold = false;  // evict the inputs from the caches before each timed pass
  // The generated trajectory used when no FILES are given.
  uint32_t synth_layers = 4, synth_hidden = 512;
  double synth_lr = 3e-6;
};

void EvictCheckpoint(const Checkpoint& c) {
  for (const auto& t : c.tensors()) EvictFromCaches(t.bytes);
}

// The scan's loop: the 8-byte words of x and y (n each) that differ. Its loop starts a 64-byte
// line: a loop this short ran at a speed that depended on where the linker placed it, and with
// it every ratio to the scan (one build with the loop 48 bytes into a line against the same
// build with it aligned, 4.5-5 % pairs: every ratio's median 1.2-1.45x higher).
[[gnu::noinline, gnu::optimize("align-loops=64")]] uint64_t CountDifferingWords(const uint8_t* x, const uint8_t* y,
                                                                               size_t n) {
  uint64_t acc = 0;
  for (size_t k = 0; k < n; ++k) {
    uint64_t u, v;
    std::memcpy(&u, x + 8 * k, 8);
    std::memcpy(&v, y + 8 * k, 8);
    acc += (u != v);
  }
  return acc;
}

// Reads both checkpoints' tensor bytes once, as a diff must: the bandwidth reference. Unless
// `cold` (the inputs just evicted from the caches, as the pass after it meets them), an untimed
// scan goes first: the pass compared with it runs right after it, on inputs that scan has just
// read, so the timed scan starts from that state too. (Timed after other work, as before, the
// scan of the real pairs ran at 23-41 GB/s against ~44.7 after a scan, on a Zen 5 VM, and every
// ratio to it was that much higher.)
double ScanSeconds(const Checkpoint& a, const Checkpoint& b, int threads, bool cold) {
  const auto& ta = a.tensors();
  std::vector<uint64_t> sink(ta.size());
  auto scan = [&] {
    return ParallelFor(ta.size(), threads, [&](size_t i) {
      sink[i] = CountDifferingWords(ta[i].bytes.data(), b.tensors()[i].bytes.data(), ta[i].bytes.size() / 8);
      return Status::Ok();
    });
  };
  if (!cold) (void)scan();
  auto t0 = Clock::now();
  Status s = scan();
  double t = SecondsSince(t0);
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  (void)keep;
  return s.ok() ? t : 0;
}

struct PairResult {
  // The best of the repetitions; the scans run before the encodes and before the decodes apart,
  // each pass's best-time ratio taken to its own scans' best.
  double encode_scan_s = 1e30, apply_scan_s = 1e30, encode_s = 1e30, apply_s = 1e30;
  double scan_s() const { return std::min(encode_scan_s, apply_scan_s); }
  // Per repetition, a scan's time over its encode's and another's over its decode+apply's:
  // each scan runs right before the pass it is compared with, so on a machine whose speed
  // drifts these ratios vary less than the ratio of the best times.
  std::vector<double> encode_vs_scan, apply_vs_scan;
  uint64_t wire = 0, changed = 0, dense = 0, elements = 0, context_payloads = 0, payloads = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Decode + apply of every payload into an in-memory replica of the base (*replica, which holds
// the base's bytes on entry and again on return: a receiver's replica stays mapped from refit to
// refit), then a bit-exact check against the new checkpoint. Excludes the O(model) base-digest
// check and fsync of `dcr apply`. Context mode reads the old bits from the replica, as a receiver
// reads its own: each payload is decoded before it is applied, and payloads cover disjoint
// elements, so every payload sees only old bits in its own segments whatever the thread count.
// The replica goes back to the base by applying `reverse` (the delta from next to base, in the
// same codec), untimed: a refit as a receiver's previous one left it, each line written last by
// the thread that applies the same elements' changes now (the parts and value shares are cut at
// the same places). Copying the base over it instead, on one thread, left half the lines in the
// other core's cache, where a store costs several times more than to a core's own line (the 4.5 %
// real pair, two threads, in a harness: decode+apply 1.1x (context) and 1.35x (plain) as long).
// The timed pass follows an untimed one (then the scan): the decoder's steady state, as a
// receiver decoding payload after payload runs, not its state right after this repetition's
// encode, which evicted its code, predictor state and buffers (the 4.5 % real pair, two threads:
// 9.75-9.79 GB/s without, 12.2-12.3 with, the scan unchanged).
// *scan_s: a scan of the pair run right before the timed decode, its reference: on a virtual
// machine a CPU back from idle (the encode's fsync) runs the next milliseconds markedly slower
// (one-thread decode+apply of the 4.8 % pair: median 0.77 ms after a 2 ms sleep, 0.46-0.52
// without), so a ratio is only fair between runs in the same state.
Result<double> DecodeApplySeconds(const DeltaReader& delta, const DeltaReader& reverse, const Checkpoint& base,
                                  const Checkpoint& next, int threads, bool cold,
                                  std::vector<std::vector<uint8_t>>* replica, double* scan_s) {
  std::vector<std::vector<uint8_t>>& work = *replica;
  BaseLookup lookup = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    if (s.tensor_index >= work.size()) return Corrupt("tensor index out of range");
    const uint64_t w = DTypeWidth(s.dtype);
    if ((s.start + s.count) * w > work[s.tensor_index].size()) return Corrupt("segment outside its tensor");
    return std::span<const uint8_t>(work[s.tensor_index]).subspan(s.start * w, s.count * w);
  };
  auto decode_apply = [&](const DeltaReader& d) {
    return ParallelForItems(d.header().payloads.size(), threads, [&](size_t i, int per_payload) {
      thread_local DecodedPayload p;  // reused: the decoder's steady state, its storage already mapped
      return DecodeApplyTablePayload(d, i, &p, lookup, [&](uint32_t t) { return std::span<uint8_t>(work[t]); },
                                     per_payload);
    });
  };
  DCR_RETURN_IF_ERROR(decode_apply(delta));  // untimed
  DCR_RETURN_IF_ERROR(decode_apply(reverse));
  if (cold) EvictCheckpoint(base), EvictCheckpoint(next);
  *scan_s = ScanSeconds(base, next, threads, cold);
  if (cold) {
    for (const auto& w : work) EvictFromCaches(w);
    for (size_t i = 0; i < delta.header().payloads.size(); ++i) EvictFromCaches(delta.PayloadBytes(i));
  }
  auto t0 = Clock::now();
  DCR_RETURN_IF_ERROR(decode_apply(delta));
  double t = SecondsSince(t0);
  for (size_t i = 0; i < work.size(); ++i)
    if (!std::equal(work[i].begin(), work[i].end(), next.tensors()[i].bytes.begin()))
      return Internal("bench: decode+apply did not reproduce tensor '" + next.tensors()[i].name() +
                      "' (or the reverse delta did not restore the base before it)");
  // The base again, for the next repetition (whose timed pass checks the result: not checked
  // here, where reading the base would warm it for the next scan).
  DCR_RETURN_IF_ERROR(decode_apply(reverse));
  return t;
}

// Diff + encode of every payload of base -> next, as DiffCheckpoints encodes them (its plan,
// waves and threads; nothing written), timed after an untimed pass: a producer's steady state,
// encoding payload after payload, as the decode is timed in the decoder's. Timed inside
// DiffCheckpoints instead, the encode followed its base digest, itself after the last call's
// footer compression on one thread and its fsync, with both CPUs idle or half idle, and ran
// slower (real 4.5-5 % pairs, two threads, on a 2-vCPU VM: 1.17-1.2x the steady encode's time,
// median over 60 repetitions; the scan it is compared with is timed after an untimed scan for the
// same reason). The timed pass's payloads are checked against `delta` (DiffCheckpoints' file):
// its change count, and the bytes of its last wave. *scan_s: a scan of the pair run between the
// two passes, right before the timed one (as DecodeApplySeconds orders them; the scan right before
// the untimed pass instead gave alike ratios).
Result<double> EncodeSeconds(const Checkpoint& base, const Checkpoint& next, const DeltaReader& delta,
                             const DiffOptions& options, int threads, bool cold, std::vector<EncodedPayload>* wave,
                             double* scan_s) {
  const uint64_t id = DefaultTransferId(delta.header().base_digest);
  DCR_RETURN_IF_ERROR(EncodeDiffPayloads(base, next, options, id, wave).status());  // untimed
  if (cold) EvictCheckpoint(base), EvictCheckpoint(next);
  *scan_s = ScanSeconds(base, next, threads, cold);
  if (cold) EvictCheckpoint(base), EvictCheckpoint(next);
  auto t0 = Clock::now();
  DCR_ASSIGN_OR_RETURN(const uint64_t changed, EncodeDiffPayloads(base, next, options, id, wave));
  const double t = SecondsSince(t0);
  if (changed != delta.header().changed_elements())
    return Internal("bench: the timed encode found " + std::to_string(changed) + " changed elements, the delta " +
                    std::to_string(delta.header().changed_elements()));
  // The last wave's payloads with changes are the delta's last ones, in plan order.
  const auto& table = delta.header().payloads;
  size_t k = table.size();
  for (size_t i = wave->size(); i-- > 0;) {
    const EncodedPayload& p = (*wave)[i];
    if (p.changed == 0) continue;
    if (k == 0) return Internal("bench: the timed encode has more payloads with changes than the delta");
    if (!std::ranges::equal(p.bytes, delta.PayloadBytes(--k)))
      return Internal("bench: the timed encode's payload " + std::to_string(k) + " differs from the delta's");
  }
  return t;
}

Result<PairResult> BenchPair(const std::string& a, const std::string& b, bool context, const BenchArgs& args,
                             const std::string& tmp) {
  DCR_ASSIGN_OR_RETURN(Checkpoint base, Checkpoint::Open(a));
  DCR_ASSIGN_OR_RETURN(Checkpoint next, Checkpoint::Open(b));
  PairResult r;
  const std::string out = tmp + "/bench.dcr";
  auto diff_options = [&] {
    DiffOptions o;
    o.threads = args.threads;
    o.encode.context = context ? EncodeOptions::Context::kWhenSmaller : EncodeOptions::Context::kNever;
    return o;
  };
  // The delta back from next to base (untimed), which DecodeApplySeconds applies to restore
  // its replica; the replica starts as a copy of the base.
  const std::string back = tmp + "/bench-reverse.dcr";
  DCR_RETURN_IF_ERROR(DiffCheckpoints(next, base, back, diff_options()).status());
  DCR_ASSIGN_OR_RETURN(DeltaReader reverse, DeltaReader::Open(back));
  std::vector<std::vector<uint8_t>> replica(base.tensors().size());
  for (size_t i = 0; i < replica.size(); ++i) replica[i].assign(base.tensors()[i].bytes.begin(), base.tensors()[i].bytes.end());
  // The delta (the same file at every repetition: the encode is deterministic), which every
  // timed encode is checked against and every timed decode+apply reads.
  DCR_ASSIGN_OR_RETURN(DiffStats s, DiffCheckpoints(base, next, out, diff_options()));
  r.wire = s.wire_bytes, r.changed = s.changed_elements, r.dense = s.dense_bytes, r.payloads = s.payloads;
  r.elements = s.total_elements;
  DCR_ASSIGN_OR_RETURN(DeltaReader delta, DeltaReader::Open(out));
  r.context_payloads = 0;
  for (size_t i = 0; i < delta.header().payloads.size(); ++i) {
    PayloadLayout layout;
    DCR_RETURN_IF_ERROR(ParsePayload(delta.PayloadBytes(i), &layout));
    r.context_payloads += NeedsOldBits(layout.mode);
  }
  std::vector<EncodedPayload> wave;
  for (int rep = 0; rep < args.repeat; ++rep) {
    double scan_s = 0;
    DCR_ASSIGN_OR_RETURN(double encode_s, EncodeSeconds(base, next, delta, diff_options(), args.threads, args.cold,
                                                        &wave, &scan_s));
    r.encode_scan_s = std::min(r.encode_scan_s, scan_s);
    r.encode_s = std::min(r.encode_s, encode_s);
    r.encode_vs_scan.push_back(scan_s / encode_s);
    double scan_before_apply_s = 0;
    DCR_ASSIGN_OR_RETURN(double apply_s, DecodeApplySeconds(delta, reverse, base, next, args.threads, args.cold,
                                                            &replica, &scan_before_apply_s));
    r.apply_scan_s = std::min(r.apply_scan_s, scan_before_apply_s);
    r.apply_s = std::min(r.apply_s, apply_s);
    r.apply_vs_scan.push_back(scan_before_apply_s / apply_s);
  }
  return r;
}

int RunBench(BenchArgs args) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/dcr-bench-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return ReportError("bench", ErrnoError("mkdtemp " + tmpl));
  const std::string tmp = tmpl;
  struct RemoveOnReturn {  // the scratch directory goes on every return path
    std::string dir;
    ~RemoveOnReturn() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{tmp};
  if (args.files.empty()) {  // a generated trajectory of three steps
    const uint32_t h = args.synth_hidden;
    SynthTrajectory traj(SynthModelConfig{args.synth_layers, h, h * 8 / 3 / 8 * 8, 16 * h, 8, 2}, {11, args.synth_lr});
    if (!args.json)
      std::printf("generating 3 snapshots of a %.1f M-parameter model (lr %g)...\n",
                  static_cast<double>(traj.num_parameters()) / 1e6, args.synth_lr);
    for (int k = 0; k < 3; ++k) {
      if (k > 0) traj.Step();
      args.files.push_back(tmp + "/step_" + std::to_string(k) + ".safetensors");
      Status s = traj.WriteSnapshot(args.files.back());
      if (!s.ok()) return ReportError("bench", s);
    }
  }
  if (args.files.size() < 2) return ReportError("bench", InvalidArgument("need at least two checkpoints"));
  const int threads = args.threads > 0 ? args.threads : HardwareThreads();
  nlohmann::json rows = nlohmann::json::array();
  if (!args.json)
    std::printf("%-40s %-5s %8s %8s %9s %9s %9s %9s %7s %7s %7s %7s\n", "pair", "codec", "chg %", "B/chg", "B/dense",
                "scan GB/s", "enc GB/s", "dec GB/s", "enc/scn", "dec/scn", "enc med", "dec med");
  int rc = kExitOk;
  for (size_t i = 0; i + 1 < args.files.size(); ++i) {
    for (bool context : {false, true}) {
      if ((context && args.codec == "plain") || (!context && args.codec == "ctx")) continue;
      args.threads = threads;
      auto r = BenchPair(args.files[i], args.files[i + 1], context, args, tmp);
      if (!r.ok()) {
        rc = ReportError("bench", r.status());
        break;
      }
      const double gb = static_cast<double>(r->dense) / 1e9;
      const double per_change = r->changed ? static_cast<double>(r->wire) / static_cast<double>(r->changed) : 0;
      const double density = static_cast<double>(r->changed) / (static_cast<double>(r->dense) / 2.0);
      const std::string pair = fs::path(args.files[i]).filename().string() + " -> " + fs::path(args.files[i + 1]).filename().string();
      nlohmann::json row = {{"pair", pair}, {"codec", context ? "ctx" : "plain"}, {"threads", threads},
                            {"changed_elements", r->changed}, {"total_elements", r->elements}, {"dense_bytes", r->dense},
                            {"wire_bytes", r->wire}, {"simd_target", ActiveSimdTargetName()},
                            {"payloads", r->payloads}, {"context_payloads", r->context_payloads},
                            {"wire_bytes_per_changed_element", per_change},
                            {"wire_bytes_per_dense_byte", static_cast<double>(r->wire) / static_cast<double>(r->dense)},
                            {"scan_GBps", gb / r->scan_s()}, {"encode_GBps", gb / r->encode_s}, {"decode_apply_GBps", gb / r->apply_s},
                            {"encode_vs_scan", r->encode_scan_s / r->encode_s}, {"decode_apply_vs_scan", r->apply_scan_s / r->apply_s},
                            {"encode_vs_scan_median", Median(r->encode_vs_scan)},
                            {"decode_apply_vs_scan_median", Median(r->apply_vs_scan)},
                            {"cold", args.cold}};
      rows.push_back(row);
      if (!args.json)
        std::printf("%-40s %-5s %8.3f %8.3f %9.5f %9.2f %9.2f %9.2f %7.2f %7.2f %7.2f %7.2f\n", pair.c_str(),
                    context ? "ctx" : "plain", 100 * density, per_change,
                    static_cast<double>(r->wire) / static_cast<double>(r->dense), gb / r->scan_s(), gb / r->encode_s,
                    gb / r->apply_s, r->encode_scan_s / r->encode_s, r->apply_scan_s / r->apply_s, Median(r->encode_vs_scan),
                    Median(r->apply_vs_scan));
    }
    if (rc != kExitOk) break;
  }
  if (rc != kExitOk) return rc;
  if (args.json) std::printf("%s\n", rows.dump().c_str());
  else
    std::printf("%d thread(s), best of %d, SIMD target %s%s. chg %% assumes 2-byte elements. enc = diff+encode in memory; dec = "
                "verify+decode+apply in memory, each timed after an untimed one; x/scn = throughput relative to the "
                "two-stream scan of the same pair (best times; a scan runs right before each timed encode and each timed "
                "decode, timed after an untimed one unless --cold); x med = the median over repetitions of that ratio within each.\n",
                threads, args.repeat, ActiveSimdTargetName(),
                args.cold ? ", inputs evicted from the caches before each timed pass" : "");
  return kExitOk;
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto* bench = app.add_subcommand("bench", "Benchmarks.");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  auto* codec = bench->add_subcommand("codec", "Codec figures per consecutive checkpoint pair.");
  codec->footer(
      "For each consecutive pair of FILES (default: a generated 3-step BF16 trajectory): wire bytes per\n"
      "changed element and per dense byte, diff+encode and decode+apply throughput, and a plain scan of\n"
      "both inputs measured in the same run, with the ratios: of the best times, and the median over\n"
      "repetitions of each repetition's own ratio (steadier where the machine's speed drifts). Each scan\n"
      "is timed after an untimed one (the pass after it meets the inputs that warm), except with --cold.\n"
      "Each timed diff+encode (every payload as `dcr diff` encodes them, nothing written) follows an\n"
      "untimed one (a producer's steady state, encoding payload after payload) and is checked against\n"
      "the delta `dcr diff` writes. Each timed decode+apply follows an untimed one (a receiver's steady\n"
      "state, decoding payload after payload, not the state the repetition's encode leaves) and is\n"
      "checked bit-exact. Between passes the in-memory replica goes back to the older checkpoint\n"
      "through the reverse delta (encoded once, untimed), as a receiver's previous refit leaves it.");
  codec->add_option("FILES", args->files, "checkpoints in trajectory order");
  codec->add_option("--codec", args->codec, "plain, ctx or both")->check(CLI::IsMember({"plain", "ctx", "both"}))->capture_default_str();
  codec->add_option("--threads", args->threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  codec->add_option("--repeat", args->repeat, "repetitions; the best time is kept")->check(CLI::Range(1, 100));
  codec->add_flag("--json", args->json, "print one JSON array of rows");
  codec->add_flag("--cold", args->cold,
                  "evict the inputs from every cache level before each timed pass (scan, encode, decode), as a "
                  "model larger than the caches meets them");
  codec->add_option("--synth-layers", args->synth_layers, "without FILES: layers of the generated model")
      ->check(CLI::Range(1, 256))->capture_default_str();
  codec->add_option("--synth-hidden", args->synth_hidden, "without FILES: hidden size (FFN 8/3 of it, vocab 16x)")
      ->check(CLI::Range(64, 16384))->capture_default_str();
  codec->add_option("--synth-lr", args->synth_lr, "without FILES: learning rate (sets the change rate)")
      ->check(CLI::Range(1e-9, 1e-1))->capture_default_str();
  codec->callback([=] { *exit_code = RunBench(*args); });
}

}  // namespace dcr::cli
