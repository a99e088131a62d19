// Value section decoding (docs/format.md §2.3): the byte-plane forms, symbol Huffman in one
// stream (codec 2) and in several (codec 3), whose streams any thread may decode.
#include <algorithm>
#include <cstring>

#include "codec/section_coding.h"
#include "codec/value_coding.h"
#include "codec/value_symbols.h"

namespace dcr {
namespace {

using value_symbols::kAlphabet;
using value_symbols::kEscape;
using value_symbols::StreamStart;

// Codecs 0 and 1.
Status DecodePlanes(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                    std::span<const std::span<uint8_t>> outs) {
  uint64_t total = 0;
  for (const ValueRun& r : runs) total += r.count * r.width;
  std::vector<uint8_t> planes;
  DCR_RETURN_IF_ERROR(DecompressSection(codec == ValueCodec::kPlanesZstd ? SectionCodec::kZstd : SectionCodec::kRaw,
                                        stored, total, &planes));
  uint64_t at = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const uint64_t n = runs[k].count * runs[k].width;
    FromBytePlanes(std::span<const uint8_t>(planes).subspan(at, n), runs[k].width, outs[k]);
    at += n;
  }
  return Status::Ok();
}

}  // namespace

ValueSectionDecoder::ValueSectionDecoder(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                                         std::span<const std::span<uint8_t>> outs)
    : codec_(codec), stored_(stored), runs_(runs), outs_(outs) {
  DCR_CHECK(runs.size() == outs.size());
  for (size_t k = 0; k < runs.size(); ++k) {
    DCR_CHECK(outs[k].size() == runs[k].count * runs[k].width);
    total_ += runs[k].count;
  }
}

Status ValueSectionDecoder::Prepare() {
  if (codec_ > ValueCodec::kHuffmanStreams) return Corrupt("value codec " + std::to_string(static_cast<int>(codec_)));
  if (codec_ != ValueCodec::kHuffman && codec_ != ValueCodec::kHuffmanStreams) return Status::Ok();  // planes, decoded whole
  ByteReader r(stored_);
  DCR_RETURN_IF_ERROR(code_.ReadTable(r, kAlphabet));
  code_.BuildMultiTable(kEscape);
  if (codec_ == ValueCodec::kHuffman) {  // one stream: its escape area, then its bits
    uint64_t escape_len = 0;
    if (!r.ReadVarint(&escape_len) || !r.ReadBytes(escape_len, &escapes_[0])) return Corrupt("value escapes truncated");
    bits_[0] = r.Rest();
  } else {
    uint8_t s = 0;
    if (!r.ReadByte(&s)) return Corrupt("value streams truncated");
    if (s < 2 || s > kMaxValueStreams || s > total_)
      return Corrupt("value section of " + std::to_string(total_) + " values in " + std::to_string(s) + " streams");
    std::array<uint64_t, kMaxValueStreams> escape_bytes{}, stream_bytes{};
    for (size_t i = 0; i < s; ++i)
      if (!r.ReadVarint(&escape_bytes[i])) return Corrupt("value streams truncated");
    for (size_t i = 0; i + 1 < s; ++i)
      if (!r.ReadVarint(&stream_bytes[i])) return Corrupt("value streams truncated");
    for (size_t i = 0; i < s; ++i)
      if (!r.ReadBytes(escape_bytes[i], &escapes_[i]))
        return Corrupt("value stream " + std::to_string(i) + ": escapes run past the section");
    for (size_t i = 0; i + 1 < s; ++i)
      if (!r.ReadBytes(stream_bytes[i], &bits_[i]))
        return Corrupt("value stream " + std::to_string(i) + " runs past the section");
    bits_[s - 1] = r.Rest();
    streams_ = s;
  }
  return Status::Ok();
}

namespace {

// Walks the values [from, to) of a stream (payload order) over the runs they fall in. Runs of
// one width whose outputs lie back to back (as a payload decode lays them out) form one
// stretch: available() counts to the stretch's end, so that the interleaved loops run on
// across segments. (Cut at every run any of their streams reached, the real 4.8 % pair's value
// section restarted them 146 times and decoded 3,463 of its 69,672 values one by one, the end
// of each lane's share of a run. With stretches, alternating in one process: its context
// decode+apply in 0.98 of the time on one thread and on two, plain decode+apply in 0.95 on one
// and 0.99 on two; the real 1.4 and 5.1 % pairs' context decodes 0.98.)
class StreamCursor {
 public:
  StreamCursor(std::span<const ValueRun> runs, std::span<const std::span<uint8_t>> outs, uint64_t from, uint64_t to)
      : runs_(runs), outs_(outs), at_(from), to_(to) {
    Settle();
  }
  bool done() const { return at_ >= to_; }
  // The values left in the current stretch (done() false: at least one), their width, and
  // where the next goes.
  uint64_t available() const { return std::min(to_, stretch_end_) - at_; }
  uint32_t width() const { return runs_[k_].width; }
  uint8_t* dst() const { return outs_[k_].data() + (at_ - first_) * runs_[k_].width; }
  void Advance(uint64_t n) {
    at_ += n;
    Settle();
  }

 private:
  // Moves past the runs that end at or before at_; past the stretch's end, finds the next
  // stretch's (each run is looked at once per cursor).
  void Settle() {
    while (!done() && at_ >= first_ + runs_[k_].count) first_ += runs_[k_++].count;
    if (done() || at_ < stretch_end_) return;
    stretch_end_ = first_ + runs_[k_].count;
    for (size_t j = k_; j + 1 < runs_.size() && stretch_end_ < to_ && runs_[j + 1].width == runs_[j].width &&
                        outs_[j + 1].data() == outs_[j].data() + outs_[j].size();
         ++j)
      stretch_end_ += runs_[j + 1].count;
  }
  std::span<const ValueRun> runs_;
  std::span<const std::span<uint8_t>> outs_;
  size_t k_ = 0;
  uint64_t first_ = 0;        // the payload-order index of run k_'s first value
  uint64_t stretch_end_ = 0;  // the payload-order index where run k_'s stretch ends
  uint64_t at_, to_;
};

}  // namespace

void ValueSectionDecoder::DecodeStreams(const size_t* id, size_t count) {
  if (codec_ != ValueCodec::kHuffman && codec_ != ValueCodec::kHuffmanStreams) {
    status_[id[0]] = DecodePlanes(codec_, stored_, runs_, outs_);
    return;
  }
  DCR_CHECK(count == 1 || count == 2 || count == 4);
  code_.PrefetchTables();  // built by the share that prepared
  constexpr size_t kMost = 4;
  // Lanes past `count` repeat the last stream and are never decoded.
  auto stream = [&](size_t l) { return id[std::min(l, count - 1)]; };
  std::array<BitReader, kMost> bits = {BitReader(bits_[stream(0)]), BitReader(bits_[stream(1)]),
                                       BitReader(bits_[stream(2)]), BitReader(bits_[stream(3)])};
  std::array<size_t, kMost> e{};
  std::array<value_symbols::SymbolLane, kMost> lane;
  auto cursor = [&](size_t l) {
    const size_t i = stream(l);
    return StreamCursor(runs_, outs_, StreamStart(total_, streams_, i), StreamStart(total_, streams_, i + 1));
  };
  std::array<StreamCursor, kMost> at = {cursor(0), cursor(1), cursor(2), cursor(3)};
  for (size_t l = 0; l < count; ++l) lane[l] = {&bits[l], escapes_[id[l]], &e[l], nullptr, Status::Ok()};
  auto single = [&](size_t l, uint64_t n) {
    lane[l].dst = at[l].dst();
    lane[l].status = value_symbols::DecodeSymbols(code_, bits[l], escapes_[id[l]], &e[l], n, at[l].width(), lane[l].dst);
    at[l].Advance(n);
  };
  auto all = [&](auto&& pred) {
    for (size_t l = 0; l < count; ++l)
      if (!pred(l)) return false;
    return true;
  };
  // The streams in step while all last (where their runs' widths agree), then each one's rest.
  while (count >= 2 && all([&](size_t l) { return !at[l].done() && lane[l].status.ok(); })) {
    uint64_t n = at[0].available();
    for (size_t l = 1; l < count; ++l) n = std::min(n, at[l].available());
    if (all([&](size_t l) { return at[l].width() == at[0].width(); })) {
      for (size_t l = 0; l < count; ++l) lane[l].dst = at[l].dst();
      if (count == 4) {
        value_symbols::SymbolLane* const quad[4] = {&lane[0], &lane[1], &lane[2], &lane[3]};
        value_symbols::DecodeSymbolQuad(code_, quad, n, at[0].width());
      } else {
        value_symbols::DecodeSymbolPair(code_, &lane[0], &lane[1], n, at[0].width());
      }
      for (size_t l = 0; l < count; ++l) at[l].Advance(n);
    } else {
      for (size_t l = 0; l < count; ++l) single(l, n);
    }
  }
  for (size_t l = 0; l < count; ++l)
    while (!at[l].done() && lane[l].status.ok()) single(l, at[l].available());
  for (size_t l = 0; l < count; ++l) {
    // Codec 2's one stream reports as the section; codec 3's name their stream. Built only for
    // an error: the streams decode in tens of microseconds.
    const std::string prefix = codec_ == ValueCodec::kHuffmanStreams ? "value stream " + std::to_string(id[l]) + ": " : "";
    Status& s = status_[id[l]];
    if (!lane[l].status.ok()) s = Status(lane[l].status.code(), prefix + lane[l].status.message());
    else if (e[l] != escapes_[id[l]].size()) s = Corrupt(prefix + "unused value escapes");
    else if (bits[l].bytes_consumed() != bits_[id[l]].size()) s = Corrupt(prefix + "trailing bytes after the value symbols");
    else s = Status::Ok();
  }
}

// Streams [from, to): four at a time, then two, then one (independent chains of table lookups,
// interleaved).
void ValueSectionDecoder::DecodeStreamRange(size_t from, size_t to) {
  size_t i = from;
  for (; to - i >= 4; i += 4) {
    const size_t id[4] = {i, i + 1, i + 2, i + 3};
    DecodeStreams(id, 4);
  }
  for (; i < to; i += 2) {
    const size_t id[2] = {i, i + 1};
    DecodeStreams(id, to - i >= 2 ? 2 : 1);
  }
}

void ValueSectionDecoder::DecodeShare(int share) {
  DCR_CHECK(share == 0 || share == 1);
  if (prepare_claim_.Claim()) {
    prepared_status_ = Prepare();
    prepared_.store(true, std::memory_order_release);
  } else {
    YieldUntil([&] { return prepared_.load(std::memory_order_acquire); });
  }
  if (!prepared_status_.ok()) return;
  const auto [from, to] = value_symbols::ShareStreams(streams_, share);
  DecodeStreamRange(from, to);
}

void ValueSectionDecoder::DecodeAll() {
  DCR_CHECK(prepare_claim_.Claim());
  prepared_status_ = Prepare();
  prepared_.store(true, std::memory_order_release);
  if (prepared_status_.ok()) DecodeStreamRange(0, streams_);
}

std::pair<uint64_t, uint64_t> ValueSectionDecoder::ShareValues(int share) const {
  const auto [from, to] = value_symbols::ShareStreams(streams_, share);
  return {StreamStart(total_, streams_, from), StreamStart(total_, streams_, to)};
}

Status ValueSectionDecoder::Result() const {
  if (!prepared_status_.ok()) return prepared_status_;
  for (size_t i = 0; i < streams_; ++i)
    if (!status_[i].ok()) return status_[i];
  return Status::Ok();
}

Status DecodeValues(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                    std::span<const std::span<uint8_t>> outs) {
  ValueSectionDecoder decoder(codec, stored, runs, outs);
  decoder.DecodeAll();
  return decoder.Result();
}

}  // namespace dcr
