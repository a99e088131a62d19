#include "codec/value_coding.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/thread_pool.h"
#include "codec/band_context.h"
#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/section_coding.h"

namespace dcr {
namespace {

// Values below kEscape are their own symbol; larger ones are coded as kEscape and their bytes
// follow raw. 12 bits cover every BF16/F16 XOR mask that stays within mantissa and exponent LSBs.
constexpr uint32_t kAlphabet = kHuffmanMaxSymbols;
constexpr uint32_t kEscape = kAlphabet - 1;

uint64_t LoadValue(const uint8_t* p, uint32_t w) {
  uint64_t v = 0;
  std::memcpy(&v, p, w);
  return v;
}

// Calls fn(U{}) with U the unsigned integer type of `width` bytes (1, 2, 4 or 8).
template <typename Fn>
auto WithWidth(uint32_t width, Fn&& fn) {
  switch (width) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    default: return fn(uint64_t{});
  }
}

// Decodes n values of type U into dst: symbols below kEscape are the value, kEscape takes the
// next sizeof(U) bytes of `escapes` from *e on.
template <typename U>
Status DecodeSymbols(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e, uint64_t n,
                     uint8_t* dst) {
  for (uint64_t i = 0; i < n; ++i, dst += sizeof(U)) {
    // Common codes, several per lookup (values of at least two bytes, where every symbol below
    // the escape is a valid value): four lookups of at most kFastBits bits each fit in one
    // refilled window, and each writes kMultiSymbols slots, of which the next step overwrites
    // the unused ones.
    if constexpr (sizeof(U) >= 2) {
      static_assert(4 * 10 <= 56, "four lookups per refill");
      while (n - i >= 4 * HuffmanDecoder::kMultiSymbols && bits.HasWindow()) {
        bits.RefillWindow();
        int k = 0;
        for (; k < 4; ++k) {
          const uint64_t m = code.PeekMulti(bits);
          const int c = HuffmanDecoder::MultiCount(m);
          if (c == 0) break;
          for (int j = 0; j < HuffmanDecoder::kMultiSymbols; ++j) {
            const U v = static_cast<U>(HuffmanDecoder::MultiSymbol(m, j));
            std::memcpy(dst + j * sizeof(U), &v, sizeof(U));
          }
          bits.SkipInWindow(HuffmanDecoder::MultiBits(m));
          dst += c * sizeof(U);
          i += static_cast<uint64_t>(c);
        }
        if (k < 4) break;  // a long code or an escape: one symbol the general way
      }
      if (i == n) break;
    }
    uint32_t sym;
    if (bits.HasWindow()) {  // the common case: no refill branch, no per-symbol length check
      bits.RefillWindow();
      sym = code.GetInWindow(bits);
    } else {
      sym = code.Get(bits);
      if (bits.overrun()) return Corrupt("value symbols truncated or invalid");
    }
    if (sym < kEscape) [[likely]] {
      if (sizeof(U) == 1 && sym > 0xff) return Corrupt("value symbol wider than its 1-byte dtype");
      const U v = static_cast<U>(sym);
      std::memcpy(dst, &v, sizeof(U));
      continue;
    }
    if (bits.overrun()) return Corrupt("value symbols truncated or invalid");  // GetLong failed
    if (escapes.size() - *e < sizeof(U)) return Corrupt("value escapes exhausted");
    std::memcpy(dst, escapes.data() + *e, sizeof(U));
    *e += sizeof(U);
    if (LoadValue(dst, sizeof(U)) < kEscape) return Corrupt("escaped value below the escape threshold");
  }
  // GetLong signals an invalid code only through the overrun flag, with symbol 0.
  if (bits.overrun()) return Corrupt("value symbols truncated or invalid");
  return Status::Ok();
}

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

Status DecodeHuffman(std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                     std::span<std::vector<uint8_t>* const> outs) {
  ByteReader r(stored);
  HuffmanDecoder code;
  DCR_RETURN_IF_ERROR(code.ReadTable(r, kAlphabet));
  code.BuildMultiTable(kEscape);
  uint64_t escape_len = 0;
  std::span<const uint8_t> escapes;
  if (!r.ReadVarint(&escape_len) || !r.ReadBytes(escape_len, &escapes)) return Corrupt("value escapes truncated");
  BitReader bits(r.Rest());
  size_t e = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const ValueRun& run = runs[k];
    outs[k]->resize(run.count * run.width);
    Status s = WithWidth(run.width, [&](auto zero) {
      return DecodeSymbols<decltype(zero)>(code, bits, escapes, &e, run.count, outs[k]->data());
    });
    DCR_RETURN_IF_ERROR(s);
  }
  if (e != escapes.size()) return Corrupt("unused value escapes");
  if (bits.bytes_consumed() != r.remaining()) return Corrupt("trailing bytes after the value symbols");
  return Status::Ok();
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

// The section from the counts of every run (`parts`, in run order). Huffman stored form: table,
// varint escape-byte count, escape bytes, then the bit stream, which `put_symbols(code, w)`
// writes. `on_code` is called once the form is chosen, with the Huffman code if it is that form
// (else null); put_symbols runs only after it.
template <typename PutFn, typename CodeFn>
ValueCodec FinishValues(std::span<const ValueRun> runs, std::span<const SymbolCounts* const> parts, int zstd_level,
                        std::vector<uint8_t>* out, PutFn&& put_symbols, CodeFn&& on_code) {
  std::vector<uint64_t> freq(kAlphabet, 0);
  uint64_t values = 0, raw_bytes = 0, escape_bytes = 0;
  for (const SymbolCounts* c : parts) {
    c->AddTo(&freq);
    values += c->values, raw_bytes += c->raw_bytes, escape_bytes += c->escaped.size();
  }
  DCR_CHECK(values > 0);
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
  PutVarint(*out, escape_bytes);
  for (const SymbolCounts* c : parts) out->insert(out->end(), c->escaped.begin(), c->escaped.end());
  BitWriter w(*out);
  {
    BitWriter::Local symbols(w);
    put_symbols(code, symbols);
  }
  w.Flush();
  return ValueCodec::kHuffman;
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

// EncodeValues on two threads: each counts the symbols of half the values, the calling thread
// chooses the form and, for Huffman, writes the first half's symbols while the helper writes the
// second half's into its own buffer, which is then appended bit for bit. Each half goes to
// whichever thread claims it first, so a late helper costs nothing; the bytes are one thread's.
ValueCodec EncodeValuesOnTwoThreads(std::span<const ValueRun> runs, uint64_t total, int zstd_level,
                                    std::vector<uint8_t>* out) {
  // The calling thread's objects, also where the helper writes (it may serve another caller as
  // soon as this call ends).
  thread_local SymbolCounts counts[2];
  thread_local std::vector<ValueRun> halves[2];
  thread_local std::vector<uint8_t> second_bits;
  CutRuns(runs, total / 2, &halves[0], &halves[1]);
  SymbolCounts* const count = counts;
  std::vector<uint8_t>* const second_out = &second_bits;
  const std::vector<ValueRun>* const half = halves;
  ClaimOnce count_second, put_second;
  std::atomic<bool> second_counted{false}, chosen{false}, second_put{false};
  const HuffmanEncoder* code_for_helper = nullptr;
  uint64_t second_nbits = 0;
  auto put_second_half = [&](const HuffmanEncoder& code) {
    second_out->clear();
    BitWriter w(*second_out);
    {
      BitWriter::Local symbols(w);
      PutRunSymbols(half[1], code, symbols);
    }
    second_nbits = w.BitCount();
    w.Flush();
  };
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
      put_second_half(*code_for_helper);
      second_put.store(true, std::memory_order_release);
    }
    return Status::Ok();
  };
  ValueCodec codec = ValueCodec::kHuffman;
  auto main = [&] {
    count[0].Count(half[0]);
    if (caller_takes(count_second))
      count[1].Count(half[1]);
    else
      YieldUntil([&] { return second_counted.load(std::memory_order_acquire); });
    const SymbolCounts* parts[2] = {&count[0], &count[1]};
    codec = FinishValues(
        runs, parts, zstd_level, out,
        [&](const HuffmanEncoder& code, BitWriter::Local& w) {
          PutRunSymbols(half[0], code, w);
          if (caller_takes(put_second)) {
            PutRunSymbols(half[1], code, w);
            return;
          }
          YieldUntil([&] { return second_put.load(std::memory_order_acquire); });
          w.AppendBits(*second_out, second_nbits);
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

ValueCodec EncodeValues(std::span<const ValueRun> runs, int zstd_level, std::vector<uint8_t>* out, int threads) {
  uint64_t total = 0;
  for (const ValueRun& r : runs) total += r.count;
  if (threads >= 2 && total >= kConcurrentValuesMin) return EncodeValuesOnTwoThreads(runs, total, zstd_level, out);
  thread_local SymbolCounts counts;
  counts.Count(runs);
  const SymbolCounts* parts[1] = {&counts};
  return FinishValues(
      runs, parts, zstd_level, out, [&](const HuffmanEncoder& code, BitWriter::Local& w) { PutRunSymbols(runs, code, w); },
      [](const HuffmanEncoder*) {});
}

Status DecodeValues(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                    std::span<std::vector<uint8_t>* const> outs) {
  DCR_CHECK(runs.size() == outs.size());
  if (codec == ValueCodec::kHuffman) return DecodeHuffman(stored, runs, outs);
  if (codec != ValueCodec::kPlanesRaw && codec != ValueCodec::kPlanesZstd)
    return Corrupt("value codec " + std::to_string(static_cast<int>(codec)));
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

}  // namespace dcr
