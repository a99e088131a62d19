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
                    std::span<std::vector<uint8_t>* const> outs) {
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
                                         std::span<std::vector<uint8_t>* const> outs)
    : codec_(codec), stored_(stored), runs_(runs), outs_(outs) {
  DCR_CHECK(runs.size() == outs.size());
  for (const ValueRun& r : runs) total_ += r.count;
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
  for (size_t k = 0; k < runs_.size(); ++k) outs_[k]->resize(runs_[k].count * runs_[k].width);
  return Status::Ok();
}

Status ValueSectionDecoder::DecodeStream(size_t i) {
  if (codec_ != ValueCodec::kHuffman && codec_ != ValueCodec::kHuffmanStreams) return DecodePlanes(codec_, stored_, runs_, outs_);
  // Codec 2's one stream reports as the section; codec 3's name their stream. Built only for an
  // error: the streams decode in tens of microseconds.
  auto prefix = [&] { return codec_ == ValueCodec::kHuffmanStreams ? "value stream " + std::to_string(i) + ": " : std::string(); };
  const uint64_t from = StreamStart(total_, streams_, i), to = StreamStart(total_, streams_, i + 1);
  BitReader bits(bits_[i]);
  size_t e = 0;
  uint64_t first = 0;  // the payload-order index of run k's first value
  for (size_t k = 0; k < runs_.size() && first < to; first += runs_[k].count, ++k) {
    const uint64_t lo = std::max(from, first), hi = std::min(to, first + runs_[k].count);
    if (lo >= hi) continue;
    const uint32_t w = runs_[k].width;
    const Status s = value_symbols::DecodeSymbols(code_, bits, escapes_[i], &e, hi - lo, w, outs_[k]->data() + (lo - first) * w);
    if (!s.ok()) return Status(s.code(), prefix() + s.message());
  }
  if (e != escapes_[i].size()) return Corrupt(prefix() + "unused value escapes");
  if (bits.bytes_consumed() != bits_[i].size()) return Corrupt(prefix() + "trailing bytes after the value symbols");
  return Status::Ok();
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
  for (size_t i = static_cast<size_t>(share); i < streams_; i += 2) status_[i] = DecodeStream(i);
}

Status ValueSectionDecoder::Result() const {
  if (!prepared_status_.ok()) return prepared_status_;
  for (size_t i = 0; i < streams_; ++i)
    if (!status_[i].ok()) return status_[i];
  return Status::Ok();
}

Status DecodeValues(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                    std::span<std::vector<uint8_t>* const> outs) {
  ValueSectionDecoder decoder(codec, stored, runs, outs);
  decoder.DecodeShare(0);
  decoder.DecodeShare(1);
  return decoder.Result();
}

}  // namespace dcr
