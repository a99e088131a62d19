#include "protocol/delta_apply.h"

#include <chrono>

#include "base/thread_pool.h"

namespace dcr {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Result<ApplyStats> ApplyDelta(const DeltaReader& delta, Checkpoint& target, const ApplyOptions& options) {
  const DeltaHeader& h = delta.header();
  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  DCR_RETURN_IF_ERROR(CompareCatalogs(h.catalog(), delta.path(), target.catalog(), target.path()));
  const auto& tensors = target.tensors();
  for (const auto& t : tensors)
    if (t.mutable_bytes.size() != t.bytes.size()) return Internal(target.path() + " was not opened for writing");

  ApplyStats stats;
  stats.payloads = h.payloads.size();
  stats.wire_bytes = delta.file_size();

  // (2) The target must hold exactly the base bits.
  auto t0 = Clock::now();
  CheckpointDigest have = DigestCheckpoint(target, threads);
  stats.base_check_seconds = Since(t0);
  if (have.total != h.base_digest) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (have.tensors[i] != h.tensors[i].base_digest)
        return WrongBase(target.path() + ": tensor '" + tensors[i].name() +
                         "' does not hold the delta's base bits (digest " + have.tensors[i].ToHex() + ", base " +
                         h.tensors[i].base_digest.ToHex() + "); nothing was written");
    return WrongBase(target.path() + ": checkpoint digest differs from the delta's base; nothing was written");
  }

  // (3)+(4) Decode every payload and fold its changes into the digest, still read-only.
  auto t1 = Clock::now();
  std::vector<Digest128> deltas(h.payloads.size());
  DCR_RETURN_IF_ERROR(ParallelFor(h.payloads.size(), threads, [&](size_t i) {
    DecodedChunk chunk;
    DCR_RETURN_IF_ERROR(DecodeTablePayload(delta, i, &chunk));
    const TensorRef& t = tensors[chunk.spec.tensor_index];
    const uint64_t key = TensorKey(t.name());
    Digest128 d;
    ForEachChange(chunk, t.bytes, [&](uint64_t idx, uint64_t old_bits, uint64_t new_bits) {
      DigestUpdate(&d, key, idx, old_bits, new_bits);
    });
    deltas[i] = d;
    return Status::Ok();
  }));
  std::vector<Digest128> expect(have.tensors);
  for (size_t i = 0; i < h.payloads.size(); ++i) expect[h.payloads[i].tensor] += deltas[i];
  for (size_t i = 0; i < tensors.size(); ++i)
    if (expect[i] != h.tensors[i].target_digest)
      return Corrupt(delta.path() + ": changes for tensor '" + tensors[i].name() +
                     "' do not produce the recorded target digest; nothing was written");
  stats.verify_seconds = Since(t1);
  if (options.progress) options.progress(0, stats.wire_bytes);

  // Every check has passed: write. Chunks are disjoint, so payloads apply in parallel.
  auto t2 = Clock::now();
  DCR_RETURN_IF_ERROR(ParallelFor(h.payloads.size(), threads, [&](size_t i) {
    DecodedChunk chunk;
    DCR_RETURN_IF_ERROR(DecodeTablePayload(delta, i, &chunk));
    return ApplyChunk(chunk, tensors[chunk.spec.tensor_index].mutable_bytes);
  }));
  DCR_RETURN_IF_ERROR(target.Sync());
  stats.apply_seconds = Since(t2);
  stats.changed_elements = h.changed_elements();
  stats.target_digest = h.target_digest;
  if (options.progress) options.progress(stats.wire_bytes, stats.wire_bytes);
  return stats;
}

}  // namespace dcr
