#include "runtime/decision_log.h"

#include <filesystem>

#include "base/durable_file.h"
#include "base/mapped_file.h"
#include "runtime/messages.h"

namespace dcr {
namespace fs = std::filesystem;

const char* TransferStateName(TransferRecord::State s) {
  switch (s) {
    case TransferRecord::State::kStarted: return "started";
    case TransferRecord::State::kCommit: return "commit";
    case TransferRecord::State::kAbort: return "abort";
  }
  return "?";
}

namespace {

std::string RecordPath(const std::string& dir, uint64_t transfer) { return dir + "/" + Hex64(transfer) + ".json"; }

Result<TransferRecord> ReadRecord(const std::string& path) {
  DCR_ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  const auto bytes = f.bytes();
  return ParseTransferRecord(Json::parse(bytes.begin(), bytes.end(), nullptr, false), path);
}

}  // namespace

Result<TransferRecord> ParseTransferRecord(const Json& j, const std::string& where) {
  if (j.is_discarded() || !j.is_object()) return Corrupt(where + ": not a transfer record");
  TransferRecord r;
  auto field = [&](auto result) { return result.ok() ? result : decltype(result)(result.status().WithContext(where)); };
  DCR_ASSIGN_OR_RETURN(r.transfer, field(ParseHex64(j, "transfer")));
  const std::string state = j.value("state", "");
  if (state == "started") r.state = TransferRecord::State::kStarted;
  else if (state == "commit") r.state = TransferRecord::State::kCommit;
  else if (state == "abort") r.state = TransferRecord::State::kAbort;
  else return Corrupt(where + ": unknown state '" + state + "'");
  DCR_ASSIGN_OR_RETURN(r.base, field(ParseVersion(j, "base")));
  if (r.state == TransferRecord::State::kCommit) {
    DCR_ASSIGN_OR_RETURN(r.target, field(ParseVersion(j, "target")));
  }
  r.reason = j.is_object() && j.contains("reason") && j["reason"].is_string() ? j["reason"].get<std::string>() : "";
  return r;
}

Json TransferRecordJson(const TransferRecord& r) {
  Json j{{"transfer", Hex64(r.transfer)}, {"state", TransferStateName(r.state)}, {"base", VersionJson(r.base)}};
  if (r.state == TransferRecord::State::kCommit) j["target"] = VersionJson(r.target);
  if (!r.reason.empty()) j["reason"] = r.reason;
  return j;
}

Result<DecisionLog> DecisionLog::Open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir + "/decisions", ec);
  if (ec) return IoError("cannot create " + dir + "/decisions: " + ec.message());
  DecisionLog log;
  log.dir_ = dir + "/decisions";
  return log;
}

Result<std::optional<TransferRecord>> DecisionLog::Find(uint64_t transfer) const {
  const std::string path = RecordPath(dir_, transfer);
  if (!fs::exists(path)) return std::optional<TransferRecord>();
  DCR_ASSIGN_OR_RETURN(TransferRecord r, ReadRecord(path));
  return std::optional<TransferRecord>(r);
}

Result<uint64_t> DecisionLog::AttemptsFrom(const Version& base) const {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() != ".json") continue;
    DCR_ASSIGN_OR_RETURN(TransferRecord r, ReadRecord(e.path().string()));
    if (r.base == base) ++n;
  }
  if (ec) return IoError("cannot list " + dir_ + ": " + ec.message());
  return n;
}

Status DecisionLog::Record(const TransferRecord& r) {
  DCR_ASSIGN_OR_RETURN(auto existing, Find(r.transfer));
  // Decisions are final: commit and abort are never overwritten by anything else.
  if (existing && existing->state != TransferRecord::State::kStarted && existing->state != r.state)
    return Internal("transfer " + Hex64(r.transfer) + " is already decided (" + TransferStateName(existing->state) +
                    "); it cannot become " + TransferStateName(r.state));
  const std::string text = TransferRecordJson(r).dump() + "\n";
  return WriteFileAtomic(RecordPath(dir_, r.transfer), {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Status ResolveStaged(BaselineState& baseline, DecisionLog& log) {
  for (uint64_t t : baseline.staged_transfers()) {
    DCR_ASSIGN_OR_RETURN(auto rec, log.Find(t));
    if (rec && rec->state == TransferRecord::State::kCommit) {
      DCR_RETURN_IF_ERROR(baseline.CommitStaged(t));
    } else {
      if (!rec || rec->state == TransferRecord::State::kStarted)
        DCR_RETURN_IF_ERROR(log.Record({t, TransferRecord::State::kAbort, rec ? rec->base : baseline.version(), {}, "never decided"}));
      DCR_RETURN_IF_ERROR(baseline.DropStaged(t));
    }
  }
  return Status::Ok();
}

}  // namespace dcr
