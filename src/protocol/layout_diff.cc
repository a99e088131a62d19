#include "protocol/layout_diff.h"

#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"
#include "base/timing.h"
#include "codec/diff.h"
#include "layout/projection.h"
#include "protocol/delta_file.h"
#include "protocol/layout_digest.h"
#include "protocol/payload_plan.h"

namespace dcr {
namespace {

// Local elements scanned per work item (DiffElements needs fewer than 2^32).
constexpr uint64_t kScanElements = 1ull << 24;

struct CanonicalChange {
  uint64_t index;
  uint64_t old_bits, new_bits;
};

struct ScanItem {
  uint32_t rank, tensor;
  uint64_t start, count;
};

struct ScanResult {
  std::vector<std::pair<uint32_t, CanonicalChange>> changes;  // (canonical tensor, change)
  uint64_t replica = 0, padding = 0;
};

Status Scan(const LayoutSet& set, const std::vector<ProjectionIndex>& projections, const ShardBytes& base,
            const ShardBytes& next, const ScanItem& item, ScanResult* out) {
  const RankLayout& l = set[item.rank];
  const LocalTensor& t = l.tensors[item.tensor];
  const uint32_t w = DTypeWidth(t.dtype);
  const auto b = base[item.rank][item.tensor].subspan(item.start * w, item.count * w);
  const auto n = next[item.rank][item.tensor].subspan(item.start * w, item.count * w);
  ChangeSet changes;
  DiffElements(b, n, w, ValueKind::kOverwrite, &changes);
  for (size_t k = 0; k < changes.size(); ++k) {
    const uint64_t local = item.start + changes.positions[k];
    const auto target = projections[item.rank].Project(item.tensor, local);
    if (!target) {
      ++out->padding;
      continue;
    }
    if (!target->piece->owner) {
      ++out->replica;
      continue;
    }
    const DType cd = l.canonical[target->canonical].dtype;
    const auto old_bits = CanonicalBitsAt(*target->piece, cd, t.dtype, base[item.rank][item.tensor], local);
    const auto new_bits = CanonicalBitsAt(*target->piece, cd, t.dtype, next[item.rank][item.tensor], local);
    if (!old_bits || !new_bits)
      return InvalidArgument("rank " + std::to_string(l.rank) + " tensor '" + t.name + "' element " + std::to_string(local) +
                             ": its canonical " + std::string(DTypeName(cd)) + " bits cannot be recovered (lossy or no conversion)");
    out->changes.push_back({target->canonical, {target->index, *old_bits, *new_bits}});
  }
  return Status::Ok();
}

}  // namespace

Result<LayoutDiffStats> DiffLayoutShards(const LayoutSet& set, const ShardBytes& base, const ShardBytes& next,
                                         const std::string& out_path, const LayoutDiffOptions& options) {
  DCR_RETURN_IF_ERROR(CheckShardBytesShape(set, base));
  DCR_RETURN_IF_ERROR(CheckShardBytesShape(set, next));
  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  const Catalog& catalog = set.at(0).canonical;
  LayoutDiffStats stats;
  for (const CatalogEntry& c : catalog) {
    stats.total_elements += *ShapeElements(c.shape);
    stats.dense_bytes += *ShapeElements(c.shape) * DTypeWidth(c.dtype);
  }

  auto t0 = Clock::now();
  DCR_ASSIGN_OR_RETURN(CheckpointDigest base_digest, DigestThroughLayout(set, base, threads));
  stats.digest_seconds = SecondsSince(t0);

  // Scan every rank's shard and project the changes.
  auto t1 = Clock::now();
  std::vector<ProjectionIndex> projections;
  for (const RankLayout& l : set) projections.emplace_back(l);
  std::vector<ScanItem> items;
  for (uint32_t r = 0; r < set.size(); ++r)
    for (uint32_t i = 0; i < set[r].tensors.size(); ++i) {
      const uint64_t n = set[r].tensors[i].num_elements();
      stats.scanned_bytes += n * DTypeWidth(set[r].tensors[i].dtype);
      for (uint64_t s = 0; s < n; s += kScanElements) items.push_back({r, i, s, std::min(kScanElements, n - s)});
    }
  std::vector<ScanResult> scans(items.size());
  DCR_RETURN_IF_ERROR(ParallelFor(items.size(), threads, [&](size_t k) { return Scan(set, projections, base, next, items[k], &scans[k]); }));
  std::vector<std::vector<CanonicalChange>> per_tensor(catalog.size());
  {
    std::vector<size_t> counts(catalog.size(), 0);
    for (const ScanResult& s : scans)
      for (const auto& [c, change] : s.changes) ++counts[c];
    for (size_t c = 0; c < catalog.size(); ++c) per_tensor[c].reserve(counts[c]);
    for (ScanResult& s : scans) {
      for (const auto& [c, change] : s.changes) per_tensor[c].push_back(change);
      stats.replica_changes += s.replica;
      stats.padding_changes += s.padding;
      s = ScanResult{};
    }
  }
  stats.scan_seconds = SecondsSince(t1);
  if (options.progress) options.progress(stats.scanned_bytes, stats.scanned_bytes);

  // Sort per canonical tensor and fold the changes into the target digest: O(changes).
  auto t2 = Clock::now();
  std::vector<Digest128> target(base_digest.tensors);
  DCR_RETURN_IF_ERROR(ParallelFor(catalog.size(), threads, [&](size_t c) {
    auto& v = per_tensor[c];
    std::sort(v.begin(), v.end(), [](const CanonicalChange& a, const CanonicalChange& b) { return a.index < b.index; });
    const uint64_t key = TensorKey(catalog[c].name);
    for (size_t k = 0; k < v.size(); ++k) {
      DCR_CHECK(k == 0 || v[k - 1].index < v[k].index);  // one owner per element (ValidateLayoutSet)
      DigestUpdate(&target[c], key, v[k].index, v[k].old_bits, v[k].new_bits);
    }
    return Status::Ok();
  }));

  const auto plan = PlanPayloads(catalog, std::max<uint64_t>(options.chunk_bytes, 8));
  if (plan.size() > UINT32_MAX) return InvalidArgument("model needs more than 2^32 payloads; raise the chunk size");
  const uint64_t transfer_id = options.transfer_id != 0 ? options.transfer_id : DefaultTransferId(base_digest.total);
  EncodeOptions encode = options.encode;
  encode.context = EncodeOptions::Context::kNever;
  DCR_ASSIGN_OR_RETURN(DeltaWriter writer, DeltaWriter::Create(out_path));
  // Encoded in parallel waves, written in plan order: the file does not depend on scheduling.
  const size_t wave = static_cast<size_t>(threads) * 2;
  std::vector<std::vector<uint8_t>> encoded(wave);
  std::vector<uint64_t> changed(wave);
  for (size_t first = 0; first < plan.size(); first += wave) {
    const size_t n = std::min(wave, plan.size() - first);
    DCR_RETURN_IF_ERROR(ParallelFor(n, threads, [&](size_t i) {
      encoded[i].clear();
      PayloadBuilder builder(encode);
      ChangeSet cs;
      for (const PlannedSegment& seg : plan[first + i]) {
        const auto& v = per_tensor[seg.tensor];
        auto lo = std::lower_bound(v.begin(), v.end(), seg.start,
                                   [](const CanonicalChange& c, uint64_t s) { return c.index < s; });
        auto hi = std::lower_bound(lo, v.end(), seg.start + seg.count,
                                   [](const CanonicalChange& c, uint64_t s) { return c.index < s; });
        if (lo == hi) continue;
        const uint32_t w = DTypeWidth(catalog[seg.tensor].dtype);
        cs.Clear();
        cs.width = w;
        for (auto it = lo; it != hi; ++it) {
          cs.positions.push_back(static_cast<uint32_t>(it->index - seg.start));
          const uint64_t value = options.kind == ValueKind::kXor ? (it->old_bits ^ it->new_bits) : it->new_bits;
          const uint8_t* p = reinterpret_cast<const uint8_t*>(&value);
          cs.values.insert(cs.values.end(), p, p + w);
        }
        builder.AddChanges({seg.tensor, catalog[seg.tensor].dtype, options.kind, seg.start, seg.count}, cs);
      }
      changed[i] = builder.changed();
      // The sequence is the payload's ordinal in the plan (gaps where nothing changed).
      if (builder.segments() > 0) builder.Finish({transfer_id, 0, static_cast<uint32_t>(first + i)}, &encoded[i]);
      return Status::Ok();
    }));
    auto tw = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      if (changed[i] == 0) continue;
      DCR_RETURN_IF_ERROR(writer.Append(encoded[i], {0, 0, static_cast<uint32_t>(first + i), changed[i]}));
      stats.changed_elements += changed[i];
      ++stats.payloads;
    }
    stats.write_seconds += SecondsSince(tw);
  }
  stats.encode_seconds = SecondsSince(t2) - stats.write_seconds;

  DeltaHeader header;
  header.transfer_id = transfer_id;
  for (size_t c = 0; c < catalog.size(); ++c)
    header.tensors.push_back({catalog[c], DigestTag(base_digest.tensors[c]), DigestTag(target[c])});
  header.base_digest = base_digest.total;
  header.target_digest = CombineDigests(catalog, target);
  stats.base_digest = header.base_digest;
  stats.target_digest = header.target_digest;
  auto tw = Clock::now();
  DCR_RETURN_IF_ERROR(writer.Finish(std::move(header)));
  stats.write_seconds += SecondsSince(tw);
  stats.wire_bytes = writer.bytes_written();
  return stats;
}

Result<LayoutDiffStats> DiffLayoutShardDirs(const LayoutSet& set, const std::string& base_dir, const std::string& next_dir,
                                            const std::string& out_path, const LayoutDiffOptions& options) {
  DCR_ASSIGN_OR_RETURN(ShardSet base, ShardSet::Open(set, base_dir, MappedFile::Mode::kReadOnly));
  DCR_ASSIGN_OR_RETURN(ShardSet next, ShardSet::Open(set, next_dir, MappedFile::Mode::kReadOnly));
  return DiffLayoutShards(set, base.bytes(), next.bytes(), out_path, options);
}

}  // namespace dcr
