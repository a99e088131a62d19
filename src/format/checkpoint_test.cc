// Writing safetensors files, sharded checkpoints, catalog comparison and FirstDifference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "format/checkpoint.h"
#include "format/dtype.h"
#include "format/safetensors.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

using test::ReadAll;
using test::TempDir;
using test::Tensors;
using test::WriteAll;

constexpr char kDirPrefix[] = "dcr_checkpoint_test_";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// One tensor of every dtype, plus scalars and empty tensors; deliberately not in name order.
Tensors AllDTypes(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensors t;
  const DType all[] = {DType::kBool, DType::kU8,  DType::kI8,  DType::kU16, DType::kI16,
                       DType::kU32,  DType::kI32, DType::kU64, DType::kI64, DType::kF16,
                       DType::kBF16, DType::kF32, DType::kF64, DType::kF8E4M3, DType::kF8E5M2};
  for (DType d : all) {
    std::string n(DTypeName(d));
    t.Add("t." + n, d, {3, 5}, rng);
    t.Add("scalar." + n, d, {}, rng);
    t.Add("empty." + n, d, {0}, rng);
  }
  t.Add("a.empty2d", DType::kF32, {4, 0}, rng);
  t.Add("z.big", DType::kBF16, {64, 33}, rng);
  return t;
}

void ExpectCheckpointHolds(const Checkpoint& c, const std::vector<TensorToWrite>& want) {
  ASSERT_EQ(c.tensors().size(), want.size());
  for (size_t i = 1; i < c.tensors().size(); ++i) EXPECT_LT(c.tensors()[i - 1].name(), c.tensors()[i].name());
  for (const auto& w : want) {
    const TensorRef* r = c.Find(w.name);
    ASSERT_NE(r, nullptr) << w.name;
    EXPECT_EQ(r->dtype(), w.dtype) << w.name;
    EXPECT_EQ(r->info->shape, w.shape) << w.name;
    EXPECT_EQ(r->num_elements(), *ShapeElements(w.shape));
    ASSERT_EQ(r->bytes.size(), w.data.size()) << w.name;
    EXPECT_TRUE(std::equal(r->bytes.begin(), r->bytes.end(), w.data.begin(), w.data.end())) << w.name;
  }
}

TEST(WriteSafetensors, EveryDTypeScalarAndEmptyTensorRoundTripsBitExactly) {
  TempDir dir(kDirPrefix);
  Tensors t = AllDTypes(1);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "7"}};
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", t.Bind(), meta).ok());
  auto f = SafetensorsFile::Open(dir / "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->header().metadata, meta);
  EXPECT_EQ((f->header().data_start - 8) % 8, 0u);  // header padded to a multiple of 8
  auto c = Checkpoint::Open(dir / "m.safetensors");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->sharded());
  ExpectCheckpointHolds(*c, t.list);
  // Tensors are laid out in the order given, back to back.
  uint64_t expect = 0;
  for (const auto& w : t.list) {
    const TensorRef* r = c->Find(w.name);
    EXPECT_EQ(r->info->data_begin, expect) << w.name;
    expect += w.data.size();
  }
  EXPECT_EQ(fs::file_size(dir / "m.safetensors"), f->header().data_start + expect);
}

TEST(WriteSafetensors, SameInputGivesByteIdenticalFiles) {
  TempDir dir(kDirPrefix);
  Tensors a = AllDTypes(2), b = AllDTypes(2);
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", a.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "b.safetensors", b.Bind()).ok());
  EXPECT_EQ(ReadAll(dir / "a.safetensors"), ReadAll(dir / "b.safetensors"));
}

TEST(WriteSafetensors, SparseTensorsReadAsZeros) {
  TempDir dir(kDirPrefix);
  std::vector<TensorToWrite> t = {{"hole", DType::kF32, {1000}, {}, true}};
  ASSERT_TRUE(WriteSafetensors(dir / "s.safetensors", t).ok());
  auto c = Checkpoint::Open(dir / "s.safetensors");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->tensors()[0].bytes.size(), 4000u);
  for (uint8_t b : c->tensors()[0].bytes) ASSERT_EQ(b, 0);
}

TEST(WriteSafetensors, WrongDataSizeOrDuplicateNameIsRefusedAndNoFileAppears) {
  TempDir dir(kDirPrefix);
  std::vector<uint8_t> bytes(12);
  std::vector<TensorToWrite> short_data = {{"w", DType::kF32, {4}, bytes, false}};
  Status s = WriteSafetensors(dir / "x.safetensors", short_data);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "'w'"));
  std::vector<TensorToWrite> dup = {{"w", DType::kF32, {3}, bytes, false}, {"w", DType::kU8, {12}, bytes, false}};
  s = WriteSafetensors(dir / "x.safetensors", dup);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "duplicate"));
  EXPECT_FALSE(fs::exists(dir / "x.safetensors"));
  EXPECT_TRUE(fs::is_empty(dir.str()));  // no temporary left behind
}

TEST(Checkpoint, ReadWriteMappingWritesThroughToTheFile) {
  TempDir dir(kDirPrefix);
  Tensors t = AllDTypes(3);
  ASSERT_TRUE(WriteSafetensors(dir / "m.safetensors", t.Bind()).ok());
  {
    auto c = Checkpoint::Open(dir / "m.safetensors", MappedFile::Mode::kReadWrite);
    ASSERT_TRUE(c.ok());
    const TensorRef* r = c->Find("t.F32");
    ASSERT_EQ(r->mutable_bytes.size(), r->bytes.size());
    r->mutable_bytes[5] ^= 0xff;
    ASSERT_TRUE(c->Sync().ok());
  }
  auto c = Checkpoint::Open(dir / "m.safetensors");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->Find("t.F32")->bytes[5], static_cast<uint8_t>(t.Bytes("t.F32")[5] ^ 0xff));
  EXPECT_TRUE(c->Find("t.F32")->mutable_bytes.empty());  // read-only open exposes no writable span
}

TEST(Checkpoint, DirectoryWithOneFileOpensAndOtherwiseIsNotFound) {
  TempDir dir(kDirPrefix);
  Tensors t = AllDTypes(4);
  EXPECT_EQ(Checkpoint::Open(dir.str()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteSafetensors(dir / "only.safetensors", t.Bind()).ok());
  auto c = Checkpoint::Open(dir.str());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectCheckpointHolds(*c, t.list);
  ASSERT_TRUE(WriteSafetensors(dir / "second.safetensors", t.list).ok());
  EXPECT_EQ(Checkpoint::Open(dir.str()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Checkpoint::Open(dir / "missing.safetensors").status().code(), StatusCode::kNotFound);
}

TEST(ShardedCheckpoint, WrittenShardsOpenAsOneCheckpointWithTheSameBits) {
  TempDir dir(kDirPrefix);
  Tensors t = AllDTypes(5);
  ASSERT_TRUE(WriteShardedCheckpoint(dir / "ckpt", t.Bind(), 64).ok());
  auto c = Checkpoint::Open(dir / "ckpt");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->sharded());
  EXPECT_GT(c->num_files(), 3u);
  ExpectCheckpointHolds(*c, t.list);
  // A tensor never spans shards, and a shard holds at most 64 bytes unless one tensor is larger.
  for (size_t i = 0; i < c->num_files(); ++i) {
    uint64_t bytes = 0;
    for (const auto& ti : c->file(static_cast<int>(i)).header().tensors) bytes += ti.byte_size();
    if (c->file(static_cast<int>(i)).header().tensors.size() > 1) {
      EXPECT_LE(bytes, 64u);
    }
  }
  char first[64];
  std::snprintf(first, sizeof(first), "ckpt/model-00001-of-%05zu.safetensors", c->num_files());
  EXPECT_TRUE(fs::exists(dir / first)) << first;
  // Same catalog and bits as the single-file form.
  ASSERT_TRUE(WriteSafetensors(dir / "single.safetensors", t.list).ok());
  auto s = Checkpoint::Open(dir / "single.safetensors");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(CompareCatalogs(c->catalog(), "sharded", s->catalog(), "single").ok());
  auto d = FirstDifference(*c, *s);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->has_value());
  EXPECT_EQ(c->total_bytes(), s->total_bytes());
  EXPECT_EQ(c->total_elements(), s->total_elements());
}

// Rewrites the shard index with `edit` applied to its text.
class ShardIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = AllDTypes(6);
    ASSERT_TRUE(WriteShardedCheckpoint(dir_ / "ckpt", t_.Bind(), 200).ok());
    index_ = dir_ / "ckpt/model.safetensors.index.json";
    original_ = ReadText(index_);
    ASSERT_TRUE(Checkpoint::Open(dir_ / "ckpt").ok());
  }
  void Replace(const std::string& from, const std::string& to) {
    std::string text = original_;
    size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    WriteAll(index_, text);
  }
  std::string ShardOf(const std::string& tensor) {
    std::string key = "\"" + tensor + "\": \"";
    size_t at = original_.find(key);
    EXPECT_NE(at, std::string::npos);
    at += key.size();
    return original_.substr(at, original_.find('"', at) - at);
  }
  Status Open() { return Checkpoint::Open(dir_ / "ckpt").status(); }

  TempDir dir_{kDirPrefix};
  Tensors t_;
  std::string index_, original_;
};

TEST_F(ShardIndexTest, IndexNamingAMissingTensorIsCorrupt) {
  Replace("\"weight_map\": {", "\"weight_map\": {\n    \"ghost.weight\": \"" + ShardOf("t.F32") + "\",");
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Contains(s.message(), "ghost.weight")) << s.message();
}

TEST_F(ShardIndexTest, IndexNamingAMissingFileIsNotFound) {
  Replace("\"weight_map\": {", "\"weight_map\": {\n    \"ghost.weight\": \"model-nowhere.safetensors\",");
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.message(), "model-nowhere.safetensors")) << s.message();
}

TEST_F(ShardIndexTest, TensorInAShardButNotInTheIndexIsCorrupt) {
  std::string entry = "    \"t.F32\": \"" + ShardOf("t.F32") + "\",\n";
  Replace(entry, "");
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Contains(s.message(), "'t.F32'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "not listed")) << s.message();
}

TEST_F(ShardIndexTest, TensorMappedToTheWrongShardIsCorrupt) {
  std::string a = ShardOf("t.F32"), b = ShardOf("z.big");
  ASSERT_NE(a, b);
  Replace("\"t.F32\": \"" + a + "\"", "\"t.F32\": \"" + b + "\"");
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Contains(s.message(), "'t.F32'")) << s.message();
}

TEST_F(ShardIndexTest, IndexPointingOutsideTheDirectoryIsCorrupt) {
  std::string a = ShardOf("t.F32");
  Replace("\"t.F32\": \"" + a + "\"", "\"t.F32\": \"../" + a + "\"");
  EXPECT_EQ(Open().code(), StatusCode::kCorrupt);
  Replace("\"t.F32\": \"" + a + "\"", "\"t.F32\": \"..\"");
  EXPECT_EQ(Open().code(), StatusCode::kCorrupt);
}

TEST_F(ShardIndexTest, MalformedIndexIsCorrupt) {
  for (const char* text : {"", "[]", "{\"weight_map\": []}", "{\"metadata\": {}}", "{\"weight_map\": {\"a\": 1}}"}) {
    WriteAll(index_, text);
    EXPECT_EQ(Open().code(), StatusCode::kCorrupt) << text;
  }
}

TEST(CompareCatalogs, EqualCatalogsAreOk) {
  Catalog a = {{"a", DType::kF32, {2}}, {"b", DType::kBF16, {}}};
  EXPECT_TRUE(CompareCatalogs(a, "A", a, "B").ok());
  EXPECT_TRUE(CompareCatalogs({}, "A", {}, "B").ok());
}

TEST(CompareCatalogs, NamesTheFirstDifferenceInCatalogOrder) {
  const Catalog base = {{"a", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}, {"c", DType::kU8, {5}}};
  auto check = [&](const Catalog& other, std::vector<std::string> parts) {
    Status s = CompareCatalogs(base, "base.st", other, "next.st");
    EXPECT_EQ(s.code(), StatusCode::kMismatch);
    for (const auto& p : parts) EXPECT_TRUE(Contains(s.message(), p)) << "'" << p << "' missing from: " << s.message();
  };
  // b's dtype and c's shape both differ: b is named.
  check({{"a", DType::kF32, {2}}, {"b", DType::kF16, {3, 4}}, {"c", DType::kU8, {6}}}, {"'b'", "BF16", "F16"});
  check({{"a", DType::kF32, {2}}, {"b", DType::kBF16, {4, 3}}, {"c", DType::kU8, {5}}},
        {"'b'", "[3, 4]", "[4, 3]", "base.st", "next.st"});
  check({{"a", DType::kF32, {2}}, {"c", DType::kU8, {5}}}, {"'b'", "is in base.st but not in next.st"});
  check({{"a", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}}, {"'c'", "is in base.st but not in next.st"});
  check({{"a", DType::kF32, {2}}, {"aa", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}, {"c", DType::kU8, {5}}},
        {"'aa'", "is in next.st but not in base.st"});
  check({{"a", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}, {"c", DType::kU8, {5}}, {"d", DType::kU8, {5}}},
        {"'d'", "is in next.st but not in base.st"});
  check({{"a", DType::kF32, {2, 1}}, {"b", DType::kBF16, {3, 4}}, {"c", DType::kU8, {5}}}, {"'a'"});
}

// CompareCheckpointCatalogs reads the checkpoints' tensor records in place: the same status,
// code and message, as CompareCatalogs of their copied catalogs labelled by their paths, for
// every kind of difference (and none), either way round.
TEST(CompareCatalogs, CheckpointsCompareAsTheirCatalogsDo) {
  TempDir dir(kDirPrefix);
  std::mt19937_64 rng(9);
  using Entries = std::vector<std::tuple<std::string, DType, std::vector<uint64_t>>>;
  auto write = [&](const std::string& name, const Entries& list) {
    Tensors t;
    for (const auto& [n, d, shape] : list) t.Add(n, d, shape, rng);
    EXPECT_TRUE(WriteSafetensors(dir / name, t.Bind()).ok());
    return dir / name;
  };
  const Entries abc = {{"a", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}, {"c", DType::kU8, {5}}};
  const std::string base = write("base.safetensors", abc);
  const std::vector<std::string> others = {
      base,
      write("same.safetensors", abc),
      write("dtype.safetensors", {{"a", DType::kF32, {2}}, {"b", DType::kF16, {3, 4}}, {"c", DType::kU8, {6}}}),
      write("shape.safetensors", {{"a", DType::kF32, {2}}, {"b", DType::kBF16, {4, 3}}, {"c", DType::kU8, {5}}}),
      write("missing.safetensors", {{"a", DType::kF32, {2}}, {"c", DType::kU8, {5}}}),
      write("last.safetensors", {{"a", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}}),
      write("extra.safetensors",
            {{"a", DType::kF32, {2}}, {"aa", DType::kF32, {2}}, {"b", DType::kBF16, {3, 4}}, {"c", DType::kU8, {5}}}),
      write("empty.safetensors", {}),
  };
  auto a = Checkpoint::Open(base);
  ASSERT_TRUE(a.ok());
  int mismatches = 0;
  for (const std::string& path : others) {
    auto b = Checkpoint::Open(path);
    ASSERT_TRUE(b.ok()) << path;
    for (const auto& [x, y] : {std::pair{&*a, &*b}, std::pair{&*b, &*a}}) {
      const Status want = CompareCatalogs(x->catalog(), x->path(), y->catalog(), y->path());
      const Status got = CompareCheckpointCatalogs(*x, *y);
      EXPECT_EQ(got.code(), want.code()) << x->path() << " against " << y->path();
      EXPECT_EQ(got.message(), want.message());
      mismatches += got.code() == StatusCode::kMismatch;
    }
  }
  EXPECT_EQ(mismatches, 12);  // all but base and its copy, both ways
}

// FirstDifference of the checkpoints at `a` and `b`; a failure to open either is returned.
Result<std::optional<TensorDifference>> FirstDifferenceOf(const std::string& a, const std::string& b) {
  auto ca = Checkpoint::Open(a);
  if (!ca.ok()) return ca.status();
  auto cb = Checkpoint::Open(b);
  if (!cb.ok()) return cb.status();
  return FirstDifference(*ca, *cb);
}

TEST(FirstDifference, IdenticalCheckpointsHaveNone) {
  TempDir dir(kDirPrefix);
  Tensors t = AllDTypes(7);
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", t.Bind()).ok());
  ASSERT_TRUE(WriteShardedCheckpoint(dir / "b", t.list, 100).ok());
  auto d = FirstDifferenceOf(dir / "a.safetensors", dir / "b");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->has_value());
}

TEST(FirstDifference, ReportsTheFirstDifferingElementInCatalogOrder) {
  TempDir dir(kDirPrefix);
  std::mt19937_64 rng(8);
  Tensors a, b;
  a.Add("m.bf16", DType::kBF16, {4, 5}, rng);
  a.Add("n.f32", DType::kF32, {2, 3, 4}, rng);
  a.Add("p.u8", DType::kU8, {3 << 20}, rng);  // larger than the 1 MiB scan step
  b = a;
  // n.f32 element 13 = [1, 0, 1]: +0.0 -> -0.0 (equal as floats, different bits), and a later
  // change in element 20; p.u8 also differs, but comes later in catalog order.
  uint32_t pz = 0x00000000, nz = 0x80000000;
  std::memcpy(a.storage[1].data() + 13 * 4, &pz, 4);
  std::memcpy(b.storage[1].data() + 13 * 4, &nz, 4);
  b.storage[1][20 * 4] ^= 1;
  b.storage[2][100] ^= 1;
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", a.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "b.safetensors", b.Bind()).ok());
  auto d = FirstDifferenceOf(dir / "a.safetensors", dir / "b.safetensors");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->has_value());
  EXPECT_EQ((*d)->tensor, "n.f32");
  EXPECT_EQ((*d)->element, 13u);
  EXPECT_EQ((*d)->width, 4u);
  EXPECT_EQ((*d)->a_bits, 0x00000000u);
  EXPECT_EQ((*d)->b_bits, 0x80000000u);
  EXPECT_EQ((*d)->shape, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(ElementCoordinates((*d)->shape, (*d)->element), "[1, 0, 1]");
}

TEST(FirstDifference, FindsADifferenceBeyondTheFirstMebibyteInTheHighByteOfAnElement) {
  TempDir dir(kDirPrefix);
  std::mt19937_64 rng(9);
  Tensors a, b;
  a.Add("w", DType::kU16, {3 << 20}, rng);
  b = a;
  const uint64_t element = (5 << 19) + 12345;  // 2.5 Mi elements in: byte offset 5 MiB + ...
  b.storage[0][element * 2 + 1] ^= 0x40;      // the high byte only
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", a.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "b.safetensors", b.Bind()).ok());
  auto d = FirstDifferenceOf(dir / "a.safetensors", dir / "b.safetensors");
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->element, element);
  EXPECT_EQ((*d)->a_bits ^ (*d)->b_bits, 0x4000u);
}

TEST(FirstDifference, DifferentCatalogsAreAMismatch) {
  TempDir dir(kDirPrefix);
  std::mt19937_64 rng(10);
  Tensors a, b;
  a.Add("w", DType::kF32, {4}, rng);
  b.Add("w", DType::kI32, {4}, rng);
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", a.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(dir / "b.safetensors", b.Bind()).ok());
  auto d = FirstDifferenceOf(dir / "a.safetensors", dir / "b.safetensors");
  EXPECT_EQ(d.status().code(), StatusCode::kMismatch);
  EXPECT_TRUE(Contains(d.status().message(), "'w'"));
}

TEST(ElementCoordinates, ConvertsFlatRowMajorIndices) {
  EXPECT_EQ(ElementCoordinates({2, 3, 4}, 0), "[0, 0, 0]");
  EXPECT_EQ(ElementCoordinates({2, 3, 4}, 23), "[1, 2, 3]");
  EXPECT_EQ(ElementCoordinates({2, 3, 4}, 4), "[0, 1, 0]");
  EXPECT_EQ(ElementCoordinates({2, 3, 4}, 12), "[1, 0, 0]");
  EXPECT_EQ(ElementCoordinates({6}, 5), "[5]");
  EXPECT_EQ(ElementCoordinates({}, 0), "[]");
  EXPECT_EQ(ElementCoordinates({1ull << 40, 3}, (1ull << 40) * 3 - 1), "[1099511627775, 2]");
  // Exhaustive inverse check on a small shape.
  const std::vector<uint64_t> shape = {3, 1, 4, 2};
  for (uint64_t e = 0; e < 24; ++e) {
    uint64_t i = e / 8, k = (e / 2) % 4, l = e % 2;
    EXPECT_EQ(ElementCoordinates(shape, e), ShapeString({i, 0, k, l}));
  }
}

}  // namespace
}  // namespace dcr
