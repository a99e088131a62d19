#include "cli/model_path.h"

#include <filesystem>
#include <fstream>

#include "protocol/replica_journal.h"
#include "protocol/replica_state.h"

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
  if (fs::is_directory(dir, ec) && fs::exists(dir / kReplicaStateFile)) {
    // The receiver's own parsers: the same checks as `dcr serve` applies when it opens the dir.
    const std::string state_path = (dir / kReplicaStateFile).string();
    DCR_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(state_path));
    DCR_ASSIGN_OR_RETURN(StateFile state, ParseStateFile(bytes, state_path));
    OpenedModel m;
    m.kind = OpenedModel::Kind::kReceiverState;
    m.state = nlohmann::json::parse(bytes.begin(), bytes.end());  // parsed above: for display
    m.committed_digest = state.digest;
    if (state.layout) {
      m.layout_dir = (dir / kReplicaLayoutDir).string();
      m.shards_dir = (dir / kReplicaShardsDir).string();
    } else {
      DCR_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open((dir / kReplicaWeightsFile).string()));
      m.checkpoint.emplace(std::move(c));
    }
    const fs::path journal = dir / kReplicaJournalDir;
    if (fs::exists(journal / "transfer.json")) {
      const std::string transfer_path = (journal / "transfer.json").string();
      DCR_ASSIGN_OR_RETURN(std::vector<uint8_t> tb, ReadWholeFile(transfer_path));
      DCR_ASSIGN_OR_RETURN(TransferFile t, ParseTransferFile(tb, transfer_path));
      m.pending = "transfer " + Hex64(t.transfer_id) + " pending" + (fs::exists(journal / "voted") ? ", voted" : "") +
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
