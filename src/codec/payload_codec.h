// A payload: the encoded changes of one or more segments (a segment is a contiguous element
// range of one tensor) under one identity and one xxh3-64 checksum. Small tensors share a
// payload so that headers and entropy-coder frames are paid once. Byte layout: docs/format.md §2.
//
// Decoder contract: DecodePayload verifies the checksum and then every structural rule before
// returning anything; each decoded segment then addresses only elements in
// [start, start + count) of a tensor of the declared dtype, and segments are strictly ascending
// by (tensor, start) and disjoint. Checking segments against a catalog is the caller's job.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "base/reused_buffer.h"
#include "base/status.h"
#include "codec/diff.h"
#include "codec/band_context.h"
#include "codec/context_coding.h"
#include "codec/location_coding.h"
#include "codec/section_coding.h"
#include "codec/value_coding.h"
#include "format/dtype.h"

namespace dcr {

static_assert(std::endian::native == std::endian::little,
              "dcr's formats are little-endian and its element views assume a little-endian host");

inline constexpr uint32_t kPayloadMagic = 0x50524344;  // "DCRP" little-endian
inline constexpr uint16_t kPayloadFormatVersion = 1;
inline constexpr size_t kPayloadHeaderBytes = 72;
inline constexpr size_t kPayloadTrailerBytes = 8;  // xxh3-64 of everything before it
inline constexpr uint64_t kMaxSegmentElements = UINT32_MAX;

enum class CodecMode : uint8_t {
  kPlain = 0,    // the locations need no old bits (applying an XOR does, and so do steps' values)
  kContext = 1,       // per exponent value (context_coding.h); read, no longer written
  kContextBands = 2,  // per fitted exponent band in one part (band_context.h); read, no longer written
  kContextParts = 3,  // per fitted exponent band, in parts, Rice codes interleaved (band_context.h); read, no longer written
  kContextSplitRice = 4,  // as 3 with each part's Rice codes split (split_rice.h): decoding reads the old bits
};
// Whether decoding a payload of this mode needs the receiver's old bits.
inline bool NeedsOldBits(CodecMode m) { return m != CodecMode::kPlain; }

// Who sent a payload and where it sits in its transfer; a retry resends identical bytes.
struct PayloadIdentity {
  uint64_t transfer_id = 0;
  uint32_t producer_id = 0;
  uint32_t sequence = 0;
  bool operator==(const PayloadIdentity&) const = default;
};

struct SegmentSpec {
  uint32_t tensor_index = 0;  // index into the transfer's catalog
  DType dtype = DType::kU8;
  ValueKind kind = ValueKind::kXor;
  uint64_t start = 0;  // first element of the segment within the tensor
  uint64_t count = 0;  // elements, 1 .. kMaxSegmentElements
};

struct EncodeOptions {
  int block_log2 = kDefaultLocationBlockLog2;
  int zstd_level = 3;
  // Context mode needs the receiver to hold the old bits to decode (it always does to apply);
  // tools without them need plain. kWhenSmaller picks per payload; kAlways is for tests. Either
  // keeps plain mode for a payload whose banded code would not decode (BandedCodeFits).
  enum class Context { kNever, kWhenSmaller, kAlways } context = Context::kNever;
  // Context mode: at least this many elements per part of the location code (band_context.h;
  // more parts where parts this large would exceed kMaxEncodedPartElements).
  uint64_t band_part_elements = kDefaultBandPartElements;
  // From this many values a payload's Huffman value section is in two streams (codec 3).
  uint64_t value_streams_min = kValueStreamsMin;
  // Context mode: split Rice streams (mode 4); false writes mode 3 instead, for tests of its
  // decoder (plain location blocks are split Rice, method 3, either way).
  bool split_rice = true;
  // Where context mode is allowed (every decoder holds the old bits), the values are coded as
  // steps (value form 1, value_steps.h: ~0.9 bits fewer per BF16 change), in plain mode too;
  // false keeps them as their kind (form 0), for tests of that form's decoder.
  bool value_steps = true;
  // The form of the values these options code.
  ValueForm value_form() const {
    return context != Context::kNever && value_steps ? ValueForm::kSteps : ValueForm::kAsKind;
  }
};

// Builds one payload from segments added in ascending (tensor, start) order. Reusable: Finish
// resets it, keeping its buffers, so steady-state encoding does not allocate.
// Below this many changes a payload's two sections are coded and decoded on one thread: handing
// one to a second thread costs more than it saves. From 4 Ki rather than 32 Ki, two-thread
// decode+apply of the real pairs took 0.90-0.91 of the time at 0.4-0.8 % change (6-12 Ki
// changes) and 0.97 at 1.3 % (interleaved runs).
inline constexpr uint64_t kConcurrentSectionsMinChanges = 4096;

// DecodePayload with threads >= 2 wakes a helper ahead (WakeHelperAhead) for payloads of at
// least this many bytes: smaller ones seldom hold kConcurrentSectionsMinChanges changes (a
// change takes about a byte or more), and waking a thread costs the caller a system call.
inline constexpr size_t kWakeHelperMinPayloadBytes = 4096;

class PayloadBuilder {
 public:
  explicit PayloadBuilder(const EncodeOptions& options = {}) : options_(options) {}
  // Changes the options of an empty builder (between Finish and the next Add*), keeping its
  // buffers.
  void set_options(const EncodeOptions& options) {
    DCR_CHECK(segments_ == 0);
    options_ = options;
  }

  // Diffs base vs next (the segment's bytes in both) and adds the segment if anything changed.
  // Returns the number of changed elements. Unless context is kNever, `base` must stay valid until
  // Finish. on_chunk: as for DiffElements (it sees the values as their kind says).
  uint64_t AddDiff(const SegmentSpec& spec, std::span<const uint8_t> base, std::span<const uint8_t> next,
                   const DiffChunkFn& on_chunk = {});
  // Whether AddChanges copies the change set or refers to it until Finish.
  enum class Changes { kCopied, kKeptUntilFinish };
  // Adds a segment from an already computed, non-empty change set, whose values are in the
  // options' value_form() (DiffElements' `form`). `base` (the segment's old
  // bytes) is needed unless context is kNever; it must stay valid until Finish. With context
  // kNever, `coded_locations`, if not empty, must be EncodeLocations(changes.positions,
  // spec.count, options.block_log2) made beforehand (by another thread): it is appended as is.
  // With kKeptUntilFinish the caller keeps `changes` unchanged until Finish returns, and its
  // positions and values are read where they are instead of copied (the bytes are the same).
  // Unless context is kNever, `plain_at_least`, if given, must be
  // LocationCodeBytesLowerBound(changes.positions, spec.count, options.block_log2) made
  // beforehand (by the thread that diffed the segment, while its positions are in that thread's
  // cache); else AddChanges computes it. Finish weighs the context code against their sum.
  void AddChanges(const SegmentSpec& spec, const ChangeSet& changes, std::span<const uint8_t> base = {},
                  std::span<const uint8_t> coded_locations = {}, Changes held = Changes::kCopied,
                  std::optional<uint64_t> plain_at_least = std::nullopt);

  // A plain-only payload's segment diffed in pieces (EncodePlannedPayload): its `changed` (> 0)
  // changes' values as kept runs in position order (held unchanged until Finish returns), and its
  // location code, EncodeLocations of all its positions, as pieces to append in order (each
  // piece's EncodeLocationsFrom). The bytes are AddChanges' of the joined change set, without
  // joining it.
  void AddCodedPieces(const SegmentSpec& spec, uint64_t changed, std::span<const ValueRun> values,
                      std::span<const std::span<const uint8_t>> coded_locations);

  // Context mode's band fit samples every segment's old bits (band_fit.h). By default Finish
  // counts them all, when the payload's diff has moved most of them out of cache. A caller that
  // knows the payload's planned elements (all its segments, changed or not) may call
  // CountFitAhead before the first Add*: AddDiff then counts each segment right after diffing
  // it, while its bytes are in cache, and the caller counts each segment it gives AddChanges
  // into a FitCounter of fit_stride() and hands the counts over with AddFitCounts. Finish checks
  // that every segment was counted once. The stride follows from planned_elements, so the bytes
  // may differ (rarely) from a payload of the same segments coded without it.
  void CountFitAhead(uint64_t planned_elements);
  uint64_t fit_stride() const { return fit_counter_.stride(); }
  void AddFitCounts(const FitCounts& counts) { fit_counts_.Add(counts); }

  // The value section's symbol counts: AddDiff counts each segment's values right after diffing
  // it; a caller that diffed segments itself may hand over the counts of the values it gives
  // AddChanges (ValueTally, which must stay unchanged until Finish returns). Where the tallies
  // cover every value, Finish does not read the values again to count them; otherwise it counts
  // them all. The bytes are the same either way.
  void AddValueTally(const ValueTally* tally) { handed_tallies_.push_back(tally); }

  size_t segments() const { return segments_; }
  uint64_t changed() const { return changed_; }
  // Appends the payload to `out` (at least one segment required) and resets the builder. With
  // threads >= 2 and context mode allowed, a second thread may count and code parts of the
  // banded location code (EncodeBandedLocations) and, with at least
  // kConcurrentSectionsMinChanges changes, code the value section meanwhile; the bytes are the
  // same.
  void Finish(const PayloadIdentity& identity, std::vector<uint8_t>* out, int threads = 1);
  // Drops everything added since the last Finish (or Reset), keeping the buffers: for a builder
  // reused after a payload that was not finished (nothing in it changed, or it was abandoned).
  void Reset();

 private:
  // Fills loc_raw_ with the location code and returns its mode. With threads >= 2,
  // EncodeBandedLocations's helper may run `early` and `also` (the value section's steps).
  // `located`, if given, runs once loc_raw_ is final, on the thread that finished it.
  CodecMode ChooseLocationCode(int threads, ClaimableTask* early, ClaimableTask* also,
                               const std::function<void()>& located);
  // A segment's entry in the table (in order after the last one), counted as added.
  void AddTableEntry(const SegmentSpec& spec, uint64_t changed);
  EncodeOptions options_;
  ChangeSet changes_;
  std::vector<uint8_t> table_, loc_raw_, val_raw_;  // val_raw_: copied values, segment after segment
  // The values in payload order, a run per segment (or per piece, AddCodedPieces): the caller's
  // kept ones from AddChanges on, copied ones (empty until then: every segment has a change)
  // from Finish on.
  std::vector<ValueRun> runs_;
  uint64_t value_bytes_ = 0;  // all segments' values
  // Context mode inputs, kept until Finish: each segment's old bytes and positions (copied ones
  // in positions_, up to position_ends_[i]; kept ones in kept_positions_[i], which is empty for
  // copied ones).
  std::vector<ContextSegment> context_segments_;
  std::vector<uint32_t> positions_;
  std::vector<size_t> position_ends_;
  std::vector<std::span<const uint32_t>> kept_positions_;
  std::vector<uint8_t> context_raw_;
  uint64_t plain_at_least_ = 0;  // context mode possible: the segments' plain-code lower bounds, summed
  ValueTally value_tally_;                          // AddDiff's
  std::vector<const ValueTally*> handed_tallies_;  // AddValueTally's
  bool count_ahead_ = false;  // CountFitAhead was called for this payload
  FitCounter fit_counter_{1};  // AddDiff's counts, when counting ahead
  FitCounts fit_counts_;       // counts handed over, and at Finish all of them
  size_t segments_ = 0;
  uint64_t changed_ = 0;
  SegmentSpec last_{};
};

// A decoded segment's changes: views into its DecodedPayload's storage.
struct DecodedChanges {
  uint32_t width = 0;
  std::span<const uint32_t> positions;  // ascending, relative to the segment's start
  std::span<const uint8_t> values;      // positions.size() * width bytes
  size_t size() const { return positions.size(); }
};

struct DecodedSegment {
  SegmentSpec spec;
  DecodedChanges changes;
};

// A decoded payload. Its segments' changes lie in two buffers that it owns, one for positions
// and one for values, so that an object reused from payload to payload (as `dcr bench codec`'s
// decode threads reuse one) keeps its memory instead of reallocating per segment: segment counts
// and sizes differ from payload to payload. Movable (the views move with their storage), not
// copyable.
struct DecodedPayload {
  PayloadIdentity identity;
  CodecMode mode = CodecMode::kPlain;
  std::vector<DecodedSegment> segments;
  uint64_t changed() const;

  // The storage behind segments[i].changes (DecodePayload's to fill).
  ReusedBuffer<uint32_t> position_store;
  ReusedBuffer<uint8_t> value_store;
};

// Reads the identity without verifying anything else (for routing and deduplication).
Result<PayloadIdentity> PeekPayloadIdentity(std::span<const uint8_t> payload);

// A payload's verified header and segment table, with its sections still coded.
struct PayloadLayout {
  PayloadIdentity identity;
  CodecMode mode = CodecMode::kPlain;
  int block_log2 = 0;
  SectionCodec loc_codec = SectionCodec::kRaw;
  ValueCodec val_codec = ValueCodec::kPlanesRaw;
  ValueForm val_form = ValueForm::kAsKind;  // kSteps: decoding the values needs the old bits
  uint64_t loc_raw = 0, val_raw = 0;
  std::span<const uint8_t> loc_stored, val_stored;  // views into the payload
  std::vector<SegmentSpec> segments;
  std::vector<uint64_t> changed;  // per segment
};

// Verifies checksum, header and segment table (everything but the sections' contents).
Status ParsePayload(std::span<const uint8_t> payload, PayloadLayout* out);

// Supplies a segment's old bytes (count × width) for context-mode decoding, or an error if the
// segment does not fit the receiver's tensor.
using BaseLookup = std::function<Result<std::span<const uint8_t>>(const SegmentSpec&)>;

// Verifies and decodes one payload into *out (whose storage it reuses; on failure *out's
// contents are unspecified). Memory: bounded by the changes the segment table declares (each
// at most its segment's elements), about 6-16 bytes per declared change. Failures are
// kCorrupt, or kUnsupported for other versions and for a context-mode payload or one whose
// values are steps when no `base` is given. With threads >= 2 (0 = all hardware threads) and at least
// kConcurrentSectionsMinChanges changes, the value section decodes on a second thread while the
// location section decodes on the calling one; the result, errors included, is the same.
Status DecodePayload(std::span<const uint8_t> payload, DecodedPayload* out, const BaseLookup& base = {},
                     int threads = 1);

// A tensor's bytes by tensor index (the whole tensor; the index is the caller's to check).
using TensorBytes = std::function<std::span<uint8_t>(uint32_t)>;
// A check of a parsed payload's header and segment table (e.g. against a delta's catalog).
using LayoutCheck = std::function<Status(const PayloadLayout&)>;

// DecodePayload, then ApplyPayload of the result to tensor_of: the same bytes, and nothing
// written on any failure. Before any section is read, `check` (if given) sees the parsed
// layout and every segment must fit its tensor (else kCorrupt). A banded context-mode payload
// whose segments are all of XOR kind (what `dcr diff` writes), decoded on one thread (threads 1, as
// ParallelFor gives each payload when there are as many payloads as threads), is applied as it
// decodes: the value section first, then each tile's changes as soon as the walk places them,
// while the tile's old bits are in cache (a separate apply reads them again from memory); on a
// failure midway the applied changes are taken back. Others decode, then apply. For context
// mode and values coded as steps, tensor_of(t) must be the bytes `base` reads for tensor t's
// segments, or memory `base` never returns. *out holds the decoded changes afterwards, as
// DecodePayload leaves them, except that a payload's steps (value form 1) are left as the
// wrapping differences new - old that were added, not as values of the segment's kind.
Status DecodeApplyPayload(std::span<const uint8_t> payload, DecodedPayload* out, const BaseLookup& base,
                          const TensorBytes& tensor_of, int threads = 1, const LayoutCheck& check = {});
// Payloads DecodeApplyPayload applied while decoding (successfully), since the process started.
uint64_t GetPayloadsAppliedWhileDecoding();

// Applies a decoded segment to the tensor it addresses; `tensor` is the whole tensor's bytes.
Status ApplySegment(const DecodedSegment& segment, std::span<uint8_t> tensor);

// Applies every segment of `p` to its tensor, tensor_of(segment's tensor index) (the whole
// tensor's bytes; the index is the caller's to check), after checking that every segment fits
// its tensor: else kCorrupt and nothing is written. With threads >= 2 and at least
// kConcurrentApplyMinChanges changes, a helper thread may apply the later half of the changes
// (in payload order) while this one applies the first; segments are disjoint, so the bytes are
// the same.
Status ApplyPayload(const DecodedPayload& p, const TensorBytes& tensor_of, int threads = 1);
// Below this many changes a payload is applied on one thread: each change is a read-modify-write
// of a few bytes, ~2-3 ns from cache, and a hand-off costs more than half of it saves.
inline constexpr uint64_t kConcurrentApplyMinChanges = 8192;

// Calls fn(element_index, old_bits, new_bits) for every change, reading old bits from `tensor`
// (the base) without modifying it. Bits are zero-extended to 64. The segment must lie inside
// `tensor` (ApplySegment's check).
template <typename Fn>
void ForEachChange(const DecodedSegment& seg, std::span<const uint8_t> tensor, Fn&& fn) {
  const uint32_t w = seg.changes.width;
  const uint8_t* vals = seg.changes.values.data();
  for (size_t k = 0; k < seg.changes.size(); ++k) {
    uint64_t idx = seg.spec.start + seg.changes.positions[k];
    uint64_t old_bits = 0, v = 0;
    std::memcpy(&old_bits, tensor.data() + idx * w, w);
    std::memcpy(&v, vals + k * w, w);
    fn(idx, old_bits, seg.spec.kind == ValueKind::kXor ? (old_bits ^ v) : v);
  }
}

// True iff the segment's range lies inside a tensor of `tensor_bytes` bytes.
bool SegmentFits(const DecodedSegment& seg, uint64_t tensor_bytes);

}  // namespace dcr
