// `dcr inspect PATH`: a summary of a delta file, a checkpoint, a receiver state dir or a producer
// baseline. Reads only.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "cli/report.h"
#include "codec/payload_codec.h"
#include "codec/value_coding.h"
#include "protocol/delta_file.h"

namespace dcr::cli {
namespace {

using Json = nlohmann::json;

bool LooksLikeDelta(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[sizeof(kDeltaMagic)] = {};
  in.read(magic, sizeof(magic));
  return in.gcount() == sizeof(magic) && std::memcmp(magic, kDeltaMagic, sizeof(magic)) == 0;
}

int InspectDelta(const std::string& path, bool json) {
  auto r = DeltaReader::Open(path);
  if (!r.ok()) return ReportError("inspect", r.status());
  const DeltaHeader& h = r->header();
  // Every payload's checksum, header and segment table are verified; sections are not decoded
  // (context-mode payloads would need the base bits).
  auto payload_where = [](const std::string& p, size_t i) { return p + ": payload " + std::to_string(i); };
  std::map<uint32_t, uint64_t> changed_per_tensor;
  std::map<uint32_t, ValueKind> kind_per_tensor;
  uint64_t segments = 0;
  uint64_t context_payloads = 0;
  // Payloads per codec mode, value codec and value form, by name (docs/format.md §2), in code order.
  std::map<uint8_t, uint64_t> modes, value_codecs, value_forms;
  for (size_t i = 0; i < h.payloads.size(); ++i) {
    PayloadLayout payload;
    Status s = ParsePayload(r->PayloadBytes(i), &payload);
    if (!s.ok()) return ReportError("inspect", s.WithContext(payload_where(path, i)));
    context_payloads += NeedsOldBits(payload.mode);
    ++modes[static_cast<uint8_t>(payload.mode)];
    ++value_codecs[static_cast<uint8_t>(payload.val_codec)];
    ++value_forms[static_cast<uint8_t>(payload.val_form)];
    for (size_t k = 0; k < payload.segments.size(); ++k) {
      const SegmentSpec& seg = payload.segments[k];
      if (seg.tensor_index >= h.tensors.size())
        return ReportError("inspect", Corrupt(payload_where(path, i) + ": tensor index out of range"));
      changed_per_tensor[seg.tensor_index] += payload.changed[k];
      kind_per_tensor[seg.tensor_index] = seg.kind;
      ++segments;
    }
  }
  const uint64_t changed = h.changed_elements(), total = h.total_elements();
  auto mode_name = [](uint8_t m) -> std::string {
    switch (static_cast<CodecMode>(m)) {
      case CodecMode::kPlain: return "plain";
      case CodecMode::kContext: return "context";
      case CodecMode::kContextBands: return "context_bands";
      case CodecMode::kContextParts: return "context_parts";
      case CodecMode::kContextSplitRice: return "context_split_rice";
    }
    return "mode_" + std::to_string(m);  // ParsePayload refuses others; kept total for the switch
  };
  auto codec_name = [](uint8_t c) -> std::string {
    switch (static_cast<ValueCodec>(c)) {
      case ValueCodec::kPlanesRaw: return "planes_raw";
      case ValueCodec::kPlanesZstd: return "planes_zstd";
      case ValueCodec::kHuffman: return "huffman";
      case ValueCodec::kHuffmanStreams: return "huffman_streams";
    }
    return "codec_" + std::to_string(c);
  };
  auto form_name = [](uint8_t f) -> std::string {
    return static_cast<ValueForm>(f) == ValueForm::kSteps ? "steps" : "as_kind";  // ParsePayload refuses others
  };
  auto counts_json = [](const std::map<uint8_t, uint64_t>& counts, const auto& name) {
    Json j = Json::object();
    for (const auto& [k, n] : counts) j[name(k)] = n;
    return j;
  };
  auto counts_text = [](const std::map<uint8_t, uint64_t>& counts, const auto& name) {
    std::string t;
    for (const auto& [k, n] : counts) t += (t.empty() ? "" : ", ") + name(k) + " " + std::to_string(n);
    return t.empty() ? std::string("none") : t;
  };
  if (json) {
    Json tensors = Json::array();
    for (size_t i = 0; i < h.tensors.size(); ++i) {
      const auto& t = h.tensors[i];
      tensors.push_back({{"name", t.entry.name}, {"dtype", std::string(DTypeName(t.entry.dtype))},
                         {"shape", t.entry.shape}, {"changed_elements", changed_per_tensor[static_cast<uint32_t>(i)]},
                         {"value_kind", !kind_per_tensor.count(static_cast<uint32_t>(i)) ? "none"
                                        : kind_per_tensor[static_cast<uint32_t>(i)] == ValueKind::kXor ? "xor" : "overwrite"}});
    }
    PrintJson({{"kind", "delta"}, {"format_version", h.format_version}, {"payload_format_version", kPayloadFormatVersion},
               {"transfer_id", h.transfer_id}, {"base_digest", h.base_digest.ToHex()},
               {"target_digest", h.target_digest.ToHex()}, {"payloads", h.payloads.size()}, {"context_payloads", context_payloads},
               {"payload_modes", counts_json(modes, mode_name)}, {"value_codecs", counts_json(value_codecs, codec_name)},
               {"value_forms", counts_json(value_forms, form_name)},
               {"segments", segments},
               {"changed_elements", changed}, {"total_elements", total}, {"wire_bytes", r->file_size()},
               {"tensors", tensors}});
    return kExitOk;
  }
  std::printf("dcr delta (format %u, payload format %u)\n", h.format_version, kPayloadFormatVersion);
  std::printf("  base   %s\n  target %s\n", h.base_digest.ToHex().c_str(), h.target_digest.ToHex().c_str());
  std::printf("  %zu payloads (%llu in context mode, %llu segments), %s; %llu of %llu elements changed (%.4f%%)\n", h.payloads.size(),
              static_cast<unsigned long long>(context_payloads), static_cast<unsigned long long>(segments), HumanBytes(static_cast<double>(r->file_size())).c_str(),
              static_cast<unsigned long long>(changed),
              static_cast<unsigned long long>(total), total ? 100.0 * static_cast<double>(changed) / static_cast<double>(total) : 0.0);
  std::printf("  payload modes: %s; value codecs: %s; value forms: %s\n", counts_text(modes, mode_name).c_str(),
              counts_text(value_codecs, codec_name).c_str(), counts_text(value_forms, form_name).c_str());
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const auto& t = h.tensors[i];
    std::printf("  %-48s %-7s %-16s %llu changed\n", t.entry.name.c_str(), std::string(DTypeName(t.entry.dtype)).c_str(),
                ShapeString(t.entry.shape).c_str(), static_cast<unsigned long long>(changed_per_tensor[static_cast<uint32_t>(i)]));
  }
  return kExitOk;
}

int InspectCheckpoint(const std::string& path, bool json) {
  auto m = OpenModel(path);
  if (!m.ok()) return ReportError("inspect", m.status());
  if (m->kind != OpenedModel::Kind::kCheckpoint) {
    if (json) {
      Json state = m->state;
      state.erase("tensor_digests");
      PrintJson({{"kind", m->KindName()}, {"state", state}, {"pending", m->pending}});
      return kExitOk;
    }
    std::printf("%s %s: version %s (%s)%s\n", m->KindName(), path.c_str(), m->state.value("number", Json(0)).dump().c_str(),
                m->state.value("version", std::string("?")).c_str(),
                m->kind == OpenedModel::Kind::kProducerBaseline
                    ? (", producer " + m->state.value("producer", Json(0)).dump() + " of " + m->state.value("producers", Json(0)).dump() +
                       " (its own tensors only)").c_str()
                    : "");
    if (!m->pending.empty()) std::printf("  %s\n", m->pending.c_str());
    if (!m->checkpoint) {
      std::printf("  serving layout in %s, shards in %s\n", m->layout_dir.c_str(), m->shards_dir.c_str());
      return kExitOk;
    }
  }
  const Checkpoint* c = &*m->checkpoint;
  std::map<std::string, uint64_t> by_dtype;
  for (const auto& t : c->tensors()) by_dtype[std::string(DTypeName(t.dtype()))] += t.num_elements();
  if (json) {
    Json tensors = Json::array();
    for (const auto& t : c->tensors())
      tensors.push_back({{"name", t.name()}, {"dtype", std::string(DTypeName(t.dtype()))}, {"shape", t.info->shape},
                         {"bytes", t.info->byte_size()}, {"file", c->file(t.file_index).path()}});
    PrintJson({{"kind", "checkpoint"}, {"sharded", c->sharded()}, {"files", c->num_files()},
               {"tensors", tensors}, {"total_elements", c->total_elements()}, {"total_bytes", c->total_bytes()},
               {"elements_by_dtype", by_dtype}});
    return kExitOk;
  }
  std::printf("safetensors checkpoint%s: %zu tensors in %zu file(s), %llu elements, %s\n", c->sharded() ? " (sharded)" : "",
              c->tensors().size(), c->num_files(), static_cast<unsigned long long>(c->total_elements()),
              HumanBytes(static_cast<double>(c->total_bytes())).c_str());
  for (auto& [d, n] : by_dtype) std::printf("  %-8s %llu elements\n", d.c_str(), static_cast<unsigned long long>(n));
  for (const auto& t : c->tensors())
    std::printf("  %-48s %-7s %s\n", t.name().c_str(), std::string(DTypeName(t.dtype())).c_str(), ShapeString(t.info->shape).c_str());
  return kExitOk;
}

}  // namespace

void RegisterInspectCommand(CLI::App& app, int* exit_code) {
  auto inspect_args = std::make_shared<std::pair<std::string, bool>>();
  auto* inspect = app.add_subcommand("inspect", "Summarise a checkpoint, a state dir or a delta file.");
  inspect->footer(
      "For a delta: its digests, its payloads per codec mode, value codec and value form (as_kind: XOR\n"
      "masks or new bits; steps: differences from the old bits), and the changed elements\n"
      "of every tensor; every payload's checksum and tables are verified, its sections are not decoded.\n"
      "For a checkpoint: its files, dtypes and tensors; for a state dir or baseline: its version and\n"
      "any pending transfer.");
  inspect->add_option("PATH", inspect_args->first, "checkpoint (file or directory), receiver state dir, producer baseline or delta file")->required();
  inspect->add_flag("--json", inspect_args->second, "print one JSON object");
  inspect->callback([=] {
    *exit_code = LooksLikeDelta(inspect_args->first) ? InspectDelta(inspect_args->first, inspect_args->second)
                                                     : InspectCheckpoint(inspect_args->first, inspect_args->second);
  });
}

}  // namespace dcr::cli
