#include "protocol/delta_diff.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/thread_pool.h"
#include "protocol/delta_file.h"

namespace dcr {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Chunk {
  uint32_t tensor;
  uint64_t start, count;
};

struct ChunkResult {
  std::vector<uint8_t> payload;
  uint64_t changed = 0;
  Digest128 digest_delta;  // target digest minus base digest over this chunk
};

}  // namespace

Result<DiffStats> DiffCheckpoints(const Checkpoint& base, const Checkpoint& next, const std::string& out_path,
                                  const DiffOptions& options) {
  DCR_RETURN_IF_ERROR(CompareCatalogs(base.catalog(), base.path(), next.catalog(), next.path()));
  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  const auto& bt = base.tensors();
  const auto& nt = next.tensors();

  DiffStats stats;
  stats.total_elements = next.total_elements();
  stats.dense_bytes = next.total_bytes();

  auto t0 = Clock::now();
  CheckpointDigest base_digest = DigestCheckpoint(base, threads);
  stats.digest_seconds = Since(t0);

  std::vector<Chunk> chunks;
  for (uint32_t t = 0; t < bt.size(); ++t) {
    uint32_t w = DTypeWidth(bt[t].dtype());
    uint64_t per = std::clamp<uint64_t>(options.chunk_bytes / w, 64, UINT32_MAX);
    for (uint64_t s = 0; s < bt[t].num_elements(); s += per)
      chunks.push_back({t, s, std::min(per, bt[t].num_elements() - s)});
  }
  if (chunks.size() > UINT32_MAX) return InvalidArgument("checkpoint needs more than 2^32 chunks; raise the chunk size");

  const uint64_t transfer_id = options.transfer_id != 0 ? options.transfer_id : DefaultTransferId(base_digest.total);
  DCR_ASSIGN_OR_RETURN(DeltaWriter writer, DeltaWriter::Create(out_path));
  std::vector<Digest128> target(base_digest.tensors);
  // Chunks are processed in waves; each wave's payloads are held in memory, then written in
  // order. A wave's results depend only on its chunks, never on which thread ran them.
  const size_t wave = static_cast<size_t>(threads) * 2;
  std::vector<ChunkResult> results(wave);
  uint64_t payloads = 0;
  uint64_t done_bytes = 0;
  for (size_t first = 0; first < chunks.size(); first += wave) {
    const size_t n = std::min(wave, chunks.size() - first);
    auto te = Clock::now();
    DCR_RETURN_IF_ERROR(ParallelFor(n, threads, [&](size_t i) {
      const Chunk& c = chunks[first + i];
      const TensorRef& b = bt[c.tensor];
      const TensorRef& x = nt[c.tensor];
      const uint32_t w = DTypeWidth(b.dtype());
      ChunkResult& r = results[i];
      r.payload.clear();
      r.digest_delta = {};
      EncodeScratch local;
      // A payload's sequence number is its chunk's ordinal in the plan (unchanged chunks leave
      // gaps), so it is known before encoding and independent of scheduling.
      ChunkSpec spec{{transfer_id, 0, static_cast<uint32_t>(first + i)}, c.tensor, b.dtype(), c.start, c.count, options.kind};
      r.changed = EncodeChunk(spec, b.bytes.subspan(c.start * w, c.count * w), x.bytes.subspan(c.start * w, c.count * w),
                              options.encode, &local, &r.payload);
      const uint64_t key = TensorKey(b.name());
      const uint8_t* nb = x.bytes.data();
      for (size_t k = 0; k < local.changes.size(); ++k) {
        uint64_t idx = c.start + local.changes.positions[k];
        uint64_t old_bits = 0, new_bits = 0;
        std::memcpy(&old_bits, b.bytes.data() + idx * w, w);
        std::memcpy(&new_bits, nb + idx * w, w);
        DigestUpdate(&r.digest_delta, key, idx, old_bits, new_bits);
      }
      return Status::Ok();
    }));
    stats.encode_seconds += Since(te);
    auto tw = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      const Chunk& c = chunks[first + i];
      ChunkResult& r = results[i];
      done_bytes += c.count * DTypeWidth(bt[c.tensor].dtype());
      if (r.changed == 0) continue;
      DCR_RETURN_IF_ERROR(writer.Append(r.payload, {0, 0, c.tensor, c.start, c.count, r.changed}));
      target[c.tensor] += r.digest_delta;
      stats.changed_elements += r.changed;
      ++payloads;
    }
    stats.write_seconds += Since(tw);
    if (options.progress) options.progress(done_bytes, stats.dense_bytes);
  }
  stats.payloads = payloads;

  DeltaHeader header;
  header.transfer_id = transfer_id;
  const Catalog catalog = base.catalog();
  for (size_t t = 0; t < bt.size(); ++t)
    header.tensors.push_back({catalog[t], options.kind, base_digest.tensors[t], target[t]});
  header.base_digest = base_digest.total;
  header.target_digest = CombineDigests(catalog, target);
  auto tw = Clock::now();
  DCR_RETURN_IF_ERROR(writer.Finish(std::move(header)));
  stats.write_seconds += Since(tw);
  stats.wire_bytes = writer.bytes_written();
  stats.base_digest = base_digest.total;
  stats.target_digest = CombineDigests(catalog, target);
  return stats;
}

}  // namespace dcr
