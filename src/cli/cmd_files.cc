// Offline commands on files: diff, apply, verify, digest (inspect: cmd_inspect.cc).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/layout_commands.h"
#include "cli/model_path.h"
#include "cli/report.h"
#include "layout/layout_json.h"
#include "layout/shard.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "protocol/layout_digest.h"

namespace dcr::cli {
namespace {

using Json = nlohmann::json;

struct DiffArgs {
  std::string base, next, out;
  bool json = false, overwrite = false, progress = false;
  std::string codec = "ctx";
  int threads = 0;
  uint64_t chunk_mib = kDefaultChunkBytes >> 20;
  std::string layout;  // training layout directory: BASE and NEW are shard directories
};

int RunDiff(const DiffArgs& a) {
  if (!a.layout.empty())
    return RunLayoutDiff({a.layout, a.base, a.next, a.out, a.json, a.overwrite, a.progress, a.threads, a.chunk_mib});
  auto base = Checkpoint::Open(a.base);
  if (!base.ok()) return ReportError("diff", base.status());
  auto next = Checkpoint::Open(a.next);
  if (!next.ok()) return ReportError("diff", next.status());
  DiffOptions o;
  o.threads = a.threads;
  o.kind = a.overwrite ? ValueKind::kOverwrite : ValueKind::kXor;
  o.chunk_bytes = a.chunk_mib << 20;
  o.encode.context = a.codec == "ctx" ? EncodeOptions::Context::kWhenSmaller : EncodeOptions::Context::kNever;
  o.progress = MakeProgress("diff", a.progress);
  auto st = DiffCheckpoints(*base, *next, a.out, o);
  if (!st.ok()) return ReportError("diff", st.status());
  const DiffStats& s = *st;
  double density = s.total_elements ? static_cast<double>(s.changed_elements) / static_cast<double>(s.total_elements) : 0;
  double per_change = s.changed_elements ? static_cast<double>(s.wire_bytes) / static_cast<double>(s.changed_elements) : 0;
  if (a.json) {
    PrintJson({{"changed_elements", s.changed_elements},
               {"total_elements", s.total_elements},
               {"density", density},
               {"dense_bytes", s.dense_bytes},
               {"wire_bytes", s.wire_bytes},
               {"wire_bytes_per_changed_element", per_change},
               {"payloads", s.payloads},
               {"encode_seconds", s.encode_seconds},
               {"digest_seconds", s.digest_seconds},
               {"write_seconds", s.write_seconds},
               {"base_digest", s.base_digest.ToHex()},
               {"target_digest", s.target_digest.ToHex()},
               {"output", a.out}});
  } else {
    std::printf("%s: %llu of %llu elements changed (%.4f%%), %s dense -> %s on the wire (%.2f bytes/change, %.1fx smaller)\n",
                a.out.c_str(), static_cast<unsigned long long>(s.changed_elements),
                static_cast<unsigned long long>(s.total_elements), 100 * density,
                HumanBytes(static_cast<double>(s.dense_bytes)).c_str(), HumanBytes(static_cast<double>(s.wire_bytes)).c_str(),
                per_change, s.wire_bytes ? static_cast<double>(s.dense_bytes) / static_cast<double>(s.wire_bytes) : 0.0);
    std::printf("diff+encode %.3f s, base digest %.3f s, write %.3f s\n", s.encode_seconds, s.digest_seconds, s.write_seconds);
  }
  return kExitOk;
}

struct ApplyArgs {
  std::string delta, target;
  bool json = false, progress = false;
  int threads = 0;
  std::string layout;  // serving layout directory: TARGET is a shard directory
  bool no_base_check = false;
};

int RunApply(const ApplyArgs& a) {
  if (!a.layout.empty())
    return RunLayoutApply({a.layout, a.delta, a.target, a.json, a.progress, a.no_base_check, a.threads});
  if (a.no_base_check) return ReportError("apply", InvalidArgument("--no-base-check needs --layout"));
  auto delta = DeltaReader::Open(a.delta);
  if (!delta.ok()) return ReportError("apply", delta.status());
  auto target = Checkpoint::Open(a.target, MappedFile::Mode::kReadWrite);
  if (!target.ok()) return ReportError("apply", target.status());
  ApplyOptions o;
  o.threads = a.threads;
  o.progress = MakeProgress("apply", a.progress);
  auto st = ApplyDelta(*delta, *target, o);
  if (!st.ok()) return ReportError("apply", st.status());
  const ApplyStats& s = *st;
  if (a.json) {
    PrintJson({{"changed_elements", s.changed_elements},
               {"payloads", s.payloads},
               {"wire_bytes", s.wire_bytes},
               {"base_check_seconds", s.base_check_seconds},
               {"verify_seconds", s.verify_seconds},
               {"apply_seconds", s.apply_seconds},
               {"prefaulted_bytes", s.prefaulted_bytes},
               {"target_digest", s.target_digest.ToHex()},
               {"target", a.target}});
  } else {
    std::printf("%s: applied %llu changes from %llu payloads; now at digest %s\n", a.target.c_str(),
                static_cast<unsigned long long>(s.changed_elements), static_cast<unsigned long long>(s.payloads),
                s.target_digest.ToHex().c_str());
  }
  return kExitOk;
}

// The first element where the tensors of `part` (a producer baseline: a subset of the model)
// differ from the same-named tensors of `whole`; kMismatch if one is missing or shaped otherwise.
Result<std::optional<TensorDifference>> SubsetDifference(const Checkpoint& part, const Checkpoint& whole) {
  for (const TensorRef& t : part.tensors()) {
    const TensorRef* u = whole.Find(t.name());
    if (!u) return Mismatch("tensor '" + t.name() + "' of " + part.path() + " is not in " + whole.path());
    if (u->dtype() != t.dtype() || u->info->shape != t.info->shape)
      return Mismatch("tensor '" + t.name() + "' has another dtype or shape in " + whole.path());
    if (auto d = FirstTensorDifference(t, *u)) return d;
  }
  return std::optional<TensorDifference>();
}

void NotePending(const char* command, const std::string& path, const OpenedModel& m) {
  if (!m.pending.empty()) std::fprintf(stderr, "dcr %s: note: %s: %s\n", command, path.c_str(), m.pending.c_str());
}

int RunVerify(const std::string& pa, const std::string& pb) {
  auto a = OpenModel(pa);
  if (!a.ok()) return ReportError("verify", a.status());
  auto b = OpenModel(pb);
  if (!b.ok()) return ReportError("verify", b.status());
  NotePending("verify", pa, *a);
  NotePending("verify", pb, *b);
  for (const auto* m : {&*a, &*b})
    if (!m->checkpoint)
      return ReportError("verify", Unsupported("a receiver holding a serving layout keeps per-rank shards, not a checkpoint: "
                                               "compare its shards with `dcr shard --layout DIR/layout CKPT -o X` (byte-identical "
                                               "files), or scrub it with `dcr digest DIR`"));
  using Kind = OpenedModel::Kind;
  const bool a_part = a->kind == Kind::kProducerBaseline, b_part = b->kind == Kind::kProducerBaseline;
  // A producer baseline holds only its own tensors: those are compared.
  auto d = a_part ? SubsetDifference(*a->checkpoint, *b->checkpoint)
           : b_part ? SubsetDifference(*b->checkpoint, *a->checkpoint)
                    : FirstDifference(*a->checkpoint, *b->checkpoint);
  if (!d.ok()) {
    if (d.status().code() == StatusCode::kMismatch) {
      std::printf("DIFFERENT: %s\n", d.status().message().c_str());
      return kExitDifferent;
    }
    return ReportError("verify", d.status());
  }
  const Checkpoint& shown = b_part ? *b->checkpoint : *a->checkpoint;
  if (!d->has_value()) {
    std::printf("IDENTICAL: %zu tensors, %llu elements bit-identical%s\n", shown.tensors().size(),
                static_cast<unsigned long long>(shown.total_elements()),
                a_part || b_part ? " (the producer baseline's own tensors)" : "");
    return kExitOk;
  }
  TensorDifference x = **d;
  if (b_part) std::swap(x.a_bits, x.b_bits);
  std::printf("DIFFERENT: tensor '%s' element %llu %s: 0x%0*llx in %s, 0x%0*llx in %s\n", x.tensor.c_str(),
              static_cast<unsigned long long>(x.element), ElementCoordinates(x.shape, x.element).c_str(),
              static_cast<int>(2 * x.width), static_cast<unsigned long long>(x.a_bits), pa.c_str(),
              static_cast<int>(2 * x.width), static_cast<unsigned long long>(x.b_bits), pb.c_str());
  return kExitDifferent;
}

// On a receiver state dir this is a scrub: the weights' digest must equal the committed one
// recorded in state.json (kExitCorrupt otherwise, unless a transfer is pending).
int RunDigest(const std::string& path, bool json, bool per_tensor, int threads) {
  auto m = OpenModel(path);
  if (!m.ok()) return ReportError("digest", m.status());
  NotePending("digest", path, *m);
  CheckpointDigest d;
  std::vector<std::string> names;
  if (m->checkpoint) {
    d = DigestCheckpoint(*m->checkpoint, threads);
    for (const TensorRef& t : m->checkpoint->tensors()) names.push_back(t.name());
  } else {  // serving layout: the canonical digest through the owner pieces
    auto set = ReadLayoutDir(m->layout_dir);
    if (!set.ok()) return ReportError("digest", set.status());
    auto shards = ShardSet::Open(*set, m->shards_dir, MappedFile::Mode::kReadOnly);
    if (!shards.ok()) return ReportError("digest", shards.status());
    auto ld = DigestThroughLayout(*set, shards->bytes(), threads);
    if (!ld.ok()) return ReportError("digest", ld.status());
    d = std::move(*ld);
    for (const CatalogEntry& e : set->at(0).canonical) names.push_back(e.name);
  }
  const bool scrub = m->committed_digest && m->pending.empty();
  const bool matches = m->committed_digest && *m->committed_digest == d.total;
  if (json) {
    Json tensors = Json::object();
    for (size_t i = 0; i < d.tensors.size(); ++i) tensors[names[i]] = d.tensors[i].ToHex();
    Json out{{"digest", d.total.ToHex()}, {"tensors", tensors}, {"kind", m->KindName()}};
    if (m->committed_digest) {
      out["committed_digest"] = m->committed_digest->ToHex();
      out["matches_committed"] = matches;
    }
    PrintJson(out);
  } else {
    std::printf("%s  %s\n", d.total.ToHex().c_str(), path.c_str());
    if (per_tensor)
      for (size_t i = 0; i < d.tensors.size(); ++i)
        std::printf("%s  %s\n", d.tensors[i].ToHex().c_str(), names[i].c_str());
    if (m->committed_digest)
      std::printf("%s the committed state digest %s (version %s)\n", matches ? "matches" : "DOES NOT MATCH",
                  m->committed_digest->ToHex().c_str(), m->state.value("number", Json(0)).dump().c_str());
  }
  if (scrub && !matches)
    return ReportError("digest", Corrupt(path + ": the weights do not hold the committed bits (silent damage); "
                                                "re-seed the replica (dcr serve --init)"));
  return kExitOk;
}

}  // namespace

void RegisterFileCommands(CLI::App& app, int* exit_code) {
  auto diff_args = std::make_shared<DiffArgs>();
  auto* diff = app.add_subcommand("diff", "Make a delta file that takes BASE to NEW.");
  diff->footer(
      "BASE and NEW are .safetensors files or sharded checkpoint directories with equal catalogs\n"
      "(same tensor names, dtypes and shapes). The delta records both checkpoints' state digests;\n"
      "`dcr apply` refuses a target that does not hold BASE's bits.");
  diff->add_option("BASE", diff_args->base, "base checkpoint")->required();
  diff->add_option("NEW", diff_args->next, "new checkpoint")->required();
  diff->add_option("-o,--output", diff_args->out, "delta file to write (atomically)")->required();
  diff->add_flag("--json", diff_args->json,
                 "print one JSON object: changed_elements, total_elements, dense_bytes, wire_bytes, encode_seconds, ...");
  diff->add_option("--threads", diff_args->threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  diff->add_flag("--overwrite", diff_args->overwrite, "code new bits instead of XOR masks");
  diff->add_option("--codec", diff_args->codec,
                   "ctx: code each payload in context mode (conditioned on the old bits, which the\n"
                   "receiver holds) when that is smaller; plain: never (decodable without old bits)")
      ->check(CLI::IsMember({"ctx", "plain"}))
      ->capture_default_str();
  diff->add_option("--chunk-mib", diff_args->chunk_mib, "dense MiB covered by one payload at most (payloads are cut to about equal size, as few as this allows)")
      ->check(CLI::Range(1, 4096));
  diff->add_flag("--progress", diff_args->progress, "show progress even when stderr is not a terminal");
  diff->add_option("--layout", diff_args->layout,
                   "training layout directory (`dcr layout generate --role train`): BASE and NEW are then shard\n"
                   "directories (`dcr shard`); each rank is diffed and its changes projected to the canonical\n"
                   "tensors, giving an ordinary delta (plain payloads; --codec is ignored)");
  diff->callback([=] { *exit_code = RunDiff(*diff_args); });

  auto apply_args = std::make_shared<ApplyArgs>();
  auto* apply = app.add_subcommand("apply", "Apply DELTA to TARGET in place.");
  apply->footer(
      "TARGET (file or sharded directory) must hold exactly the delta's base bits: its digest is\n"
      "checked first, then every payload's checksum and structure, then the digest the changes\n"
      "produce. Only then is anything written. On any error TARGET is unchanged.");
  apply->add_option("DELTA", apply_args->delta, "delta file from `dcr diff`")->required();
  apply->add_option("TARGET", apply_args->target, "checkpoint to update in place")->required();
  apply->add_flag("--json", apply_args->json, "print one JSON object with counts and timings");
  apply->add_option("--threads", apply_args->threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  apply->add_flag("--progress", apply_args->progress, "show progress even when stderr is not a terminal");
  apply->add_option("--layout", apply_args->layout,
                    "serving layout directory (`dcr layout generate --role serve`): TARGET is then a shard\n"
                    "directory; every change is written into each rank's local copies in place");
  apply->add_flag("--no-base-check", apply_args->no_base_check,
                  "with --layout: skip the base and target digest checks (needed when the shards hold the\n"
                  "model only in a rounded dtype, e.g. BF16 served as F16; the delta must be --overwrite)");
  apply->callback([=] { *exit_code = RunApply(*apply_args); });

  auto verify_paths = std::make_shared<std::pair<std::string, std::string>>();
  auto* verify = app.add_subcommand("verify", "Exit 0 iff A and B hold bit-identical tensors.");
  verify->footer(
      "Otherwise prints the first differing tensor and element (or catalog difference) and exits 1.\n"
      "A and B are checkpoints, receiver state dirs (dcr serve --state) or producer baselines\n"
      "(dcr push --baseline; only the producer's own tensors are compared).");
  verify->add_option("A", verify_paths->first, "checkpoint, receiver state dir or producer baseline")->required();
  verify->add_option("B", verify_paths->second, "checkpoint, receiver state dir or producer baseline")->required();
  verify->callback([=] { *exit_code = RunVerify(verify_paths->first, verify_paths->second); });

  struct DigestArgs {
    std::string path;
    bool json = false, tensors = false;
    int threads = 0;
  };
  auto digest_args = std::make_shared<DigestArgs>();
  auto* digest = app.add_subcommand("digest", "Print the state digest of a checkpoint.");
  digest->footer(
      "The digest covers names, dtypes, shapes and every element's bits (docs/format.md).\n"
      "On a receiver state dir it is a scrub: the weights must have the committed digest recorded in\n"
      "state.json, else exit 5 (unless a transfer is pending).");
  digest->add_option("PATH", digest_args->path, "checkpoint, receiver state dir or producer baseline")->required();
  digest->add_flag("--json", digest_args->json,
                   "print {\"digest\", \"tensors\": {name: digest}, \"kind\"} (+ \"committed_digest\", \"matches_committed\" for state dirs)");
  digest->add_flag("--tensors", digest_args->tensors, "also print each tensor's digest");
  digest->add_option("--threads", digest_args->threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  digest->callback([=] { *exit_code = RunDigest(digest_args->path, digest_args->json, digest_args->tensors, digest_args->threads); });
}

}  // namespace dcr::cli
