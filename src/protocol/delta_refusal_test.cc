// Protocol tests, part 2: every refused apply leaves the target exactly as it was, checked by
// state digest and by comparing the raw bytes of every file of the target before and after.
#include <gtest/gtest.h>
#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/band_context.h"
#include "codec/payload_codec.h"
#include "codec/section_coding.h"
#include "format/checkpoint.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "protocol/protocol_test_support.h"
#include "protocol/state_digest.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using protocol_test::Apply;
using protocol_test::OpenOrDie;
using test::ReadAll;
using test::TempDir;
using test::Tensors;
using test::WriteAll;

// Every regular file under `path` (or `path` itself), by relative name.
std::map<std::string, std::vector<uint8_t>> ReadTree(const std::string& path) {
  std::map<std::string, std::vector<uint8_t>> out;
  if (fs::is_regular_file(path)) {
    out[""] = ReadAll(path);
    return out;
  }
  for (auto& e : fs::recursive_directory_iterator(path))
    if (e.is_regular_file()) out[fs::relative(e.path(), path).string()] = ReadAll(e.path().string());
  return out;
}

Tensors MakeBase() {
  std::mt19937_64 rng(101);
  Tensors t;
  t.Add("a.bf16", DType::kBF16, {64, 40}, rng);
  t.Add("b.f32", DType::kF32, {500}, rng);
  t.Add("c.empty", DType::kF16, {0}, rng);
  t.Add("d.f8", DType::kF8E5M2, {333}, rng);
  t.Add("e.i64", DType::kI64, {17}, rng);
  t.Add("f.scalar", DType::kF64, {}, rng);
  t.Add("g.bf16", DType::kBF16, {2000}, rng);
  const uint32_t nz = 0x80000000u;
  std::memcpy(t.storage[1].data(), &nz, 4);  // b.f32[0] = -0.0
  return t;
}

Tensors MakeNext(const Tensors& base) {
  std::mt19937_64 rng(102);
  Tensors t = base;
  for (size_t i = 0; i < t.storage.size(); ++i) {
    const uint32_t w = DTypeWidth(t.list[i].dtype);
    for (size_t e = 0; e * w < t.storage[i].size(); ++e)
      if (rng() % 20 == 0 || t.list[i].shape.empty()) t.storage[i][e * w] ^= static_cast<uint8_t>(1 + rng() % 7);
  }
  // -0.0 -> +0.0: equal as floats, different bits.
  const uint32_t pz = 0;
  std::memcpy(t.storage[1].data(), &pz, 4);
  return t;
}

// The parts of a delta file: the payload region [0, F) and the footer JSON (stored zstd-compressed).
struct DeltaParts {
  std::vector<uint8_t> region;
  Json footer;
};

DeltaParts Split(const std::vector<uint8_t>& file) {
  const uint8_t* tail = file.data() + file.size() - kDeltaTailBytes;
  const uint64_t stored = LoadLe(tail, 8), json_len = LoadLe(tail + 8, 8);
  const size_t at = file.size() - kDeltaTailBytes - stored;
  std::string json(json_len, '\0');
  size_t n = ZSTD_decompress(json.data(), json.size(), file.data() + at, stored);
  EXPECT_EQ(n, json_len);
  DeltaParts p;
  p.region.assign(file.begin(), file.begin() + static_cast<ptrdiff_t>(at));
  p.footer = Json::parse(json);
  return p;
}

// Reassembles a delta file whose footer has a valid checksum, lengths and end marker.
std::vector<uint8_t> Join(const DeltaParts& p) {
  std::vector<uint8_t> out = p.region;
  const std::string json = p.footer.dump();
  std::vector<uint8_t> stored(ZSTD_compressBound(json.size()));
  stored.resize(ZSTD_compress(stored.data(), stored.size(), json.data(), json.size(), 3));
  out.insert(out.end(), stored.begin(), stored.end());
  PutLe(out, stored.size(), 8);
  PutLe(out, json.size(), 8);
  PutLe(out, XXH3_64bits(stored.data(), stored.size()), 8);
  out.insert(out.end(), kDeltaTailMagic, kDeltaTailMagic + sizeof(kDeltaTailMagic));
  return out;
}

// Rebuilds the payload region and table from a list of payloads (bytes, sequence, changed).
struct RawPayload {
  std::vector<uint8_t> bytes;
  uint64_t sequence, changed;
};
void SetPayloads(DeltaParts& p, const std::vector<RawPayload>& payloads) {
  p.region.assign(kDeltaMagic, kDeltaMagic + sizeof(kDeltaMagic));
  Json rows = Json::array();
  for (const auto& r : payloads) {
    rows.push_back({p.region.size(), r.bytes.size(), r.sequence, r.changed});
    p.region.insert(p.region.end(), r.bytes.begin(), r.bytes.end());
  }
  p.footer["payloads"] = rows;
}

void ResignPayload(std::vector<uint8_t>& payload) {
  StoreLe(payload.data() + payload.size() - 8, XXH3_64bits(payload.data(), payload.size() - 8), 8);
}

class DeltaRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = MakeBase();
    next_ = MakeNext(base_);
    ASSERT_TRUE(WriteSafetensors(dir_ / "base.safetensors", base_.Bind()).ok());
    ASSERT_TRUE(WriteSafetensors(dir_ / "next.safetensors", next_.Bind()).ok());
    DiffOptions opt;
    opt.chunk_bytes = 1024;  // several payloads per tensor
    ASSERT_TRUE(Diff(delta_, opt).ok());
    delta_bytes_ = ReadAll(delta_);
    fs::copy_file(dir_ / "base.safetensors", target_);
    auto r = DeltaReader::Open(delta_);
    ASSERT_TRUE(r.ok());
    header_ = r->header();
    ASSERT_GT(header_.payloads.size(), 5u);
  }

  // Writes the delta from base.safetensors to next.safetensors to `out`.
  Status Diff(const std::string& out, const DiffOptions& opt) {
    Checkpoint b = OpenOrDie(dir_ / "base.safetensors"), n = OpenOrDie(dir_ / "next.safetensors");
    return DiffCheckpoints(b, n, out, opt).status();
  }

  // The payloads of the unedited delta, in table order.
  std::vector<RawPayload> Payloads() const {
    std::vector<RawPayload> payloads;
    for (const auto& e : header_.payloads)
      payloads.push_back({std::vector<uint8_t>(delta_bytes_.begin() + static_cast<ptrdiff_t>(e.offset),
                                               delta_bytes_.begin() + static_cast<ptrdiff_t>(e.offset + e.length)),
                          e.sequence, e.changed});
    return payloads;
  }

  // Applying `delta` to `target` fails with `code` and leaves every byte of the target as it was.
  void ExpectRefusedUnchanged(const std::string& delta, const std::string& target, StatusCode code,
                              const std::string& what = "") {
    const auto before = ReadTree(target);
    const Digest128 digest_before = DigestCheckpoint(OpenOrDie(target), 1).total;
    auto s = Apply(delta, target);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.status().code(), code) << what << ": " << s.status().ToString();
    EXPECT_FALSE(s.status().message().empty());
    EXPECT_EQ(DigestCheckpoint(OpenOrDie(target), 1).total, digest_before) << what;
    EXPECT_TRUE(ReadTree(target) == before) << what << ": target bytes changed";
  }
  void ExpectRefusedUnchanged(const std::vector<uint8_t>& delta_file, StatusCode code, const std::string& what = "") {
    WriteAll(dir_ / "edited.dcr", delta_file);
    ExpectRefusedUnchanged(dir_ / "edited.dcr", target_, code, what);
  }

  TempDir dir_{"dcr_refusal_test_"};
  Tensors base_, next_;
  std::string delta_ = dir_ / "d.dcr", target_ = dir_ / "target.safetensors";
  std::vector<uint8_t> delta_bytes_;
  DeltaHeader header_;
};

TEST_F(DeltaRefusal, TheUneditedDeltaApplies) {
  ASSERT_TRUE(Apply(delta_, target_).ok());
  EXPECT_EQ(ReadAll(target_), ReadAll(dir_ / "next.safetensors"));
}

TEST_F(DeltaRefusal, WrongBaseIsRefusedAndTargetUnchanged) {
  // The target already holds the next bits.
  fs::copy_file(dir_ / "next.safetensors", dir_ / "at_next.safetensors");
  ExpectRefusedUnchanged(delta_, dir_ / "at_next.safetensors", StatusCode::kWrongBase);
  // One bit of one element differs from the base, and the message names that tensor.
  Tensors off = base_;
  off.storage[6][101] ^= 0x01;  // g.bf16
  ASSERT_TRUE(WriteSafetensors(dir_ / "off.safetensors", off.Bind()).ok());
  ExpectRefusedUnchanged(delta_, dir_ / "off.safetensors", StatusCode::kWrongBase);
  auto s = Apply(delta_, dir_ / "off.safetensors");
  EXPECT_NE(s.status().message().find("'g.bf16'"), std::string::npos) << s.status().message();
  // The same on a sharded target.
  ASSERT_TRUE(WriteShardedCheckpoint(dir_ / "off_sharded", off.list, 2000).ok());
  ExpectRefusedUnchanged(delta_, dir_ / "off_sharded", StatusCode::kWrongBase);
}

TEST_F(DeltaRefusal, ASecondApplyIsRefusedAsWrongBaseAndLeavesTheTargetAtNext) {
  ASSERT_TRUE(Apply(delta_, target_).ok());
  ExpectRefusedUnchanged(delta_, target_, StatusCode::kWrongBase);
  EXPECT_EQ(ReadAll(target_), ReadAll(dir_ / "next.safetensors"));
}

TEST_F(DeltaRefusal, CatalogMismatchIsRefusedAndTargetUnchanged) {
  struct Case {
    const char* what;
    std::function<void(Tensors&)> edit;
  };
  const Case cases[] = {
      {"different shape", [](Tensors& t) { t.list[0].shape = {40, 64}; }},
      {"different dtype", [](Tensors& t) { t.list[0].dtype = DType::kF16; }},
      {"missing tensor", [](Tensors& t) { t.list.erase(t.list.begin() + 3), t.storage.erase(t.storage.begin() + 3); }},
      {"extra tensor",
       [](Tensors& t) {
         std::mt19937_64 rng(1);
         t.Add("z.extra", DType::kU8, {4}, rng);
       }},
      {"renamed tensor", [](Tensors& t) { t.list[4].name = "e.i64.renamed"; }},
  };
  int i = 0;
  for (const Case& c : cases) {
    Tensors t = base_;
    c.edit(t);
    std::string path = dir_ / ("mismatch" + std::to_string(i++) + ".safetensors");
    ASSERT_TRUE(WriteSafetensors(path, t.Bind()).ok()) << c.what;
    ExpectRefusedUnchanged(delta_, path, StatusCode::kMismatch, c.what);
  }
}

TEST_F(DeltaRefusal, TruncatedDeltaIsRefusedAtEveryLengthAndTargetUnchanged) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n < 64; ++n) lengths.push_back(n);
  for (size_t n = 64; n < delta_bytes_.size(); n += 97) lengths.push_back(n);
  for (size_t n = delta_bytes_.size() - 300; n < delta_bytes_.size(); ++n) lengths.push_back(n);
  for (const auto& e : header_.payloads) lengths.push_back(e.offset + e.length);  // payload boundaries
  for (size_t n : lengths)
    ExpectRefusedUnchanged(std::vector<uint8_t>(delta_bytes_.begin(), delta_bytes_.begin() + static_cast<ptrdiff_t>(n)),
                           StatusCode::kCorrupt, "length " + std::to_string(n));
}

TEST_F(DeltaRefusal, FlippedPayloadByteIsCorruptAndTargetUnchanged) {
  for (size_t i = 0; i < header_.payloads.size(); i += 3) {
    const auto& e = header_.payloads[i];
    for (uint64_t at : {uint64_t{0}, uint64_t{8}, uint64_t{40}, uint64_t{96}, e.length / 2, e.length - 9, e.length - 1}) {
      if (at >= e.length) continue;
      auto bytes = delta_bytes_;
      bytes[e.offset + at] ^= 0x10;
      WriteAll(dir_ / "flip.dcr", bytes);
      ASSERT_TRUE(DeltaReader::Open(dir_ / "flip.dcr").ok());  // the footer is intact
      ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt, "payload " + std::to_string(i) + " byte " + std::to_string(at));
    }
  }
}

TEST_F(DeltaRefusal, FlippedFooterOrTailByteIsCorruptAndTargetUnchanged) {
  const uint64_t footer_len = LoadLe(delta_bytes_.data() + delta_bytes_.size() - kDeltaTailBytes, 8);
  const size_t footer_at = delta_bytes_.size() - kDeltaTailBytes - footer_len;
  for (size_t at = footer_at; at < delta_bytes_.size(); at += (at >= delta_bytes_.size() - kDeltaTailBytes ? 1 : 13)) {
    auto bytes = delta_bytes_;
    bytes[at] ^= 0x04;
    ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt, "byte " + std::to_string(at));
  }
  for (size_t at = 0; at < 8; ++at) {  // the leading magic
    auto bytes = delta_bytes_;
    bytes[at] ^= 0x01;
    ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt, "magic byte " + std::to_string(at));
  }
}

TEST_F(DeltaRefusal, ReassembledUneditedDeltaOpensAndApplies) {
  // The edit helpers themselves produce valid files when nothing is edited.
  DeltaParts p = Split(delta_bytes_);
  std::vector<RawPayload> payloads = Payloads();
  SetPayloads(p, payloads);
  EXPECT_TRUE(std::equal(p.region.begin(), p.region.end(), delta_bytes_.begin()));
  WriteAll(dir_ / "joined.dcr", Join(p));
  auto r = DeltaReader::Open(dir_ / "joined.dcr");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header().payloads.size(), header_.payloads.size());
  ASSERT_TRUE(Apply(dir_ / "joined.dcr", target_).ok());
  EXPECT_EQ(ReadAll(target_), ReadAll(dir_ / "next.safetensors"));
}

TEST_F(DeltaRefusal, ResignedFooterThatLiesIsRefusedAndTargetUnchanged) {
  struct Case {
    const char* what;
    std::function<void(Json&)> edit;
    StatusCode code;
  };
  auto bump = [](Json& v, int64_t by) { v = static_cast<uint64_t>(static_cast<int64_t>(v.get<uint64_t>()) + by); };
  const Case cases[] = {
      {"changed count + 1", [&](Json& f) { bump(f["payloads"][2][3], 1); }, StatusCode::kCorrupt},
      {"changed count - 1", [&](Json& f) { bump(f["payloads"][2][3], -1); }, StatusCode::kCorrupt},
      {"changed count 0", [&](Json& f) { f["payloads"][2][3] = 0; }, StatusCode::kCorrupt},
      {"sequence of the last payload + 1", [&](Json& f) { bump(f["payloads"].back()[2], 1); }, StatusCode::kCorrupt},
      {"sequences not ascending", [&](Json& f) { f["payloads"][1][2] = f["payloads"][0][2]; }, StatusCode::kCorrupt},
      {"sequence beyond u32", [&](Json& f) { f["payloads"][0][2] = 1ull << 32; }, StatusCode::kCorrupt},
      {"length + 1", [&](Json& f) { bump(f["payloads"][1][1], 1); }, StatusCode::kCorrupt},
      {"offset + 1", [&](Json& f) { bump(f["payloads"][0][0], 1); }, StatusCode::kCorrupt},
      {"rows swapped", [](Json& f) { std::swap(f["payloads"][1], f["payloads"][2]); }, StatusCode::kCorrupt},
      {"row dropped", [](Json& f) { f["payloads"].erase(1); }, StatusCode::kCorrupt},
      {"row of 3", [](Json& f) { f["payloads"][0].erase(3); }, StatusCode::kCorrupt},
      {"row holds a string", [](Json& f) { f["payloads"][0][3] = "7"; }, StatusCode::kCorrupt},
      {"transfer id", [](Json& f) { f["transfer_id"] = "0000000000000001"; }, StatusCode::kCorrupt},
      {"transfer id not hex", [](Json& f) { f["transfer_id"] = "000000000000000g"; }, StatusCode::kCorrupt},
      {"target digest", [](Json& f) { f["target_digest"] = Digest128{1, 2}.ToHex(); }, StatusCode::kCorrupt},
      {"base digest", [](Json& f) { f["base_digest"] = Digest128{1, 2}.ToHex(); }, StatusCode::kWrongBase},
      {"digest not hex", [](Json& f) { f["base_digest"] = std::string(32, 'x'); }, StatusCode::kCorrupt},
      {"dtype", [](Json& f) { f["tensors"][0]["dtype"] = "F16"; }, StatusCode::kMismatch},
      {"shape", [](Json& f) { f["tensors"][0]["shape"] = {40, 64}; }, StatusCode::kMismatch},
      {"tensor dropped",  // with its tag, so the footer stays well-formed
       [](Json& f) {
         f["tensors"].erase(6);
         f["base_tags"] = f["base_tags"].get<std::string>().erase(12, 2);
       },
       StatusCode::kMismatch},
      {"tensors unsorted", [](Json& f) { std::swap(f["tensors"][0], f["tensors"][1]); }, StatusCode::kCorrupt},
      {"unknown dtype", [](Json& f) { f["tensors"][0]["dtype"] = "F4"; }, StatusCode::kCorrupt},
      {"negative dimension", [](Json& f) { f["tensors"][0]["shape"][0] = -1; }, StatusCode::kCorrupt},
      {"per-tensor tag in format 2", [](Json& f) { f["tensors"][0]["base_tag"] = 1; }, StatusCode::kCorrupt},
      {"base_tags one digit short", [](Json& f) { f["base_tags"] = f["base_tags"].get<std::string>().substr(1); }, StatusCode::kCorrupt},
      {"base_tags not hex", [](Json& f) { f["base_tags"] = std::string(f["base_tags"].get<std::string>().size(), 'g'); }, StatusCode::kCorrupt},
      {"base_tags missing", [](Json& f) { f.erase("base_tags"); }, StatusCode::kCorrupt},
      {"format name", [](Json& f) { f["format"] = "other"; }, StatusCode::kCorrupt},
      {"the next version", [](Json& f) { f["version"] = kDeltaFormatVersion + 1; }, StatusCode::kUnsupported},
      {"version 0", [](Json& f) { f["version"] = 0; }, StatusCode::kUnsupported},
      {"version 1 without tags", [](Json& f) { f["version"] = 1; }, StatusCode::kCorrupt},
      {"missing payloads", [](Json& f) { f.erase("payloads"); }, StatusCode::kCorrupt},
      {"missing tensors", [](Json& f) { f.erase("tensors"); }, StatusCode::kCorrupt},
      {"not an object", [](Json& f) { f = Json::array({1, 2}); }, StatusCode::kCorrupt},
  };
  for (const Case& c : cases) {
    DeltaParts p = Split(delta_bytes_);
    c.edit(p.footer);
    ExpectRefusedUnchanged(Join(p), c.code, c.what);
  }
}

// A payload removed from both the file and the table, offsets fixed up: the file is well
// formed, but its changes no longer produce the recorded target digest.
TEST_F(DeltaRefusal, MissingPayloadIsCaughtByTheTargetDigestAndTargetUnchanged) {
  DeltaParts p = Split(delta_bytes_);
  std::vector<RawPayload> payloads = Payloads();
  payloads.erase(payloads.begin() + 3);
  SetPayloads(p, payloads);
  const auto bytes = Join(p);
  WriteAll(dir_ / "dropped.dcr", bytes);
  ASSERT_TRUE(DeltaReader::Open(dir_ / "dropped.dcr").ok());
  ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt);
}

// Payload 2 replayed in place of payload 3, re-signed under payload 3's sequence number with a
// consistent table: every payload is valid on its own, but applying both would XOR the same
// elements twice (and leave payload 3's changes out).
TEST_F(DeltaRefusal, ReplayedPayloadUnderAnotherSequenceIsCorruptAndTargetUnchanged) {
  DeltaParts p = Split(delta_bytes_);
  std::vector<RawPayload> payloads = Payloads();
  RawPayload replay = payloads[2];
  StoreLe(replay.bytes.data() + 20, payloads[3].sequence, 4);  // header field: sequence
  ResignPayload(replay.bytes);
  replay.sequence = payloads[3].sequence;
  payloads[3] = replay;
  SetPayloads(p, payloads);
  const auto bytes = Join(p);
  WriteAll(dir_ / "replayed.dcr", bytes);
  auto r = DeltaReader::Open(dir_ / "replayed.dcr");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  DecodedPayload d;
  ASSERT_TRUE(DecodeTablePayload(*r, 3, &d).ok());  // valid on its own
  ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt);
}

// Payload 3 re-encoded with its first segment starting one unchanged element earlier, inside
// payload 2's range. No element is written twice and the target digest comes out right, so only
// the rule that segments never overlap across payloads refuses it.
TEST_F(DeltaRefusal, SegmentOverlappingThePreviousPayloadIsCorruptEvenWhenNoElementIsWrittenTwice) {
  auto r = DeltaReader::Open(delta_);
  ASSERT_TRUE(r.ok());
  DecodedPayload p2, p3;
  ASSERT_TRUE(DecodeTablePayload(*r, 2, &p2).ok());
  ASSERT_TRUE(DecodeTablePayload(*r, 3, &p3).ok());
  const SegmentSpec last2 = p2.segments.back().spec;
  SegmentSpec first3 = p3.segments.front().spec;
  ASSERT_EQ(first3.tensor_index, last2.tensor_index);
  ASSERT_EQ(first3.start, last2.start + last2.count);  // contiguous in the valid delta
  const uint32_t w = DTypeWidth(first3.dtype);
  const auto& b = base_.storage[first3.tensor_index];
  const auto& n = next_.storage[first3.tensor_index];
  ASSERT_TRUE(std::equal(b.begin() + (first3.start - 1) * w, b.begin() + first3.start * w, n.begin() + (first3.start - 1) * w))
      << "the element before payload 3 must be unchanged for this test";
  PayloadBuilder builder;
  for (size_t k = 0; k < p3.segments.size(); ++k) {
    SegmentSpec spec = p3.segments[k].spec;
    if (k == 0) --spec.start, ++spec.count;
    const auto& bb = base_.storage[spec.tensor_index];
    const auto& nn = next_.storage[spec.tensor_index];
    const uint32_t sw = DTypeWidth(spec.dtype);
    builder.AddDiff(spec, std::span<const uint8_t>(bb).subspan(spec.start * sw, spec.count * sw),
                    std::span<const uint8_t>(nn).subspan(spec.start * sw, spec.count * sw));
  }
  ASSERT_EQ(builder.changed(), header_.payloads[3].changed);
  RawPayload overlapping{{}, header_.payloads[3].sequence, header_.payloads[3].changed};
  builder.Finish(p3.identity, &overlapping.bytes);

  DeltaParts parts = Split(delta_bytes_);
  std::vector<RawPayload> payloads = Payloads();
  payloads[3] = overlapping;
  SetPayloads(parts, payloads);
  const auto bytes = Join(parts);
  ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt);
  auto s = Apply(dir_ / "edited.dcr", target_);
  EXPECT_NE(s.status().message().find("overlaps"), std::string::npos) << s.status().message();
}

// A payload replaced by a valid payload of another transfer for the same segments (same table
// row, re-signed footer): its transfer id betrays it.
TEST_F(DeltaRefusal, PayloadFromAnotherTransferIsCorruptAndTargetUnchanged) {
  DiffOptions opt;
  opt.chunk_bytes = 1024;
  opt.transfer_id = 77;
  ASSERT_TRUE(Diff(dir_ / "other.dcr", opt).ok());
  const auto other = ReadAll(dir_ / "other.dcr");
  DeltaParts mine = Split(delta_bytes_), theirs = Split(other);
  ASSERT_EQ(mine.region.size(), theirs.region.size());
  // Swap in their payload 2 (same length: only the transfer id and checksum differ).
  const auto& e = header_.payloads[2];
  std::copy(theirs.region.begin() + static_cast<ptrdiff_t>(e.offset),
            theirs.region.begin() + static_cast<ptrdiff_t>(e.offset + e.length),
            mine.region.begin() + static_cast<ptrdiff_t>(e.offset));
  ExpectRefusedUnchanged(Join(mine), StatusCode::kCorrupt);
}

TEST_F(DeltaRefusal, OverwriteDeltaOnAWrongBaseIsRefusedAndTargetUnchanged) {
  DiffOptions opt;
  opt.kind = ValueKind::kOverwrite;
  ASSERT_TRUE(Diff(dir_ / "ow.dcr", opt).ok());
  Tensors off = base_;
  off.storage[0][0] ^= 0x80;
  ASSERT_TRUE(WriteSafetensors(dir_ / "off.safetensors", off.Bind()).ok());
  ExpectRefusedUnchanged(dir_ / "ow.dcr", dir_ / "off.safetensors", StatusCode::kWrongBase);
  auto bytes = ReadAll(dir_ / "ow.dcr");
  bytes[8 + 50] ^= 1;  // inside the first payload
  ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt);
}

TEST_F(DeltaRefusal, ReadOnlyTargetIsRefusedAndUnchanged) {
  auto r = DeltaReader::Open(delta_);
  ASSERT_TRUE(r.ok());
  const auto before = ReadAll(target_);
  auto t = Checkpoint::Open(target_);  // read-only
  ASSERT_TRUE(t.ok());
  auto s = ApplyDelta(*r, *t, ApplyOptions{});
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
  EXPECT_EQ(ReadAll(target_), before);
}

// ---------------------------------------------------------------------------------------------
// Context mode: decoding reads the target's old bits, so a wrong target must be refused before
// any payload is decoded against it, and payloads that decode to other positions are caught.

// The payloads of the delta file at `path`, in table order.
std::vector<RawPayload> PayloadsOf(const std::string& path) {
  auto r = DeltaReader::Open(path);
  EXPECT_TRUE(r.ok());
  const auto bytes = ReadAll(path);
  std::vector<RawPayload> out;
  for (const auto& e : r->header().payloads)
    out.push_back({std::vector<uint8_t>(bytes.begin() + static_cast<ptrdiff_t>(e.offset),
                                        bytes.begin() + static_cast<ptrdiff_t>(e.offset + e.length)),
                   e.sequence, e.changed});
  return out;
}

// `payload` with its location section replaced by `loc` stored raw, re-signed (docs/format.md §2:
// table length at 28, location codec at 32, location raw and stored lengths at 40 and 48).
std::vector<uint8_t> WithRawLocationSection(const std::vector<uint8_t>& payload, const std::vector<uint8_t>& loc) {
  const uint64_t table_len = LoadLe(payload.data() + 28, 4), loc_stored = LoadLe(payload.data() + 48, 8);
  const size_t loc_at = kPayloadHeaderBytes + table_len;
  std::vector<uint8_t> q(payload.begin(), payload.begin() + static_cast<ptrdiff_t>(loc_at));
  q.insert(q.end(), loc.begin(), loc.end());
  q.insert(q.end(), payload.begin() + static_cast<ptrdiff_t>(loc_at + loc_stored), payload.end());
  q[32] = 0;
  StoreLe(q.data() + 40, loc.size(), 8);
  StoreLe(q.data() + 48, loc.size(), 8);
  ResignPayload(q);
  return q;
}

TEST_F(DeltaRefusal, ContextDeltaOnAWrongBaseIsRefusedAndTargetUnchanged) {
  DiffOptions opt;
  opt.chunk_bytes = 1024;
  opt.encode.context = EncodeOptions::Context::kAlways;
  const std::string ctx = dir_ / "ctx.dcr";
  ASSERT_TRUE(Diff(ctx, opt).ok());
  auto r = DeltaReader::Open(ctx);
  ASSERT_TRUE(r.ok());
  size_t context_payloads = 0;
  for (size_t i = 0; i < r->header().payloads.size(); ++i) {
    PayloadLayout l;
    ASSERT_TRUE(ParsePayload(r->PayloadBytes(i), &l).ok());
    context_payloads += l.mode == CodecMode::kContextSplitRice;
  }
  ASSERT_GT(context_payloads, 0u);
  // The target already holds the next bits (a second apply).
  fs::copy_file(dir_ / "next.safetensors", dir_ / "at_next.safetensors");
  ExpectRefusedUnchanged(ctx, dir_ / "at_next.safetensors", StatusCode::kWrongBase);
  // One element differs from the base, in its exponent: its class, and so the meaning of the
  // class code, differs too.
  Tensors off = base_;
  off.storage[6][101] ^= 0x01;  // g.bf16 element 50, lowest exponent bit
  ASSERT_TRUE(WriteSafetensors(dir_ / "off.safetensors", off.Bind()).ok());
  ExpectRefusedUnchanged(ctx, dir_ / "off.safetensors", StatusCode::kWrongBase);
  ASSERT_TRUE(WriteShardedCheckpoint(dir_ / "off_sharded", off.list, 2000).ok());
  ExpectRefusedUnchanged(ctx, dir_ / "off_sharded", StatusCode::kWrongBase);
  // An unrelated checkpoint of the same catalog.
  Tensors other = base_;
  std::mt19937_64 rng(103);
  for (auto& t : other.storage)
    for (auto& b : t) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE(WriteSafetensors(dir_ / "other.safetensors", other.Bind()).ok());
  ExpectRefusedUnchanged(ctx, dir_ / "other.safetensors", StatusCode::kWrongBase);
  // The right base applies, after which the delta is refused.
  ASSERT_TRUE(Apply(ctx, target_).ok());
  EXPECT_EQ(ReadAll(target_), ReadAll(dir_ / "next.safetensors"));
  ExpectRefusedUnchanged(ctx, target_, StatusCode::kWrongBase);
}

TEST_F(DeltaRefusal, ContextPayloadsWithBrokenOrMisleadingBandCodesAreCorruptAndTargetUnchanged) {
  DiffOptions opt;
  opt.chunk_bytes = 1024;
  opt.encode.context = EncodeOptions::Context::kAlways;
  const std::string ctx = dir_ / "ctx.dcr";
  ASSERT_TRUE(Diff(ctx, opt).ok());
  const auto file = ReadAll(ctx);
  const std::vector<RawPayload> payloads = PayloadsOf(ctx);
  // Flipped bytes inside a context payload fail its checksum.
  {
    auto r = DeltaReader::Open(ctx);
    ASSERT_TRUE(r.ok());
    const auto& e = r->header().payloads[1];
    auto bytes = file;
    bytes[e.offset + e.length / 2] ^= 0x10;
    ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt, "flipped byte");
  }
  // Re-signed context payloads with edited band tables (docs/format.md §2.8-2.9: u8 K, K-1
  // thresholds, u8 P, per part and band varint k and (when k > 0) u8 r, the stream lengths, then
  // the split Rice streams). Changes here do not depend on the exponent and the payloads are small, so the
  // encoder fits one band in one part: [1, 1, k, r, bits...]. Edits of the thresholds of several
  // bands and of the part fields are covered by codec_band_hostile_test.
  int edited = 0;
  for (size_t i = 0; i < payloads.size() && edited < 6; ++i) {
    PayloadLayout l;
    ASSERT_TRUE(ParsePayload(payloads[i].bytes, &l).ok());
    if (l.mode != CodecMode::kContextSplitRice) continue;
    std::vector<uint8_t> raw;
    ASSERT_TRUE(DecompressSection(l.loc_codec, l.loc_stored, l.loc_raw, &raw).ok());
    if (raw[0] != 1 || raw[1] != 1 || raw[2] < 2 || raw[2] >= 127) continue;  // one band, one part; a one-byte count >= 2
    struct Edit {
      const char* what;
      const std::vector<uint8_t>* code;
      std::function<void(std::vector<uint8_t>&)> apply;
    };
    const std::vector<Edit> edits = {
        {"no bands", &raw, [](std::vector<uint8_t>& c) { c[0] = 0; }},
        {"nine bands", &raw, [](std::vector<uint8_t>& c) { c[0] = 9; }},
        {"no parts", &raw, [](std::vector<uint8_t>& c) { c[1] = 0; }},
        {"nine parts", &raw, [](std::vector<uint8_t>& c) { c[1] = 9; }},
        {"band count + 1", &raw, [](std::vector<uint8_t>& c) { c[2] += 1; }},
        {"band count - 1", &raw, [](std::vector<uint8_t>& c) { c[2] -= 1; }},
        {"rice 31", &raw, [](std::vector<uint8_t>& c) { c[3] = 31; }},
        {"trailing byte", &raw, [](std::vector<uint8_t>& c) { c.push_back(0); }},
        {"last byte missing", &raw, [](std::vector<uint8_t>& c) { c.pop_back(); }},
    };
    for (const Edit& e : edits) {
      auto loc = *e.code;
      e.apply(loc);
      auto q = payloads;
      q[i].bytes = WithRawLocationSection(payloads[i].bytes, loc);
      DeltaParts parts = Split(file);
      SetPayloads(parts, q);
      ExpectRefusedUnchanged(Join(parts), StatusCode::kCorrupt, std::string(e.what) + " in payload " + std::to_string(i));
    }
    ++edited;
  }
  EXPECT_GT(edited, 0);
}

// A context payload re-signed with a well-formed band code for other positions (one change moved
// to an unchanged neighbour): it decodes, and only the target digest refuses it.
TEST_F(DeltaRefusal, ContextPayloadDecodingToOtherElementsIsCaughtByTheTargetDigestAndTargetUnchanged) {
  DiffOptions opt;
  opt.chunk_bytes = 1024;
  opt.encode.context = EncodeOptions::Context::kAlways;
  const std::string ctx = dir_ / "ctx.dcr";
  ASSERT_TRUE(Diff(ctx, opt).ok());
  const auto file = ReadAll(ctx);
  const std::vector<RawPayload> payloads = PayloadsOf(ctx);
  Checkpoint base = OpenOrDie(dir_ / "base.safetensors");
  BaseLookup lookup = [&base](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
    const TensorRef& t = base.tensors().at(s.tensor_index);
    const uint64_t w = DTypeWidth(t.dtype());
    return t.bytes.subspan(s.start * w, s.count * w);
  };
  int tried = 0;
  for (size_t i = 0; i < payloads.size() && tried < 3; ++i) {
    DecodedPayload d;
    ASSERT_TRUE(DecodePayload(payloads[i].bytes, &d, lookup).ok());
    if (d.mode != CodecMode::kContextSplitRice) continue;
    // Move the first change whose next element is unchanged.
    std::vector<std::vector<uint32_t>> positions;
    std::vector<ContextSegment> segs;
    bool moved = false;
    for (auto& seg : d.segments) {
      std::vector<uint32_t> pos = AsVector(seg.changes.positions);
      for (size_t k = 0; k < pos.size() && !moved; ++k)
        if (pos[k] + 1 < seg.spec.count && (k + 1 == pos.size() || pos[k + 1] != pos[k] + 1)) pos[k] += 1, moved = true;
      positions.push_back(pos);
      segs.push_back({seg.spec.dtype, *lookup(seg.spec)});
    }
    ASSERT_TRUE(moved);
    std::vector<std::span<const uint32_t>> views(positions.begin(), positions.end());
    std::vector<uint8_t> loc;
    EncodeBandedLocations(segs, views, &loc);
    auto q = payloads;
    q[i].bytes = WithRawLocationSection(payloads[i].bytes, loc);
    DecodedPayload e;
    Status s = DecodePayload(q[i].bytes, &e, lookup);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (size_t k = 0; k < e.segments.size(); ++k) EXPECT_EQ(AsVector(e.segments[k].changes.positions), positions[k]);
    DeltaParts parts = Split(file);
    SetPayloads(parts, q);
    const auto bytes = Join(parts);
    ExpectRefusedUnchanged(bytes, StatusCode::kCorrupt, "payload " + std::to_string(i));
    auto st = Apply(dir_ / "edited.dcr", target_);
    EXPECT_NE(st.status().message().find("target digest"), std::string::npos) << st.status().ToString();
    ++tried;
  }
  EXPECT_GT(tried, 0);
}

}  // namespace
}  // namespace dcr
