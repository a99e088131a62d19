#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

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

TEST(ParallelFor, KeepsItsThreadsAndTheirThreadLocalsBetweenCallsAndNests) {
  // Each call's items meet, so every call really runs on 3 threads. A thread-local counter counts
  // the calls each thread took part in: with kept helpers the same threads serve every call, so
  // the counts of the last call reach the number of calls instead of restarting at 1.
  constexpr int kCalls = 10;
  std::vector<int> seen(3);
  for (int call = 0; call < kCalls; ++call) {
    std::atomic<int> started{0};
    ASSERT_TRUE(ParallelFor(3, 3, [&](size_t i) {
                  thread_local int calls_here = 0;
                  seen[i] = ++calls_here;
                  started++;
                  while (started.load() < 3) std::this_thread::yield();
                  return Status::Ok();
                }).ok());
  }
  for (int v : seen) EXPECT_EQ(v, kCalls);
  // Items may themselves run ParallelFor; the inner calls take further helpers.
  std::vector<std::atomic<int>> hits(4 * 50);
  ASSERT_TRUE(ParallelFor(4, 4, [&](size_t outer) {
                return ParallelFor(50, 3, [&](size_t inner) { hits[outer * 50 + inner]++; return Status::Ok(); });
              }).ok());
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_EQ(ParallelFor(6, 3, [](size_t i) { return i == 4 ? Corrupt("inner " + std::to_string(i)) : Status::Ok(); }).message(),
            "inner 4");
}

TEST(ThreadsPerItem, SharesThreadsOnlyWhenItemsAreFewer) {
  EXPECT_EQ(ThreadsPerItem(1, 4), 4);
  EXPECT_EQ(ThreadsPerItem(3, 4), 1);
  EXPECT_EQ(ThreadsPerItem(2, 5), 2);
  EXPECT_EQ(ThreadsPerItem(8, 4), 1);
  EXPECT_EQ(ThreadsPerItem(0, 4), 1);
  EXPECT_EQ(ThreadsPerItem(1, 0), HardwareThreads());
}

TEST(RunConcurrently, RunsBothAtOnceAndReportsTheSideErrorFirst) {
  // Each waits for the other to start, so this finishes only if they run at the same time.
  std::atomic<int> started{0};
  auto meet = [&] {
    started++;
    while (started.load() < 2) std::this_thread::yield();
  };
  std::thread::id side_id, main_id;
  ASSERT_TRUE(RunConcurrently([&] { side_id = std::this_thread::get_id(); meet(); return Status::Ok(); },
                              [&] { main_id = std::this_thread::get_id(); meet(); return Status::Ok(); })
                  .ok());
  EXPECT_NE(side_id, main_id);
  EXPECT_EQ(main_id, std::this_thread::get_id());
  bool main_ran = false;
  Status s = RunConcurrently([] { return Corrupt("side"); }, [&] { main_ran = true; return Corrupt("main"); });
  EXPECT_EQ(s.message(), "side");
  EXPECT_TRUE(main_ran);
  EXPECT_EQ(RunConcurrently([] { return Status::Ok(); }, [] { return Corrupt("main"); }).message(), "main");
}

TEST(RunConcurrently, KeepsItsHelperBetweenCallsAndServesConcurrentCallers) {
  // One caller at a time: the same helper thread every time, not a new thread per call.
  std::thread::id first;
  for (int i = 0; i < 20; ++i) {
    std::thread::id id;
    ASSERT_TRUE(RunConcurrently([&] { id = std::this_thread::get_id(); return Status::Ok(); }, [] { return Status::Ok(); }).ok());
    if (i == 0) first = id;
    EXPECT_EQ(id, first) << "call " << i;
  }
  // Four callers at once, each with its own results.
  std::vector<std::atomic<int>> sums(4);
  ASSERT_TRUE(ParallelFor(4, 4, [&](size_t c) {
                for (int i = 0; i < 200; ++i) {
                  int side = 0, main = 0;
                  Status s = RunConcurrently([&] { side = i; return Status::Ok(); }, [&] { main = i; return Status::Ok(); });
                  if (!s.ok() || side != i || main != i) return Corrupt("caller " + std::to_string(c) + " call " + std::to_string(i));
                  sums[c] += side;
                }
                return Status::Ok();
              }).ok());
  for (auto& v : sums) EXPECT_EQ(v.load(), 199 * 200 / 2);
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
