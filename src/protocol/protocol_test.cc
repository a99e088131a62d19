// Protocol tests, part 1: checkpoint digests and the delta round trip (DiffCheckpoints ->
// DeltaReader -> ApplyDelta gives exactly the new bits), plain and context mode. Determinism
// across thread counts and chunk sizes is in delta_determinism_test.cc, refusals in
// delta_refusal_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "protocol/payload_plan.h"
#include "protocol/protocol_test_support.h"
#include "protocol/state_digest.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

using namespace protocol_test;  // NOLINT: the shared test data and helpers

// ---------------------------------------------------------------------------------------------
// State digest

TEST(StateDigest, CheckpointDigestIsTheSameForEveryThreadCountAndShardLayout) {
  TempDir dir{"dcr_protocol_test_"};
  Tensors t = MakeBase(5);
  t.Add("huge.u8", DType::kU8, {(1u << 22) + 12345});  // spans two digest slices
  std::mt19937_64 rng(6);
  for (auto& b : t.Bytes("huge.u8")) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(WriteSafetensors(dir / "one.safetensors", t.Bind()).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(dir / "sharded", t.list, 4096).ok());
  Checkpoint one = OpenOrDie(dir / "one.safetensors"), sharded = OpenOrDie(dir / "sharded");
  const CheckpointDigest d1 = DigestCheckpoint(one, 1);
  for (int threads : {2, 4}) {
    CheckpointDigest d = DigestCheckpoint(one, threads);
    EXPECT_EQ(d.total, d1.total);
    EXPECT_EQ(d.tensors, d1.tensors);
  }
  CheckpointDigest ds = DigestCheckpoint(sharded, 3);
  EXPECT_EQ(ds.total, d1.total);
  EXPECT_EQ(ds.tensors, d1.tensors);
  // Each tensor digest is the plain sum over its elements; the total combines them with the catalog.
  for (size_t i = 0; i < one.tensors().size(); ++i) {
    const TensorRef& r = one.tensors()[i];
    uint32_t w = DTypeWidth(r.dtype());
    EXPECT_EQ(d1.tensors[i], DigestElements(TensorKey(r.name()), r.bytes, w, 0)) << r.name();
    if (r.num_elements() == 0) {
      EXPECT_EQ(d1.tensors[i], Digest128{});
    }
  }
  EXPECT_EQ(d1.total, CombineDigests(one.catalog(), d1.tensors));
}

TEST(StateDigest, CombinedDigestDependsOnTheCatalog) {
  const std::vector<Digest128> tensors = {{1, 2}, {3, 4}};
  const Catalog cat = {{"a", DType::kF32, {2, 3}}, {"b", DType::kBF16, {}}};
  const Digest128 d = CombineDigests(cat, tensors);
  auto with = [&](auto edit) {
    Catalog c = cat;
    edit(c);
    return CombineDigests(c, tensors);
  };
  EXPECT_NE(with([](Catalog& c) { c[0].name = "a2"; }), d);
  EXPECT_NE(with([](Catalog& c) { c[0].shape = {3, 2}; }), d);
  EXPECT_NE(with([](Catalog& c) { c[0].shape = {6}; }), d);
  EXPECT_NE(with([](Catalog& c) { c[0].dtype = DType::kI32; }), d);
  EXPECT_NE(CombineDigests(cat, {{1, 2}, {3, 5}}), d);
  EXPECT_EQ(CombineDigests(cat, tensors), d);
}

// ---------------------------------------------------------------------------------------------
// Delta round trip

TEST(DeltaRoundTrip, MixedDTypesSpecialValuesAndEmptyTensorsApplyBitExactly) {
  Pair p;
  auto stats = p.Diff(p.dir / "d.dcr");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const uint64_t want_changed = CountChanged(p.base, p.next);
  EXPECT_EQ(stats->changed_elements, want_changed);
  EXPECT_EQ(stats->wire_bytes, fs::file_size(p.dir / "d.dcr"));

  auto r = DeltaReader::Open(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const DeltaHeader& h = r->header();
  EXPECT_EQ(h.tensors.size(), p.base.list.size());
  EXPECT_EQ(h.changed_elements(), want_changed);
  EXPECT_EQ(h.base_digest, DigestCheckpoint(OpenOrDie(p.base_path), 1).total);
  EXPECT_EQ(h.target_digest, DigestCheckpoint(OpenOrDie(p.next_path), 1).total);
  EXPECT_EQ(h.target_digest, stats->target_digest);
  // Unchanged and empty tensors have no segment; every tensor's tags are its digests' low bits.
  for (size_t i = 0; i < h.payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    for (const auto& seg : d.segments) {
      EXPECT_NE(h.tensors[seg.spec.tensor_index].entry.name, "frozen.weight");
      EXPECT_NE(h.tensors[seg.spec.tensor_index].entry.name, "empty.weight");
    }
  }
  const CheckpointDigest bd = DigestCheckpoint(OpenOrDie(p.base_path), 1);
  EXPECT_EQ(h.format_version, kDeltaFormatVersion);
  for (size_t t = 0; t < h.tensors.size(); ++t)
    EXPECT_EQ(h.tensors[t].base_tag, DigestTag(bd.tensors[t], h.base_tag_bits())) << h.tensors[t].entry.name;

  auto applied = p.ApplyToBaseCopy(p.dir / "d.dcr", p.dir / "target.safetensors");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->changed_elements, want_changed);
  EXPECT_EQ(applied->target_digest, h.target_digest);
  // The whole file, header included, is now the next checkpoint's file.
  EXPECT_EQ(ReadAll(p.dir / "target.safetensors"), ReadAll(p.next_path));
  Checkpoint target = OpenOrDie(p.dir / "target.safetensors");
  ExpectHolds(target, p.next);
  EXPECT_EQ(DigestCheckpoint(target, 2).total, h.target_digest);
}

TEST(DeltaRoundTrip, ShardedTargetReceivesExactlyTheNewBits) {
  Pair p;
  ASSERT_TRUE(p.Diff(p.dir / "d.dcr").ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "target", p.base.Bind(), 8192).ok());
  ASSERT_GT(OpenOrDie(p.dir / "target").num_files(), 2u);
  auto applied = Apply(p.dir / "d.dcr", p.dir / "target");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  Checkpoint target = OpenOrDie(p.dir / "target");
  EXPECT_TRUE(target.sharded());
  ExpectHolds(target, p.next);
  auto diff = FirstDifference(target, OpenOrDie(p.next_path));
  ASSERT_TRUE(diff.ok());
  EXPECT_FALSE(diff->has_value());
}

TEST(DeltaRoundTrip, ShardedAndSingleFileCheckpointsGiveTheSameDeltaFile) {
  Pair p;
  ASSERT_TRUE(p.Diff(p.dir / "single.dcr").ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "base_sh", p.base.Bind(), 10000).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "next_sh", p.next.Bind(), 3000).ok());
  Checkpoint b = OpenOrDie(p.dir / "base_sh"), n = OpenOrDie(p.dir / "next_sh");
  ASSERT_TRUE(DiffCheckpoints(b, n, p.dir / "sharded.dcr", DiffOptions{}).ok());
  EXPECT_EQ(ReadAll(p.dir / "single.dcr"), ReadAll(p.dir / "sharded.dcr"));
}

TEST(DeltaRoundTrip, SmallChunksSplitTensorsIntoManyPayloadsAndStillApplyExactly) {
  Pair p;
  DiffOptions opt;
  opt.chunk_bytes = 256;  // at most 256 dense bytes per payload
  auto s = p.Diff(p.dir / "d.dcr", opt);
  ASSERT_TRUE(s.ok());
  auto r = DeltaReader::Open(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok());
  const DeltaHeader& h = r->header();
  EXPECT_GT(h.payloads.size(), 200u);
  EXPECT_EQ(s->payloads, h.payloads.size());
  std::map<uint32_t, int> payloads_per_tensor;
  uint64_t changed = 0;
  for (size_t i = 0; i < h.payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    EXPECT_EQ(d.identity.sequence, h.payloads[i].sequence);
    EXPECT_EQ(d.changed(), h.payloads[i].changed);
    changed += d.changed();
    uint64_t dense = 0;
    for (const auto& seg : d.segments) {
      dense += seg.spec.count * DTypeWidth(seg.spec.dtype);
      payloads_per_tensor[seg.spec.tensor_index]++;
    }
    EXPECT_LE(dense, 256u) << "payload " << i;
    if (i > 0) {
      EXPECT_GT(h.payloads[i].sequence, h.payloads[i - 1].sequence);
    }
  }
  EXPECT_EQ(changed, CountChanged(p.base, p.next));
  int most = 0;
  for (auto& [tensor, n] : payloads_per_tensor) most = std::max(most, n);
  EXPECT_GT(most, 50);  // big.weight alone is cut into hundreds of payloads
  ASSERT_TRUE(p.ApplyToBaseCopy(p.dir / "d.dcr", p.dir / "t.safetensors").ok());
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.next_path));
}

// With the default payload size every small tensor shares one payload.
TEST(DeltaRoundTrip, SmallTensorsShareOnePayload) {
  Pair p;
  auto r = p.DiffAndOpen(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->header().payloads.size(), 1u);
  DecodedPayload d;
  ASSERT_TRUE(DecodeTablePayload(*r, 0, &d).ok());
  EXPECT_EQ(d.segments.size(), p.base.list.size() - 2);  // all but frozen.weight and empty.weight
}

TEST(DeltaRoundTrip, EveryDecodedChangeTakesTheBaseBitsToTheNextBits) {
  Pair p;
  DiffOptions opt;
  opt.chunk_bytes = 1024;
  auto r = p.DiffAndOpen(p.dir / "d.dcr", opt);
  ASSERT_TRUE(r.ok());
  Checkpoint base = OpenOrDie(p.base_path), next = OpenOrDie(p.next_path);
  uint64_t seen = 0;
  for (size_t i = 0; i < r->header().payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    for (const auto& seg : d.segments) {
      const TensorRef& b = base.tensors()[seg.spec.tensor_index];
      const TensorRef& n = next.tensors()[seg.spec.tensor_index];
      const uint32_t w = DTypeWidth(b.dtype());
      ForEachChange(seg, b.bytes, [&](uint64_t idx, uint64_t o, uint64_t nb) {
        uint64_t want_old = 0, want_new = 0;
        std::memcpy(&want_old, b.bytes.data() + idx * w, w);
        std::memcpy(&want_new, n.bytes.data() + idx * w, w);
        EXPECT_EQ(o, want_old);
        EXPECT_EQ(nb, want_new);
        EXPECT_NE(o, nb);
        ++seen;
      });
    }
  }
  EXPECT_EQ(seen, CountChanged(p.base, p.next));
}

TEST(DeltaRoundTrip, OverwriteKindAppliesBitExactly) {
  Pair p;
  DiffOptions opt;
  opt.kind = ValueKind::kOverwrite;
  opt.chunk_bytes = 2048;
  auto r = p.DiffAndOpen(p.dir / "ow.dcr", opt);
  ASSERT_TRUE(r.ok());
  auto x = p.DiffAndOpen(p.dir / "xor.dcr");
  ASSERT_TRUE(x.ok());
  for (size_t i = 0; i < r->header().payloads.size(); ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodeTablePayload(*r, i, &d).ok());
    for (const auto& seg : d.segments) EXPECT_EQ(seg.spec.kind, ValueKind::kOverwrite);
  }
  EXPECT_EQ(r->header().target_digest, x->header().target_digest);
  EXPECT_NE(ReadAll(p.dir / "ow.dcr"), ReadAll(p.dir / "xor.dcr"));

  auto applied = p.ApplyToBaseCopy(p.dir / "ow.dcr", p.dir / "t.safetensors");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.next_path));
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "sh", p.base.Bind(), 5000).ok());
  ASSERT_TRUE(Apply(p.dir / "ow.dcr", p.dir / "sh").ok());
  ExpectHolds(OpenOrDie(p.dir / "sh"), p.next);
}

TEST(DeltaRoundTrip, IdenticalCheckpointsGiveADeltaWithoutPayloadsThatLeavesTheTargetAsIs) {
  Pair p;
  Checkpoint b = OpenOrDie(p.base_path);
  auto s = DiffCheckpoints(b, b, p.dir / "none.dcr", DiffOptions{});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->changed_elements, 0u);
  EXPECT_EQ(s->payloads, 0u);
  auto r = DeltaReader::Open(p.dir / "none.dcr");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->header().payloads.empty());
  EXPECT_EQ(r->header().base_digest, r->header().target_digest);
  ASSERT_TRUE(p.ApplyToBaseCopy(p.dir / "none.dcr", p.dir / "t.safetensors").ok());
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.base_path));
}

TEST(DeltaRoundTrip, TransferIdDefaultsToTheBaseDigestHashAndEveryPayloadCarriesIt) {
  Pair p;
  auto r = p.DiffAndOpen(p.dir / "d.dcr");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header().transfer_id, DefaultTransferId(DigestCheckpoint(OpenOrDie(p.base_path), 1).total));
  DiffOptions opt;
  opt.transfer_id = 0x0123456789abcdefull;
  auto e = p.DiffAndOpen(p.dir / "e.dcr", opt);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->header().transfer_id, 0x0123456789abcdefull);
  ASSERT_FALSE(e->header().payloads.empty());
  for (size_t i = 0; i < e->header().payloads.size(); ++i) {
    auto id = PeekPayloadIdentity(e->PayloadBytes(i));
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(id->transfer_id, 0x0123456789abcdefull);
    EXPECT_EQ(id->producer_id, 0u);
  }
}

TEST(DeltaRoundTrip, ProgressIsReportedUpToTheTotal) {
  Pair p;
  DiffOptions opt;
  opt.chunk_bytes = 4096;
  uint64_t last_done = 0, total = 0;
  int calls = 0;
  opt.progress = [&](uint64_t done, uint64_t t) {
    EXPECT_GE(done, last_done);
    last_done = done, total = t, ++calls;
  };
  auto s = p.Diff(p.dir / "d.dcr", opt);
  ASSERT_TRUE(s.ok());
  EXPECT_GT(calls, 0);
  EXPECT_EQ(last_done, total);
  EXPECT_EQ(total, s->dense_bytes);
}

TEST(DeltaDiff, CatalogMismatchIsRefusedAndNoFileIsWritten) {
  Pair p;
  Tensors other = MakeBase(1);
  other.list[0].shape = {48, 64};
  ASSERT_TRUE(WriteSafetensors(p.dir / "other.safetensors", other.Bind()).ok());
  Checkpoint b = OpenOrDie(p.base_path), o = OpenOrDie(p.dir / "other.safetensors");
  auto s = DiffCheckpoints(b, o, p.dir / "d.dcr", DiffOptions{});
  EXPECT_EQ(s.status().code(), StatusCode::kMismatch);
  EXPECT_NE(s.status().message().find("attn.q.weight"), std::string::npos) << s.status().message();
  EXPECT_FALSE(fs::exists(p.dir / "d.dcr"));
}

// ---------------------------------------------------------------------------------------------
// Context mode: payloads whose locations are coded per class of the old value (decoding reads
// the target's old bits).

// Old bytes of a segment from `c`, as a receiver supplies them.
BaseLookup LookupIn(const Checkpoint& c) {
  return [&c](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    if (s.tensor_index >= c.tensors().size()) return Corrupt("tensor index out of range");
    const TensorRef& t = c.tensors()[s.tensor_index];
    const uint64_t w = DTypeWidth(t.dtype()), n = t.num_elements();
    if (s.dtype != t.dtype() || s.start > n || s.count > n - s.start) return Corrupt("segment does not fit");
    return t.bytes.subspan(s.start * w, s.count * w);
  };
}

bool SameBytes(std::span<const uint8_t> a, std::span<const uint8_t> b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

TEST(DeltaContext, AlwaysAndWhenSmallerApplyBitExactlyAndAreByteIdenticalForOneTwoAndFourThreads) {
  using Context = EncodeOptions::Context;
  Pair p;
  const uint64_t want_changed = CountChanged(p.base, p.next);
  for (uint64_t chunk_bytes : {kDefaultChunkBytes, uint64_t{4096}, uint64_t{256}}) {
    const std::string tag = "chunk " + std::to_string(chunk_bytes);
    std::map<Context, std::string> files;
    for (Context context : {Context::kNever, Context::kAlways, Context::kWhenSmaller}) {
      const std::string what = tag + " context " + std::to_string(static_cast<int>(context));
      std::vector<uint8_t> first;
      for (int threads : {1, 2, 4}) {
        DiffOptions opt;
        opt.threads = threads;
        opt.chunk_bytes = chunk_bytes;
        opt.encode.context = context;
        const std::string out = p.dir / ("c" + std::to_string(static_cast<int>(context)) + "_" +
                                         std::to_string(chunk_bytes) + "_" + std::to_string(threads) + ".dcr");
        auto s = p.Diff(out, opt);
        ASSERT_TRUE(s.ok()) << what << ": " << s.status().ToString();
        EXPECT_EQ(s->changed_elements, want_changed) << what;
        auto bytes = ReadAll(out);
        if (threads == 1) {
          first = bytes;
          files[context] = out;
          continue;
        }
        EXPECT_EQ(bytes, first) << what << " threads " << threads;
      }
      const std::string target = p.dir / ("t" + std::to_string(static_cast<int>(context)) + "_" + std::to_string(chunk_bytes) + ".safetensors");
      auto applied = p.ApplyToBaseCopy(files[context], target);
      ASSERT_TRUE(applied.ok()) << what << ": " << applied.status().ToString();
      EXPECT_EQ(applied->changed_elements, want_changed) << what;
      EXPECT_EQ(ReadAll(target), ReadAll(p.next_path)) << what;
    }

    // One plan for every mode: payload by payload the same changes, and kWhenSmaller's payload
    // has the location code of the plain or the kAlways one and kAlways' values.
    auto never = DeltaReader::Open(files[Context::kNever]);
    auto always = DeltaReader::Open(files[Context::kAlways]);
    auto smaller = DeltaReader::Open(files[Context::kWhenSmaller]);
    ASSERT_TRUE(never.ok() && always.ok() && smaller.ok()) << tag;
    const size_t np = never->header().payloads.size();
    ASSERT_EQ(always->header().payloads.size(), np) << tag;
    ASSERT_EQ(smaller->header().payloads.size(), np) << tag;
    EXPECT_EQ(always->header().base_digest, never->header().base_digest);
    EXPECT_EQ(always->header().target_digest, never->header().target_digest);
    EXPECT_EQ(smaller->header().target_digest, never->header().target_digest);
    EXPECT_NE(ReadAll(files[Context::kAlways]), ReadAll(files[Context::kNever])) << tag;
    Checkpoint base = OpenOrDie(p.base_path);
    const BaseLookup lookup = LookupIn(base);
    size_t context_payloads = 0;
    for (size_t i = 0; i < np; ++i) {
      const auto pn = never->PayloadBytes(i), pa = always->PayloadBytes(i), ps = smaller->PayloadBytes(i);
      // kWhenSmaller's payload is the kAlways one, or the plain one's location code with the
      // values as steps (as kAlways codes them).
      PayloadLayout la, ls, ln;
      ASSERT_TRUE(ParsePayload(pa, &la).ok() && ParsePayload(ps, &ls).ok() && ParsePayload(pn, &ln).ok());
      EXPECT_EQ(ls.val_form, ValueForm::kSteps);
      EXPECT_EQ(ln.val_form, ValueForm::kAsKind);
      if (ls.mode == CodecMode::kPlain)
        EXPECT_TRUE(SameBytes(ls.loc_stored, ln.loc_stored) && ls.val_codec == la.val_codec &&
                    SameBytes(ls.val_stored, la.val_stored))
            << tag << " payload " << i;
      else
        EXPECT_TRUE(SameBytes(ps, pa)) << tag << " payload " << i;
      DecodedPayload dn, da;
      ASSERT_TRUE(DecodeTablePayload(*never, i, &dn).ok());
      Status st = DecodeTablePayload(*always, i, &da, lookup);
      ASSERT_TRUE(st.ok()) << tag << " payload " << i << ": " << st.ToString();
      EXPECT_EQ(da.mode, la.mode);
      ASSERT_EQ(da.segments.size(), dn.segments.size());
      for (size_t k = 0; k < da.segments.size(); ++k) {
        EXPECT_EQ(da.segments[k].spec.tensor_index, dn.segments[k].spec.tensor_index);
        EXPECT_EQ(da.segments[k].spec.start, dn.segments[k].spec.start);
        EXPECT_EQ(AsVector(da.segments[k].changes.positions), AsVector(dn.segments[k].changes.positions)) << tag << " payload " << i;
        EXPECT_EQ(AsVector(da.segments[k].changes.values), AsVector(dn.segments[k].changes.values)) << tag << " payload " << i;
      }
      if (la.mode == CodecMode::kContextSplitRice) {
        ++context_payloads;
        // Without the old bits (a tool that only reads the delta) it cannot be decoded.
        DecodedPayload none;
        EXPECT_EQ(DecodeTablePayload(*always, i, &none).code(), StatusCode::kUnsupported);
      }
    }
    // kAlways falls back to plain only for payloads whose band code exceeds the location limit.
    EXPECT_GT(context_payloads, np / 2) << tag;
  }
}

TEST(DeltaContext, OverwriteKindOnAShardedTargetAppliesBitExactly) {
  Pair p;
  DiffOptions opt;
  opt.kind = ValueKind::kOverwrite;
  opt.chunk_bytes = 2048;
  opt.encode.context = EncodeOptions::Context::kAlways;
  ASSERT_TRUE(p.Diff(p.dir / "ctx_ow.dcr", opt).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(p.dir / "sh", p.base.Bind(), 5000).ok());
  ASSERT_GT(OpenOrDie(p.dir / "sh").num_files(), 2u);
  auto applied = Apply(p.dir / "ctx_ow.dcr", p.dir / "sh");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  ExpectHolds(OpenOrDie(p.dir / "sh"), p.next);
  auto again = p.ApplyToBaseCopy(p.dir / "ctx_ow.dcr", p.dir / "t.safetensors");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ReadAll(p.dir / "t.safetensors"), ReadAll(p.next_path));
}

}  // namespace
}  // namespace dcr
