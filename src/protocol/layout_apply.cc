#include "protocol/layout_apply.h"

#include "base/thread_pool.h"
#include "base/timing.h"
#include "protocol/layout_digest.h"
#include "protocol/placer.h"
#include "protocol/write_prefault.h"

namespace dcr {
namespace {

Status Decode(const DeltaReader& delta, size_t i, DecodedPayload* payload) {
  Status s = DecodeTablePayload(delta, i, payload);
  if (s.code() == StatusCode::kUnsupported)
    return s.WithContext("a layout apply needs plain-mode payloads (make the delta with `dcr diff --layout` or `--codec plain`)");
  return s;
}

std::string ElementName(const CatalogEntry& c, uint64_t index) {
  return "canonical tensor '" + c.name + "' element " + ElementCoordinates(c.shape, index);
}

}  // namespace

Result<LayoutApplyStats> ApplyLayoutDelta(const DeltaReader& delta, const LayoutSet& set, const MutableShardBytes& shards,
                                          const LayoutApplyOptions& options) {
  const DeltaHeader& h = delta.header();
  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  DCR_RETURN_IF_ERROR(CompareCatalogs(h.catalog(), delta.path(), set.at(0).canonical, "the serving layout"));
  ShardBytes readable(shards.size());
  for (size_t r = 0; r < shards.size(); ++r) readable[r].assign(shards[r].begin(), shards[r].end());
  DCR_RETURN_IF_ERROR(CheckShardBytesShape(set, readable));
  const Placer placer(set, shards);
  const Catalog& catalog = placer.catalog();

  LayoutApplyStats stats;
  stats.payloads = h.payloads.size();
  stats.wire_bytes = delta.file_size();

  // (2) The shards must hold exactly the base bits.
  std::vector<Digest128> have;
  if (options.verify) {
    auto t0 = Clock::now();
    if (options.known_base) {
      if (options.known_base->size() != catalog.size()) return InvalidArgument("known_base has the wrong number of tensors");
      have = *options.known_base;
    } else {
      auto d = DigestThroughLayout(set, readable, threads);
      if (d.status().code() == StatusCode::kUnsupported)
        return d.status().WithContext("cannot verify the base (apply without verification, with an overwrite delta)");
      if (!d.ok()) return d.status();
      have = std::move(d->tensors);
    }
    stats.base_check_seconds = SecondsSince(t0);
    if (CombineDigests(catalog, have) != h.base_digest) {
      for (size_t i = 0; i < catalog.size(); ++i)
        if (DigestTag(have[i], h.base_tag_bits()) != h.tensors[i].base_tag)
          return WrongBase("the shards' canonical tensor '" + catalog[i].name +
                           "' does not hold the delta's base bits; nothing was written");
      return WrongBase("the shards' canonical state does not hold the delta's base bits (digest " + CombineDigests(catalog, have).ToHex() +
                       ", the delta's base " + h.base_digest.ToHex() + "); nothing was written");
    }
  }

  // (3)-(5) Decode every payload, check every change can be placed, fold it into the digest.
  auto t1 = Clock::now();
  const size_t np = h.payloads.size();
  std::vector<std::vector<std::pair<uint32_t, Digest128>>> digest_deltas(np);
  std::vector<std::pair<SegmentSpec, SegmentSpec>> ends(np);
  DCR_RETURN_IF_ERROR(ParallelFor(np, threads, [&](size_t i) {
    DecodedPayload payload;
    DCR_RETURN_IF_ERROR(Decode(delta, i, &payload));
    for (const DecodedSegment& seg : payload.segments) {
      const uint32_t t = seg.spec.tensor_index;
      const bool xor_kind = seg.spec.kind == ValueKind::kXor;
      const bool needs_old = options.verify || (xor_kind && placer.has_converted(t));
      if (!needs_old) continue;
      const uint64_t key = TensorKey(catalog[t].name);
      Digest128 d;
      DCR_RETURN_IF_ERROR(ForEachResolvedChange(placer, seg, [&](size_t, uint64_t index, uint64_t value, std::span<const Slot> copies) {
        const auto old_bits = placer.OldBits(t, copies);
        if (!old_bits)
          return Unsupported(ElementName(catalog[t], index) + " is held only as rounded conversions, so its old bits are unknown: " +
                             (xor_kind ? "an XOR delta cannot be placed (make the delta with --overwrite)"
                                       : "it cannot be verified (apply without verification)") +
                             "; nothing was written");
        DigestUpdate(&d, key, index, *old_bits, xor_kind ? (*old_bits ^ value) : value);
        return Status::Ok();
      }));
      digest_deltas[i].emplace_back(t, d);
    }
    ends[i] = {payload.segments.front().spec, payload.segments.back().spec};
    return Status::Ok();
  }));
  for (size_t i = 1; i < np; ++i)
    DCR_RETURN_IF_ERROR(CheckSegmentOrder(ends[i - 1].second, ends[i].first, i).WithContext(delta.path()));
  if (options.verify) {
    std::vector<Digest128> expect(have);
    for (const auto& per_payload : digest_deltas)
      for (const auto& [t, d] : per_payload) expect[t] += d;
    if (CombineDigests(catalog, expect) != h.target_digest) {
      for (size_t i = 0; i < catalog.size(); ++i)
        if (h.has_target_tags() && DigestTag(expect[i]) != h.tensors[i].target_tag)
          return Corrupt(delta.path() + ": changes for canonical tensor '" + catalog[i].name +
                         "' do not produce the recorded target digest; nothing was written");
      return Corrupt(delta.path() + ": changes do not produce the recorded target digest; nothing was written");
    }
    stats.target_tensor_digests = std::move(expect);
  }
  stats.verify_seconds = SecondsSince(t1);
  if (options.progress) options.progress(0, stats.wire_bytes);

  // Every check has passed: write. Payloads hold disjoint canonical elements and each local element
  // copies at most one canonical element, so payloads are placed in parallel without conflicts.
  auto t2 = Clock::now();
  std::vector<uint64_t> placed(np, 0), prefaulted(np, 0);
  DCR_RETURN_IF_ERROR(ParallelFor(np, threads, [&](size_t i) {
    DecodedPayload payload;
    DCR_RETURN_IF_ERROR(Decode(delta, i, &payload));
    for (const DecodedSegment& seg : payload.segments) {
      const uint32_t t = seg.spec.tensor_index;
      const bool xor_kind = seg.spec.kind == ValueKind::kXor;
      const bool needs_old = xor_kind && placer.has_converted(t);
      prefaulted[i] += PrefaultDenseSegment(placer, seg);  // dense local spans made writable whole first
      DCR_RETURN_IF_ERROR(ForEachResolvedChange(placer, seg, [&](size_t, uint64_t, uint64_t value, std::span<const Slot> copies) {
        // Read before any copy of this element is written; present (checked above).
        const uint64_t new_bits = needs_old ? (*placer.OldBits(t, copies) ^ value) : value;
        placer.Place(t, copies, seg.spec.kind, value, new_bits);
        placed[i] += copies.size();
        return Status::Ok();
      }));
    }
    return Status::Ok();
  }));
  stats.apply_seconds = SecondsSince(t2);
  for (uint64_t p : placed) stats.placed_elements += p;
  for (uint64_t p : prefaulted) stats.prefaulted_bytes += p;
  stats.changed_elements = h.changed_elements();
  stats.target_digest = h.target_digest;
  if (options.progress) options.progress(stats.wire_bytes, stats.wire_bytes);
  return stats;
}

Result<LayoutApplyStats> ApplyLayoutDeltaToDir(const DeltaReader& delta, const LayoutSet& set, const std::string& dir,
                                               const LayoutApplyOptions& options) {
  DCR_RETURN_IF_ERROR(CompareCatalogs(delta.header().catalog(), delta.path(), set.at(0).canonical, "the serving layout"));
  DCR_ASSIGN_OR_RETURN(ShardSet shards, ShardSet::Open(set, dir, MappedFile::Mode::kReadWrite));
  auto t = Clock::now();
  DCR_ASSIGN_OR_RETURN(LayoutApplyStats stats, ApplyLayoutDelta(delta, set, shards.mutable_bytes(), options));
  DCR_RETURN_IF_ERROR(shards.Sync());
  stats.apply_seconds = SecondsSince(t) - stats.base_check_seconds - stats.verify_seconds;  // placement + sync
  return stats;
}

}  // namespace dcr
