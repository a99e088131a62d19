#include "protocol/replica_state.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/crash_point.h"
#include "base/durable_file.h"
#include "base/thread_pool.h"
#include "base/timing.h"
#include "codec/payload_codec.h"
#include "protocol/replica_layout.h"
#include "protocol/write_prefault.h"

namespace dcr {

namespace fs = std::filesystem;

ReplicaState::ReplicaState(std::string dir, int threads, std::optional<Checkpoint> weights,
                           std::unique_ptr<ReplicaLayout> layout)
    : dir_(std::move(dir)), threads_(threads), weights_(std::move(weights)), layout_(std::move(layout)) {
  journal_ = dir_ + "/" + kReplicaJournalDir;
  DCR_CHECK(weights_.has_value() != (layout_ != nullptr));
  catalog_ = layout_ ? layout_->catalog() : weights_->catalog();
  for (const CatalogEntry& c : catalog_) elements_.push_back(ShapeElements(c.shape).value_or(0));
  if (weights_)
    for (const TensorRef& t : weights_->tensors()) undo_tensors_.push_back({t.mutable_bytes, DTypeWidth(t.dtype())});
}

ReplicaState::ReplicaState(ReplicaState&&) noexcept = default;
ReplicaState& ReplicaState::operator=(ReplicaState&&) noexcept = default;
ReplicaState::~ReplicaState() = default;

const LayoutSet* ReplicaState::layout() const { return layout_ ? &layout_->set() : nullptr; }
const ShardSet* ReplicaState::shards() const { return layout_ ? &layout_->shards() : nullptr; }
Checkpoint& ReplicaState::weights() {
  DCR_CHECK(weights_.has_value());
  return *weights_;
}
const Checkpoint& ReplicaState::weights() const {
  DCR_CHECK(weights_.has_value());
  return *weights_;
}
const std::vector<UndoTensor>& ReplicaState::undo_tensors() const {
  return layout_ ? layout_->undo_tensors() : undo_tensors_;
}
Status ReplicaState::SyncWeights() { return layout_ ? layout_->Sync() : weights_->Sync(); }

Digest128 ReplicaState::committed_digest() const { return CombineDigests(catalog_, committed_); }
Digest128 ReplicaState::running_digest() const { return CombineDigests(catalog_, running_); }

bool ReplicaState::HasApplied(uint32_t producer, uint32_t sequence) const {
  return done_.count({producer, sequence}) > 0;
}

Status ReplicaState::Broken(Status s) {
  broken_ = s.WithContext(dir_ + ": replica state must be reopened");
  return s;
}

Status ReplicaState::Init(const std::string& dir, const std::string& checkpoint, int threads, const std::string& layout_dir,
                          const std::optional<ReplicaSeed>& seed) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return InvalidArgument(dir + ": exists and is not a directory");
    if (fs::exists(dir + "/" + kReplicaStateFile, ec) || fs::exists(dir + "/" + kReplicaWeightsFile, ec))
      return InvalidArgument(dir + ": already holds a replica state; nothing was written");
    if (!fs::is_empty(dir, ec)) return InvalidArgument(dir + ": not empty; a replica state directory must start empty");
  } else {
    if (!fs::create_directories(dir, ec) || ec) return IoError("create directory " + dir + ": " + ec.message());
    const fs::path parent = fs::absolute(dir).parent_path();
    DCR_RETURN_IF_ERROR(SyncDirectory(parent.string()));
  }
  DCR_ASSIGN_OR_RETURN(Checkpoint src, Checkpoint::Open(checkpoint));
  // The source is digested up front only where it must be: to check a seed before anything is
  // written, and for a layout (its shards are checked against it).
  std::optional<CheckpointDigest> d;
  if (seed || !layout_dir.empty()) d = DigestCheckpoint(src, threads);
  if (seed && (d->total != seed->digest || (seed->version.number == 0 && seed->version.id != d->total)))
    return Corrupt(checkpoint + ": state digest " + d->total.ToHex() + " is not " + seed->digest.ToHex() + ", the digest of " +
                   seed->version.ToString() + " it should hold; nothing was written");
  const uint64_t last_transfer = seed ? seed->last_transfer : 0;
  if (!layout_dir.empty()) {
    DCR_RETURN_IF_ERROR(ReplicaLayout::Create(dir, layout_dir, src, *d, threads));
    DCR_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaLayout> layout, ReplicaLayout::Open(dir));
    ReplicaState r(dir, threads, std::nullopt, std::move(layout));
    return r.WriteState(seed ? seed->version : InitialVersion(d->total), d->tensors, last_transfer);
  }
  std::vector<TensorToWrite> list;
  for (const TensorRef& t : src.tensors()) list.push_back({t.name(), t.dtype(), t.info->shape, t.bytes, false});
  const std::string weights_path = dir + "/" + kReplicaWeightsFile;
  DCR_RETURN_IF_ERROR(WriteSafetensors(weights_path, list));
  DCR_ASSIGN_OR_RETURN(Checkpoint weights, Checkpoint::Open(weights_path));
  ReplicaState r(dir, threads, std::move(weights), nullptr);
  // The written file's bits, not the source's, are what state.json vouches for.
  CheckpointDigest written = DigestCheckpoint(*r.weights_, threads);
  if (d && written.total != d->total) return IoError(weights_path + ": the written weights do not digest to the source's bits");
  return r.WriteState(seed ? seed->version : InitialVersion(written.total), written.tensors, last_transfer);
}

Status ReplicaState::WriteState(const Version& v, const std::vector<Digest128>& digests, uint64_t last_transfer) {
  const std::string text = EncodeStateFile({v, CombineDigests(catalog_, digests), digests, last_transfer, has_layout()});
  return WriteFileAtomic(dir_ + "/" + kReplicaStateFile,
                         {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Result<ReplicaState> ReplicaState::Open(const std::string& dir, int threads) {
  const std::string state_path = dir + "/" + kReplicaStateFile;
  auto bytes = ReadWholeFile(state_path);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) return NotFound(dir + ": no replica state (no " + kReplicaStateFile + ")");
    return bytes.status();
  }
  DCR_ASSIGN_OR_RETURN(StateFile st, ParseStateFile(*bytes, state_path));
  std::optional<ReplicaState> opened;
  if (st.layout) {
    DCR_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaLayout> layout, ReplicaLayout::Open(dir));
    opened.emplace(ReplicaState(dir, threads, std::nullopt, std::move(layout)));
  } else {
    DCR_ASSIGN_OR_RETURN(Checkpoint w, Checkpoint::Open(dir + "/" + kReplicaWeightsFile, MappedFile::Mode::kReadWrite));
    opened.emplace(ReplicaState(dir, threads, std::move(w), nullptr));
  }
  ReplicaState& r = *opened;
  if (st.tensors.size() != r.catalog_.size())
    return Corrupt(state_path + ": " + std::to_string(st.tensors.size()) + " tensor digests for " +
                   std::to_string(r.catalog_.size()) + " tensors in " +
                   (st.layout ? std::string("the layout's catalog") : std::string(kReplicaWeightsFile)));
  if (CombineDigests(r.catalog_, st.tensors) != st.digest)
    return Corrupt(state_path + ": digest does not match the tensor digests and the weights' catalog");
  if (st.version.number == 0 && (st.version.id != st.digest || st.last_transfer != 0))
    return Corrupt(state_path + ": version 0 must be the initial digest with last_transfer 0");
  r.version_ = st.version;
  r.last_transfer_ = st.last_transfer;
  r.committed_ = st.tensors;
  r.running_ = st.tensors;
  DCR_RETURN_IF_ERROR(RemoveTempFiles(dir));
  DCR_RETURN_IF_ERROR(r.Recover());
  return std::move(r);
}

Status ReplicaState::Recover() {
  std::error_code ec;
  if (!fs::exists(journal_, ec)) return Status::Ok();
  DCR_RETURN_IF_ERROR(RemoveTempFiles(journal_));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(journal_, ec)) names.push_back(e.path().filename().string());
  if (ec) return IoError("list " + journal_ + ": " + ec.message());
  std::sort(names.begin(), names.end());
  const std::string transfer_path = journal_ + "/transfer.json";
  if (std::find(names.begin(), names.end(), "transfer.json") == names.end()) {
    if (!names.empty()) return Corrupt(journal_ + ": holds " + names.front() + " but no transfer.json");
    return RemoveJournal(dir_, journal_, {});
  }
  DCR_ASSIGN_OR_RETURN(std::vector<uint8_t> tbytes, ReadWholeFile(transfer_path));
  DCR_ASSIGN_OR_RETURN(TransferFile tf, ParseTransferFile(tbytes, transfer_path));
  if (tf.base != version_) {
    if (tf.transfer_id == last_transfer_) return RemoveJournal(dir_, journal_, {});  // committed
    return Corrupt(journal_ + ": journal of transfer " + Hex64(tf.transfer_id) + " from " + tf.base.ToString() +
                   ", but the committed version is " + version_.ToString());
  }
  pending_ = PendingTransfer{tf.transfer_id, tf.base, false, 0};

  std::map<std::pair<uint32_t, uint32_t>, DoneRecord> done;
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, std::string>> undo;  // -> (ordinal, path)
  for (const std::string& name : names) {
    const std::string path = journal_ + "/" + name;
    uint32_t p = 0, s = 0;
    std::string ext;
    if (name == "transfer.json") continue;
    if (name == "voted") {
      pending_->voted = true;
    } else if (ParseRecordName(name, &p, &s, &ext) && ext == "undo") {
      DCR_ASSIGN_OR_RETURN(UndoRecord u, ReadUndoRecord(path, undo_tensors()));
      if (u.producer != p || u.sequence != s || u.transfer != tf.transfer_id)
        return Corrupt(path + ": record identity does not match its name and transfer " + Hex64(tf.transfer_id));
      undo[{p, s}] = {u.ordinal, path};
    } else if (ParseRecordName(name, &p, &s, &ext) && ext == "done") {
      DCR_ASSIGN_OR_RETURN(std::vector<uint8_t> b, ReadWholeFile(path));
      DCR_ASSIGN_OR_RETURN(DoneRecord d, ParseDoneRecord(b, path, catalog_.size()));
      if (d.producer != p || d.sequence != s || d.transfer != tf.transfer_id)
        return Corrupt(path + ": record identity does not match its name and transfer " + Hex64(tf.transfer_id));
      done[{p, s}] = std::move(d);
    } else {
      return Corrupt(path + ": unexpected file in the journal");
    }
  }
  for (const auto& [id, u] : undo) undo_.push_back(u);
  std::sort(undo_.begin(), undo_.end());
  for (size_t i = 1; i < undo_.size(); ++i)
    if (undo_[i].first == undo_[i - 1].first)
      return Corrupt(undo_[i].second + ": undo ordinal " + std::to_string(undo_[i].first) + " is not unique");
  if (!pending_->voted) return Abort();

  // Voted: keep done payloads, roll back a partial one.
  std::vector<std::pair<uint64_t, std::string>> partial;
  for (const auto& [id, u] : undo)
    if (!done.count(id)) partial.push_back(u);
  for (const auto& [id, d] : done)
    if (!undo.count(id))
      return Corrupt(journal_ + "/" + RecordStem(id.first, id.second) + ".done: voted journal has no undo record for it");
  std::sort(partial.begin(), partial.end());
  if (!partial.empty()) {
    DCR_RETURN_IF_ERROR(RollBack(partial, false));
    for (auto it = partial.rbegin(); it != partial.rend(); ++it) DCR_RETURN_IF_ERROR(RemoveDurably(it->second));
    std::erase_if(undo_, [&](const auto& u) { return std::find(partial.begin(), partial.end(), u) != partial.end(); });
  }
  for (const auto& [id, d] : done) {
    done_[id] = d.payload_hash;
    for (const auto& [t, delta] : d.deltas) running_[t] += delta;
  }
  pending_->applied_payloads = done_.size();
  next_ordinal_ = undo_.empty() ? 0 : undo_.back().first + 1;
  return Status::Ok();
}

Status ReplicaState::RollBack(const std::vector<std::pair<uint64_t, std::string>>& undo, bool crash_point) {
  std::vector<UndoRecord> records;  // every record is validated before any byte is restored
  for (const auto& [ordinal, path] : undo) {
    DCR_ASSIGN_OR_RETURN(UndoRecord r, ReadUndoRecord(path, undo_tensors()));
    records.push_back(std::move(r));
  }
  for (auto it = records.rbegin(); it != records.rend(); ++it) RestoreUndoRecord(*it, undo_tensors());
  DCR_RETURN_IF_ERROR(SyncWeights());
  if (crash_point) CrashPoint("replica.rolled_back");
  return Status::Ok();
}

std::vector<std::string> ReplicaState::UndoPathsNewestFirst() const {
  std::vector<std::string> out;
  for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) out.push_back(it->second);
  return out;
}

Status ReplicaState::Begin(uint64_t transfer_id, const Version& base) {
  if (!broken_.ok()) return broken_;
  if (base != version_)
    return WrongBase(dir_ + ": transfer " + Hex64(transfer_id) + " starts from " + base.ToString() +
                     ", but the replica is at " + version_.ToString() + "; nothing was written");
  if (pending_) {
    if (pending_->transfer_id == transfer_id) return Status::Ok();
    if (pending_->voted)
      return InvalidArgument(dir_ + ": awaiting decision of transfer " + Hex64(pending_->transfer_id) +
                             "; cannot begin transfer " + Hex64(transfer_id));
    DCR_RETURN_IF_ERROR(Abort());
  }
  std::error_code ec;
  fs::create_directory(journal_, ec);
  if (ec) return IoError("create directory " + journal_ + ": " + ec.message());
  DCR_RETURN_IF_ERROR(SyncDirectory(dir_));
  const std::string text = EncodeTransferFile({transfer_id, base});
  DCR_RETURN_IF_ERROR(WriteFileAtomic(journal_ + "/transfer.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  pending_ = PendingTransfer{transfer_id, base, false, 0};
  running_ = committed_;
  done_.clear();
  undo_.clear();
  next_ordinal_ = 0;
  return Status::Ok();
}

Result<ApplyOutcome> ReplicaState::ApplyPayload(std::span<const uint8_t> payload) {
  const auto t0 = Clock::now();
  if (!broken_.ok()) return broken_;
  if (!pending_) return InvalidArgument(dir_ + ": no transfer is pending; payload refused");
  // (1) Checks, all before anything is written.
  PayloadLayout layout;
  DCR_RETURN_IF_ERROR(ParsePayload(payload, &layout).WithContext(dir_ + ": payload refused"));
  const PayloadIdentity id = layout.identity;
  const std::string what = "payload " + std::to_string(id.producer_id) + "/" + std::to_string(id.sequence) +
                           " of transfer " + Hex64(id.transfer_id);
  if (id.transfer_id != pending_->transfer_id)
    return WrongBase(dir_ + ": " + what + " refused: transfer " + Hex64(pending_->transfer_id) + " is pending");
  uint64_t checksum = 0;
  std::memcpy(&checksum, payload.data() + payload.size() - 8, 8);  // verified by ParsePayload
  if (auto it = done_.find({id.producer_id, id.sequence}); it != done_.end()) {
    if (it->second != checksum) return Corrupt(dir_ + ": " + what + " resent with different bytes; nothing was written");
    ApplyOutcome dup;
    dup.duplicate = true;
    dup.seconds = SecondsSince(t0);
    return dup;
  }
  if (pending_->voted) return InvalidArgument(dir_ + ": " + what + " refused: the transfer is already voted");
  if (layout_ && (layout.mode != CodecMode::kPlain || layout.val_form != ValueForm::kAsKind))
    return Unsupported(dir_ + ": " + what + " refused: a receiver holding a serving layout needs plain payloads " +
                       "(context mode and values coded as steps decode against canonical old bits it does not " +
                       "hold); nothing was written");
  auto fit = [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    if (s.tensor_index >= catalog_.size())
      return Corrupt(what + ": segment names tensor " + std::to_string(s.tensor_index) + ", out of range");
    const CatalogEntry& c = catalog_[s.tensor_index];
    const uint64_t n = elements_[s.tensor_index];
    if (s.dtype != c.dtype || s.start > n || s.count > n - s.start)
      return Corrupt(what + ": segment [" + std::to_string(s.start) + ", +" + std::to_string(s.count) + ") " +
                     std::string(DTypeName(s.dtype)) + " does not fit tensor '" + c.name + "'");
    if (layout_) return std::span<const uint8_t>();  // plain payloads read no old bytes
    const uint64_t w = DTypeWidth(c.dtype);
    return weights_->tensors()[s.tensor_index].bytes.subspan(s.start * w, s.count * w);
  };
  for (const SegmentSpec& s : layout.segments) DCR_RETURN_IF_ERROR(fit(s).status().WithContext(dir_));
  DecodedPayload decoded;
  DCR_RETURN_IF_ERROR(DecodePayload(payload, &decoded, fit, threads_).WithContext(dir_ + ": " + what + " refused"));
  const size_t nseg = decoded.segments.size();
  std::vector<Digest128> seg_delta(nseg);
  PlacedPayload placed;  // layout mode: every change resolved to its local copies
  uint64_t undo_entries = decoded.changed();
  if (layout_) {
    DCR_RETURN_IF_ERROR(layout_->Resolve(decoded, threads_, dir_ + ": " + what + " refused", &placed));
    for (size_t i = 0; i < nseg; ++i) seg_delta[i] = placed.segments[i].digest_delta;
    undo_entries = placed.local_elements;
  } else {
    DCR_RETURN_IF_ERROR(ParallelFor(nseg, threads_, [&](size_t i) {
      const DecodedSegment& seg = decoded.segments[i];
      const uint64_t key = TensorKey(catalog_[seg.spec.tensor_index].name);
      ForEachChange(seg, weights_->tensors()[seg.spec.tensor_index].bytes,
                    [&](uint64_t idx, uint64_t o, uint64_t n) { DigestUpdate(&seg_delta[i], key, idx, o, n); });
      return Status::Ok();
    }));
  }
  DoneRecord done{id.producer_id, id.sequence, id.transfer_id, checksum, decoded.changed(), {}};
  for (size_t i = 0; i < nseg; ++i) {
    const uint32_t t = decoded.segments[i].spec.tensor_index;
    if (done.deltas.empty() || done.deltas.back().first != t) done.deltas.push_back({t, Digest128{}});
    done.deltas.back().second += seg_delta[i];
  }

  // (2) Undo record, durable before the first store (W2).
  const std::string stem = journal_ + "/" + RecordStem(id.producer_id, id.sequence);
  auto write_undo = [&]() -> Status {
    DCR_ASSIGN_OR_RETURN(UndoWriter u, UndoWriter::Create(stem + ".undo", id.producer_id, id.sequence, id.transfer_id,
                                                          next_ordinal_, undo_entries));
    Status s;
    if (layout_) {
      s = layout_->AddUndo(placed, u);
    } else {
      for (const DecodedSegment& seg : decoded.segments) {
        const uint32_t ti = seg.spec.tensor_index, w = seg.changes.width;
        ForEachChange(seg, weights_->tensors()[ti].bytes, [&](uint64_t idx, uint64_t o, uint64_t) {
          if (s.ok()) s = u.Add(ti, idx, o, w);
        });
      }
    }
    return s.ok() ? u.Commit() : s;
  };
  if (Status s = write_undo(); !s.ok()) {  // nothing was stored; a published record must go
    Status r = RemoveDurably(stem + ".undo");
    return r.ok() ? s : Broken(s);
  }
  undo_.push_back({next_ordinal_++, stem + ".undo"});
  CrashPoint("replica.undo_written");

  // (3) Stores, sync, done record (W3). A failure here rolls this payload back.
  // Dense segments' pages are made writable in one call each, not a fault per page
  // (write_prefault.h).
  if (layout_)
    for (const PlacedPayload::Segment& seg : placed.segments) PrefaultDenseSlots(seg.slots);
  else
    PrefaultWriteRanges(DenseWriteRanges(decoded),
                        [&](uint32_t t) { return weights_->tensors()[t].mutable_bytes; });
  Status s;
  for (size_t i = 0; i < nseg && s.ok(); ++i) {
    const DecodedSegment& seg = decoded.segments[i];
    if (layout_) layout_->Store(placed, i);
    else s = ApplySegment(seg, weights_->tensors()[seg.spec.tensor_index].mutable_bytes);
    if (s.ok()) CrashPoint("replica.segment_applied");
  }
  if (s.ok()) s = SyncWeights();
  if (s.ok()) CrashPoint("replica.applied");
  if (s.ok()) s = WriteFileAtomic(stem + ".done", EncodeDoneRecord(done));
  if (!s.ok()) {
    std::vector<std::pair<uint64_t, std::string>> last{undo_.back()};
    Status r = RollBack(last, false);
    if (r.ok()) r = RemoveDurably(stem + ".done");
    if (r.ok()) r = RemoveDurably(stem + ".undo");
    if (!r.ok()) return Broken(s);
    undo_.pop_back();
    return s.WithContext(dir_ + ": " + what + " rolled back");
  }
  CrashPoint("replica.done_written");
  done_[{id.producer_id, id.sequence}] = checksum;
  for (const auto& [t, delta] : done.deltas) running_[t] += delta;
  ++pending_->applied_payloads;
  ApplyOutcome out;
  out.changed = done.changed;
  out.seconds = SecondsSince(t0);
  return out;
}

Status ReplicaState::Vote() {
  if (!broken_.ok()) return broken_;
  if (!pending_) return InvalidArgument(dir_ + ": no transfer is pending; nothing to vote on");
  if (pending_->voted) return Status::Ok();
  DCR_RETURN_IF_ERROR(WriteFileAtomic(journal_ + "/voted", {}));
  CrashPoint("replica.voted");
  pending_->voted = true;
  return Status::Ok();
}

Status ReplicaState::Commit(const Version& next) {
  if (!broken_.ok()) return broken_;
  if (!pending_) return InvalidArgument(dir_ + ": no transfer is pending; nothing to commit");
  const uint64_t transfer = pending_->transfer_id;
  const Version expect = NextVersion(version_, transfer, running_digest());
  if (next != expect)
    return Corrupt(dir_ + ": transfer " + Hex64(transfer) + " commits " + next.ToString() + ", but the replica's bits (digest " +
                   running_digest().ToHex() + ") make " + expect.ToString() + "; nothing was written");
  DCR_RETURN_IF_ERROR(WriteState(next, running_, transfer));
  CrashPoint("replica.state_written");
  version_ = next;
  last_transfer_ = transfer;
  committed_ = running_;
  const std::vector<std::string> undo = UndoPathsNewestFirst();
  pending_.reset();
  done_.clear();
  undo_.clear();
  Status s = RemoveJournal(dir_, journal_, undo);
  return s.ok() ? s : Broken(s.WithContext("committed " + next.ToString() + ", but removing the journal failed"));
}

Status ReplicaState::Abort() {
  if (!broken_.ok()) return broken_;
  if (!pending_) return Status::Ok();
  // Without "voted", a crash from here on is recovered by a full rollback: what this does.
  Status s = RemoveDurably(journal_ + "/voted");
  if (s.ok()) pending_->voted = false;
  if (s.ok()) s = RollBack(undo_, true);
  if (s.ok()) s = RemoveJournal(dir_, journal_, UndoPathsNewestFirst());
  if (!s.ok()) return Broken(s.WithContext("aborting transfer " + Hex64(pending_->transfer_id)));
  pending_.reset();
  running_ = committed_;
  done_.clear();
  undo_.clear();
  next_ordinal_ = 0;
  return Status::Ok();
}

}  // namespace dcr
