#include "cli/model_path.h"

#include <filesystem>
#include <fstream>

namespace dcr::cli {
namespace fs = std::filesystem;

const char* OpenedModel::KindName() const {
  switch (kind) {
    case Kind::kCheckpoint: return "checkpoint";
    case Kind::kReceiverState: return "receiver state";
    case Kind::kProducerBaseline: return "producer baseline";
  }
  return "?";
}

namespace {

Result<nlohmann::json> ReadJson(const fs::path& p) {
  std::ifstream in(p);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(p.string() + ": not a JSON object");
  return j;
}

}  // namespace

Result<OpenedModel> OpenModel(const std::string& path) {
  const fs::path dir(path);
  std::error_code ec;
  if (fs::is_directory(dir, ec) && fs::exists(dir / "state.json")) {
    DCR_ASSIGN_OR_RETURN(nlohmann::json state, ReadJson(dir / "state.json"));
    OpenedModel m;
    m.kind = OpenedModel::Kind::kReceiverState;
    m.state = state;
    if (state.value("layout", false)) {
      m.layout_dir = (dir / "layout").string();
      m.shards_dir = (dir / "shards").string();
    } else {
      DCR_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open((dir / "weights.safetensors").string()));
      m.checkpoint.emplace(std::move(c));
    }
    Digest128 d;
    if (state.contains("digest") && state["digest"].is_string() && Digest128::FromHex(state["digest"].get<std::string>(), &d))
      m.committed_digest = d;
    if (fs::exists(dir / "journal" / "transfer.json")) {
      auto t = ReadJson(dir / "journal" / "transfer.json");
      m.pending = "transfer " + (t.ok() ? t->value("transfer", std::string("?")) : std::string("?")) + " pending" +
                  (fs::exists(dir / "journal" / "voted") ? ", voted" : "") +
                  " (the weights hold its applied payloads; the receiver settles it on restart or at the next push)";
    }
    return m;
  }
  if (fs::is_directory(dir, ec) && fs::exists(dir / "baseline.json")) {
    DCR_ASSIGN_OR_RETURN(nlohmann::json state, ReadJson(dir / "baseline.json"));
    const std::string file = state.value("file", "");
    if (file.empty() || file.find('/') != std::string::npos) return Corrupt((dir / "baseline.json").string() + ": no valid \"file\"");
    DCR_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open((dir / file).string()));
    OpenedModel m;
    m.kind = OpenedModel::Kind::kProducerBaseline;
    m.checkpoint.emplace(std::move(c));
    m.state = state;
    return m;
  }
  DCR_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(path));
  OpenedModel m;
  m.checkpoint.emplace(std::move(c));
  return m;
}

}  // namespace dcr::cli
