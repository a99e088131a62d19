// The file:// backend against the ObjectStore contract (store/object_store.h).
#include "store/file_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <thread>

#include "store/object_store.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

using test::TempDir;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::unique_ptr<ObjectStore> Open(const TempDir& dir) {
  auto s = OpenObjectStore("file://" + dir.str() + "/store");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(FileStore, PutThenGetReturnsTheExactBytes) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  const auto bytes = RandomBytes(3 << 20, 1);
  ASSERT_TRUE(store->Put("a/b/c.bin", bytes).ok());
  auto got = store->Get("a/b/c.bin");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, bytes);
  auto range = store->GetRange("a/b/c.bin", 1000, 5000);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(*range, std::vector<uint8_t>(bytes.begin() + 1000, bytes.begin() + 6000));
  auto head = store->Head("a/b/c.bin");
  ASSERT_TRUE(head.ok() && head->has_value());
  EXPECT_EQ((*head)->size, bytes.size());
  EXPECT_EQ(store->counters().bytes_put, bytes.size());
}

TEST(FileStore, OverwriteReplacesTheWholeObject) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  ASSERT_TRUE(store->Put("k", RandomBytes(1000, 1)).ok());
  const auto second = RandomBytes(10, 2);
  ASSERT_TRUE(store->Put("k", second).ok());
  EXPECT_EQ(*store->Get("k"), second);
}

TEST(FileStore, MissingKeyIsNotFoundAndHeadIsEmpty) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  EXPECT_EQ(store->Get("nope/x").status().code(), StatusCode::kNotFound);
  EXPECT_NE(store->Get("nope/x").status().message().find("nope/x"), std::string::npos);
  auto head = store->Head("nope/x");
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head->has_value());
  EXPECT_TRUE(store->Delete("nope/x").ok());  // deleting a missing key is Ok
  EXPECT_EQ(store->GetFile("nope/x", dir / "out").code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

TEST(FileStore, RangeOutsideTheObjectIsRefused) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  ASSERT_TRUE(store->Put("k", RandomBytes(100, 1)).ok());
  EXPECT_EQ(store->GetRange("k", 90, 11).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->GetRange("k", 101, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->GetRange("k", 100, 0).ok());
}

TEST(FileStore, ListIsSortedFilteredByPrefixAndHidesTemporaries) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  for (const char* k : {"t/b/2", "t/a/1", "t/a/10", "u/x", "t/ab"}) ASSERT_TRUE(store->Put(k, RandomBytes(3, 1)).ok());
  // A temporary of an interrupted write (a dot-file) is never an object.
  test::WriteAll(dir / "store/t/a/.1.tmp.123.0", "partial");
  auto list = store->List("t/a");
  ASSERT_TRUE(list.ok());
  std::vector<std::string> keys;
  for (const auto& o : *list) keys.push_back(o.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"t/a/1", "t/a/10", "t/ab"}));
  auto all = store->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);
  EXPECT_TRUE(store->List("zzz/").ok());
  EXPECT_TRUE(store->List("zzz/")->empty());
}

TEST(FileStore, DeleteRemovesTheObjectAndEmptyDirectories) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  ASSERT_TRUE(store->Put("p/q/r", RandomBytes(3, 1)).ok());
  ASSERT_TRUE(store->Delete("p/q/r").ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "store/p"));
  EXPECT_TRUE(std::filesystem::exists(dir / "store"));
}

TEST(FileStore, PutFileAndGetFileCopyDurably) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  const auto bytes = RandomBytes(5 << 20, 3);
  test::WriteAll(dir / "src.bin", bytes);
  ASSERT_TRUE(store->PutFile("m/model.safetensors", dir / "src.bin").ok());
  ASSERT_TRUE(store->GetFile("m/model.safetensors", dir / "copy.bin").ok());
  EXPECT_EQ(test::ReadAll(dir / "copy.bin"), bytes);
  EXPECT_EQ(store->PutFile("m/x", dir / "absent.bin").code(), StatusCode::kIoError);
}

TEST(FileStore, ConcurrentPutsOfOneKeyLeaveOneWholeObject) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  std::vector<std::vector<uint8_t>> versions;
  for (uint32_t i = 0; i < 8; ++i) versions.push_back(RandomBytes(100000 + i, i));
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r) ASSERT_TRUE(store->Put("shared", versions[i]).ok());
    });
  for (auto& t : threads) t.join();
  auto got = store->Get("shared");
  ASSERT_TRUE(got.ok());
  EXPECT_NE(std::find(versions.begin(), versions.end(), *got), versions.end());
  EXPECT_EQ(store->List("")->size(), 1u);  // no temporaries left
}

TEST(ObjectKeys, InvalidKeysAreRefusedBeforeAnythingIsWritten) {
  TempDir dir("file_store_");
  auto store = Open(dir);
  for (const char* k : {"", "/a", "a//b", "a/", "../x", "a/./b", "a/.hidden", "sp ace", "back\\slash", "a/\x01"})
    EXPECT_EQ(store->Put(k, RandomBytes(1, 1)).code(), StatusCode::kInvalidArgument) << k;
  EXPECT_TRUE(store->List("")->empty());
  EXPECT_TRUE(CheckObjectKey("transfers/0123456789abcdef/payloads/00000-0000000001.dcrp").ok());
}

TEST(ObjectStoreUrl, UnknownSchemesAreRefused) {
  EXPECT_EQ(OpenObjectStore("ftp://x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("/plain/path").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenObjectStore("file://").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcr
