#include "codec/payload_codec.h"

#include <zstd.h>

#include <atomic>
#include <optional>

#include "base/thread_pool.h"
#include "codec/apply_changes.h"
#include "codec/band_context.h"
#include "codec/band_walk.h"
#include "codec/bit_stream.h"
#include "codec/context_coding.h"
#include "codec/payload_checksum.h"
#include "codec/section_coding.h"
#include "codec/value_coding.h"
#include "codec/value_steps.h"

namespace dcr {
namespace {

// Header field offsets (docs/format.md §2).
enum : size_t {
  kOffMagic = 0, kOffVersion = 4, kOffMode = 6, kOffBlockLog2 = 7, kOffTransfer = 8, kOffProducer = 16,
  kOffSequence = 20, kOffSegments = 24, kOffTableLen = 28, kOffLocCodec = 32, kOffValCodec = 33,
  kOffValForm = 34, kOffReserved8 = 35, kOffReserved32 = 36, kOffLocRaw = 40, kOffLocStored = 48, kOffValRaw = 56,
  kOffValStored = 64,
};
static_assert(kOffValStored + 8 == kPayloadHeaderBytes);

// What Finish reserves for a value section beyond its raw bytes: its code table (up to 4096
// entries of a few bytes) and stream header. A hint only: a larger section grows the buffer.
constexpr size_t kValueSectionSlackBytes = 16 * 1024;

// AddDiff counts the band fit's samples of a larger segment in ranges of this many elements: a
// multiple of the sampling stride of payloads below 2^34 elements (larger ones count after the
// diff), so that the ranges' samples are the whole segment's.
constexpr uint64_t kFitCountRangeElements = uint64_t{1} << 18;

// Upper bound of a valid location code for one segment: each block's count, method and Rice
// parameter, plus at most a bitmap's worth of data (the encoder never picks a larger code).
uint64_t MaxLocationBytes(uint64_t count, int block_log2) {
  return ((count >> block_log2) + 1) * 12 + count / 8 + 8;
}

}  // namespace

uint64_t DecodedPayload::changed() const {
  uint64_t n = 0;
  for (const auto& s : segments) n += s.changes.size();
  return n;
}

uint64_t PayloadBuilder::AddDiff(const SegmentSpec& spec, std::span<const uint8_t> base,
                                 std::span<const uint8_t> next, const DiffChunkFn& on_chunk) {
  // Counting ahead, the band fit counts the changes from the old bits each run of the diff
  // hands over.
  const DiffChunkFn counting = !count_ahead_ ? DiffChunkFn() : [&](const DiffChunk& c) {
    if (on_chunk) on_chunk(c);
    fit_counter_.CountChangedOldBits(spec.dtype, c.old_bits);
  };
  const uint32_t w = DTypeWidth(spec.dtype);
  const uint64_t n = base.size() / w;
  // A segment larger than kFitCountRangeElements is diffed range by range, and each range's
  // sampled elements are counted right after its diff, while they are in cache, apart from the
  // other segments' counts until the segment is known to have changes. (Counted after the whole
  // segment's diff, a large one's samples came from memory: 4.2 % of the samples of a one-thread
  // context encode of a 31.6 MB generated payload, against 1.1 % so, same bytes.)
  std::optional<FitCounter> ranges;  // the ranges' sampled elements
  if (count_ahead_ && n > kFitCountRangeElements && kFitCountRangeElements % fit_counter_.stride() == 0) {
    changes_.Clear();
    ranges.emplace(fit_counter_.stride());
    for (uint64_t first = 0; first < n; first += kFitCountRangeElements) {
      const uint64_t bytes = std::min(kFitCountRangeElements, n - first) * w;
      const std::span<const uint8_t> old_range = base.subspan(first * w, bytes);
      DiffElementsAppend(old_range, next.subspan(first * w, bytes), w, spec.kind, first, &changes_, counting,
                         options_.value_form());
      ranges->CountPopulation({spec.dtype, old_range});
    }
  } else {
    DiffElements(base, next, w, spec.kind, &changes_, count_ahead_ ? counting : on_chunk, options_.value_form());
  }
  if (changes_.size() > 0) {
    value_tally_.Add(changes_.values, changes_.width);
    AddChanges(spec, changes_, base);
    if (ranges)
      ranges->AddTo(&fit_counts_);
    else if (count_ahead_)
      fit_counter_.CountPopulation({spec.dtype, base});
  }
  return changes_.size();
}

void PayloadBuilder::CountFitAhead(uint64_t planned_elements) {
  DCR_CHECK(segments_ == 0);
  count_ahead_ = options_.context != EncodeOptions::Context::kNever;
  fit_counter_ = FitCounter(FitSampleStride(planned_elements));
  fit_counts_ = FitCounts{};
}

void PayloadBuilder::AddChanges(const SegmentSpec& spec, const ChangeSet& changes, std::span<const uint8_t> base,
                                std::span<const uint8_t> coded_locations, Changes held,
                                std::optional<uint64_t> plain_at_least) {
  const bool kept = held == Changes::kKeptUntilFinish;
  const uint32_t w = DTypeWidth(spec.dtype);
  DCR_CHECK(changes.width == w && changes.size() > 0 && changes.form == options_.value_form());
  DCR_CHECK(options_.context == EncodeOptions::Context::kNever || base.size() == spec.count * w);
  AddTableEntry(spec, changes.size());
  // With context mode possible, the plain code is written in Finish only if it is chosen.
  if (options_.context == EncodeOptions::Context::kNever) {
    if (coded_locations.empty())
      EncodeLocations(changes.positions, spec.count, options_.block_log2, &loc_raw_);
    else
      loc_raw_.insert(loc_raw_.end(), coded_locations.begin(), coded_locations.end());
  } else {
    DCR_CHECK(coded_locations.empty());
    if (options_.context == EncodeOptions::Context::kWhenSmaller)  // kAlways never weighs the plain code
      plain_at_least_ += plain_at_least.has_value()
                             ? *plain_at_least
                             : LocationCodeBytesLowerBound(changes.positions, spec.count, options_.block_log2);
    context_segments_.push_back({spec.dtype, base});
    if (!kept) positions_.insert(positions_.end(), changes.positions.begin(), changes.positions.end());
    position_ends_.push_back(positions_.size());
    kept_positions_.push_back(kept ? std::span<const uint32_t>(changes.positions) : std::span<const uint32_t>());
  }
  if (!kept) val_raw_.insert(val_raw_.end(), changes.values.begin(), changes.values.end());
  runs_.push_back({w, changes.size(), kept ? std::span<const uint8_t>(changes.values) : std::span<const uint8_t>()});
  value_bytes_ += changes.values.size();
}

void PayloadBuilder::AddCodedPieces(const SegmentSpec& spec, uint64_t changed, std::span<const ValueRun> values,
                                    std::span<const std::span<const uint8_t>> coded_locations) {
  DCR_CHECK(options_.context == EncodeOptions::Context::kNever && changed > 0);
  uint64_t counted = 0;
  for (const ValueRun& r : values) {
    DCR_CHECK(r.width == DTypeWidth(spec.dtype) && r.count > 0 && r.bytes.size() == r.count * r.width);
    counted += r.count;
  }
  DCR_CHECK(counted == changed);
  AddTableEntry(spec, changed);
  for (std::span<const uint8_t> piece : coded_locations) loc_raw_.insert(loc_raw_.end(), piece.begin(), piece.end());
  for (const ValueRun& r : values) runs_.push_back(r), value_bytes_ += r.bytes.size();
}

void PayloadBuilder::AddTableEntry(const SegmentSpec& spec, uint64_t changed) {
  DCR_CHECK(spec.count >= 1 && spec.count <= kMaxSegmentElements && changed <= spec.count);
  DCR_CHECK(segments_ == 0 || spec.tensor_index > last_.tensor_index ||
            (spec.tensor_index == last_.tensor_index && spec.start >= last_.start + last_.count));
  table_.push_back(DTypeCode(spec.dtype));
  table_.push_back(static_cast<uint8_t>(spec.kind));
  PutVarint(table_, spec.tensor_index);
  PutVarint(table_, spec.start);
  PutVarint(table_, spec.count);
  PutVarint(table_, changed);
  ++segments_;
  changed_ += changed;
  last_ = spec;
}

// Context mode when allowed and smaller (both location codes are near-incompressible, so their
// raw sizes decide), where the banded code's parts fit (BandedCodeFits). The choice is made,
// and `located` run, by the thread that finishes the banded code (EncodeBandedLocations'
// `coded`), while the other may code value streams.
CodecMode PayloadBuilder::ChooseLocationCode(int threads, ClaimableTask* early, ClaimableTask* also,
                                             const std::function<void()>& located) {
  CodecMode mode = CodecMode::kPlain;
  if (options_.context != EncodeOptions::Context::kNever) {
    std::vector<std::span<const uint32_t>> per_segment;
    size_t from = 0;
    for (size_t i = 0; i < position_ends_.size(); ++i) {
      const size_t end = position_ends_[i];
      per_segment.push_back(kept_positions_[i].empty() ? std::span<const uint32_t>(positions_).subspan(from, end - from)
                                                       : kept_positions_[i]);
      from = end;
    }
    auto encode_plain = [&] {
      for (size_t i = 0; i < context_segments_.size(); ++i)
        EncodeLocations(per_segment[i], context_segments_[i].elements(), options_.block_log2, &loc_raw_);
    };
    if (!BandedCodeFits(TotalElements(context_segments_))) {
      encode_plain();
      if (located) located();
      return mode;
    }
    context_raw_.clear();
    const FitCounts* counted = nullptr;
    if (count_ahead_) {
      fit_counter_.AddTo(&fit_counts_);
      DCR_CHECK(fit_counts_.elements == TotalElements(context_segments_));  // each segment counted once
      counted = &fit_counts_;
    }
    auto choose = [&] {
      // The decoder bounds every location section by the plain-mode limit (ParsePayload); a
      // context code could exceed it, so even kAlways keeps plain mode then.
      uint64_t loc_bound = 0;
      for (const ContextSegment& seg : context_segments_)
        loc_bound += MaxLocationBytes(seg.elements(), options_.block_log2);
      // The plain code's exact size only when the cheap lower bound does not already decide.
      auto smaller_than_plain = [&] {
        if (context_raw_.size() < plain_at_least_) return true;
        uint64_t plain_bytes = 0;
        for (size_t i = 0; i < context_segments_.size(); ++i)
          plain_bytes += LocationCodeBytes(per_segment[i], context_segments_[i].elements(), options_.block_log2);
        return context_raw_.size() < plain_bytes;
      };
      if (context_raw_.size() <= loc_bound && (options_.context == EncodeOptions::Context::kAlways || smaller_than_plain())) {
        loc_raw_.swap(context_raw_);
        mode = options_.split_rice ? CodecMode::kContextSplitRice : CodecMode::kContextParts;
      } else {
        encode_plain();
      }
      if (located) located();
    };
    EncodeBandedLocations(context_segments_, per_segment, &context_raw_, options_.band_part_elements, threads, early, also,
                          counted, options_.split_rice, choose);
    return mode;
  }
  if (located) located();
  return mode;
}

void PayloadBuilder::Reset() {
  table_.clear();
  loc_raw_.clear();
  val_raw_.clear();
  runs_.clear();
  value_bytes_ = 0;
  kept_positions_.clear();
  value_tally_.Clear();
  handed_tallies_.clear();
  context_segments_.clear();
  positions_.clear();
  position_ends_.clear();
  plain_at_least_ = 0;
  segments_ = 0;
  changed_ = 0;
  count_ahead_ = false;
  fit_counts_ = FitCounts{};
}

void PayloadBuilder::Finish(const PayloadIdentity& identity, std::vector<uint8_t>* out, int threads) {
  DCR_CHECK(segments_ > 0);
  const size_t at = out->size();
  out->resize(at + kPayloadHeaderBytes, 0);
  out->insert(out->end(), table_.begin(), table_.end());
  uint64_t value_at = 0;
  for (ValueRun& r : runs_) {
    if (!r.bytes.empty()) continue;  // kept by the caller
    r.bytes = std::span<const uint8_t>(val_raw_).subspan(value_at, r.count * r.width);
    value_at += r.count * r.width;
  }
  // The values' counts where the tallies cover them all (else the value coder counts them).
  if (value_tally_.values() > 0) handed_tallies_.push_back(&value_tally_);
  uint64_t tallied = 0;
  for (const ValueTally* t : handed_tallies_) tallied += t->values();
  DCR_CHECK(tallied <= changed_);
  const std::span<const ValueTally* const> tallies =
      tallied == changed_ ? std::span<const ValueTally* const>(handed_tallies_) : std::span<const ValueTally* const>();
  CodecMode mode = CodecMode::kPlain;
  ValueCodec val_codec = ValueCodec::kPlanesRaw;
  size_t loc_at = 0, val_at = 0;
  SectionCodec loc_codec = SectionCodec::kRaw;
  // The sections are independent: where the location code is still to be made (context mode
  // possible), a second thread codes the values meanwhile (or a stream of them), and may walk
  // half of the old bits for the banded code; with fewer than kConcurrentSectionsMinChanges
  // changes, only where the banded code uses the helper anyway (EncodeUsesHelper). A plain-only
  // code was made segment by segment in AddChanges, and nothing here would overlap the values.
  const bool share_values = threads >= 2 && options_.context != EncodeOptions::Context::kNever &&
                            (changed_ >= kConcurrentSectionsMinChanges || EncodeUsesHelper(context_segments_, threads));
  // Shared, the value section is two tasks. The helper takes the early one while the calling
  // thread fits the bands: the counts, the choice of code and share 1's streams, the values it
  // wrote (a two-thread diff has the helper diff the back of the payload, EncodePlannedPayload).
  // The other, every stage still unclaimed (share 0's streams, which were the calling thread's
  // to write), is a chain of two steps that both run Work(0): the thread done with its parts
  // first takes the first step, the other the second when it arrives, and Work claims stream by
  // stream, so the two write the streams left at once. (As one step, its thread wrote both of
  // share 0's streams while the other thread idled: the real 4.8 % pair's two-thread context
  // encode took 1.01x as long, 352-354 against 348-352 us, alternating in one process; the 0.4
  // and 1.4 % pairs alike either way.) (With the helper coding every stream before its part,
  // the calling thread's part ended ~27 us before the helper's, and two-thread encodes of the
  // real 4.5-4.8 % pairs took 1.04-1.08x as long: medians of 3000.)
  std::optional<ValueSectionEncoder> values;
  if (share_values) values.emplace(runs_, options_.zstd_level, options_.value_streams_min, false, tallies);
  ClaimableTask values_early([&] { return values->Work(1, /*own_streams_only=*/true), Status::Ok(); });
  ClaimableTask values_rest([&] { return values->Work(0), Status::Ok(); });
  ClaimableTask values_rest_again([&] { return values->Work(0), Status::Ok(); });
  values_rest.Then(&values_rest_again);
  // The location section, stored (compressed if that is smaller) once its code is final: `out`
  // is this function's alone until then (the value coders write to their own buffers).
  auto store_locations = [&] {
    // Room for the whole payload at once (the value section is at most about its raw bytes, as
    // planes, plus its tables): growing by doubling copied it and touched up to twice the pages,
    // and fresh pages are what a payload's output costs most on a machine with slow page faults.
    out->reserve(out->size() + ZSTD_compressBound(loc_raw_.size()) + value_bytes_ + kValueSectionSlackBytes +
                 kPayloadTrailerBytes);
    loc_at = out->size();
    loc_codec = CompressSection(loc_raw_, options_.zstd_level, out);
    val_at = out->size();
  };
  // Shared values: the section is stored by the thread that finishes the location code, while
  // the other codes value streams (ChooseLocationCode).
  mode = ChooseLocationCode(threads, share_values ? &values_early : nullptr, share_values ? &values_rest : nullptr,
                            share_values ? store_locations : std::function<void()>());
  if (share_values) {
    (void)values_rest.RunIfUnclaimed();  // every stage no thread has claimed: Write waits for them all
    val_codec = values->Write(out);
  } else {
    // A helper starts on the values (with their counts taken ahead, the choice of code) while
    // this thread stores the location section.
    val_codec = EncodeValues(runs_, options_.zstd_level, out, threads, options_.value_streams_min, tallies,
                             store_locations);
  }

  uint8_t* h = out->data() + at;
  StoreLe(h + kOffMagic, kPayloadMagic, 4);
  StoreLe(h + kOffVersion, kPayloadFormatVersion, 2);
  h[kOffMode] = static_cast<uint8_t>(mode);
  h[kOffBlockLog2] = static_cast<uint8_t>(options_.block_log2);
  StoreLe(h + kOffTransfer, identity.transfer_id, 8);
  StoreLe(h + kOffProducer, identity.producer_id, 4);
  StoreLe(h + kOffSequence, identity.sequence, 4);
  StoreLe(h + kOffSegments, segments_, 4);
  StoreLe(h + kOffTableLen, table_.size(), 4);
  h[kOffLocCodec] = static_cast<uint8_t>(loc_codec);
  h[kOffValCodec] = static_cast<uint8_t>(val_codec);
  h[kOffValForm] = static_cast<uint8_t>(options_.value_form());
  StoreLe(h + kOffLocRaw, loc_raw_.size(), 8);
  StoreLe(h + kOffLocStored, val_at - loc_at, 8);
  StoreLe(h + kOffValRaw, value_bytes_, 8);
  StoreLe(h + kOffValStored, out->size() - val_at, 8);
  PutLe(*out, PayloadChecksum(std::span<const uint8_t>(*out).subspan(at)), 8);

  Reset();
}

Result<PayloadIdentity> PeekPayloadIdentity(std::span<const uint8_t> p) {
  if (p.size() < kPayloadHeaderBytes + kPayloadTrailerBytes || LoadLe(p.data(), 4) != kPayloadMagic)
    return Corrupt("not a dcr payload");
  return PayloadIdentity{LoadLe(p.data() + kOffTransfer, 8), static_cast<uint32_t>(LoadLe(p.data() + kOffProducer, 4)),
                         static_cast<uint32_t>(LoadLe(p.data() + kOffSequence, 4))};
}

Status ParsePayload(std::span<const uint8_t> p, PayloadLayout* out) {
  if (p.size() < kPayloadHeaderBytes + kPayloadTrailerBytes)
    return Corrupt("payload of " + std::to_string(p.size()) + " bytes is shorter than its header");
  const uint8_t* h = p.data();
  if (LoadLe(h + kOffMagic, 4) != kPayloadMagic) return Corrupt("payload magic mismatch");
  if (PayloadChecksum(p.first(p.size() - 8)) != LoadLe(p.data() + p.size() - 8, 8)) return Corrupt("payload checksum mismatch");
  const uint64_t version = LoadLe(h + kOffVersion, 2);
  if (version != kPayloadFormatVersion)
    return Unsupported("payload format version " + std::to_string(version) + " (this build reads " +
                       std::to_string(kPayloadFormatVersion) + ")");
  if (h[kOffMode] > static_cast<uint8_t>(CodecMode::kContextSplitRice)) return Unsupported("payload codec mode " + std::to_string(h[kOffMode]));
  const int block_log2 = h[kOffBlockLog2];
  if (block_log2 < 3 || block_log2 > 31) return Corrupt("payload location block size 2^" + std::to_string(block_log2));
  if (h[kOffLocCodec] > static_cast<uint8_t>(SectionCodec::kZstd) || h[kOffValCodec] > static_cast<uint8_t>(ValueCodec::kHuffmanStreams))
    return Corrupt("payload section codec unknown");
  if (h[kOffValForm] > static_cast<uint8_t>(ValueForm::kSteps))
    return Corrupt("payload value form " + std::to_string(h[kOffValForm]));
  if (h[kOffReserved8] != 0 || LoadLe(h + kOffReserved32, 4) != 0) return Corrupt("payload reserved field is not zero");
  const uint64_t nseg = LoadLe(h + kOffSegments, 4), table_len = LoadLe(h + kOffTableLen, 4);
  const uint64_t loc_stored = LoadLe(h + kOffLocStored, 8), val_stored = LoadLe(h + kOffValStored, 8);
  const uint64_t body = p.size() - kPayloadHeaderBytes - kPayloadTrailerBytes;
  if (table_len > body || loc_stored > body - table_len || val_stored != body - table_len - loc_stored)
    return Corrupt("payload section sizes disagree with the payload size");
  if (nseg == 0 || nseg > table_len / 6) return Corrupt("payload segment count " + std::to_string(nseg));

  // Segment table: every rule is checked before any section is decompressed, so the sizes it
  // implies bound the memory decoding may use.
  PayloadLayout& d = *out;
  d.identity = {LoadLe(h + kOffTransfer, 8), static_cast<uint32_t>(LoadLe(h + kOffProducer, 4)),
                static_cast<uint32_t>(LoadLe(h + kOffSequence, 4))};
  d.mode = static_cast<CodecMode>(h[kOffMode]);
  d.block_log2 = block_log2;
  d.loc_codec = static_cast<SectionCodec>(h[kOffLocCodec]);
  d.val_codec = static_cast<ValueCodec>(h[kOffValCodec]);
  d.val_form = static_cast<ValueForm>(h[kOffValForm]);
  d.loc_raw = LoadLe(h + kOffLocRaw, 8);
  d.val_raw = LoadLe(h + kOffValRaw, 8);
  d.loc_stored = p.subspan(kPayloadHeaderBytes + table_len, loc_stored);
  d.val_stored = p.subspan(kPayloadHeaderBytes + table_len + loc_stored, val_stored);
  d.segments.assign(nseg, {});
  d.changed.assign(nseg, 0);
  ByteReader table(p.subspan(kPayloadHeaderBytes, table_len));
  uint64_t loc_bound = 0, val_expect = 0;
  for (uint64_t i = 0; i < nseg; ++i) {
    SegmentSpec& s = d.segments[i];
    auto where = [i] { return "payload segment " + std::to_string(i); };  // built only for an error
    uint8_t dtype = 0, kind = 0;
    uint64_t tensor = 0;
    if (!table.ReadByte(&dtype) || !table.ReadByte(&kind) || !table.ReadVarint(&tensor) || !table.ReadVarint(&s.start) ||
        !table.ReadVarint(&s.count) || !table.ReadVarint(&d.changed[i]))
      return Corrupt(where() + ": truncated segment table");
    auto dt = DTypeFromCode(dtype);
    if (!dt) return Corrupt(where() + ": dtype code " + std::to_string(dtype));
    if (kind > static_cast<uint8_t>(ValueKind::kOverwrite)) return Corrupt(where() + ": value kind " + std::to_string(kind));
    if (tensor > UINT32_MAX) return Corrupt(where() + ": tensor index " + std::to_string(tensor));
    s.dtype = *dt;
    s.kind = static_cast<ValueKind>(kind);
    s.tensor_index = static_cast<uint32_t>(tensor);
    if (s.count == 0 || s.count > kMaxSegmentElements) return Corrupt(where() + ": element count " + std::to_string(s.count));
    if (s.start > UINT64_MAX / 8 - s.count) return Corrupt(where() + ": range overflows");
    if (d.changed[i] == 0 || d.changed[i] > s.count)
      return Corrupt(where() + ": " + std::to_string(d.changed[i]) + " changes in " + std::to_string(s.count) + " elements");
    if (i > 0) {
      const SegmentSpec& q = d.segments[i - 1];
      if (s.tensor_index < q.tensor_index || (s.tensor_index == q.tensor_index && s.start < q.start + q.count))
        return Corrupt(where() + ": segments out of order or overlapping");
    }
    loc_bound += MaxLocationBytes(s.count, block_log2);
    val_expect += d.changed[i] * DTypeWidth(s.dtype);
  }
  if (table.remaining() != 0) return Corrupt("payload segment table has trailing bytes");
  if (d.val_raw != val_expect) return Corrupt("payload value section size disagrees with its segments");
  if (d.loc_raw > loc_bound) return Corrupt("payload location section larger than its segments allow");
  return Status::Ok();
}

namespace {

// What decoding the location section needs besides the payload: the section's raw bytes and,
// in context modes, each segment's old bits.
struct LocationInputs {
  std::span<const uint8_t> loc;
  std::vector<ContextSegment> segs;
};

Status PrepareLocations(const PayloadLayout& layout, const BaseLookup& base, LocationInputs* in) {
  // A raw section is read where it lies in the payload. A compressed one is restored into a
  // buffer per thread, reused: the raw location section of a large payload is megabytes, which
  // a fresh buffer would map and fault in for every payload.
  thread_local std::vector<uint8_t> loc;
  auto bytes = SectionBytes(layout.loc_codec, layout.loc_stored, layout.loc_raw, &loc);
  if (!bytes.ok()) return bytes.status().WithContext("payload location section");
  in->loc = *bytes;
  if (!NeedsOldBits(layout.mode) && layout.val_form == ValueForm::kAsKind) return Status::Ok();
  if (!base)
    return Unsupported(NeedsOldBits(layout.mode) ? "context-mode payload: decoding needs the receiver's old bits"
                                                 : "payload values coded as steps: decoding needs the receiver's old bits");
  const size_t nseg = layout.segments.size();
  in->segs.resize(nseg);
  for (size_t i = 0; i < nseg; ++i) {
    DCR_ASSIGN_OR_RETURN(std::span<const uint8_t> old, base(layout.segments[i]));
    if (old.size() != layout.segments[i].count * DTypeWidth(layout.segments[i].dtype))
      return Internal("base lookup returned " + std::to_string(old.size()) + " bytes for a segment of " +
                      std::to_string(layout.segments[i].count) + " elements");
    in->segs[i] = {layout.segments[i].dtype, old};
  }
  return Status::Ok();
}

// The banded form of a mode's location section, if it has one.
std::optional<BandedForm> BandedFormOf(CodecMode mode) {
  switch (mode) {
    case CodecMode::kContextBands: return BandedForm::kOnePart;
    case CodecMode::kContextParts: return BandedForm::kParts;
    case CodecMode::kContextSplitRice: return BandedForm::kPartsSplitRice;
    default: return std::nullopt;
  }
}

// With `also` (threads >= 2), a helper thread runs it beside the location decode unless the
// calling thread claims it first; the caller runs it afterwards if it is still unclaimed.
Status DecodeLocations(const PayloadLayout& layout, const LocationInputs& in,
                       std::span<const std::span<uint32_t>> position_outs, int threads, ClaimableTask* also) {
  if (const std::optional<BandedForm> form = BandedFormOf(layout.mode))
    return DecodeBandedLocations(in.loc, *form, in.segs, position_outs, threads, also)
        .WithContext("payload location section");
  if (also != nullptr)
    return OfferClaimable(*also, [&] { return DecodeLocations(layout, in, position_outs, threads, nullptr); });
  if (layout.mode == CodecMode::kContext)
    return DecodeContextLocations(in.loc, in.segs, position_outs).WithContext("payload location section");
  std::span<const uint8_t> loc_rest = in.loc;
  for (size_t i = 0; i < layout.segments.size(); ++i) {
    size_t used = 0;
    const Status s = DecodeLocationsPrefix(loc_rest, layout.segments[i].count, layout.block_log2, position_outs[i], &used);
    if (!s.ok()) return s.WithContext("payload segment " + std::to_string(i));
    loc_rest = loc_rest.subspan(used);
  }
  if (!loc_rest.empty()) return Corrupt("payload location section has " + std::to_string(loc_rest.size()) + " trailing bytes");
  return Status::Ok();
}

bool SpecFits(const SegmentSpec& spec, uint64_t tensor_bytes) {
  const uint64_t w = DTypeWidth(spec.dtype);
  return tensor_bytes % w == 0 && spec.start <= tensor_bytes / w && spec.count <= tensor_bytes / w - spec.start;
}

Status NotInTensor(const SegmentSpec& spec, uint64_t tensor_bytes) {
  return Corrupt("segment [" + std::to_string(spec.start) + ", +" + std::to_string(spec.count) +
                 ") lies outside a tensor of " + std::to_string(tensor_bytes) + " bytes");
}

std::atomic<uint64_t> g_applied_while_decoding{0};

// DecodeApplyPayload's additions to a decode.
// Applies changes [from, to) of `seg`, which fits `tensor` (SegmentFits): its values, or with
// `differences` their wrapping differences (a payload's steps, once decoded).
void ApplyChanges(const DecodedSegment& seg, std::span<uint8_t> tensor, bool differences, size_t from, size_t to) {
  if (from >= to) return;
  const uint32_t width = seg.changes.width;
  uint8_t* base = tensor.data() + seg.spec.start * width;
  const uint32_t* pos = seg.changes.positions.data();
  const bool sparse = (uint64_t{pos[to - 1]} - pos[from]) * width >= (to - from) * 64;
  const ApplyOp op = differences ? ApplyOp::kAdd : seg.spec.kind == ValueKind::kXor ? ApplyOp::kXor : ApplyOp::kStore;
  ApplyChangeRun(base, width, op, sparse, seg.changes.values.data(), pos, from, to);
}

// ApplyPayload, or with `differences` of the wrapping differences the payload's values hold.
Status ApplyDecoded(const DecodedPayload& p, const TensorBytes& tensor_of, int threads, bool differences) {
  std::vector<std::span<uint8_t>> tensors(p.segments.size());
  uint64_t total = 0;
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const DecodedSegment& seg = p.segments[i];
    tensors[i] = tensor_of(seg.spec.tensor_index);
    if (!SpecFits(seg.spec, tensors[i].size())) return NotInTensor(seg.spec, tensors[i].size());
    total += seg.changes.size();
  }
  // Changes [from, to) in payload order.
  auto apply_range = [&](uint64_t from, uint64_t to) {
    uint64_t first = 0;  // the payload-order index of segment i's first change
    for (size_t i = 0; i < p.segments.size() && first < to; ++i) {
      const uint64_t n = p.segments[i].changes.size();
      if (first + n > from)
        ApplyChanges(p.segments[i], tensors[i], differences, std::max(from, first) - first,
                     std::min(to, first + n) - first);
      first += n;
    }
  };
  if (threads < 2 || total < kConcurrentApplyMinChanges) {
    apply_range(0, total);
    return Status::Ok();
  }
  ClaimableTask second([&] {
    apply_range(total / 2, total);
    return Status::Ok();
  });
  (void)OfferClaimable(second, [&] {
    apply_range(0, total / 2);
    return Status::Ok();
  });
  (void)second.RunIfUnclaimed();
  return Status::Ok();
}

struct ApplyRequest {
  const TensorBytes& tensor_of;
  const LayoutCheck& check;
};

// DecodePayload, or with `apply` DecodeApplyPayload.
Status DecodeInto(std::span<const uint8_t> p, DecodedPayload* out, const BaseLookup& base, int threads,
                  const ApplyRequest* apply) {
  if (threads == 0) threads = HardwareThreads();
  // A payload that may give a second thread work wakes its helper before the checksum and the
  // parse, so that the helper is polling when the work is handed over instead of waking then.
  if (threads >= 2 && p.size() >= kWakeHelperMinPayloadBytes) WakeHelperAhead();
  PayloadLayout layout;
  DCR_RETURN_IF_ERROR(ParsePayload(p, &layout));
  const size_t nseg = layout.segments.size();
  std::vector<std::span<uint8_t>> tensors;  // with `apply`: each segment's tensor
  if (apply != nullptr) {
    if (apply->check) DCR_RETURN_IF_ERROR(apply->check(layout));
    tensors.resize(nseg);
    for (size_t i = 0; i < nseg; ++i) {
      const SegmentSpec& spec = layout.segments[i];
      tensors[i] = apply->tensor_of(spec.tensor_index);
      if (!SpecFits(spec, tensors[i].size())) return NotInTensor(spec, tensors[i].size());
    }
  }
  DecodedPayload& d = *out;
  d.identity = layout.identity;
  d.mode = layout.mode;
  d.segments.resize(nseg);
  std::vector<ValueRun> runs(nseg);
  // Every segment's positions and values, back to back in payload order: the table's counts
  // (bounded by ParsePayload) size them before the sections are read.
  uint64_t changed = 0, value_bytes = 0;
  for (size_t i = 0; i < nseg; ++i) {
    changed += layout.changed[i];
    value_bytes += layout.changed[i] * DTypeWidth(layout.segments[i].dtype);
  }
  const std::span<uint32_t> all_positions = d.position_store.Take(changed);
  const std::span<uint8_t> all_values = d.value_store.Take(value_bytes);
  std::vector<std::span<uint8_t>> value_outs(nseg);
  std::vector<std::span<uint32_t>> position_outs(nseg);
  for (size_t i = 0, pos_at = 0, val_at = 0; i < nseg; ++i) {
    const uint32_t width = DTypeWidth(layout.segments[i].dtype);
    const size_t n = layout.changed[i];
    position_outs[i] = all_positions.subspan(pos_at, n);
    value_outs[i] = all_values.subspan(val_at, n * width);
    pos_at += n;
    val_at += n * width;
    d.segments[i] = {layout.segments[i], {width, position_outs[i], value_outs[i]}};
    runs[i] = {width, n, {}};
  }
  // The value section in two shares (its two streams in codec 3), chained: a thread done with
  // its location work takes whichever share is still unclaimed.
  ValueSectionDecoder value_decoder(layout.val_codec, layout.val_stored, runs, value_outs);
  ClaimableTask values_odd([&] {
    value_decoder.DecodeShare(1);
    return Status::Ok();
  });
  ClaimableTask values([&] {
    value_decoder.DecodeShare(0);
    return Status::Ok();
  });
  values.Then(&values_odd);
  auto values_result = [&] { return value_decoder.Result().WithContext("payload value section"); };
  // Steps, once decoded, become wrapping differences: payload-order values [from, to).
  auto to_differences = [&](uint64_t from, uint64_t to) {
    for (size_t i = 0, first = 0; i < nseg && first < to; first += layout.changed[i++]) {
      const uint64_t lo = std::max<uint64_t>(from, first), hi = std::min<uint64_t>(to, first + layout.changed[i]);
      const uint32_t w = DTypeWidth(layout.segments[i].dtype);
      if (lo < hi) StepsToDifferences(w, value_outs[i].subspan((lo - first) * w, (hi - lo) * w));
    }
  };
  // Errors come in one order whatever the threads: the value section's first, then the
  // location section's.
  LocationInputs in;
  const Status prepared = PrepareLocations(layout, base, &in);
  if (!prepared.ok()) {
    (void)values.RunIfUnclaimed();
    DCR_RETURN_IF_ERROR(values_result());
    return prepared;
  }
  const bool steps = layout.val_form == ValueForm::kSteps;
  const std::optional<BandedForm> banded = apply != nullptr ? BandedFormOf(layout.mode) : std::nullopt;
  const bool all_xor = banded && std::all_of(layout.segments.begin(), layout.segments.end(),
                                             [](const SegmentSpec& s) { return s.kind == ValueKind::kXor; });
  if (banded && all_xor) {
    // Each tile's changes applied as the walk places them (DecodeApplyBandedLocations), on one
    // thread, or on two that each decode a share of the values and then walk half of the parts.
    std::vector<uint8_t*> to(nseg);
    std::vector<const uint8_t*> values(nseg);
    for (size_t i = 0; i < nseg; ++i) {
      to[i] = tensors[i].data() + layout.segments[i].start * DTypeWidth(layout.segments[i].dtype);
      values[i] = value_outs[i].data();
    }
    // With two threads, share 1 gets a decoder of its own (BandedValueSection).
    const int walk_threads = threads >= 2 && changed >= kConcurrentSectionsMinChanges ? 2 : 1;
    std::optional<ValueSectionDecoder> share_1_decoder;
    if (walk_threads == 2) share_1_decoder.emplace(layout.val_codec, layout.val_stored, runs, value_outs);
    auto decoder_of = [&](int share, bool apart) -> ValueSectionDecoder& {
      return share == 1 && apart ? *share_1_decoder : value_decoder;
    };
    const BandedValueSection value_section{
        [&](int share, bool apart) {
          decoder_of(share, apart).DecodeShare(share);
          if (steps) {
            const auto [from, to] = decoder_of(share, apart).ShareValues(share);
            to_differences(from, to);
          }
        },
        [&] {
          value_decoder.DecodeAll();
          if (steps) to_differences(0, changed);
        },
        [&]() -> Status {
          DCR_RETURN_IF_ERROR(values_result());
          if (share_1_decoder) return share_1_decoder->Result().WithContext("payload value section");
          return Status::Ok();
        },
        [&](int share) { return decoder_of(share, true).ShareValues(share); },
        layout.val_codec == ValueCodec::kHuffmanStreams};
    const Status s = DecodeApplyBandedLocations(in.loc, *banded, in.segs, position_outs, value_section,
                                                WalkApply{to, values, steps, {}, {}}, walk_threads);
    if (s.ok()) {
      g_applied_while_decoding.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
    DCR_RETURN_IF_ERROR(value_section.result());
    return s.WithContext("payload location section");
  }
  // The sections are independent: with enough changes, a second thread may decode the values.
  const bool share_values = threads >= 2 && changed >= kConcurrentSectionsMinChanges;
  const Status located = DecodeLocations(layout, in, position_outs, threads, share_values ? &values : nullptr);
  if (share_values)
    (void)values.RunIfUnclaimed();
  else
    value_decoder.DecodeAll();  // one thread: the streams four at a time across the shares
  DCR_RETURN_IF_ERROR(values_result());
  DCR_RETURN_IF_ERROR(located);
  // Steps are applied as differences, or become values of each segment's kind from the old bits.
  if (steps) to_differences(0, changed);
  if (apply != nullptr) return ApplyDecoded(d, apply->tensor_of, threads, steps);
  if (steps)
    for (size_t i = 0; i < nseg; ++i)
      DifferencesToValues(in.segs[i].base, position_outs[i], layout.segments[i].kind,
                          DTypeWidth(layout.segments[i].dtype), value_outs[i]);
  return Status::Ok();
}

}  // namespace

Status DecodePayload(std::span<const uint8_t> p, DecodedPayload* out, const BaseLookup& base, int threads) {
  return DecodeInto(p, out, base, threads, nullptr);
}

uint64_t GetPayloadsAppliedWhileDecoding() { return g_applied_while_decoding.load(); }

Status DecodeApplyPayload(std::span<const uint8_t> p, DecodedPayload* out, const BaseLookup& base,
                          const TensorBytes& tensor_of, int threads, const LayoutCheck& check) {
  const ApplyRequest apply{tensor_of, check};
  return DecodeInto(p, out, base, threads, &apply);
}

bool SegmentFits(const DecodedSegment& seg, uint64_t tensor_bytes) { return SpecFits(seg.spec, tensor_bytes); }

Status ApplySegment(const DecodedSegment& seg, std::span<uint8_t> tensor) {
  if (!SegmentFits(seg, tensor.size())) return NotInTensor(seg.spec, tensor.size());
  ApplyChanges(seg, tensor, false, 0, seg.changes.size());
  return Status::Ok();
}

Status ApplyPayload(const DecodedPayload& p, const TensorBytes& tensor_of, int threads) {
  return ApplyDecoded(p, tensor_of, threads, false);
}

}  // namespace dcr
