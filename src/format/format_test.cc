// safetensors header validation on hostile input, dtypes and shapes. Writing, sharded
// checkpoints and comparisons are in checkpoint_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "format/dtype.h"
#include "format/safetensors.h"

namespace dcr {
namespace {

const std::string kPath = "hostile.safetensors";

// An 8-byte length, the header text, then `data_bytes` bytes of data.
std::vector<uint8_t> StFile(const std::string& json, size_t data_bytes) {
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(json.size() >> (8 * i));
  b.insert(b.end(), json.begin(), json.end());
  b.resize(b.size() + data_bytes, 0xab);
  return b;
}

std::vector<uint8_t> WithLength(uint64_t n, size_t total) {
  std::vector<uint8_t> b(total, ' ');
  for (int i = 0; i < 8 && static_cast<size_t>(i) < total; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  return b;
}

Status Parse(const std::vector<uint8_t>& file) { return ParseSafetensorsHeader(file, kPath).status(); }

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The status has `code` and its message names the file and every string in `names`.
void ExpectRefused(const std::vector<uint8_t>& file, StatusCode code, std::vector<std::string> names = {}) {
  Status s = Parse(file);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), kPath)) << s.message();
  for (const auto& n : names) EXPECT_TRUE(Contains(s.message(), n)) << "'" << n << "' missing from: " << s.message();
}

TEST(DType, NamesCodesAndWidthsFollowTheDocumentedTable) {
  struct Row {
    DType t;
    const char* name;
    uint32_t width;
    uint8_t code;
  };
  const Row rows[] = {{DType::kBool, "BOOL", 1, 0},     {DType::kU8, "U8", 1, 1},     {DType::kI8, "I8", 1, 2},
                      {DType::kU16, "U16", 2, 3},       {DType::kI16, "I16", 2, 4},   {DType::kU32, "U32", 4, 5},
                      {DType::kI32, "I32", 4, 6},       {DType::kU64, "U64", 8, 7},   {DType::kI64, "I64", 8, 8},
                      {DType::kF16, "F16", 2, 9},       {DType::kBF16, "BF16", 2, 10}, {DType::kF32, "F32", 4, 11},
                      {DType::kF64, "F64", 8, 12},      {DType::kF8E4M3, "F8_E4M3", 1, 13},
                      {DType::kF8E5M2, "F8_E5M2", 1, 14}};
  static_assert(std::size(rows) == kNumDTypes);
  for (const Row& r : rows) {
    EXPECT_EQ(DTypeName(r.t), r.name);
    EXPECT_EQ(DTypeWidth(r.t), r.width);
    EXPECT_EQ(DTypeCode(r.t), r.code);
    EXPECT_EQ(ParseDType(r.name), r.t);
    EXPECT_EQ(DTypeFromCode(r.code), r.t);
  }
  EXPECT_FALSE(ParseDType("bf16").has_value());
  EXPECT_FALSE(ParseDType("F8_E4M3FN").has_value());
  EXPECT_FALSE(ParseDType("").has_value());
  EXPECT_FALSE(DTypeFromCode(15).has_value());
  EXPECT_FALSE(DTypeFromCode(255).has_value());
}

TEST(ShapeElements, MultipliesAndDetectsOverflow) {
  EXPECT_EQ(ShapeElements({}), 1u);
  EXPECT_EQ(ShapeElements({3, 4, 5}), 60u);
  EXPECT_EQ(ShapeElements({0, 1ull << 63, 4}), 0u);
  EXPECT_EQ(ShapeElements({1ull << 32, (1ull << 32) - 1}), (1ull << 32) * ((1ull << 32) - 1));
  EXPECT_FALSE(ShapeElements({1ull << 32, 1ull << 32}).has_value());
  EXPECT_FALSE(ShapeElements({UINT64_MAX, 2}).has_value());
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({3, 4}), "[3, 4]");
}

TEST(SafetensorsHeader, ValidHeaderIsParsedWithTensorsSortedAndMetadata) {
  auto f = StFile(R"({"z":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("a":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]},)"
                  R"("s":{"dtype":"I64","shape":[],"data_offsets":[16,24]},)"
                  R"("e":{"dtype":"U8","shape":[0,3],"data_offsets":[24,24]},)"
                  R"("__metadata__":{"format":"pt","k":"v"}})",
                  24);
  auto h = ParseSafetensorsHeader(f, kPath);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 4u);
  EXPECT_EQ(h->tensors[0].name, "a");
  EXPECT_EQ(h->tensors[1].name, "e");
  EXPECT_EQ(h->tensors[2].name, "s");
  EXPECT_EQ(h->tensors[3].name, "z");
  EXPECT_EQ(h->tensors[0].dtype, DType::kBF16);
  EXPECT_EQ(h->tensors[0].shape, (std::vector<uint64_t>{2, 2}));
  EXPECT_EQ(h->tensors[0].num_elements, 4u);
  EXPECT_EQ(h->tensors[0].data_begin, 8u);
  EXPECT_EQ(h->tensors[0].byte_size(), 8u);
  EXPECT_EQ(h->tensors[1].num_elements, 0u);
  EXPECT_EQ(h->tensors[2].num_elements, 1u);  // a scalar
  EXPECT_TRUE(h->tensors[2].shape.empty());
  EXPECT_EQ(h->metadata.size(), 2u);
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->data_start, f.size() - 24);
}

TEST(SafetensorsHeader, EmptyObjectIsAValidFileWithoutTensors) {
  auto h = ParseSafetensorsHeader(StFile("{}", 0), kPath);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->tensors.empty());
  EXPECT_EQ(h->data_start, 10u);
}

TEST(SafetensorsHeader, FilesShorterThanEightBytesAreCorrupt) {
  for (size_t n = 0; n < 8; ++n) ExpectRefused(std::vector<uint8_t>(n, 0), StatusCode::kCorrupt, {"too short"});
}

TEST(SafetensorsHeader, HeaderLengthBeyondTheFileIsCorrupt) {
  ExpectRefused(WithLength(100, 8 + 99), StatusCode::kCorrupt, {"exceeds the file size"});
  ExpectRefused(WithLength(1, 8), StatusCode::kCorrupt, {"exceeds the file size"});
  ExpectRefused(WithLength(kMaxSafetensorsHeaderBytes, 1000), StatusCode::kCorrupt);
}

TEST(SafetensorsHeader, HeaderLengthAboveTheLimitIsCorruptWithoutReadingIt) {
  ExpectRefused(WithLength(kMaxSafetensorsHeaderBytes + 1, 64), StatusCode::kCorrupt, {"exceeds the limit"});
  ExpectRefused(WithLength(UINT64_MAX, 64), StatusCode::kCorrupt, {"exceeds the limit"});
  ExpectRefused(WithLength(1ull << 63, 64), StatusCode::kCorrupt, {"exceeds the limit"});
}

TEST(SafetensorsHeader, MalformedJsonIsCorrupt) {
  for (const char* text : {"", "{", R"({"a":)", R"({"a":{"dtype":"F32",}})", "\xff\xfe", "{} trailing"})
    ExpectRefused(StFile(text, 0), StatusCode::kCorrupt, {"JSON"});
}

TEST(SafetensorsHeader, JsonThatIsNotAnObjectIsCorrupt) {
  for (const char* text : {"[]", "[1,2]", "42", "\"text\"", "null", "true"})
    ExpectRefused(StFile(text, 0), StatusCode::kCorrupt, {"not a JSON object"});
}

TEST(SafetensorsHeader, UnknownDTypeIsUnsupportedAndNamesTheTensor) {
  ExpectRefused(StFile(R"({"w.q":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1), StatusCode::kUnsupported,
                {"w.q", "F4"});
  ExpectRefused(StFile(R"({"w.q":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8), StatusCode::kUnsupported,
                {"w.q"});
}

TEST(SafetensorsHeader, MissingOrMistypedFieldsAreCorruptAndNameTheTensor) {
  const std::vector<std::string> bad_entries = {
      R"("x")",
      R"([1])",
      R"({"shape":[2],"data_offsets":[0,8]})",
      R"({"dtype":"F32","data_offsets":[0,8]})",
      R"({"dtype":"F32","shape":[2]})",
      R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})",
      R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})",
      R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})",
      R"({"dtype":"F32","shape":[2],"data_offsets":[0]})",
      R"({"dtype":"F32","shape":[2],"data_offsets":[0,8,8]})",
      R"({"dtype":"F32","shape":[2],"data_offsets":{"a":0}})",
      R"({"dtype":"F32","shape":[2],"data_offsets":["0","8"]})",
      R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})",
      R"({"dtype":"F32","shape":[2],"data_offsets":[0.0,8]})",
  };
  for (const auto& e : bad_entries)
    ExpectRefused(StFile(R"({"layer.7.w":)" + e + "}", 8), StatusCode::kCorrupt, {"layer.7.w"});
}

TEST(SafetensorsHeader, NegativeNumbersAreCorrupt) {
  ExpectRefused(StFile(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), StatusCode::kCorrupt,
                {"'t'", "shape"});
  ExpectRefused(StFile(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8), StatusCode::kCorrupt,
                {"'t'", "data_offsets"});
  ExpectRefused(StFile(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8), StatusCode::kCorrupt,
                {"'t'", "data_offsets"});
}

TEST(SafetensorsHeader, ShapeAndByteSizeDisagreementIsCorrupt) {
  ExpectRefused(StFile(R"({"emb":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24), StatusCode::kCorrupt,
                {"emb", "[2, 3]", "20"});
  ExpectRefused(StFile(R"({"emb":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16), StatusCode::kCorrupt,
                {"emb"});
  ExpectRefused(StFile(R"({"emb":{"dtype":"U8","shape":[0],"data_offsets":[0,1]}})", 1), StatusCode::kCorrupt, {"emb"});
  ExpectRefused(StFile(R"({"emb":{"dtype":"F64","shape":[],"data_offsets":[0,4]}})", 4), StatusCode::kCorrupt, {"emb"});
}

TEST(SafetensorsHeader, OffsetsOutsideTheDataRegionAreCorrupt) {
  ExpectRefused(StFile(R"({"w":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}})", 8), StatusCode::kCorrupt,
                {"'w'", "beyond the data region"});
  ExpectRefused(StFile(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[9,9]}})", 8), StatusCode::kCorrupt, {"'w'"});
  ExpectRefused(StFile(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[8,4]}})", 8), StatusCode::kCorrupt,
                {"'w'", "begin"});
  ExpectRefused(StFile(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", 8),
                StatusCode::kCorrupt, {"'w'"});
}

TEST(SafetensorsHeader, OverlappingTensorsAreCorruptAndBothAreNamed) {
  ExpectRefused(StFile(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                       12),
                StatusCode::kCorrupt, {"'a'", "'b'", "overlap"});
  // Containment, and a shared start, are overlaps too.
  ExpectRefused(StFile(R"({"a":{"dtype":"U8","shape":[12],"data_offsets":[0,12]},)"
                       R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
                       R"("c":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                       12),
                StatusCode::kCorrupt, {"overlap"});
  ExpectRefused(StFile(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                       R"("b":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})",
                       2),
                StatusCode::kCorrupt, {"overlap"});
  // Adjacent tensors and empty tensors at any offset do not overlap.
  auto ok = ParseSafetensorsHeader(StFile(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                                          R"("e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                                          8),
                                   kPath);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(SafetensorsHeader, ShapeOverflowIsCorrupt) {
  ExpectRefused(StFile(R"({"big":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
                StatusCode::kCorrupt, {"'big'", "overflows"});
  // Elements fit in 64 bits but bytes do not.
  ExpectRefused(StFile(R"({"big":{"dtype":"U16","shape":[9223372036854775808],"data_offsets":[0,0]}})", 0),
                StatusCode::kCorrupt, {"'big'"});
  // A dimension beyond 2^64 is not an unsigned integer.
  ExpectRefused(StFile(R"({"big":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}})", 0),
                StatusCode::kCorrupt, {"'big'"});
}

TEST(SafetensorsHeader, MetadataMustBeAnObjectOfStrings) {
  ExpectRefused(StFile(R"({"__metadata__":{"a":1}})", 0), StatusCode::kCorrupt, {"__metadata__", "'a'"});
  ExpectRefused(StFile(R"({"__metadata__":{"a":"x","b":{"c":"d"}}})", 0), StatusCode::kCorrupt, {"'b'"});
  ExpectRefused(StFile(R"({"__metadata__":{"a":null}})", 0), StatusCode::kCorrupt, {"'a'"});
  ExpectRefused(StFile(R"({"__metadata__":["a"]})", 0), StatusCode::kCorrupt, {"__metadata__"});
  ExpectRefused(StFile(R"({"__metadata__":"a"})", 0), StatusCode::kCorrupt, {"__metadata__"});
}

// Cutting a valid file anywhere before its end leaves either the header or some tensor's data
// incomplete.
TEST(SafetensorsHeader, EveryTruncationOfAValidFileIsCorrupt) {
  auto f = StFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                  R"("b":{"dtype":"U8","shape":[5],"data_offsets":[12,17]}})",
                  17);
  ASSERT_TRUE(Parse(f).ok());
  for (size_t len = 0; len < f.size(); ++len) {
    std::vector<uint8_t> cut(f.begin(), f.begin() + static_cast<ptrdiff_t>(len));
    ASSERT_EQ(Parse(cut).code(), StatusCode::kCorrupt) << "length " << len;
  }
}

TEST(SafetensorsHeader, RandomCorruptionsNeverCrashAndAreRefusedWithTheFileNamed) {
  auto f = StFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                  R"("b":{"dtype":"U8","shape":[5],"data_offsets":[12,17]},"__metadata__":{"k":"v"}})",
                  17);
  const size_t header_end = f.size() - 17;
  std::mt19937_64 rng(21);
  for (int i = 0; i < 20000; ++i) {
    auto g = f;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) g[rng() % header_end] = static_cast<uint8_t>(rng() % 3 ? rng() : "{}[],:\"0-9e"[rng() % 11]);
    auto h = ParseSafetensorsHeader(g, kPath);
    if (!h.ok()) {
      ASSERT_TRUE(h.status().code() == StatusCode::kCorrupt || h.status().code() == StatusCode::kUnsupported)
          << h.status().ToString();
      ASSERT_TRUE(Contains(h.status().message(), kPath));
      continue;
    }
    for (const auto& t : h->tensors) {
      ASSERT_LE(t.data_begin, t.data_end);
      ASSERT_LE(h->data_start + t.data_end, g.size());
      ASSERT_EQ(t.byte_size(), t.num_elements * DTypeWidth(t.dtype));
    }
  }
}

TEST(SafetensorsFile, OpenNamesTheFileOnDiskInErrors) {
  auto dir = std::filesystem::temp_directory_path() / ("dcr_format_test_open_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "broken.safetensors").string();
  auto bytes = StFile(R"({"w":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}})", 3);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  auto f = SafetensorsFile::Open(path);
  EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Contains(f.status().message(), path)) << f.status().message();
  EXPECT_TRUE(Contains(f.status().message(), "'w'")) << f.status().message();
  EXPECT_EQ(SafetensorsFile::Open((dir / "absent.safetensors").string()).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dcr
