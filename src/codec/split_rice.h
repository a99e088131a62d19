// Split Rice streams (payload codec mode 4, docs/format.md §2.9): the Rice codes of one part's
// bands (or of one plain location block, method 3 of §2.2) with each code's r low bits in a
// first area and its quotient, in unary, in a second.
// The bits are those of the interleaved codes (§2.7), rearranged: the remainders are fixed-width
// fields and the quotients' terminators are set bits, so a decoder finds every code without
// reading the one before it. On x86-64 with AVX-512 VBMI2 it decodes 8 codes per step (a byte
// compress of the terminators' bit indices, a byte permute of the remainders, a prefix sum), 32
// where r <= 9 (the prefix sum in 16-bit lanes): ~0.4 ns per code on a Zen 5 in 8-code steps,
// where the interleaved codes' chain of count, add and shift per code took 1.6-1.8; elsewhere a
// scalar loop of independent steps per code.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dcr {

// One band's gaps and Rice parameter (0..30).
struct RiceRun {
  std::span<const uint64_t> gaps;
  int r = 0;
};

// Appends the split code of `runs` (in order) to `out`: every run's remainders (the r low bits of
// each gap, LSB-first, packed across runs), zero-padded to a byte; then every run's quotients
// (gap >> r zero bits, then a one bit), zero-padded to a byte. Nothing when there are no gaps.
void PutSplitRice(std::span<const RiceRun> runs, std::vector<uint8_t>* out);

// Why GetSplitRiceOrdinals refused a stream; `band` names the run where that applies
// (NamesBand).
struct SplitRiceError {
  enum class Kind { kNone, kRemaindersTruncated, kPaddingNotZero, kTerminatorsMissing, kOutOfRange, kTrailingBytes };
  Kind kind = Kind::kNone;
  size_t band = 0;
  bool ok() const { return kind == Kind::kNone; }
  bool NamesBand() const { return kind == Kind::kRemaindersTruncated || kind == Kind::kTerminatorsMissing || kind == Kind::kOutOfRange; }
  std::string Message() const;  // what is wrong, without the band
};

// Decodes a split code of counts.size() runs (run b: counts[b] codes with parameter rice[b] <= 30) into
// each run's ascending ordinals (gaps + 1 summed, the first from ordinal 0), run after run at
// out[0, sum of counts). Every ordinal must lie below `limit`; the padding must be zero and no
// bit after the last terminator in its byte set. Without `consumed` the stream must end with
// that byte; with it, the code is a prefix of `stream` and *consumed = its length in bytes.
// Never reads outside `stream` and writes only out[0, sum of counts); on failure out's
// contents are unspecified.
SplitRiceError GetSplitRiceOrdinals(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                    std::span<const uint8_t> rice, uint64_t limit, uint64_t* out,
                                    size_t* consumed = nullptr);

// The ordinals of runs [from, to) of the code GetSplitRiceOrdinals decodes (without `consumed`),
// at out[0, their counts' sum), as it would give them: so two threads may decode one code's
// runs [0, m) and [m, counts.size()) at once (any m from 0 to counts.size()). True iff nothing
// that GetSplitRiceOrdinals checks fails in the range's codes, the code's layout (its counts,
// the remainders' size and padding), the terminators before the range (a popcount per word up
// to them), and, for a range with the last run, what follows the last terminator: the two calls
// of a split are both true exactly when GetSplitRiceOrdinals succeeds.
// On false, GetSplitRiceOrdinals of the whole code tells why.
bool GetSplitRiceRuns(std::span<const uint8_t> stream, std::span<const uint64_t> counts, std::span<const uint8_t> rice,
                      uint64_t limit, size_t from, size_t to, uint64_t* out);

// Streams the 32-bit decoders take are shorter than this: their terminators' bit indices are
// kept in 32 bits.
inline constexpr size_t kMaxSplitRiceStream32Bytes = size_t{1} << 29;

// The same with 32-bit ordinals (the band decoder's, which read and write half the bytes): as
// the 64-bit ones give them, where limit <= 2^32 and the stream is shorter than
// kMaxSplitRiceStream32Bytes; else kOutOfRange (false).
SplitRiceError GetSplitRiceOrdinals(std::span<const uint8_t> stream, std::span<const uint64_t> counts,
                                    std::span<const uint8_t> rice, uint64_t limit, uint32_t* out);
bool GetSplitRiceRuns(std::span<const uint8_t> stream, std::span<const uint64_t> counts, std::span<const uint8_t> rice,
                      uint64_t limit, size_t from, size_t to, uint32_t* out);

// For tests: encode and decode with the scalar loops even where the SIMD ones run, or not; and
// whether they are forced (for the encoder's dispatch, split_rice_encode.cc).
void ForceScalarSplitRice(bool scalar);
bool ScalarSplitRiceForced();

}  // namespace dcr
