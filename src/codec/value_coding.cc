// Value section encoding (docs/format.md §2.3); decoding is value_decode.cc.
#include "codec/value_coding.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "base/thread_pool.h"
#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/section_coding.h"
#include "codec/value_symbols.h"

namespace dcr {
namespace {

using value_symbols::kAlphabet;

// Byte b of element i <-> byte i of plane b, for `n` elements of W bytes: the width fixed at
// compile time, so that the loops are plain shifts and stores the compiler can vectorize, where
// a loop over a run-time width moves one byte per step.
template <uint32_t W>
void ToPlanesT(const uint8_t* values, size_t n, uint8_t* planes) {
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < W; ++b) planes[b * n + i] = values[i * W + b];
}
template <uint32_t W>
void FromPlanesT(const uint8_t* planes, size_t n, uint8_t* values) {
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < W; ++b) values[i * W + b] = planes[b * n + i];
}

}  // namespace

void ToBytePlanes(std::span<const uint8_t> values, uint32_t width, std::vector<uint8_t>* planes) {
  DCR_CHECK(width > 0 && values.size() % width == 0);
  const size_t n = values.size() / width;
  size_t at = planes->size();
  planes->resize(at + values.size());
  uint8_t* out = planes->data() + at;
  switch (width) {
    case 1: std::memcpy(out, values.data(), n); return;
    case 2: return ToPlanesT<2>(values.data(), n, out);
    case 4: return ToPlanesT<4>(values.data(), n, out);
    case 8: return ToPlanesT<8>(values.data(), n, out);
  }
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < width; ++b) out[b * n + i] = values[i * width + b];
}

void FromBytePlanes(std::span<const uint8_t> planes, uint32_t width, std::span<uint8_t> values) {
  DCR_CHECK(width > 0 && planes.size() % width == 0 && values.size() == planes.size());
  const size_t n = planes.size() / width;
  uint8_t* out = values.data();
  switch (width) {
    case 1: std::memcpy(out, planes.data(), n); return;
    case 2: return FromPlanesT<2>(planes.data(), n, out);
    case 4: return FromPlanesT<4>(planes.data(), n, out);
    case 8: return FromPlanesT<8>(planes.data(), n, out);
  }
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < width; ++b) out[i * width + b] = planes[b * n + i];
}

ValueTally::ValueTally()
    : small4_(4 * value_symbols::kSmallSymbols), large_(kAlphabet) {}  // large_ below kSmallSymbols stay 0

void ValueTally::Clear() {
  if (values_ == 0) return;  // nothing counted since the last Clear: the counters are zero
  std::fill(small4_.begin(), small4_.end(), 0);
  for (uint64_t g = large_groups_; g != 0; g &= g - 1)
    std::fill_n(large_.begin() + 64 * std::countr_zero(g), 64, 0);
  values_ = raw_bytes_ = escape_bytes_ = large_groups_ = 0;
}

void ValueTally::Add(std::span<const uint8_t> values, uint32_t width) {
  DCR_CHECK(width > 0 && values.size() % width == 0);
  const uint64_t n = values.size() / width, escapes_before = large_[value_symbols::kEscape];
  value_symbols::CountSymbols(values.data(), n, width, small4_.data(), large_.data(), &large_groups_);
  values_ += n;
  raw_bytes_ += values.size();
  escape_bytes_ += (large_[value_symbols::kEscape] - escapes_before) * width;
}

std::vector<uint64_t> ValueTally::Frequencies() const {
  const ValueTally* const self[] = {this};
  std::vector<uint32_t> symbols;
  std::vector<uint64_t> counts;
  SumUsed(self, &symbols, &counts);
  std::vector<uint64_t> freq(kAlphabet, 0);
  for (size_t i = 0; i < symbols.size(); ++i) freq[symbols[i]] = counts[i];
  return freq;
}

void ValueTally::SumUsed(std::span<const ValueTally* const> tallies, std::vector<uint32_t>* symbols,
                         std::vector<uint64_t>* counts) {
  using value_symbols::kSmallSymbols;
  uint64_t groups = 0;
  for (const ValueTally* t : tallies) groups |= t->large_groups_;
  const size_t most = kSmallSymbols + 64 * static_cast<size_t>(std::popcount(groups));
  symbols->resize(most);
  counts->resize(most);
  // Every symbol is written and kept only if counted: no branch per symbol, which would
  // mispredict on the used ones.
  size_t u = 0;
  auto put = [&](uint32_t v, uint64_t c) {
    (*symbols)[u] = v, (*counts)[u] = c;
    u += c != 0;
  };
  for (uint32_t v = 0; v < kSmallSymbols; ++v) {
    uint64_t c = 0;
    for (const ValueTally* t : tallies) {
      const uint64_t* h = t->small4_.data();
      c += h[v] + h[kSmallSymbols + v] + h[2 * kSmallSymbols + v] + h[3 * kSmallSymbols + v];
    }
    put(v, c);
  }
  for (uint64_t g = groups; g != 0; g &= g - 1)
    for (uint32_t v = 64 * static_cast<uint32_t>(std::countr_zero(g)), end = v + 64; v < end; ++v) {
      uint64_t c = 0;
      for (const ValueTally* t : tallies) c += t->large_[v];  // zero in a tally without the group
      put(v, c);
    }
  symbols->resize(u);
  counts->resize(u);
}

namespace {

// The symbols of `runs` as a bit stream zero-padded to a byte, in *buffer, and the bytes of
// their escaped values, in *escaped (both replaced).
void StreamOf(std::span<const ValueRun> runs, const HuffmanEncoder& code, std::vector<uint8_t>* buffer,
              std::vector<uint8_t>* escaped) {
  buffer->clear();
  escaped->clear();
  BitWriter w(*buffer);
  const value_symbols::SmallSymbolCodes small(code);
  for (const ValueRun& r : runs) value_symbols::PutSymbols(r.bytes.data(), r.count, r.width, code, small, w, escaped);
  w.Flush();
}

// `runs` cut into `parts` runs of values [StreamStart(total, parts, i), ... (i + 1)), in parts[i].
void CutRuns(std::span<const ValueRun> runs, uint64_t total, size_t parts, std::vector<ValueRun>* out) {
  size_t i = 0;
  uint64_t at = 0;  // payload-order index of the next value to place
  for (size_t p = 0; p < parts; ++p) out[p].clear();
  for (const ValueRun& r : runs) {
    for (uint64_t done = 0; done < r.count;) {
      while (at >= value_symbols::StreamStart(total, parts, i + 1)) ++i;
      const uint64_t take = std::min(r.count - done, value_symbols::StreamStart(total, parts, i + 1) - at);
      out[i].push_back({r.width, take, r.bytes.subspan(done * r.width, take * r.width)});
      done += take, at += take;
    }
  }
}

}  // namespace

ValueSectionEncoder::ValueSectionEncoder(std::span<const ValueRun> runs, int zstd_level, uint64_t streams_min,
                                         bool obey_walker_for_tests, std::span<const ValueTally* const> tallies)
    : runs_(runs), zstd_level_(zstd_level), tallies_(tallies.begin(), tallies.end()) {
  DCR_CHECK(streams_min >= 2);
  // This (calling) thread's buffers, also where a helper writes: they are reused from payload
  // to payload (the counts' histograms are 40 KiB, which fresh ones would fault in each time).
  thread_local ValueTally counts[2];
  thread_local std::vector<ValueRun> stream_runs[kValueStreamsWritten];
  thread_local std::vector<uint8_t> escaped[kValueStreamsWritten], stream_buffers[kValueStreamsWritten], packed;
  counts_ = counts, stream_runs_ = stream_runs, escaped_ = escaped, buffers_ = stream_buffers, packed_ = &packed;
  uint64_t total = 0;
  for (const ValueRun& r : runs) total += r.count;
  DCR_CHECK(total > 0);
  // Every stream holds a value (the decoder requires it).
  streams_ = total >= streams_min ? static_cast<size_t>(std::min<uint64_t>(kValueStreamsWritten, total)) : 1;
  CutRuns(runs, total, streams_, stream_runs_);
  if (obey_walker_for_tests) walker_ = GetSecondPartWalkerForTests();
  if (!tallies_.empty()) {
    uint64_t tallied = 0;
    for (const ValueTally* t : tallies_) tallied += t->values();
    DCR_CHECK(tallied == total);
    counted_[0].store(true, std::memory_order_relaxed), counted_[1].store(true, std::memory_order_relaxed);
  } else {
    for (size_t h = 0; h < Shares(); ++h) tallies_.push_back(&counts_[h]);
  }
}

bool ValueSectionEncoder::Takes(ClaimOnce& stage, size_t share, int first) {
  if (walker_ == SecondPartWalker::kHelperPath && static_cast<int>(share) != first) return false;
  if (walker_ == SecondPartWalker::kCallerWalksOn && first != 0) return false;
  return stage.Claim();
}

void ValueSectionEncoder::Work(int first, bool own_streams_only) {
  DCR_CHECK(first == 0 || first == 1);
  const size_t order[2] = {static_cast<size_t>(first), static_cast<size_t>(1 - first)};
  const size_t shares = Shares();
  auto streams_of = [&](size_t share) { return value_symbols::ShareStreams(streams_, static_cast<int>(share)); };
  for (size_t h : order)
    if (h < shares && !counted_[h].load(std::memory_order_relaxed) && Takes(count_claim_[h], h, first)) {
      counts_[h].Clear();
      for (auto [i, end] = streams_of(h); i < end; ++i)
        for (const ValueRun& r : stream_runs_[i]) counts_[h].Add(r.bytes, r.width);
      counted_[h].store(true, std::memory_order_release);
    }
  YieldUntil([&] {
    return counted_[0].load(std::memory_order_acquire) && (shares == 1 || counted_[1].load(std::memory_order_acquire));
  });
  if (Takes(choose_claim_, 0, first)) {
    Choose();
    chosen_.store(true, std::memory_order_release);
  }
  YieldUntil([&] { return chosen_.load(std::memory_order_acquire); });
  if (!code_.has_value()) return;
  for (size_t h : order) {
    if (h >= shares || (own_streams_only && h != order[0])) continue;
    for (auto [i, end] = streams_of(h); i < end; ++i)
      if (Takes(put_claim_[i], h, first)) {
        StreamOf(stream_runs_[i], *code_, &buffers_[i], &escaped_[i]);
        put_[i].store(true, std::memory_order_release);
      }
  }
}

// The form: symbol Huffman (codec 2 or 3) unless escapes are many and byte planes are smaller.
// The code is built from the used symbols alone (ValueTally::SumUsed), not from an
// alphabet-sized array zero-filled, added into and scanned whole: both encode threads wait on
// this step (the real 4.5 % pair's two tallies, best of 20000: 10.9 us, against 14.8 for the
// dense way in a harness that also allocated each tally's frequencies).
void ValueSectionEncoder::Choose() {
  thread_local std::vector<uint32_t> symbols;
  thread_local std::vector<uint64_t> counts;
  uint64_t raw_bytes = 0, escape_bytes = 0;
  for (const ValueTally* t : tallies_) raw_bytes += t->raw_bytes_, escape_bytes += t->escape_bytes_;
  ValueTally::SumUsed(tallies_, &symbols, &counts);
  code_.emplace(kAlphabet, symbols, counts);
  const uint64_t huffman_bytes = (code_->CostBitsOfUsed(counts) + 7) / 8 + escape_bytes + 64;
  // Few escapes: the symbol code is near the entropy and zstd is not worth running.
  if (escape_bytes * 20 >= raw_bytes) {
    std::vector<uint8_t> planes;
    for (const ValueRun& r : runs_) ToBytePlanes(r.bytes, r.width, &planes);
    packed_->clear();
    const SectionCodec c = CompressSection(planes, zstd_level_, packed_);
    if (packed_->size() < huffman_bytes) {
      code_.reset();
      planes_codec_ = c == SectionCodec::kZstd ? ValueCodec::kPlanesZstd : ValueCodec::kPlanesRaw;
    }
  }
}

ValueCodec ValueSectionEncoder::Write(std::vector<uint8_t>* out) {
  YieldUntil([&] { return chosen_.load(std::memory_order_acquire); });
  if (!code_.has_value()) {
    out->insert(out->end(), packed_->begin(), packed_->end());
    return planes_codec_;
  }
  for (size_t i = 0; i < streams_; ++i) YieldUntil([&] { return put_[i].load(std::memory_order_acquire); });
  code_->WriteTable(out);
  if (streams_ > 1) {
    out->push_back(static_cast<uint8_t>(streams_));
    for (size_t i = 0; i < streams_; ++i) PutVarint(*out, escaped_[i].size());
    for (size_t i = 0; i + 1 < streams_; ++i) PutVarint(*out, buffers_[i].size());
  } else {
    PutVarint(*out, escaped_[0].size());
  }
  for (size_t i = 0; i < streams_; ++i) out->insert(out->end(), escaped_[i].begin(), escaped_[i].end());
  for (size_t i = 0; i < streams_; ++i) out->insert(out->end(), buffers_[i].begin(), buffers_[i].end());
  return streams_ > 1 ? ValueCodec::kHuffmanStreams : ValueCodec::kHuffman;
}

ValueCodec EncodeValues(std::span<const ValueRun> runs, int zstd_level, std::vector<uint8_t>* out, int threads,
                        uint64_t streams_min, std::span<const ValueTally* const> tallies,
                        const std::function<void()>& first) {
  uint64_t total = 0;
  for (const ValueRun& r : runs) total += r.count;
  const bool two_threads = threads >= 2 && total >= std::max(kConcurrentValuesMin, streams_min);
  ValueSectionEncoder e(runs, zstd_level, streams_min, /*obey_walker_for_tests=*/two_threads, tallies);
  if (two_threads) {
    // Each thread counts and writes one share of the streams; each stage goes to whichever thread
    // claims it first, so a late helper costs nothing (and the helper chooses the code while this
    // thread runs `first`).
    auto side = [&] { return e.Work(1), Status::Ok(); };
    auto main = [&] {
      if (first) first();
      return e.Work(0), Status::Ok();
    };
    if (GetSecondPartWalkerForTests() == SecondPartWalker::kHelperPath)
      (void)RunConcurrently(side, main);
    else
      (void)OfferToHelper(side, main);
  } else {
    if (first) first();
    e.Work(0);
  }
  return e.Write(out);
}

}  // namespace dcr
