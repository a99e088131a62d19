// Value section encoding (docs/format.md §2.3); decoding is value_decode.cc.
#include "codec/value_coding.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/thread_pool.h"
#include "codec/band_context.h"
#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/section_coding.h"
#include "codec/value_symbols.h"

namespace dcr {
namespace {

using value_symbols::kAlphabet;
using value_symbols::kEscape;
using value_symbols::WithWidth;

// Adds the symbols of n values of type U at p to four interleaved histograms of kAlphabet
// counters (value i to histogram i % 4), and appends the bytes of escaped values to `escaped`.
template <typename U>
void CountSymbols(const uint8_t* p, uint64_t n, uint64_t* freq4, std::vector<uint8_t>* escaped) {
  auto count = [&](uint64_t i, uint64_t* freq) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    if (v >= kEscape) [[unlikely]]
      escaped->insert(escaped->end(), p + i * sizeof(U), p + (i + 1) * sizeof(U));
    ++freq[std::min<uint64_t>(v, kEscape)];
  };
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4)
    count(i, freq4), count(i + 1, freq4 + kAlphabet), count(i + 2, freq4 + 2 * kAlphabet), count(i + 3, freq4 + 3 * kAlphabet);
  for (; i < n; ++i) count(i, freq4 + (i & 3) * kAlphabet);
}

// The symbols of values of type U, three per write.
template <typename U>
void PutSymbols(const uint8_t* p, uint64_t n, const HuffmanEncoder& code, BitWriter::Local& w) {
  auto symbol = [&](uint64_t i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    return static_cast<uint32_t>(std::min<uint64_t>(v, kEscape));
  };
  uint64_t i = 0;
  for (; i + 3 <= n; i += 3) code.Put3(w, symbol(i), symbol(i + 1), symbol(i + 2));
  for (; i < n; ++i) code.Put(w, symbol(i));
}

}  // namespace

namespace {

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

void FromBytePlanes(std::span<const uint8_t> planes, uint32_t width, std::vector<uint8_t>* values) {
  DCR_CHECK(width > 0 && planes.size() % width == 0);
  const size_t n = planes.size() / width;
  values->resize(planes.size());
  uint8_t* out = values->data();
  switch (width) {
    case 1: std::memcpy(out, planes.data(), n); return;
    case 2: return FromPlanesT<2>(planes.data(), n, out);
    case 4: return FromPlanesT<4>(planes.data(), n, out);
    case 8: return FromPlanesT<8>(planes.data(), n, out);
  }
  for (size_t i = 0; i < n; ++i)
    for (uint32_t b = 0; b < width; ++b) out[i * width + b] = planes[b * n + i];
}

namespace {

// The symbol counts of some runs: four interleaved histograms (XOR masks repeat, 0x1, 0x3 ...,
// and increments of one counter in a row would wait on each other's stores) and the escaped
// values' bytes in order. Reused per thread: the histograms are 128 KiB, which a fresh
// allocation would map and fault in each time.
struct SymbolCounts {
  std::vector<uint64_t> freq4 = std::vector<uint64_t>(4 * kAlphabet);
  std::vector<uint8_t> escaped;
  uint64_t values = 0, raw_bytes = 0;

  void Count(std::span<const ValueRun> runs) {
    std::fill(freq4.begin(), freq4.end(), 0);
    escaped.clear();
    values = raw_bytes = 0;
    for (const ValueRun& r : runs) {
      DCR_CHECK(r.bytes.size() == r.count * r.width);
      values += r.count;
      raw_bytes += r.bytes.size();
      WithWidth(r.width, [&](auto zero) { CountSymbols<decltype(zero)>(r.bytes.data(), r.count, freq4.data(), &escaped); });
    }
  }
  void AddTo(std::vector<uint64_t>* freq) const {
    for (uint32_t v = 0; v < kAlphabet; ++v)
      (*freq)[v] += freq4[v] + freq4[kAlphabet + v] + freq4[2 * kAlphabet + v] + freq4[3 * kAlphabet + v];
  }
};

void PutRunSymbols(std::span<const ValueRun> runs, const HuffmanEncoder& code, BitWriter::Local& w) {
  for (const ValueRun& r : runs)
    WithWidth(r.width, [&](auto zero) { PutSymbols<decltype(zero)>(r.bytes.data(), r.count, code, w); });
}

// The section from the counts of its streams' values (`parts`: one stream, codec 2, or two,
// codec 3, the counts of each stream's values). Huffman stored forms: table, then (codec 3) the
// stream count, each stream's escape-byte count and all but the last stream's byte length, or
// (codec 2) the escape-byte count; the escape bytes; the bit streams, each zero-padded to a byte,
// which `stream_bits(code, i)` returns. `on_code` is called once the form is chosen, with the
// Huffman code if it is that form (else null); stream_bits runs only after it.
template <typename StreamFn, typename CodeFn>
ValueCodec FinishValues(std::span<const ValueRun> runs, std::span<const SymbolCounts* const> parts, int zstd_level,
                        std::vector<uint8_t>* out, StreamFn&& stream_bits, CodeFn&& on_code) {
  std::vector<uint64_t> freq(kAlphabet, 0);
  uint64_t values = 0, raw_bytes = 0, escape_bytes = 0;
  for (const SymbolCounts* c : parts) {
    c->AddTo(&freq);
    values += c->values, raw_bytes += c->raw_bytes, escape_bytes += c->escaped.size();
  }
  DCR_CHECK(values > 0 && (parts.size() == 1 || parts.size() == 2));
  HuffmanEncoder code(freq);
  const uint64_t huffman_bytes = (code.CostBits(freq) + 7) / 8 + escape_bytes + 64;
  // Few escapes: the symbol code is near the entropy and zstd is not worth running.
  if (escape_bytes * 20 >= raw_bytes) {
    std::vector<uint8_t> planes, packed;
    for (const ValueRun& r : runs) ToBytePlanes(r.bytes, r.width, &planes);
    SectionCodec c = CompressSection(planes, zstd_level, &packed);
    if (packed.size() < huffman_bytes) {
      on_code(nullptr);
      out->insert(out->end(), packed.begin(), packed.end());
      return c == SectionCodec::kZstd ? ValueCodec::kPlanesZstd : ValueCodec::kPlanesRaw;
    }
  }
  on_code(&code);
  code.WriteTable(out);
  std::array<std::span<const uint8_t>, 2> streams;
  for (size_t i = 0; i < parts.size(); ++i) streams[i] = stream_bits(code, i);
  if (parts.size() == 2) {
    out->push_back(2);
    for (const SymbolCounts* c : parts) PutVarint(*out, c->escaped.size());
    PutVarint(*out, streams[0].size());
  } else {
    PutVarint(*out, escape_bytes);
  }
  for (const SymbolCounts* c : parts) out->insert(out->end(), c->escaped.begin(), c->escaped.end());
  for (size_t i = 0; i < parts.size(); ++i) out->insert(out->end(), streams[i].begin(), streams[i].end());
  return parts.size() == 2 ? ValueCodec::kHuffmanStreams : ValueCodec::kHuffman;
}

// The symbols of `runs` as a bit stream zero-padded to a byte, in *buffer (replaced).
std::span<const uint8_t> StreamOf(std::span<const ValueRun> runs, const HuffmanEncoder& code, std::vector<uint8_t>* buffer) {
  buffer->clear();
  BitWriter w(*buffer);
  {
    BitWriter::Local symbols(w);
    PutRunSymbols(runs, code, symbols);
  }
  w.Flush();
  return *buffer;
}

// `runs` cut at value `at`: the values before it as `first`, the rest as `second`.
void CutRuns(std::span<const ValueRun> runs, uint64_t at, std::vector<ValueRun>* first, std::vector<ValueRun>* second) {
  first->clear();
  second->clear();
  for (const ValueRun& r : runs) {
    const uint64_t take = std::min(at, r.count);
    if (take > 0) first->push_back({r.width, take, r.bytes.first(take * r.width)});
    if (take < r.count) second->push_back({r.width, r.count - take, r.bytes.subspan(take * r.width)});
    at -= take;
  }
}

// EncodeValues for two streams (codec 3) on two threads: each thread counts the symbols of one
// stream's values, the calling thread chooses the form and, for Huffman, writes stream 0 while the
// helper writes stream 1 into its own buffer. Each stream goes to whichever thread claims it
// first, so a late helper costs nothing; the bytes are one thread's.
ValueCodec EncodeValuesOnTwoThreads(std::span<const ValueRun> runs, uint64_t total, int zstd_level,
                                    std::vector<uint8_t>* out) {
  // The calling thread's objects, also where the helper writes (it may serve another caller as
  // soon as this call ends).
  thread_local SymbolCounts counts[2];
  thread_local std::vector<ValueRun> halves[2];
  thread_local std::vector<uint8_t> stream_buffers[2];
  CutRuns(runs, value_symbols::StreamStart(total, 2, 1), &halves[0], &halves[1]);
  SymbolCounts* const count = counts;
  std::vector<uint8_t>* const buffer = stream_buffers;
  const std::vector<ValueRun>* const half = halves;
  ClaimOnce count_second, put_second;
  std::atomic<bool> second_counted{false}, chosen{false}, second_put{false};
  const HuffmanEncoder* code_for_helper = nullptr;
  const SecondPartWalker who = GetSecondPartWalkerForTests();  // tests force either path
  const bool helper_path = who == SecondPartWalker::kHelperPath, caller_all = who == SecondPartWalker::kCallerWalksOn;
  auto helper_takes = [&](ClaimOnce& claim) { return helper_path || (!caller_all && claim.Claim()); };
  auto caller_takes = [&](ClaimOnce& claim) { return caller_all || (!helper_path && claim.Claim()); };
  auto side = [&] {
    if (helper_takes(count_second)) {
      count[1].Count(half[1]);
      second_counted.store(true, std::memory_order_release);
    }
    YieldUntil([&] { return chosen.load(std::memory_order_acquire); });
    if (code_for_helper != nullptr && helper_takes(put_second)) {
      (void)StreamOf(half[1], *code_for_helper, &buffer[1]);
      second_put.store(true, std::memory_order_release);
    }
    return Status::Ok();
  };
  ValueCodec codec = ValueCodec::kHuffmanStreams;
  auto main = [&] {
    count[0].Count(half[0]);
    if (caller_takes(count_second))
      count[1].Count(half[1]);
    else
      YieldUntil([&] { return second_counted.load(std::memory_order_acquire); });
    const SymbolCounts* parts[2] = {&count[0], &count[1]};
    codec = FinishValues(
        runs, parts, zstd_level, out,
        [&](const HuffmanEncoder& code, size_t i) {
          if (i == 0 || caller_takes(put_second)) return StreamOf(half[i], code, &buffer[i]);
          YieldUntil([&] { return second_put.load(std::memory_order_acquire); });
          return std::span<const uint8_t>(buffer[1]);
        },
        [&](const HuffmanEncoder* code) {
          code_for_helper = code;
          chosen.store(true, std::memory_order_release);
        });
    return Status::Ok();
  };
  if (helper_path)
    (void)RunConcurrently(side, main);
  else
    (void)OfferToHelper(side, main);
  return codec;
}

}  // namespace

ValueCodec EncodeValues(std::span<const ValueRun> runs, int zstd_level, std::vector<uint8_t>* out, int threads,
                        uint64_t streams_min) {
  DCR_CHECK(streams_min >= 2);
  uint64_t total = 0;
  for (const ValueRun& r : runs) total += r.count;
  if (threads >= 2 && total >= std::max(kConcurrentValuesMin, streams_min))
    return EncodeValuesOnTwoThreads(runs, total, zstd_level, out);
  thread_local SymbolCounts counts[2];
  thread_local std::vector<ValueRun> halves[2];
  thread_local std::vector<uint8_t> stream_buffers[2];
  const bool two = total >= streams_min;
  if (two) {
    CutRuns(runs, value_symbols::StreamStart(total, 2, 1), &halves[0], &halves[1]);
    counts[0].Count(halves[0]);
    counts[1].Count(halves[1]);
  } else {
    counts[0].Count(runs);
  }
  const SymbolCounts* parts[2] = {&counts[0], &counts[1]};
  return FinishValues(
      runs, std::span<const SymbolCounts* const>(parts, two ? 2 : 1), zstd_level, out,
      [&](const HuffmanEncoder& code, size_t i) {
        return StreamOf(two ? std::span<const ValueRun>(halves[i]) : runs, code, &stream_buffers[i]);
      },
      [](const HuffmanEncoder*) {});
}

}  // namespace dcr
