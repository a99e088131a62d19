#include "protocol/replica_layout.h"

#include <filesystem>

#include "base/durable_file.h"
#include "base/thread_pool.h"
#include "layout/dtype_convert.h"
#include "layout/layout_json.h"
#include "protocol/layout_digest.h"
#include "protocol/replica_state.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

std::string Join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

}  // namespace

Status ReplicaLayout::Create(const std::string& dir, const std::string& layout_dir, const Checkpoint& canonical,
                             const CheckpointDigest& digest, int threads) {
  // Every refusal comes before the first write.
  DCR_ASSIGN_OR_RETURN(LayoutSet set, ReadLayoutDir(layout_dir));
  DCR_RETURN_IF_ERROR(CompareCatalogs(canonical.catalog(), canonical.path(), set.at(0).canonical, "the layout in " + layout_dir));
  const Catalog& catalog = set.at(0).canonical;
  for (const RankLayout& l : set)
    for (const LocalTensor& t : l.tensors)
      for (const Piece& p : t.pieces) {
        const CatalogEntry& c = catalog[static_cast<size_t>(l.FindCanonical(p.canonical))];
        if (p.owner && p.transform == PieceTransform::kConvert && !ConversionExact(c.dtype, t.dtype))
          return Unsupported(layout_dir + ": canonical tensor '" + p.canonical + "' is owned by rank " + std::to_string(l.rank) +
                             " tensor '" + t.name + "', which holds it converted to " + std::string(DTypeName(t.dtype)) +
                             " with rounding: its canonical bits cannot be recovered, and a live receiver must be able to " +
                             "vote on canonical digests; serve it in a dtype that holds " + std::string(DTypeName(c.dtype)) +
                             " exactly; nothing was written");
      }

  // The layout files, byte for byte, then the shards.
  const std::string ldir = Join(dir, kReplicaLayoutDir), sdir = Join(dir, kReplicaShardsDir);
  std::error_code ec;
  if (!fs::create_directory(ldir, ec) || ec) return IoError("create directory " + ldir + ": " + ec.message());
  DCR_RETURN_IF_ERROR(SyncDirectory(dir));
  for (const RankLayout& l : set) {
    DCR_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(Join(layout_dir, LayoutFileName(l.rank))));
    DCR_RETURN_IF_ERROR(WriteFileAtomic(Join(ldir, LayoutFileName(l.rank)), bytes));
  }
  DCR_RETURN_IF_ERROR(WriteShards(set, canonical, sdir, threads));
  DCR_RETURN_IF_ERROR(SyncDirectory(dir));

  // The shards must digest, through the layout, to the checkpoint's canonical digest.
  DCR_ASSIGN_OR_RETURN(ShardSet shards, ShardSet::Open(set, sdir, MappedFile::Mode::kReadOnly));
  DCR_ASSIGN_OR_RETURN(CheckpointDigest through, DigestThroughLayout(set, shards.bytes(), threads));
  for (size_t i = 0; i < catalog.size(); ++i)
    if (through.tensors[i] != digest.tensors[i])
      return Internal(sdir + ": the shards' canonical tensor '" + catalog[i].name + "' does not digest to " + canonical.path() +
                      "'s, from which they were written");
  return Status::Ok();
}

Result<std::unique_ptr<ReplicaLayout>> ReplicaLayout::Open(const std::string& dir) {
  const std::string ldir = Join(dir, kReplicaLayoutDir), sdir = Join(dir, kReplicaShardsDir);
  std::unique_ptr<ReplicaLayout> l(new ReplicaLayout());
  DCR_ASSIGN_OR_RETURN(l->set_, ReadLayoutDir(ldir));
  DCR_RETURN_IF_ERROR(RemoveTempFiles(ldir));
  DCR_ASSIGN_OR_RETURN(l->shards_, ShardSet::Open(l->set_, sdir, MappedFile::Mode::kReadWrite));
  DCR_RETURN_IF_ERROR(RemoveTempFiles(sdir));
  l->placer_ = std::make_unique<Placer>(l->set_, l->shards_.mutable_bytes());
  for (const RankLayout& r : l->set_) {
    l->first_ordinal_.push_back(static_cast<uint32_t>(l->undo_tensors_.size()));
    for (size_t i = 0; i < r.tensors.size(); ++i)
      l->undo_tensors_.push_back({l->shards_.mutable_bytes()[r.rank][i], DTypeWidth(r.tensors[i].dtype)});
  }
  return l;
}

Status ReplicaLayout::Resolve(const DecodedPayload& payload, int threads, const std::string& what, PlacedPayload* out) const {
  const size_t n = payload.segments.size();
  out->segments.assign(n, {});
  DCR_RETURN_IF_ERROR(ParallelFor(n, threads, [&](size_t i) {
    const DecodedSegment& seg = payload.segments[i];
    PlacedPayload::Segment& o = out->segments[i];
    const uint32_t t = o.tensor = seg.spec.tensor_index;
    const CatalogEntry& c = catalog()[t];
    const uint64_t key = TensorKey(c.name);
    const bool xor_kind = seg.spec.kind == ValueKind::kXor;
    o.ends.reserve(seg.changes.size());
    o.new_bits.reserve(seg.changes.size());
    return ForEachResolvedChange(*placer_, seg, [&](size_t, uint64_t index, uint64_t value, std::span<const Slot> copies) {
      const std::optional<uint64_t> old = placer_->OldBits(t, copies);
      if (!old)
        return Unsupported(what + ": canonical tensor '" + c.name + "' element " + ElementCoordinates(c.shape, index) +
                           " is held only as rounded conversions, so its old bits are unknown; nothing was written");
      const uint64_t next = xor_kind ? (*old ^ value) : value;
      DigestUpdate(&o.digest_delta, key, index, *old, next);
      o.slots.insert(o.slots.end(), copies.begin(), copies.end());
      o.ends.push_back(o.slots.size());
      o.new_bits.push_back(next);
      return Status::Ok();
    });
  }));
  out->local_elements = 0;
  for (const PlacedPayload::Segment& s : out->segments) out->local_elements += s.slots.size();
  return Status::Ok();
}

Status ReplicaLayout::AddUndo(const PlacedPayload& placed, UndoWriter& undo) const {
  for (const PlacedPayload::Segment& seg : placed.segments)
    for (const Slot& s : seg.slots) {
      const uint32_t w = DTypeWidth(s.local_dtype);
      uint64_t old = 0;
      std::memcpy(&old, s.at, w);
      DCR_RETURN_IF_ERROR(undo.Add(first_ordinal_[s.rank] + s.local_tensor, s.element, old, w));
    }
  return Status::Ok();
}

void ReplicaLayout::Store(const PlacedPayload& placed, size_t i) const {
  const PlacedPayload::Segment& seg = placed.segments[i];
  size_t begin = 0;
  for (size_t k = 0; k < seg.new_bits.size(); ++k) {
    const std::span<const Slot> copies(seg.slots.data() + begin, seg.ends[k] - begin);
    placer_->Place(seg.tensor, copies, ValueKind::kOverwrite, seg.new_bits[k], seg.new_bits[k]);
    begin = seg.ends[k];
  }
}

}  // namespace dcr
