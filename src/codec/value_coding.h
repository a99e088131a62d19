// Value coding: the values of all segments of a payload (XOR masks or new bits), in order.
// Three stored forms, the encoder keeping the smallest (docs/format.md §2.3):
//  - byte planes (all byte-0s, then all byte-1s, ...), raw or zstd-compressed: generic;
//  - symbol Huffman: values below 4095 are symbols of one Huffman code, larger ones escape to
//    raw bytes. XOR masks of neighbouring floats are mostly 0x1, 0x3, 0x7, ..., so this reaches the
//    order-0 entropy (~2.6 bits per BF16 change) where zstd spends ~3.5. In one bit stream
//    (codec 2) or, from kValueStreamsMin values, in two that decode independently (codec 3).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "codec/huffman.h"
#include "codec/second_part_walker.h"

namespace dcr {

enum class ValueCodec : uint8_t { kPlanesRaw = 0, kPlanesZstd = 1, kHuffman = 2, kHuffmanStreams = 3 };

// One segment's values: count × width bytes, packed little-endian.
struct ValueRun {
  uint32_t width = 0;
  uint64_t count = 0;
  std::span<const uint8_t> bytes;  // encoder input only
};

// From `streams_min` values (default kValueStreamsMin) the symbol Huffman form is stored as
// codec 3: one code, the values cut into kValueStreamsWritten streams (in payload order), each
// with its own escape area and bit stream, so that two threads decode (and code) it at once,
// each four streams at a time (independent chains of table lookups, interleaved); about 20 bytes
// more than codec 2. The format allows 2..kMaxValueStreams streams (format 5 wrote two, then
// four; format 6 four, then eight: with four, each thread's share interleaved two chains,
// whose lookups left the core idle between them).
inline constexpr uint64_t kValueStreamsMin = 16384;
inline constexpr size_t kValueStreamsWritten = 8;
inline constexpr uint32_t kMaxValueStreams = 8;

// The symbol counts of some values, for the symbol Huffman forms: additive, so that values may be
// counted where they are made (the thread that diffed a segment counts its values while they are
// in its cache), and a value section encoder given the tallies of all its values does not read
// them once more to count them. 40 KiB of counters: keep one per thread, reused.
class ValueTally {
 public:
  ValueTally();
  void Clear();
  void Add(std::span<const uint8_t> values, uint32_t width);  // values.size() a multiple of width
  uint64_t values() const { return values_; }
  // Each symbol's count (values from kHuffmanMaxSymbols - 1 on count as that escape symbol).
  std::vector<uint64_t> Frequencies() const;
  // The symbols any of `tallies` counted, ascending, into *symbols, and their counts summed over
  // the tallies into *counts (both replaced): the nonzero entries of their summed frequencies.
  // O(256 + 64 per symbol group >= 256 in use), not O(alphabet).
  static void SumUsed(std::span<const ValueTally* const> tallies, std::vector<uint32_t>* symbols,
                      std::vector<uint64_t>* counts);

 private:
  friend class ValueSectionEncoder;
  std::vector<uint64_t> small4_;  // value_symbols::CountSymbols' histograms
  std::vector<uint64_t> large_;
  // Bit g: large_[64 g .. 64 g + 63] may be nonzero. Clear and SumUsed visit only those groups:
  // a payload's values use a few of the 60 (the 32 KiB histogram was zeroed and read whole, in
  // the serial part of every two-thread encode).
  uint64_t large_groups_ = 0;
  uint64_t values_ = 0, raw_bytes_ = 0, escape_bytes_ = 0;
};

// Appends the stored form of `runs` to `out` and returns its codec. Deterministic: the same
// bytes with any thread count, and with or without `tallies`. With threads >= 2 and at least
// kConcurrentValuesMin values (and streams_min), a helper thread may count and write one share of
// the streams. `tallies`, if not empty, must hold the counts of exactly the runs' values (in any
// grouping); their counting is then skipped. `first`, if given, runs on the calling thread before
// anything is appended to `out` (e.g. appending the section before this one), while the helper
// already works on the values.
inline constexpr uint64_t kConcurrentValuesMin = kValueStreamsMin;
ValueCodec EncodeValues(std::span<const ValueRun> runs, int zstd_level, std::vector<uint8_t>* out, int threads = 1,
                        uint64_t streams_min = kValueStreamsMin, std::span<const ValueTally* const> tallies = {},
                        const std::function<void()>& first = {});

// Codes a value section in stages that two threads may share: each share's symbol counts (one
// stream, or from streams_min values kValueStreamsWritten in two shares: the first half of the
// streams and the second; none where `tallies` hold the values' counts, as for EncodeValues),
// the choice of form and code, each stream's bits and escapes. Work(first) runs every stage no
// thread has claimed yet, share `first`'s before the other's, and waits only for stages another
// thread is running; Work(first, true) leaves the other share's streams to a later Work (the
// counts and the choice it needs it runs all the same); Write, once Work has returned on some
// thread, appends the section (waiting for stages another thread is still running). The bytes
// are the same however the stages were shared. Constructed on the thread that calls Write: the
// buffers are that thread's, reused from one section to the next. `obey_walker_for_tests`: SecondPartWalker
// settings force who takes what (kHelperPath: each Work only its own share's stages and Work(0)
// the choice; kCallerWalksOn: Work(0) everything).
class ValueSectionEncoder {
 public:
  ValueSectionEncoder(std::span<const ValueRun> runs, int zstd_level, uint64_t streams_min = kValueStreamsMin,
                      bool obey_walker_for_tests = false, std::span<const ValueTally* const> tallies = {});
  void Work(int first, bool own_streams_only = false);
  ValueCodec Write(std::vector<uint8_t>* out);

 private:
  bool Takes(ClaimOnce& stage, size_t share, int first);
  void Choose();
  // The shares with streams (value_symbols::ShareStreams): one for one stream, else two.
  size_t Shares() const { return streams_ == 1 ? 1 : 2; }

  std::span<const ValueRun> runs_;
  int zstd_level_;
  size_t streams_ = 1;
  // The counts Choose folds: the caller's tallies, or else the count stage's, one per share
  // (counts_, this thread's, reused).
  std::vector<const ValueTally*> tallies_;
  ValueTally* counts_ = nullptr;                  // [2]
  std::vector<ValueRun>* stream_runs_ = nullptr;  // [kValueStreamsWritten]: each stream's values
  std::vector<uint8_t>* escaped_ = nullptr;       // [kValueStreamsWritten]: each stream's escaped values' bytes
  std::vector<uint8_t>* buffers_ = nullptr;       // [kValueStreamsWritten]: each stream's bits
  std::vector<uint8_t>* packed_ = nullptr;        // byte planes, when chosen
  ClaimOnce count_claim_[2], choose_claim_, put_claim_[kValueStreamsWritten];
  std::atomic<bool> counted_[2] = {false, false}, chosen_{false}, put_[kValueStreamsWritten] = {};
  std::optional<HuffmanEncoder> code_;  // empty: byte planes
  ValueCodec planes_codec_ = ValueCodec::kPlanesRaw;
  SecondPartWalker walker_ = SecondPartWalker::kClaimed;
};

// Decodes a value section in two shares, which two threads may take at once or one thread one
// after the other: whichever share starts first also reads the code (the other waits for it);
// share 0 decodes the first half of the streams (rounded up), share 1 the others, two streams
// at a time (codecs 0-2 are one stream).
// Values go to outs[i], which must hold exactly runs[i].count × width bytes. Never reads outside
// `stored`; the memory it uses besides `outs` is bounded by Σ count × width.
class ValueSectionDecoder {
 public:
  ValueSectionDecoder(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                      std::span<const std::span<uint8_t>> outs);
  void DecodeShare(int share);
  // Both shares on the calling thread, in place of DecodeShare(0) and DecodeShare(1) (neither of
  // which may run on this decoder): the streams four at a time across the shares.
  void DecodeAll();
  // After DecodeShare(share): the payload-order values [first, second) that share decoded
  // (share 0 all of them where the section has one stream or none).
  std::pair<uint64_t, uint64_t> ShareValues(int share) const;
  // Once both shares have run: kCorrupt on any inconsistency, the first error one thread
  // decoding the streams in order would meet.
  Status Result() const;

 private:
  Status Prepare();
  // Streams id[0 .. count) (count 1, 2 or 4) into their status_ entries.
  void DecodeStreams(const size_t* id, size_t count);
  void DecodeStreamRange(size_t from, size_t to);

  ValueCodec codec_;
  std::span<const uint8_t> stored_;
  std::span<const ValueRun> runs_;
  std::span<const std::span<uint8_t>> outs_;
  uint64_t total_ = 0;  // values
  ClaimOnce prepare_claim_;
  std::atomic<bool> prepared_{false};
  Status prepared_status_;
  HuffmanDecoder code_;  // codecs 2 and 3
  size_t streams_ = 1;
  std::array<std::span<const uint8_t>, kMaxValueStreams> escapes_{}, bits_{};
  std::array<Status, kMaxValueStreams> status_;
};

// Both shares on the calling thread.
Status DecodeValues(ValueCodec codec, std::span<const uint8_t> stored, std::span<const ValueRun> runs,
                    std::span<const std::span<uint8_t>> outs);

// Byte-plane transposition, exposed for tests: values (n × width) -> width planes of n bytes.
void ToBytePlanes(std::span<const uint8_t> values, uint32_t width, std::vector<uint8_t>* planes);
void FromBytePlanes(std::span<const uint8_t> planes, uint32_t width, std::span<uint8_t> values);  // same size

}  // namespace dcr
