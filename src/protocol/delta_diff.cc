#include "protocol/delta_diff.h"

#include <algorithm>

#include "base/thread_pool.h"
#include "base/timing.h"
#include "protocol/delta_file.h"
#include "protocol/payload_plan.h"

namespace dcr {
namespace {

int ResolvedThreads(const DiffOptions& options) { return options.threads > 0 ? options.threads : HardwareThreads(); }

Result<PayloadPlan> DiffPlan(const Checkpoint& base, const DiffOptions& options) {
  PayloadPlan plan = PlanPayloads(base.tensors(), std::max<uint64_t>(options.chunk_bytes, 8));
  if (plan.size() > UINT32_MAX) return InvalidArgument("checkpoint needs more than 2^32 payloads; raise the chunk size");
  return plan;
}

// Payloads are encoded in waves of this many, held in memory, then written in plan order: the
// file does not depend on which thread encoded what.
size_t WavePayloads(int threads) { return static_cast<size_t>(threads) * 2; }

// Diffs and encodes plan[first, first + n) into (*results)[0, n) on `threads` threads. An encode
// does not fail (its checks of the inputs abort: a violation is the caller's bug).
void EncodeWave(const PayloadPlan& plan, size_t first, size_t n, const Checkpoint& base, const Checkpoint& next,
                const DiffOptions& options, int threads, uint64_t transfer_id, std::vector<EncodedPayload>* results) {
  (void)ParallelForItems(n, threads, [&](size_t i, int per_payload) {
    // A payload's sequence is its ordinal in the plan (gaps where nothing changed), so it is
    // known before encoding and independent of scheduling.
    EncodePlannedPayload(plan[first + i], base.tensors(), next.tensors(), options.kind, options.encode,
                         {transfer_id, 0, static_cast<uint32_t>(first + i)}, &(*results)[i], per_payload);
    return Status::Ok();
  });
}

}  // namespace

Result<DiffStats> DiffCheckpoints(const Checkpoint& base, const Checkpoint& next, const std::string& out_path,
                                  const DiffOptions& options) {
  DCR_RETURN_IF_ERROR(CompareCheckpointCatalogs(base, next));
  const int threads = ResolvedThreads(options);
  const auto& bt = base.tensors();

  DiffStats stats;
  stats.total_elements = next.total_elements();
  stats.dense_bytes = next.total_bytes();

  // The output file first: creating it takes a few system calls (50-140 us on a VM), and made
  // after the digest, it left the helper thread the digest had used to go back to sleep before
  // the encode handed it work (a helper woken from sleep ran its share slower).
  DCR_ASSIGN_OR_RETURN(DeltaWriter writer, DeltaWriter::Create(out_path));
  auto t0 = Clock::now();
  CheckpointDigest base_digest = DigestCheckpoint(base, threads);
  stats.digest_seconds = SecondsSince(t0);

  DCR_ASSIGN_OR_RETURN(const PayloadPlan plan, DiffPlan(base, options));

  const uint64_t transfer_id = options.transfer_id != 0 ? options.transfer_id : DefaultTransferId(base_digest.total);
  std::vector<Digest128> target(base_digest.tensors);
  const size_t wave = WavePayloads(threads);
  std::vector<EncodedPayload> results(wave);
  uint64_t payloads = 0, done_bytes = 0;
  for (size_t first = 0; first < plan.size(); first += wave) {
    const size_t n = std::min(wave, plan.size() - first);
    auto te = Clock::now();
    EncodeWave(plan, first, n, base, next, options, threads, transfer_id, &results);
    stats.encode_seconds += SecondsSince(te);
    auto tw = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      const EncodedPayload& r = results[i];
      for (const auto& seg : plan[first + i]) done_bytes += seg.count * DTypeWidth(bt[seg.tensor].dtype());
      if (r.changed == 0) continue;
      DCR_RETURN_IF_ERROR(writer.Append(r.bytes, {0, 0, static_cast<uint32_t>(first + i), r.changed}));
      for (const auto& [t, d] : r.digest_deltas) target[t] += d;
      stats.changed_elements += r.changed;
      ++payloads;
    }
    stats.write_seconds += SecondsSince(tw);
    if (options.progress) options.progress(done_bytes, stats.dense_bytes);
  }
  stats.payloads = payloads;

  DeltaHeader header;
  header.transfer_id = transfer_id;
  const Catalog catalog = base.catalog();
  for (size_t t = 0; t < bt.size(); ++t)
    header.tensors.push_back({catalog[t], DigestTag(base_digest.tensors[t]), DigestTag(target[t])});
  header.base_digest = base_digest.total;
  header.target_digest = CombineDigests(catalog, target);
  auto tw = Clock::now();
  DCR_RETURN_IF_ERROR(writer.Finish(std::move(header)));
  stats.write_seconds += SecondsSince(tw);
  stats.wire_bytes = writer.bytes_written();
  stats.base_digest = base_digest.total;
  stats.target_digest = CombineDigests(catalog, target);
  return stats;
}

Result<uint64_t> EncodeDiffPayloads(const Checkpoint& base, const Checkpoint& next, const DiffOptions& options,
                                    uint64_t transfer_id, std::vector<EncodedPayload>* wave) {
  DCR_RETURN_IF_ERROR(CompareCheckpointCatalogs(base, next));
  const int threads = ResolvedThreads(options);
  DCR_ASSIGN_OR_RETURN(const PayloadPlan plan, DiffPlan(base, options));
  wave->resize(WavePayloads(threads));
  uint64_t changed = 0;
  for (size_t first = 0; first < plan.size(); first += wave->size()) {
    const size_t n = std::min(wave->size(), plan.size() - first);
    EncodeWave(plan, first, n, base, next, options, threads, transfer_id, wave);
    for (size_t i = 0; i < n; ++i) changed += (*wave)[i].changed;
    for (size_t i = n; i < wave->size(); ++i) (*wave)[i].bytes.clear(), (*wave)[i].changed = 0;
  }
  return changed;
}

}  // namespace dcr
