// Layout commands: `dcr layout generate`, `dcr layout check`, `dcr shard`, and the --layout forms of
// `dcr diff` and `dcr apply` (docs/layout.md).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/layout_commands.h"
#include "cli/report.h"
#include "layout/generators.h"
#include "layout/layout_json.h"
#include "layout/shard.h"
#include "protocol/layout_apply.h"
#include "protocol/layout_diff.h"

namespace dcr::cli {
namespace {

using Json = nlohmann::json;

struct GenerateArgs {
  std::string config, role, out, dtype;
  uint32_t tp = 1, pp = 1, ep = 1;
  bool json = false;
};

int RunGenerate(const GenerateArgs& a) {
  auto model = ReadHfConfig(a.config);
  if (!model.ok()) return ReportError("layout generate", model.status());
  const ParallelSizes sizes{a.tp, a.pp, a.ep};
  DType local = model->dtype;
  if (!a.dtype.empty()) {
    if (a.role == "train") return ReportError("layout generate", InvalidArgument("--dtype is for --role serve only"));
    auto d = ParseDType(a.dtype);
    if (!d) return ReportError("layout generate", InvalidArgument("unknown --dtype " + a.dtype + " (BF16, F16 or F32)"));
    local = *d;
  }
  auto set = a.role == "train" ? GenerateMegatronLayouts(*model, sizes) : GenerateVllmLayouts(*model, sizes, local);
  if (!set.ok()) return ReportError("layout generate", set.status().WithContext(a.config));
  if (Status s = WriteLayoutDir(a.out, *set); !s.ok()) return ReportError("layout generate", s);
  const RankLayout& r0 = (*set)[0];
  if (a.json) {
    PrintJson({{"output", a.out}, {"role", a.role}, {"framework", r0.framework}, {"ranks", set->size()},
               {"tp", a.tp}, {"pp", a.pp}, {"ep", a.ep}, {"canonical_tensors", r0.canonical.size()}});
  } else {
    std::printf("%s: %zu %s layout files (%s, tp %u x pp %u x ep %u) for a %zu-tensor %s model\n", a.out.c_str(),
                set->size(), a.role.c_str(), r0.framework.c_str(), a.tp, a.pp, a.ep, r0.canonical.size(),
                model->model_type.c_str());
  }
  return kExitOk;
}

int RunCheck(const std::string& dir, bool json) {
  auto set = ReadLayoutDir(dir);
  if (!set.ok()) return ReportError("layout check", set.status());
  uint64_t tensors = 0, pieces = 0, copies = 0, owned = 0, local = 0, padding = 0;
  for (const RankLayout& l : *set)
    for (const LocalTensor& t : l.tensors) {
      ++tensors;
      local += t.num_elements();
      for (const Piece& p : t.pieces) {
        ++pieces;
        (p.owner ? owned : copies) += p.num_elements();
      }
      for (const PaddingRegion& r : t.padding) {
        uint64_t n = 1;
        for (uint64_t e : r.extent) n *= e;
        padding += n;
      }
    }
  const RankLayout& r0 = (*set)[0];
  if (json) {
    PrintJson({{"valid", true}, {"role", LayoutRoleName(r0.role)}, {"framework", r0.framework}, {"ranks", set->size()},
               {"canonical_tensors", r0.canonical.size()}, {"local_tensors", tensors}, {"pieces", pieces},
               {"canonical_elements", owned}, {"copied_elements", copies}, {"padding_elements", padding},
               {"local_elements", local}});
  } else {
    std::printf("%s: valid %s layout (%s), %zu ranks, %zu canonical tensors\n", dir.c_str(), LayoutRoleName(r0.role),
                r0.framework.c_str(), set->size(), r0.canonical.size());
    std::printf("  %llu local tensors in %llu pieces: %llu canonical elements owned once, %llu extra copies, %llu padding\n",
                static_cast<unsigned long long>(tensors), static_cast<unsigned long long>(pieces),
                static_cast<unsigned long long>(owned), static_cast<unsigned long long>(copies),
                static_cast<unsigned long long>(padding));
  }
  return kExitOk;
}

int RunShard(const std::string& layout_dir, const std::string& ckpt_path, const std::string& out, int threads) {
  auto set = ReadLayoutDir(layout_dir);
  if (!set.ok()) return ReportError("shard", set.status());
  auto ckpt = Checkpoint::Open(ckpt_path);
  if (!ckpt.ok()) return ReportError("shard", ckpt.status());
  if (Status s = WriteShards(*set, *ckpt, out, threads); !s.ok()) return ReportError("shard", s);
  std::printf("%s: %zu shard files (rank-00000.safetensors ...) from %s\n", out.c_str(), set->size(), ckpt_path.c_str());
  return kExitOk;
}

}  // namespace

int RunLayoutDiff(const LayoutDiffRequest& r) {
  auto set = ReadLayoutDir(r.layout_dir);
  if (!set.ok()) return ReportError("diff", set.status());
  LayoutDiffOptions o;
  o.threads = r.threads;
  o.kind = r.overwrite ? ValueKind::kOverwrite : ValueKind::kXor;
  o.chunk_bytes = r.chunk_mib << 20;
  o.progress = MakeProgress("diff", r.progress);
  auto st = DiffLayoutShardDirs(*set, r.base_shards, r.new_shards, r.out, o);
  if (!st.ok()) return ReportError("diff", st.status());
  const LayoutDiffStats& s = *st;
  const double density = s.total_elements ? static_cast<double>(s.changed_elements) / static_cast<double>(s.total_elements) : 0;
  if (r.json) {
    PrintJson({{"changed_elements", s.changed_elements}, {"total_elements", s.total_elements}, {"density", density},
               {"dense_bytes", s.dense_bytes}, {"wire_bytes", s.wire_bytes}, {"payloads", s.payloads},
               {"ranks", set->size()}, {"scanned_bytes", s.scanned_bytes}, {"replica_changes", s.replica_changes},
               {"padding_changes", s.padding_changes}, {"digest_seconds", s.digest_seconds},
               {"scan_seconds", s.scan_seconds}, {"encode_seconds", s.encode_seconds}, {"write_seconds", s.write_seconds},
               {"base_digest", s.base_digest.ToHex()}, {"target_digest", s.target_digest.ToHex()}, {"output", r.out}});
  } else {
    std::printf("%s: %llu of %llu canonical elements changed (%.4f%%) over %zu ranks, %s dense -> %s on the wire\n",
                r.out.c_str(), static_cast<unsigned long long>(s.changed_elements),
                static_cast<unsigned long long>(s.total_elements), 100 * density, set->size(),
                HumanBytes(static_cast<double>(s.dense_bytes)).c_str(), HumanBytes(static_cast<double>(s.wire_bytes)).c_str());
    std::printf("scan+project %.3f s, sort+encode %.3f s, base digest %.3f s; %llu replica and %llu padding changes not sent\n",
                s.scan_seconds, s.encode_seconds, s.digest_seconds, static_cast<unsigned long long>(s.replica_changes),
                static_cast<unsigned long long>(s.padding_changes));
  }
  return kExitOk;
}

int RunLayoutApply(const LayoutApplyRequest& r) {
  auto set = ReadLayoutDir(r.layout_dir);
  if (!set.ok()) return ReportError("apply", set.status());
  auto delta = DeltaReader::Open(r.delta);
  if (!delta.ok()) return ReportError("apply", delta.status());
  LayoutApplyOptions o;
  o.threads = r.threads;
  o.verify = !r.no_base_check;
  o.progress = MakeProgress("apply", r.progress);
  auto st = ApplyLayoutDeltaToDir(*delta, *set, r.shards, o);
  if (!st.ok()) return ReportError("apply", st.status());
  const LayoutApplyStats& s = *st;
  if (r.json) {
    PrintJson({{"changed_elements", s.changed_elements}, {"placed_elements", s.placed_elements}, {"payloads", s.payloads},
               {"wire_bytes", s.wire_bytes}, {"ranks", set->size()}, {"verified", o.verify},
               {"base_check_seconds", s.base_check_seconds}, {"verify_seconds", s.verify_seconds},
               {"apply_seconds", s.apply_seconds}, {"prefaulted_bytes", s.prefaulted_bytes},
               {"target_digest", s.target_digest.ToHex()}, {"target", r.shards}});
  } else {
    std::printf("%s: applied %llu changes to %llu local elements on %zu ranks from %llu payloads%s; now at digest %s\n",
                r.shards.c_str(), static_cast<unsigned long long>(s.changed_elements),
                static_cast<unsigned long long>(s.placed_elements), set->size(), static_cast<unsigned long long>(s.payloads),
                o.verify ? "" : " (base not verified)", s.target_digest.ToHex().c_str());
  }
  return kExitOk;
}

void RegisterLayoutCommands(CLI::App& app, int* exit_code) {
  auto* layout = app.add_subcommand("layout", "Make or check layouts: how each rank's tensors map onto the checkpoint's.");
  layout->require_subcommand(1);
  layout->footer("Layout files and their JSON form: docs/layout.md.");

  auto gen = std::make_shared<GenerateArgs>();
  auto* generate = layout->add_subcommand("generate", "Write one layout file per rank for a Llama/Qwen-style model.");
  generate->footer(
      "--role train: Megatron-Core (TransformerEngine spec) training shards: fused QKV in grouped-query\n"
      "order, fused gate+up, pipeline stages with renumbered layers, expert parallelism (ep carved out of\n"
      "data parallelism), vocabulary padded to 128*tp. Ranks: tp fastest, then ep, then pp.\n"
      "--role serve: vLLM serving shards: qkv_proj (key/value heads replicated when tp > their number),\n"
      "gate_up_proj, fused MoE w13/w2 (--ep equal to --tp splits whole experts), vocabulary padded to 64,\n"
      "lm_head tied to embed_tokens. Ranks: tp fastest, then pp. --dtype stores the tensors converted.\n"
      "Sizes the model cannot be split into are refused with the constraint (exit 2).\n"
      "Supported model_type: llama, mistral, qwen2, qwen3, qwen3_moe.");
  generate->add_option("--config", gen->config, "Hugging Face config.json")->required();
  generate->add_option("--role", gen->role, "train (Megatron-Core) or serve (vLLM)")
      ->required()
      ->check(CLI::IsMember({"train", "serve"}));
  generate->add_option("--tp", gen->tp, "tensor-parallel size")->required()->check(CLI::PositiveNumber);
  generate->add_option("--pp", gen->pp, "pipeline-parallel size")->check(CLI::PositiveNumber)->capture_default_str();
  generate->add_option("--ep", gen->ep, "expert-parallel size (MoE models)")->check(CLI::PositiveNumber)->capture_default_str();
  generate->add_option("--dtype", gen->dtype, "serve only: store local tensors as BF16, F16 or F32 (default: the checkpoint's)");
  generate->add_option("-o,--output", gen->out, "directory for rank-00000.json, rank-00001.json, ...")->required();
  generate->add_flag("--json", gen->json, "print one JSON object");
  generate->callback([=] { *exit_code = RunGenerate(*gen); });

  auto check_args = std::make_shared<std::pair<std::string, bool>>();
  auto* check = layout->add_subcommand("check", "Validate a layout directory and summarise it.");
  check->footer(
      "Checks every rank file, that ranks agree on the model, that pieces and padding cover every local\n"
      "element exactly once, and that every canonical element has exactly one owner. Exit 2 if not.");
  check->add_option("DIR", check_args->first, "layout directory")->required();
  check->add_flag("--json", check_args->second, "print one JSON object");
  check->callback([=] { *exit_code = RunCheck(check_args->first, check_args->second); });

  struct ShardArgs {
    std::string layout, ckpt, out;
    int threads = 0;
  };
  auto sh = std::make_shared<ShardArgs>();
  auto* shard = app.add_subcommand("shard", "Cut a checkpoint into one safetensors file per rank of a layout.");
  shard->footer(
      "Writes OUT/rank-00000.safetensors, ... holding each rank's local tensors: pieces copied (or\n"
      "converted) from CKPT, padding zero or repeating the last row as the layout says. CKPT's tensors\n"
      "must be exactly the layout's canonical tensors.");
  shard->add_option("--layout", sh->layout, "layout directory")->required();
  shard->add_option("CKPT", sh->ckpt, "canonical checkpoint (file or sharded directory)")->required();
  shard->add_option("-o,--output", sh->out, "directory for the shard files")->required();
  shard->add_option("--threads", sh->threads, "worker threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  shard->callback([=] { *exit_code = RunShard(sh->layout, sh->ckpt, sh->out, sh->threads); });
}

}  // namespace dcr::cli
