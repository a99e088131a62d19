#include "protocol/baseline_state.h"

#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "base/crash_point.h"
#include "base/durable_file.h"
#include "protocol/baseline_dir.h"
#include "protocol/ownership.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
using namespace baseline_dir;

// Opens a tensors file and checks that it holds exactly the tensors `digests` names.
Result<Checkpoint> OpenTensorsFile(const std::string& path, const std::string& manifest_path,
                                   const std::map<std::string, Digest128>& digests) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Corrupt(manifest_path + " names " + path + ", which is missing");
  DCR_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(path));
  auto it = digests.begin();
  for (const TensorRef& t : c.tensors()) {
    if (it == digests.end() || it->first != t.name())
      return Corrupt(path + " holds tensor '" + t.name() + "', which " + manifest_path + " does not list");
    ++it;
  }
  if (it != digests.end())
    return Corrupt(manifest_path + " lists tensor '" + it->first + "', which " + path + " does not hold");
  return c;
}

std::vector<TensorToWrite> ToWrite(const std::vector<const TensorRef*>& tensors) {
  std::vector<TensorToWrite> out;
  out.reserve(tensors.size());
  for (const TensorRef* t : tensors) out.push_back({t->name(), t->dtype(), t->info->shape, t->bytes, false});
  return out;
}

}  // namespace

uint64_t CatalogDigest64(const Catalog& catalog) {
  std::vector<uint8_t> buf;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  for (const CatalogEntry& e : catalog) {
    put(e.name.size(), 4);
    buf.insert(buf.end(), e.name.begin(), e.name.end());
    const std::string_view dt = DTypeName(e.dtype);
    put(dt.size(), 4);
    buf.insert(buf.end(), dt.begin(), dt.end());
    put(e.shape.size(), 4);
    for (uint64_t d : e.shape) put(d, 8);
  }
  return XXH3_64bits(buf.data(), buf.size());
}

Status BaselineState::Init(const std::string& dir, const std::string& checkpoint, uint32_t producer,
                           uint32_t producers, int threads) {
  if (producers == 0 || producer >= producers)
    return InvalidArgument("producer " + std::to_string(producer) + " of " + std::to_string(producers) +
                           ": need producers >= 1 and producer < producers");
  std::error_code ec;
  const std::string json_path = Join(dir, kBaselineJson);
  if (fs::exists(json_path, ec)) return InvalidArgument(dir + " already holds a baseline (" + kBaselineJson + ")");
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return InvalidArgument(dir + " exists and is not a directory");
    // Only leftovers of an interrupted Init (or of a baseline whose json was removed) may be
    // there; they are removed. Anything else means DIR is not ours.
    std::vector<fs::path> leftovers;
    DCR_ASSIGN_OR_RETURN(auto entries, ListDir(dir));
    for (const auto& e : entries) {
      const std::string name = e.path().filename().string();
      uint64_t t = 0;
      bool ours = IsTempName(name) || ParseTensorsFileName(name, &t);
      if (name == kBaselineStagedDir && e.is_directory(ec)) {
        ours = true;
        DCR_ASSIGN_OR_RETURN(auto staged_entries, ListDir(e.path().string()));
        for (const auto& s : staged_entries) {
          const std::string sn = s.path().filename().string();
          if (!IsTempName(sn) && !ParseStagedName(sn, &t))
            return InvalidArgument(dir + " is not empty and not a baseline directory: it holds " + s.path().string());
        }
      }
      if (!ours) return InvalidArgument(dir + " is not empty and not a baseline directory: it holds " + e.path().string());
      leftovers.push_back(e.path());
    }
    for (const auto& p : leftovers) {
      fs::remove_all(p, ec);
      if (ec) return IoError("remove " + p.string() + ": " + ec.message());
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) return IoError("create " + dir + ": " + ec.message());
    const fs::path parent = fs::absolute(fs::path(dir), ec).parent_path();
    DCR_RETURN_IF_ERROR(SyncDirectory(parent.string()));
  }

  DCR_ASSIGN_OR_RETURN(Checkpoint full, Checkpoint::Open(checkpoint));
  const Catalog catalog = full.catalog();
  const CheckpointDigest digest = DigestCheckpoint(full, threads);
  Manifest m;
  m.producer = producer;
  m.producers = producers;
  m.version = InitialVersion(digest.total);
  m.catalog_digest = CatalogDigest64(catalog);
  m.transfer = 0;
  m.file = TensorsFileName(0);
  std::vector<const TensorRef*> owned;
  for (uint32_t t : OwnedTensors(catalog, producer, producers)) {
    owned.push_back(&full.tensors()[t]);
    m.tensor_digests.emplace(catalog[t].name, digest.tensors[t]);
  }
  DCR_RETURN_IF_ERROR(WriteSafetensors(Join(dir, m.file), ToWrite(owned)));
  fs::create_directories(StagedDir(dir), ec);
  if (ec) return IoError("create " + StagedDir(dir) + ": " + ec.message());
  // baseline.json last: its presence is what makes DIR a baseline.
  return WriteManifest(json_path, m, false);
}

Result<BaselineState> BaselineState::Open(const std::string& dir, uint32_t producer, uint32_t producers) {
  const std::string json_path = Join(dir, kBaselineJson);
  DCR_ASSIGN_OR_RETURN(Manifest m, ReadManifest(json_path, false));
  if (m.producer != producer || m.producers != producers)
    return InvalidArgument(dir + " is the baseline of producer " + std::to_string(m.producer) + " of " +
                           std::to_string(m.producers) + ", not of producer " + std::to_string(producer) + " of " +
                           std::to_string(producers));
  DCR_ASSIGN_OR_RETURN(Checkpoint c, OpenTensorsFile(Join(dir, m.file), json_path, m.tensor_digests));

  BaselineState s;
  s.dir_ = dir;
  s.producer_ = m.producer;
  s.producers_ = m.producers;
  s.version_ = m.version;
  s.catalog_digest_ = m.catalog_digest;
  s.last_transfer_ = m.transfer;
  s.file_ = m.file;
  s.tensor_digests_ = std::move(m.tensor_digests);
  s.baseline_.emplace(std::move(c));

  // Recovery (docs/state-dirs.md §Recovery at Open). Staged transfers not based on the current version
  // can never be committed (already committed, or stale): their json goes first, made durable,
  // then unreferenced tensors files and temporaries go.
  std::error_code ec;
  const std::string sdir = StagedDir(dir);
  fs::create_directories(sdir, ec);
  if (ec) return IoError("create " + sdir + ": " + ec.message());
  DCR_ASSIGN_OR_RETURN(auto staged, ReadStaged(dir));
  std::set<std::string> referenced = {s.file_};
  bool removed_json = false;
  for (const auto& [t, sm] : staged) {
    const bool usable = sm.base == s.version_ && sm.producer == producer && sm.producers == producers &&
                        sm.catalog_digest == s.catalog_digest_ && t != s.last_transfer_ &&
                        fs::is_regular_file(Join(dir, sm.file), ec);
    if (usable) {
      referenced.insert(sm.file);
      continue;
    }
    DCR_RETURN_IF_ERROR(RemoveFile(StagedJsonPath(dir, t)));
    removed_json = true;
  }
  if (removed_json) DCR_RETURN_IF_ERROR(SyncDirectory(sdir));
  for (const std::string& d : {dir, sdir}) {
    DCR_ASSIGN_OR_RETURN(auto entries, ListDir(d));
    for (const auto& e : entries) {
      const std::string name = e.path().filename().string();
      uint64_t t = 0;
      const bool orphan = d == dir && ParseTensorsFileName(name, &t) && !referenced.count(name);
      if (orphan || (IsTempName(name) && e.is_regular_file(ec))) DCR_RETURN_IF_ERROR(RemoveFile(e.path().string()));
    }
  }
  return s;
}

std::vector<uint64_t> BaselineState::staged_transfers() const {
  std::vector<uint64_t> out;
  auto staged = ReadStaged(dir_);
  if (!staged.ok()) return out;
  std::error_code ec;
  for (const auto& [t, sm] : *staged)
    if (sm.base == version_ && t != last_transfer_ && fs::is_regular_file(Join(dir_, sm.file), ec)) out.push_back(t);
  return out;
}

Result<std::vector<TensorRef>> BaselineState::TensorsByCatalogIndex(const Catalog& catalog) const {
  const uint64_t digest = CatalogDigest64(catalog);
  if (digest != catalog_digest_)
    return Mismatch("catalog digest " + Hex64(digest) + " differs from baseline " + dir_ + "'s " + Hex64(catalog_digest_) +
                    " (a different model)");
  std::vector<TensorRef> out(catalog.size());
  const auto owned = OwnedTensors(catalog, producer_, producers_);
  if (owned.size() != baseline_->tensors().size())
    return Internal("baseline " + dir_ + " holds " + std::to_string(baseline_->tensors().size()) +
                    " tensors, ownership gives " + std::to_string(owned.size()));
  for (size_t i = 0; i < owned.size(); ++i) {
    const TensorRef& t = baseline_->tensors()[i];
    const CatalogEntry& e = catalog[owned[i]];
    if (e.name != t.name() || e.dtype != t.dtype() || e.shape != t.info->shape)
      return Mismatch("baseline " + dir_ + " tensor '" + t.name() + "' does not match catalog entry '" + e.name + "'");
    out[owned[i]] = t;
  }
  return out;
}

Status BaselineState::Verify(int threads) const {
  const CheckpointDigest d = DigestCheckpoint(*baseline_, threads);
  const auto& ts = baseline_->tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    auto it = tensor_digests_.find(ts[i].name());
    if (it == tensor_digests_.end() || !(it->second == d.tensors[i]))
      return Corrupt("baseline " + Join(dir_, file_) + ": tensor '" + ts[i].name() + "' has digest " +
                     d.tensors[i].ToHex() + ", baseline.json records " +
                     (it == tensor_digests_.end() ? std::string("none") : it->second.ToHex()));
  }
  return Status::Ok();
}

Status BaselineState::Stage(uint64_t transfer, const Checkpoint& next, const Version& target,
                            const std::map<std::string, Digest128>& target_digests) {
  if (transfer == 0) return InvalidArgument("transfer id 0 cannot be staged");
  if (transfer == last_transfer_)
    return InvalidArgument("transfer " + Hex64(transfer) + " is already the committed baseline of " + dir_);
  if (target.number != version_.number + 1)
    return InvalidArgument("target version " + target.ToString() + " does not follow baseline version " +
                           version_.ToString());
  // Every owned tensor must be in `next` with equal dtype and shape.
  std::vector<const TensorRef*> tensors;
  for (const TensorRef& b : baseline_->tensors()) {
    const TensorRef* x = next.Find(b.name());
    if (x == nullptr)
      return Mismatch("tensor '" + b.name() + "' (owned by producer " + std::to_string(producer_) + ") is not in " +
                      next.path());
    if (x->dtype() != b.dtype())
      return Mismatch("tensor '" + b.name() + "' has dtype " + std::string(DTypeName(x->dtype())) + " in " + next.path() +
                      " but " + std::string(DTypeName(b.dtype())) + " in the baseline");
    if (x->info->shape != b.info->shape)
      return Mismatch("tensor '" + b.name() + "' has shape " + ShapeString(x->info->shape) + " in " + next.path() +
                      " but " + ShapeString(b.info->shape) + " in the baseline");
    tensors.push_back(x);
  }
  const uint64_t cd = CatalogDigest64(next.catalog());
  if (cd != catalog_digest_)
    return Mismatch(next.path() + ": catalog digest " + Hex64(cd) + " differs from the baseline's " +
                    Hex64(catalog_digest_) + " (tensors were added or removed)");
  for (const TensorRef& b : baseline_->tensors())
    if (!target_digests.count(b.name()))
      return InvalidArgument("no target digest for owned tensor '" + b.name() + "'");
  for (const auto& [name, d] : target_digests)
    if (!tensor_digests_.count(name))
      return InvalidArgument("target digest for tensor '" + name + "', which producer " + std::to_string(producer_) +
                             " does not own");

  std::error_code ec;
  const std::string sdir = StagedDir(dir_);
  fs::create_directories(sdir, ec);
  if (ec) return IoError("create " + sdir + ": " + ec.message());
  // Re-staging: unmark the old stage before its tensors file is replaced.
  const std::string json_path = StagedJsonPath(dir_, transfer);
  if (fs::exists(json_path, ec)) {
    DCR_RETURN_IF_ERROR(RemoveFile(json_path));
    DCR_RETURN_IF_ERROR(SyncDirectory(sdir));
  }
  Manifest m;
  m.producer = producer_;
  m.producers = producers_;
  m.version = target;
  m.catalog_digest = catalog_digest_;
  m.tensor_digests = target_digests;
  m.transfer = transfer;
  m.file = TensorsFileName(transfer);
  m.base = version_;
  DCR_RETURN_IF_ERROR(WriteSafetensors(Join(dir_, m.file), ToWrite(tensors)));
  DCR_RETURN_IF_ERROR(WriteManifest(json_path, m, true));
  CrashPoint("baseline.staged");
  return Status::Ok();
}

Status BaselineState::CommitStaged(uint64_t transfer) {
  std::error_code ec;
  const std::string sdir = StagedDir(dir_);
  if (transfer != last_transfer_) {
    const std::string json_path = StagedJsonPath(dir_, transfer);
    if (!fs::exists(json_path, ec))
      return NotFound("transfer " + Hex64(transfer) + " is neither staged in " + dir_ + " nor its baseline (at " +
                      version_.ToString() + ", transfer " + Hex64(last_transfer_) + ")");
    DCR_ASSIGN_OR_RETURN(Manifest m, ReadManifest(json_path, true));
    if (!(m.base == version_))
      return WrongBase(json_path + ": staged on version " + m.base.ToString() + ", but the baseline is at " +
                       version_.ToString());
    if (m.producer != producer_ || m.producers != producers_ || m.catalog_digest != catalog_digest_)
      return Corrupt(json_path + ": producer or catalog digest differs from " + kBaselineJson);
    DCR_ASSIGN_OR_RETURN(Checkpoint c, OpenTensorsFile(Join(dir_, m.file), json_path, m.tensor_digests));
    // The single switch: baseline.json now names the staged tensors file.
    DCR_RETURN_IF_ERROR(WriteManifest(Join(dir_, kBaselineJson), m, false));
    CrashPoint("baseline.committed");
    version_ = m.version;
    last_transfer_ = m.transfer;
    file_ = m.file;
    tensor_digests_ = std::move(m.tensor_digests);
    baseline_.emplace(std::move(c));
  }
  // Cleanup (also finishes an earlier, interrupted commit): every staged transfer was based on
  // the previous version. Jsons go first (made durable), then every tensors file but the current.
  // Failures here leave only leftovers that Open removes; the commit itself is done.
  if (auto entries = ListDir(sdir); entries.ok()) {
    for (const auto& e : *entries) fs::remove(e.path(), ec);
    (void)SyncDirectory(sdir);
  }
  if (auto entries = ListDir(dir_); entries.ok()) {
    for (const auto& e : *entries) {
      const std::string name = e.path().filename().string();
      uint64_t t = 0;
      if ((ParseTensorsFileName(name, &t) && name != file_) || (IsTempName(name) && e.is_regular_file(ec)))
        fs::remove(e.path(), ec);
    }
  }
  return Status::Ok();
}

Status BaselineState::DropStaged(uint64_t transfer) {
  if (transfer == last_transfer_)
    return InvalidArgument("transfer " + Hex64(transfer) + " is the committed baseline of " + dir_ + "; cannot drop it");
  std::error_code ec;
  const std::string json_path = StagedJsonPath(dir_, transfer);
  if (fs::exists(json_path, ec)) {
    DCR_RETURN_IF_ERROR(RemoveFile(json_path));
    DCR_RETURN_IF_ERROR(SyncDirectory(StagedDir(dir_)));
  }
  return RemoveFile(Join(dir_, TensorsFileName(transfer)));
}

}  // namespace dcr
