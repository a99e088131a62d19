#include "protocol/delta_apply.h"

#include "base/thread_pool.h"
#include "base/timing.h"
#include "protocol/write_prefault.h"

namespace dcr {
namespace {

// Old bytes of a segment from the target, for context-mode decoding; refuses segments that do
// not fit the target's catalog.
BaseLookup TargetLookup(const Checkpoint& target) {
  return [&target](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    const auto& tensors = target.tensors();
    if (s.tensor_index >= tensors.size()) return Corrupt("segment names tensor " + std::to_string(s.tensor_index) + ", out of range");
    const TensorRef& t = tensors[s.tensor_index];
    const uint64_t w = DTypeWidth(t.dtype()), n = t.num_elements();
    if (s.dtype != t.dtype() || s.start > n || s.count > n - s.start)
      return Corrupt("segment [" + std::to_string(s.start) + ", +" + std::to_string(s.count) + ") " +
                     std::string(DTypeName(s.dtype)) + " does not fit tensor '" + t.name() + "'");
    return t.bytes.subspan(s.start * w, s.count * w);
  };
}

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
  stats.base_check_seconds = SecondsSince(t0);
  if (have.total != h.base_digest) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (DigestTag(have.tensors[i], h.base_tag_bits()) != h.tensors[i].base_tag)
        return WrongBase(target.path() + ": tensor '" + tensors[i].name() +
                         "' does not hold the delta's base bits; nothing was written");
    return WrongBase(target.path() + " does not hold the delta's base bits (checkpoint digest " + have.total.ToHex() +
                     ", the delta's base " + h.base_digest.ToHex() + "); nothing was written");
  }

  const BaseLookup lookup = TargetLookup(target);
  // (3)+(4) Decode every payload and fold its changes into the digest, still read-only.
  auto t1 = Clock::now();
  const size_t np = h.payloads.size();
  std::vector<std::vector<std::pair<uint32_t, Digest128>>> deltas(np);
  std::vector<std::pair<SegmentSpec, SegmentSpec>> ends(np);  // first and last segment
  std::vector<std::vector<WriteRange>> dense(np);              // DenseWriteRanges of each payload
  DCR_RETURN_IF_ERROR(ParallelForItems(np, threads, [&](size_t i, int per_payload) {
    DecodedPayload payload;
    DCR_RETURN_IF_ERROR(DecodeTablePayload(delta, i, &payload, lookup, per_payload));
    for (const DecodedSegment& seg : payload.segments) {
      const TensorRef& t = tensors[seg.spec.tensor_index];
      const uint64_t key = TensorKey(t.name());
      Digest128 d;
      ForEachChange(seg, t.bytes, [&](uint64_t idx, uint64_t old_bits, uint64_t new_bits) {
        DigestUpdate(&d, key, idx, old_bits, new_bits);
      });
      deltas[i].emplace_back(seg.spec.tensor_index, d);
    }
    ends[i] = {payload.segments.front().spec, payload.segments.back().spec};
    if (options.prefault_writes) dense[i] = DenseWriteRanges(payload);
    return Status::Ok();
  }));
  // Segments are disjoint across payloads too, so no element is written twice.
  for (size_t i = 1; i < np; ++i)
    DCR_RETURN_IF_ERROR(CheckSegmentOrder(ends[i - 1].second, ends[i].first, i).WithContext(delta.path()));
  std::vector<Digest128> expect(have.tensors);
  for (const auto& per_payload : deltas)
    for (const auto& [t, d] : per_payload) expect[t] += d;
  if (CombineDigests(target.catalog(), expect) != h.target_digest) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (h.has_target_tags() && DigestTag(expect[i]) != h.tensors[i].target_tag)
        return Corrupt(delta.path() + ": changes for tensor '" + tensors[i].name() +
                       "' do not produce the recorded target digest; nothing was written");
    return Corrupt(delta.path() + ": changes do not produce the recorded target digest; nothing was written");
  }
  stats.verify_seconds = SecondsSince(t1);
  if (options.progress) options.progress(0, stats.wire_bytes);

  // Every check has passed: write. Segments are disjoint, so payloads apply in parallel; a
  // context-mode payload reads only its own segments' old bits, which only it changes. Each
  // payload's dense segments are first made writable whole (write_prefault.h).
  auto t2 = Clock::now();
  const TensorBytes tensor_of = [&](uint32_t t) { return tensors[t].mutable_bytes; };
  std::vector<uint64_t> prefaulted(np, 0);
  DCR_RETURN_IF_ERROR(ParallelForItems(np, threads, [&](size_t i, int per_payload) {
    prefaulted[i] = PrefaultWriteRanges(dense[i], tensor_of);
    DecodedPayload payload;
    return DecodeApplyTablePayload(delta, i, &payload, lookup, tensor_of, per_payload);
  }));
  for (uint64_t b : prefaulted) stats.prefaulted_bytes += b;
  DCR_RETURN_IF_ERROR(target.Sync());
  stats.apply_seconds = SecondsSince(t2);
  stats.changed_elements = h.changed_elements();
  stats.target_digest = h.target_digest;
  if (options.progress) options.progress(stats.wire_bytes, stats.wire_bytes);
  return stats;
}

}  // namespace dcr
