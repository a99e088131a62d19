#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "base/durable_file.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "base/thread_pool.h"

namespace dcr {
namespace {

TEST(Status, CarriesCodeAndContext) {
  Status s = Corrupt("bad bytes").WithContext("file.dcr");
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "file.dcr: bad bytes");
  EXPECT_EQ(s.ToString(), "corrupt: file.dcr: bad bytes");
  EXPECT_TRUE(Status::Ok().ok());
}

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}
Result<int> Quarter(int x) {
  DCR_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Result, PropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParallelFor, RunsEveryItemOnceAndReportsTheLowestFailure) {
  std::vector<std::atomic<int>> hits(1000);
  ASSERT_TRUE(ParallelFor(hits.size(), 4, [&](size_t i) { hits[i]++; return Status::Ok(); }).ok());
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  Status s = ParallelFor(10, 1, [](size_t i) { return i >= 3 ? Corrupt("item " + std::to_string(i)) : Status::Ok(); });
  EXPECT_EQ(s.message(), "item 3");
}

TEST(MappedFile, WritesThroughAndAtomicWriteReplaces) {
  auto dir = std::filesystem::temp_directory_path() / ("dcr_base_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "f.bin").string();
  std::vector<uint8_t> bytes = {1, 2, 3, 4};
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  {
    auto f = MappedFile::Open(path, MappedFile::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    f->mutable_bytes()[2] = 9;
    ASSERT_TRUE(f->Sync().ok());
  }
  auto g = MappedFile::Open(path);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(std::vector<uint8_t>(g->bytes().begin(), g->bytes().end()), (std::vector<uint8_t>{1, 2, 9, 4}));
  EXPECT_EQ(MappedFile::Open((dir / "missing").string()).status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dcr
