// Golden files pin the byte formats: every delta format version this build claims to read has
// committed files under testdata/golden/v<N>/, and decoding them must keep giving exactly the
// committed target. Regenerate (only when adding a new version) with DCR_WRITE_GOLDEN=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iterator>

#include "codec/bit_stream.h"
#include "codec/huffman.h"
#include "codec/section_coding.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
// testdata/golden/v<N>: every delta format version this build reads (kMinDeltaFormatVersion ..
// kDeltaFormatVersion). The files of one version are never rewritten.
fs::path GoldenDir(uint32_t version) { return fs::path(DCR_SOURCE_DIR) / ("testdata/golden/v" + std::to_string(version)); }

using test::ReadAll;
using test::TempDir;

// Base and target of format `version`: every width, special float bits, an empty tensor, a
// scalar, and a tensor with contiguous, scattered and dense changes (so all three location codes
// appear); from format 4 also a larger tensor for context mode in parts.
void MakeGoldenCheckpoints(const fs::path& dir, uint32_t version) {
  std::vector<uint16_t> bf16(5000), bf16_new;
  for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = static_cast<uint16_t>(0x3c00 + (i * 7919) % 997);
  bf16_new = bf16;
  for (size_t i = 0; i < 5000; i += 97) bf16_new[i] ^= 0x1;       // scattered
  for (size_t i = 2000; i < 2300; ++i) bf16_new[i] ^= 0x3;        // a run
  for (size_t i = 4000; i < 4400; i += 2) bf16_new[i] ^= 0x7;     // dense
  std::vector<uint32_t> f32 = {0x7fc00001u, 0x80000000u, 0x00000001u, 0x7f800000u, 0x3f800000u};
  std::vector<uint32_t> f32_new = {0x7fc00002u, 0x00000000u, 0x00000002u, 0xff800000u, 0x3f800000u};
  std::vector<uint64_t> i64 = {1, 2, 3, 0xffffffffffffffffull}, i64_new = {1, 5, 3, 0};
  std::vector<uint8_t> u8 = {0, 1, 2, 3, 4, 5, 6, 7}, u8_new = {0, 1, 9, 3, 4, 5, 6, 8};
  uint16_t scalar = 0x3c00, scalar_new = 0xbc00;
  // From format 4: 12,288 BF16 elements of varied magnitude, small ones changing more often (as
  // in training), so that context mode in parts has several bands and parts to pin.
  std::vector<uint16_t> g(12288), g_new;
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<uint16_t>(((116 + i * 7 % 12) << 7) | (i * 31 % 128));
  g_new = g;
  for (size_t i = 0; i < g.size(); ++i)
    if ((i * 2654435761u >> 7) % 64 < static_cast<size_t>(128 - ((g[i] >> 7) & 0xff)) / 2) g_new[i] ^= 0x1;
  auto bytes = [](const auto& v) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(v[0]));
  };
  auto one = [](const uint16_t& v) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), 2); };
  std::vector<TensorToWrite> base = {
      {"a.bf16", DType::kBF16, {50, 100}, bytes(bf16)}, {"b.f32", DType::kF32, {5}, bytes(f32)},
      {"c.i64", DType::kI64, {2, 2}, bytes(i64)},      {"d.u8", DType::kU8, {8}, bytes(u8)},
      {"e.empty", DType::kF16, {0, 4}, {}},            {"f.scalar", DType::kBF16, {}, one(scalar)}};
  if (version >= 4) base.push_back({"g.bf16", DType::kBF16, {96, 128}, bytes(g)});
  std::vector<TensorToWrite> target = base;
  if (version >= 4) target[6].data = bytes(g_new);
  target[0].data = bytes(bf16_new);
  target[1].data = bytes(f32_new);
  target[2].data = bytes(i64_new);
  target[3].data = bytes(u8_new);
  target[5].data = one(scalar_new);
  ASSERT_TRUE(WriteSafetensors((dir / "base.safetensors").string(), base).ok());
  ASSERT_TRUE(WriteSafetensors((dir / "target.safetensors").string(), target).ok());
}

constexpr const char* kGoldenDeltas[] = {"xor.dcr", "overwrite.dcr", "context.dcr"};
// Format 6's encoder later planned payloads of about equal size, not full ones and a smaller last
// one (the plan is the encoder's choice, so the version stayed): v6 keeps the files as first
// written and these, the current encoder's bytes of the same deltas.
constexpr const char* kGoldenBalancedDeltas[] = {"xor_balanced.dcr", "overwrite_balanced.dcr", "context_balanced.dcr"};
constexpr uint32_t kBalancedPlanVersion = 6;
// The name of golden delta i (of kGoldenDeltas) that the current encoder writes into its version's
// directory.
const char* CurrentDelta(size_t i) {
  return kDeltaFormatVersion == kBalancedPlanVersion ? kGoldenBalancedDeltas[i] : kGoldenDeltas[i];
}
// From format 4: one payload of every tensor in context mode, in 4 parts (codec mode 3); from
// format 5 with its values in two Huffman streams (value codec 3); from format 6 in four, its
// Rice codes split (codec mode 4); from format 7 in eight, its values as steps.
constexpr const char* kGoldenPartsDelta = "context_parts.dcr";
// Format 5's encoder later wrote four value streams instead of two, and format 6's eight instead
// of four (the format allows 2..8, so the version stayed): v5 and v6 keep the files as first
// written and these, the current encoder's bytes.
constexpr const char* kGoldenFourStreamsDelta = "context_parts_4streams.dcr";
constexpr const char* kGoldenEightStreamsDelta = "context_parts_8streams.dcr";
// The parts delta the current encoder writes into its version's directory.
const char* CurrentPartsDelta() {
  return kDeltaFormatVersion == 5 ? kGoldenFourStreamsDelta
         : kDeltaFormatVersion == 6 ? kGoldenEightStreamsDelta
                                    : kGoldenPartsDelta;
}
// The parts deltas of `version`, with the value streams they hold.
std::vector<std::pair<std::string, int>> PartsDeltas(uint32_t version) {
  if (version < 4) return {};
  if (version == 4) return {{kGoldenPartsDelta, 1}};
  if (version == 5) return {{kGoldenPartsDelta, 2}, {kGoldenFourStreamsDelta, 4}};
  if (version == 6) return {{kGoldenPartsDelta, 4}, {kGoldenEightStreamsDelta, 8}};
  return {{kGoldenPartsDelta, 8}};
}
// From format 7 (values as steps where context mode is allowed): a context-mode delta of new
// bits (overwrite kind), whose steps the decoder turns into new bits rather than XOR masks.
constexpr uint32_t kStepsVersion = 7;
constexpr const char* kGoldenStepsDeltas[] = {"context_overwrite.dcr"};

// Diffs the golden base and target in `from` into the golden deltas in `to`: several payloads
// (one tensor split across two), plain XOR, plain overwrite and context mode.
void WriteGoldenDeltas(const fs::path& from, const fs::path& to) {
  auto base = Checkpoint::Open((from / "base.safetensors").string());
  auto target = Checkpoint::Open((from / "target.safetensors").string());
  ASSERT_TRUE(base.ok() && target.ok());
  using Context = EncodeOptions::Context;
  const std::tuple<ValueKind, Context> modes[] = {
      {ValueKind::kXor, Context::kNever}, {ValueKind::kOverwrite, Context::kNever}, {ValueKind::kXor, Context::kAlways}};
  for (size_t i = 0; i < 3; ++i) {
    DiffOptions o;
    o.kind = std::get<0>(modes[i]);
    o.encode.context = std::get<1>(modes[i]);
    o.chunk_bytes = 4096;
    o.encode.block_log2 = 10;
    ASSERT_TRUE(DiffCheckpoints(*base, *target, (to / CurrentDelta(i)).string(), o).ok());
  }
  if (kDeltaFormatVersion >= kStepsVersion) {
    DiffOptions o;
    o.kind = ValueKind::kOverwrite;
    o.encode.context = Context::kAlways;
    o.chunk_bytes = 4096;
    o.encode.block_log2 = 10;
    ASSERT_TRUE(DiffCheckpoints(*base, *target, (to / kGoldenStepsDeltas[0]).string(), o).ok());
  }
  DiffOptions o;
  o.encode.context = Context::kAlways;
  o.encode.band_part_elements = 4096;
  o.encode.value_streams_min = 256;  // from format 5: the values in Huffman streams
  o.chunk_bytes = 1 << 20;
  ASSERT_TRUE(DiffCheckpoints(*base, *target, (to / CurrentPartsDelta()).string(), o).ok());
}

// Writes the current version's files (only when a new version is added).
TEST(Golden, WriteWhenAsked) {
  if (std::getenv("DCR_WRITE_GOLDEN") == nullptr) GTEST_SKIP() << "set DCR_WRITE_GOLDEN=1 to regenerate";
  const fs::path kGolden = GoldenDir(kDeltaFormatVersion);
  fs::create_directories(kGolden);
  MakeGoldenCheckpoints(kGolden, kDeltaFormatVersion);
  WriteGoldenDeltas(kGolden, kGolden);
}

class GoldenDecode : public ::testing::TestWithParam<std::tuple<uint32_t, const char*>> {};

TEST_P(GoldenDecode, CommittedDeltaTakesCommittedBaseExactlyToCommittedTarget) {
  const auto [version, file] = GetParam();
  const fs::path dir = GoldenDir(version);
  TempDir work("dcr_golden_");
  fs::copy_file(dir / "base.safetensors", work / "t.safetensors");
  auto delta = DeltaReader::Open((dir / file).string());
  ASSERT_TRUE(delta.ok()) << delta.status().ToString();
  EXPECT_EQ(delta->header().format_version, version);
  EXPECT_GT(delta->header().payloads.size(), 1u);
  auto t = Checkpoint::Open(work / "t.safetensors", MappedFile::Mode::kReadWrite);
  ASSERT_TRUE(t.ok());
  auto st = ApplyDelta(*delta, *t, {});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(ReadAll(work / "t.safetensors"), ReadAll(dir / "target.safetensors"));
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenDecode,
                         ::testing::Combine(::testing::Range(kMinDeltaFormatVersion, kDeltaFormatVersion + 1),
                                            ::testing::ValuesIn(kGoldenDeltas)));
INSTANTIATE_TEST_SUITE_P(BalancedFiles, GoldenDecode,
                         ::testing::Combine(::testing::Values(kBalancedPlanVersion),
                                            ::testing::ValuesIn(kGoldenBalancedDeltas)));
INSTANTIATE_TEST_SUITE_P(StepsFiles, GoldenDecode,
                         ::testing::Combine(::testing::Range(kStepsVersion, kDeltaFormatVersion + 1),
                                            ::testing::ValuesIn(kGoldenStepsDeltas)));

// context.dcr exercises the context mode its version writes: mode 1 (one class per exponent
// value) up to format 2, banded mode 2 in format 3, banded mode 3 in formats 4-5, mode 4 (split
// Rice streams) from format 6, so every decoder stays pinned; from format 7 its values (in every
// payload, plain-mode ones too) are steps.
TEST(Golden, ContextDeltasHoldTheirVersionsContextMode) {
  for (uint32_t version = kMinDeltaFormatVersion; version <= kDeltaFormatVersion; ++version) {
    auto delta = DeltaReader::Open((GoldenDir(version) / "context.dcr").string());
    ASSERT_TRUE(delta.ok()) << delta.status().ToString();
    const CodecMode want = version >= 6   ? CodecMode::kContextSplitRice
                           : version >= 4 ? CodecMode::kContextParts
                           : version >= 3 ? CodecMode::kContextBands
                                          : CodecMode::kContext;
    size_t context = 0;
    for (size_t i = 0; i < delta->header().payloads.size(); ++i) {
      PayloadLayout layout;
      ASSERT_TRUE(ParsePayload(delta->PayloadBytes(i), &layout).ok());
      if (layout.mode != CodecMode::kPlain) {
        EXPECT_EQ(layout.mode, want) << "format " << version << " payload " << i;
        ++context;
      }
      EXPECT_EQ(layout.val_form, version >= kStepsVersion ? ValueForm::kSteps : ValueForm::kAsKind)
          << "format " << version << " payload " << i;
    }
    EXPECT_GT(context, 0u) << "format " << version;
  }
}

// context_parts.dcr (from format 4) is one payload in mode 3 with 4 parts (from format 5 its
// values in Huffman streams, value codec 3: two, then four; from format 6 in mode 4), and takes
// its base to its target exactly.
TEST(Golden, PartsDeltaHoldsOnePayloadInFourParts) {
  for (uint32_t version = 4; version <= kDeltaFormatVersion; ++version)
    for (const auto& [file, streams] : PartsDeltas(version)) {
      SCOPED_TRACE(file);
      const fs::path dir = GoldenDir(version);
      auto delta = DeltaReader::Open((dir / file).string());
      ASSERT_TRUE(delta.ok()) << delta.status().ToString();
      ASSERT_EQ(delta->header().payloads.size(), 1u);
      PayloadLayout layout;
      ASSERT_TRUE(ParsePayload(delta->PayloadBytes(0), &layout).ok());
      EXPECT_EQ(layout.mode, version >= 6 ? CodecMode::kContextSplitRice : CodecMode::kContextParts);
      std::vector<uint8_t> loc;
      ASSERT_TRUE(DecompressSection(layout.loc_codec, layout.loc_stored, layout.loc_raw, &loc).ok());
      ASSERT_GE(loc.size(), 2u);
      EXPECT_GE(loc[0], 2) << "bands";
      EXPECT_EQ(loc.at(loc[0]), 4) << "parts";
      EXPECT_EQ(layout.val_codec, version >= 5 ? ValueCodec::kHuffmanStreams : ValueCodec::kHuffman) << "format " << version;
      if (version >= 5) {  // the stream count follows the code table
        ByteReader r(layout.val_stored);
        HuffmanDecoder code;
        uint8_t count = 0;
        ASSERT_TRUE(code.ReadTable(r, kHuffmanMaxSymbols).ok() && r.ReadByte(&count));
        EXPECT_EQ(count, streams);
      }
      for (int threads : {1, 2}) {
        TempDir work("dcr_golden_");
        fs::copy_file(dir / "base.safetensors", work / "t.safetensors");
        auto t = Checkpoint::Open(work / "t.safetensors", MappedFile::Mode::kReadWrite);
        ASSERT_TRUE(t.ok());
        ApplyOptions o;
        o.threads = threads;
        auto st = ApplyDelta(*delta, *t, o);
        ASSERT_TRUE(st.ok()) << st.status().ToString();
        EXPECT_EQ(ReadAll(work / "t.safetensors"), ReadAll(dir / "target.safetensors")) << threads << " threads";
      }
    }
}

// The current version's encoder still writes its golden files byte for byte (a format change
// needs a new version).
TEST(Golden, CurrentEncoderReproducesItsGoldenFiles) {
  const fs::path dir = GoldenDir(kDeltaFormatVersion);
  TempDir work("dcr_golden_");
  WriteGoldenDeltas(dir, work.path());
  for (size_t i = 0; i < std::size(kGoldenDeltas); ++i)
    EXPECT_EQ(ReadAll(work / CurrentDelta(i)), ReadAll(dir / CurrentDelta(i))) << CurrentDelta(i);
  for (const char* file : kGoldenStepsDeltas) EXPECT_EQ(ReadAll(work / file), ReadAll(dir / file)) << file;
  EXPECT_EQ(ReadAll(work / CurrentPartsDelta()), ReadAll(dir / CurrentPartsDelta()));
}

}  // namespace
}  // namespace dcr
