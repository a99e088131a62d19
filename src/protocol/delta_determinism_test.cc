// Determinism of the delta encoder: the same file for one, two and four threads and any chunk
// size, and a payload diffed by two threads (in pieces one may take of the other's segment) gives
// one thread's bytes.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <thread>

#include "protocol/payload_plan.h"
#include "protocol/protocol_test_support.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

using namespace protocol_test;  // NOLINT: the shared test data and helpers

// Flips the low bits (XOR 1..7, as one-ulp steps do) of about `percent` % of the BF16 elements of
// next's tensors from number `first` on.
void FlipSomeBF16(Tensors& next, size_t first, uint64_t percent, std::mt19937_64& rng) {
  for (size_t t = first; t < next.list.size(); ++t)
    for (size_t i = 0; i < next.storage[t].size() / 2; ++i)
      if (rng() % 100 < percent) Put(next.storage[t], i, 2, Get(next.storage[t], i, 2) ^ (1 + rng() % 7));
}

// `base` and `next` written to dir/base.safetensors and dir/next.safetensors, and opened.
struct OpenedPair {
  Checkpoint base, next;
};
OpenedPair WriteAndOpen(const fs::path& dir, Tensors& base, Tensors& next) {
  if (!WriteSafetensors(dir / "base.safetensors", base.Bind()).ok() ||
      !WriteSafetensors(dir / "next.safetensors", next.Bind()).ok())
    Fatal(__FILE__, __LINE__, "cannot write test checkpoints");
  return {OpenOrDie(dir / "base.safetensors"), OpenOrDie(dir / "next.safetensors")};
}

TEST(DeltaDeterminism, FileIsByteIdenticalForOneTwoAndFourThreadsAndAnyChunkSize) {
  Pair p;
  for (uint64_t chunk_bytes : {kDefaultChunkBytes, uint64_t{4096}, uint64_t{256}, uint64_t{8}}) {
    std::vector<uint8_t> first;
    for (int threads : {1, 2, 4}) {
      DiffOptions opt;
      opt.threads = threads;
      opt.chunk_bytes = chunk_bytes;
      std::string out = p.dir / ("d_" + std::to_string(chunk_bytes) + "_" + std::to_string(threads) + ".dcr");
      auto s = p.Diff(out, opt);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      auto bytes = ReadAll(out);
      if (threads == 1) {
        first = bytes;
        continue;
      }
      EXPECT_EQ(bytes, first) << "chunk " << chunk_bytes << " threads " << threads;
    }
  }
}

// One payload of at least kConcurrentDiffMinElements elements: with two threads, both diff its
// segments, largest first, each into the segment's own slot (EncodePlannedPayload); and a value
// section decodes beside the location section (DecodePayload). The file must be the one one
// thread writes, and apply.
TEST(DeltaDeterminism, ALargePayloadSplitAcrossTwoThreadsIsByteIdenticalAndApplies) {
  using Context = EncodeOptions::Context;
  TempDir dir{"dcr_protocol_test_"};
  std::mt19937_64 rng(77);
  Tensors base;
  base.Add("a.weight", DType::kBF16, {600, 1000}, rng);
  base.Add("b.weight", DType::kBF16, {300, 1000}, rng);
  base.Add("c.weight", DType::kF32, {200, 1000}, rng);
  base.Add("d.bias", DType::kBF16, {1000}, rng);  // small ones, taken last by whichever thread is free
  base.Add("e.bias", DType::kF32, {3000}, rng);
  Tensors next = base;
  for (size_t t = 0; t < next.list.size(); ++t) {
    const uint32_t w = DTypeWidth(next.list[t].dtype);
    std::vector<uint8_t>& bytes = next.storage[t];
    for (size_t i = 0; i < bytes.size() / w; ++i)
      if (rng() % 100 < 4) Put(bytes, i, w, Get(bytes, i, w) ^ (1 + rng() % 7));
  }
  const std::string base_path = dir / "base.safetensors", next_path = dir / "next.safetensors";
  ASSERT_TRUE(WriteSafetensors(base_path, base.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(next_path, next.Bind()).ok());
  ASSERT_GE(uint64_t{600000 + 300000 + 200000 + 1000 + 3000}, kConcurrentDiffMinElements);
  for (Context context : {Context::kNever, Context::kWhenSmaller}) {
    std::vector<std::vector<uint8_t>> files;
    for (int threads : {1, 2}) {
      DiffOptions opt;
      opt.threads = threads;
      opt.encode.context = context;
      const std::string out = dir / ("d" + std::to_string(threads) + ".dcr");
      Checkpoint b = OpenOrDie(base_path), n = OpenOrDie(next_path);
      auto s = DiffCheckpoints(b, n, out, opt);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_EQ(s->payloads, 1u);
      ASSERT_GE(s->changed_elements, kConcurrentSectionsMinChanges);
      files.push_back(ReadAll(out));
      const std::string target = dir / ("t" + std::to_string(threads) + ".safetensors");
      fs::copy_file(base_path, target, fs::copy_options::overwrite_existing);
      {
        auto delta = DeltaReader::Open(out);
        ASSERT_TRUE(delta.ok()) << delta.status().ToString();
        Checkpoint t = OpenOrDie(target, MappedFile::Mode::kReadWrite);
        ApplyOptions ao;
        ao.threads = threads;
        auto a = ApplyDelta(*delta, t, ao);
        ASSERT_TRUE(a.ok()) << a.status().ToString();
      }
      ExpectHolds(OpenOrDie(target), next);
    }
    EXPECT_EQ(files[0], files[1]) << "context " << static_cast<int>(context);
  }
}

// EncodeDiffPayloads (what `dcr bench codec` times) encodes DiffCheckpoints' payloads: the same
// change count, and after each call the last wave's payloads as the file holds them (payloads
// without changes empty), the slots past them cleared, also when a call reuses the slots of one
// with a different plan.
TEST(DeltaDeterminism, EncodeDiffPayloadsGivesTheDeltaFilesPayloadsWaveByWave) {
  Pair p;
  std::vector<EncodedPayload> wave;
  bool partial_wave = false;
  for (uint64_t chunk_bytes : {uint64_t{4096}, uint64_t{256}, kDefaultChunkBytes}) {
    for (int threads : {1, 2}) {
      DiffOptions opt;
      opt.threads = threads;
      opt.chunk_bytes = chunk_bytes;
      const std::string what = "chunk " + std::to_string(chunk_bytes) + ", threads " + std::to_string(threads);
      auto delta = p.DiffAndOpen(p.dir / "d.dcr", opt);
      ASSERT_TRUE(delta.ok()) << delta.status().ToString();
      Checkpoint b = OpenOrDie(p.base_path), n = OpenOrDie(p.next_path);
      auto changed = EncodeDiffPayloads(b, n, opt, DefaultTransferId(delta->header().base_digest), &wave);
      ASSERT_TRUE(changed.ok()) << changed.status().ToString();
      EXPECT_EQ(*changed, delta->header().changed_elements()) << what;
      const size_t planned = PlanPayloads(b.tensors(), chunk_bytes).size(), slots = 2 * static_cast<size_t>(threads);
      ASSERT_EQ(wave.size(), slots) << what;
      const size_t first = (planned - 1) / slots * slots;  // the last wave's first payload
      partial_wave |= planned - first < slots;
      std::map<uint32_t, size_t> entry_of;  // sequence -> the file's payload index
      for (size_t i = 0; i < delta->header().payloads.size(); ++i) entry_of[delta->header().payloads[i].sequence] = i;
      for (size_t i = 0; i < slots; ++i) {
        const auto it = entry_of.find(static_cast<uint32_t>(first + i));
        if (first + i < planned && it != entry_of.end()) {
          EXPECT_EQ(wave[i].changed, delta->header().payloads[it->second].changed) << what << ", slot " << i;
          EXPECT_TRUE(std::ranges::equal(wave[i].bytes, delta->PayloadBytes(it->second))) << what << ", slot " << i;
        } else {
          EXPECT_EQ(wave[i].changed, 0u) << what << ", slot " << i;
          EXPECT_TRUE(wave[i].bytes.empty()) << what << ", slot " << i;
        }
      }
    }
  }
  EXPECT_TRUE(partial_wave) << "no plan ended in a partial wave: the cleared slots went untested";
}

// The owner's pause after each diff piece (SetDiffPiecePauseForTests) while in scope; none after.
class DiffPiecePause {
 public:
  explicit DiffPiecePause(int microseconds) { Set(microseconds); }
  ~DiffPiecePause() { SetDiffPiecePauseForTests(0); }
  void Set(int microseconds) const { SetDiffPiecePauseForTests(microseconds); }
};

// Encodes `segments` on two threads until a thread has taken pieces of the other's segment (at
// most 20 encodes; the caller sets an owner pause) and expects each encode to give `want`, the
// one-thread encode's change count, bytes and digests.
void ExpectPiecesTakenGiveOneThreadsEncode(const std::vector<PlannedSegment>& segments, const Checkpoint& base,
                                           const Checkpoint& next, const EncodeOptions& options,
                                           const EncodedPayload& want, const std::string& what) {
  const uint64_t stolen_before = DiffPiecesStolenForTests();
  for (int attempt = 0; attempt < 20 && DiffPiecesStolenForTests() == stolen_before; ++attempt) {
    EncodedPayload got;
    EncodePlannedPayload(segments, base.tensors(), next.tensors(), ValueKind::kXor, options, {1, 0, 0}, &got, 2);
    EXPECT_EQ(got.changed, want.changed) << what;
    EXPECT_EQ(got.bytes, want.bytes) << what;
    EXPECT_EQ(got.digest_deltas, want.digest_deltas) << what;
  }
  EXPECT_GT(DiffPiecesStolenForTests(), stolen_before) << what << ": no piece was taken in 20 encodes";
}

// Two threads diff a payload's segments in pieces, and a thread left without segments takes
// pieces of the other's (EncodePlannedPayload). A payload of one segment is so shared from the
// start, and one whose first segment has no change (the calling thread takes it, the helper the
// small one behind it, then pieces of the first) must not count that segment for the band fit
// (Finish checks every counted element belongs to a segment with changes). The bytes must be
// one thread's. Whether pieces are taken depends on the helper's timing: the owner pauses after
// each piece, and the encode is repeated until some are taken.
TEST(PayloadEncode, PiecesTakenFromTheOtherThreadsSegmentGiveOneThreadsBytes) {
  using Context = EncodeOptions::Context;
  const DiffPiecePause pause(200);
  std::mt19937_64 rng(79);
  for (const bool first_unchanged : {false, true}) {
    Tensors base;
    base.Add("a.weight", DType::kBF16, {1200, 1000}, rng);
    if (first_unchanged) base.Add("b.bias", DType::kBF16, {5000}, rng);
    Tensors next = base;
    FlipSomeBF16(next, first_unchanged ? 1 : 0, 3, rng);
    TempDir dir{"dcr_protocol_test_"};
    const auto [base_file, next_file] = WriteAndOpen(dir.path(), base, next);
    const PayloadPlan plan = PlanPayloads(base_file.tensors(), uint64_t{1} << 30);
    ASSERT_EQ(plan.size(), 1u);
    ASSERT_GE(uint64_t{1200000}, kConcurrentDiffMinElements);
    for (Context context : {Context::kNever, Context::kWhenSmaller}) {
      const std::string what = std::string(first_unchanged ? "first segment unchanged" : "one segment") +
                               ", context " + std::to_string(static_cast<int>(context));
      EncodeOptions options;
      options.context = context;
      EncodedPayload want;
      EncodePlannedPayload(plan[0], base_file.tensors(), next_file.tensors(), ValueKind::kXor, options, {1, 0, 0},
                           &want, 1);
      ASSERT_FALSE(want.bytes.empty()) << what;
      ExpectPiecesTakenGiveOneThreadsEncode(plan[0], base_file, next_file, options, want, what);
    }
  }
}

// The band fit's sampled elements of a segment diffed in pieces are counted piece by piece, by
// the thread that diffed each piece: a payload of one BF16 segment whose changes depend on the
// exponent, and whose first piece's exponents lie below 64 (the rest's anywhere), in context
// mode, gives one thread's bytes on two threads once pieces are taken (counts of another piece's
// elements than the one diffed would change the bands).
TEST(PayloadEncode, PiecesCountTheirOwnElementsForTheBandFit) {
  using Context = EncodeOptions::Context;
  const DiffPiecePause pause(200);
  std::mt19937_64 rng(81);
  Tensors base;
  base.Add("a.weight", DType::kBF16, {1200, 1000}, rng);
  std::vector<uint8_t>& a = base.storage[0];
  for (size_t i = 0; i < kDiffPieceElements; ++i) a[2 * i + 1] &= 0x1f;  // high byte: sign, exponent bits 7..1
  Tensors next = base;
  std::vector<uint8_t>& x = next.storage[0];
  for (size_t i = 0; i < x.size() / 2; ++i) {
    const uint64_t exponent = (Get(x, i, 2) >> 7) & 0xff;
    if (rng() % 1000 < (exponent < 100 ? 60u : 10u)) Put(x, i, 2, Get(x, i, 2) ^ (1 + rng() % 7));
  }
  TempDir dir{"dcr_protocol_test_"};
  const auto [base_file, next_file] = WriteAndOpen(dir.path(), base, next);
  const PayloadPlan plan = PlanPayloads(base_file.tensors(), uint64_t{1} << 30);
  ASSERT_EQ(plan.size(), 1u);
  ASSERT_GT(uint64_t{1200000}, 4 * kDiffPieceElements);
  for (Context context : {Context::kAlways, Context::kWhenSmaller}) {
    const std::string what = "context " + std::to_string(static_cast<int>(context));
    EncodeOptions options;
    options.context = context;
    EncodedPayload want;
    EncodePlannedPayload(plan[0], base_file.tensors(), next_file.tensors(), ValueKind::kXor, options, {1, 0, 0}, &want, 1);
    PayloadLayout layout;
    ASSERT_TRUE(ParsePayload(want.bytes, &layout).ok()) << what;
    ASSERT_TRUE(NeedsOldBits(layout.mode)) << what;
    ExpectPiecesTakenGiveOneThreadsEncode(plan[0], base_file, next_file, options, want, what);
  }
}

// Random payloads (1-5 tensors of 1 to 900 K elements, BF16 or F32, some unchanged, 1-8 %
// changed in the others), with random owner pauses that vary which pieces are taken: two
// threads give one thread's bytes, change counts and digests, plain and context.
TEST(PayloadEncode, RandomPayloadsOnTwoThreadsGiveOneThreadsBytes) {
  using Context = EncodeOptions::Context;
  std::mt19937_64 rng(80);
  TempDir dir{"dcr_protocol_test_"};
  DiffPiecePause pause(0);
  for (int round = 0; round < 24; ++round) {
    Tensors base;
    const int tensors = 1 + static_cast<int>(rng() % 5);
    for (int t = 0; t < tensors; ++t) {
      const uint64_t n = rng() % 3 == 0 ? 1 + rng() % 5000 : 1 + rng() % 900000;
      base.Add("t" + std::to_string(t), rng() % 4 == 0 ? DType::kF32 : DType::kBF16, {n}, rng);
    }
    Tensors next = base;
    for (size_t t = 0; t < next.list.size(); ++t) {
      const uint64_t percent = rng() % 4 == 0 ? 0 : 1 + rng() % 8;
      const uint32_t w = DTypeWidth(next.list[t].dtype);
      for (size_t i = 0; i < next.storage[t].size() / w; ++i)
        if (rng() % 100 < percent) next.storage[t][i * w] ^= static_cast<uint8_t>(1 + rng() % 7);
    }
    const auto [b, n] = WriteAndOpen(dir.path(), base, next);
    const PayloadPlan plan = PlanPayloads(b.tensors(), uint64_t{1} << 30);
    pause.Set(rng() % 3 == 0 ? static_cast<int>(rng() % 50) : 0);
    for (Context context : {Context::kNever, Context::kWhenSmaller})
      for (size_t p = 0; p < plan.size(); ++p) {
        EncodeOptions options;
        options.context = context;
        EncodedPayload one, two;
        EncodePlannedPayload(plan[p], b.tensors(), n.tensors(), ValueKind::kXor, options, {1, 0, 0}, &one, 1);
        EncodePlannedPayload(plan[p], b.tensors(), n.tensors(), ValueKind::kXor, options, {1, 0, 0}, &two, 2);
        const std::string what = "round " + std::to_string(round) + ", context " + std::to_string(static_cast<int>(context));
        EXPECT_EQ(two.changed, one.changed) << what;
        EXPECT_EQ(two.bytes, one.bytes) << what;
        EXPECT_EQ(two.digest_deltas, one.digest_deltas) << what;
      }
  }
}

// A thread's payload builder is reused from payload to payload (EncodePlannedPayload): a payload
// with nothing changed must leave nothing behind for the next one on its thread. (It left the
// value tallies of its two diff threads registered, and the next two-thread payload counted
// them twice: a failed check, which ended `dcr bench codec` on a pair of equal files followed
// by another pair.)
TEST(PayloadEncode, AnUnchangedPayloadLeavesNothingBehindOnItsThread) {
  using Context = EncodeOptions::Context;
  std::mt19937_64 rng(78);
  Tensors base;
  base.Add("a.weight", DType::kBF16, {600, 1000}, rng);
  base.Add("b.weight", DType::kBF16, {500, 1000}, rng);
  Tensors next = base;
  FlipSomeBF16(next, 0, 4, rng);
  TempDir dir{"dcr_protocol_test_"};
  const auto [base_file, next_file] = WriteAndOpen(dir.path(), base, next);
  const std::vector<TensorRef>& b = base_file.tensors();
  const std::vector<TensorRef>& n = next_file.tensors();
  const PayloadPlan plan = PlanPayloads(b, uint64_t{1} << 30);
  ASSERT_EQ(plan.size(), 1u);
  ASSERT_GE(uint64_t{1100000}, kConcurrentDiffMinElements);
  for (Context context : {Context::kNever, Context::kWhenSmaller})
    for (int threads : {1, 2}) {
      EncodeOptions options;
      options.context = context;
      const std::string what = "context " + std::to_string(static_cast<int>(context)) + ", " +
                               std::to_string(threads) + " threads";
      EncodedPayload want, unchanged, got;
      std::thread([&] { EncodePlannedPayload(plan[0], b, n, ValueKind::kXor, options, {1, 0, 0}, &want, threads); })
          .join();
      ASSERT_FALSE(want.bytes.empty()) << what;
      std::thread([&] {  // a fresh thread: its builder's first payload changes nothing
        EncodePlannedPayload(plan[0], b, b, ValueKind::kXor, options, {1, 0, 0}, &unchanged, threads);
        EncodePlannedPayload(plan[0], b, n, ValueKind::kXor, options, {1, 0, 0}, &got, threads);
      }).join();
      EXPECT_EQ(unchanged.changed, 0u) << what;
      EXPECT_TRUE(unchanged.bytes.empty()) << what;
      EXPECT_EQ(got.changed, want.changed) << what;
      EXPECT_EQ(got.bytes, want.bytes) << what;
    }
}

}  // namespace
}  // namespace dcr
