#include <gtest/gtest.h>
#include <sched.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>


#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "base/cache_evict.h"
#include "base/durable_file.h"
#include "base/int_math.h"
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

TEST(FloorShare, IsTheExactFloorOfNTimesIOverDForAnyN) {
  std::mt19937_64 rng(5);
  for (int rep = 0; rep < 100000; ++rep) {
    const uint64_t n = rep % 3 == 0 ? UINT64_MAX - rng() % 1000 : rng() >> (rng() % 64);
    const uint64_t d = 1 + (rep % 2 == 0 ? rng() % 16 : rng() % 0xffffffffull);
    const uint64_t i = rng() % (d + 1);
    const auto want = static_cast<uint64_t>(static_cast<unsigned __int128>(n) * i / d);
    ASSERT_EQ(FloorShare(n, i, d), want) << n << " * " << i << " / " << d;
  }
  EXPECT_EQ(FloorShare(UINT64_MAX, 7, 8), static_cast<uint64_t>(static_cast<unsigned __int128>(UINT64_MAX) * 7 / 8));
  EXPECT_EQ(FloorShare(10, 3, 3), 10u);
  EXPECT_EQ(FloorShare(10, 0, 3), 0u);
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

TEST(RunConcurrently, AForkedChildStartsHelpersOfItsOwn) {
  // The parent's pool holds an idle helper; a forked child has no such thread. Its call must
  // start one: side and main each wait (up to 10 s) for the other to start, so they meet only if
  // side runs on another thread while main runs, not after main on the caller.
  ASSERT_TRUE(RunConcurrently([] { return Status::Ok(); }, [] { return Status::Ok(); }).ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int> started{0};
    auto meet = [&] {
      started++;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < 2)
        if (std::chrono::steady_clock::now() > until) return false;
      return true;
    };
    bool side_met = false, main_met = false;
    std::thread::id side_id;
    const Status s = RunConcurrently([&] { side_id = std::this_thread::get_id(), side_met = meet(); return Status::Ok(); },
                                     [&] { main_met = meet(); return Status::Ok(); });
    ::_exit(s.ok() && side_met && main_met && side_id != std::this_thread::get_id() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's side ran on its calling thread, after main";
}

TEST(RunConcurrently, KeepsItsHelperBetweenCallsAndServesConcurrentCallers) {
  // One caller at a time: the same helper thread every time, not a new thread per call. Main
  // waits for side to start, so that side runs on the helper, not after main on the caller.
  std::thread::id first;
  for (int i = 0; i < 20; ++i) {
    std::thread::id id;
    std::atomic<bool> side_started{false};
    ASSERT_TRUE(RunConcurrently(
                    [&] {
                      id = std::this_thread::get_id();
                      side_started = true;
                      return Status::Ok();
                    },
                    [&] {
                      while (!side_started.load()) std::this_thread::yield();
                      return Status::Ok();
                    })
                    .ok());
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

// Pins the calling thread (and the helpers it starts) to one CPU while alive, so that a helper
// woken by a call rarely starts before the caller's own quick work returns. The tests below also
// let the helpers fall asleep (they poll ~50 us after a task) before each call, so that a call
// must wake one, which takes microseconds on any machine.
void LetHelpersSleep() { std::this_thread::sleep_for(std::chrono::microseconds(300)); }

class OneCpu {
 public:
  OneCpu() {
    CPU_ZERO(&saved_);
    pinned_ = ::sched_getaffinity(0, sizeof(saved_), &saved_) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &saved_)) {
        CPU_SET(c, &one);
        break;
      }
    pinned_ = pinned_ && ::sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~OneCpu() {
    if (pinned_) (void)::sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  bool pinned() const { return pinned_; }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
};

TEST(RunConcurrently, RunsASideNoHelperHasStartedOnTheCallerAfterMain) {
  OneCpu pin;
  ASSERT_TRUE(pin.pinned());
  const std::thread::id caller = std::this_thread::get_id();
  int on_caller = 0;
  for (int i = 0; i < 200; ++i) {
    LetHelpersSleep();
    int runs = 0;
    bool main_done = false, side_after_main = false;
    std::thread::id where;
    ASSERT_TRUE(RunConcurrently(
                    [&] {
                      ++runs;
                      where = std::this_thread::get_id();
                      side_after_main = main_done;
                      return Status::Ok();
                    },
                    [&] {
                      main_done = true;
                      return Status::Ok();
                    })
                    .ok());
    ASSERT_EQ(runs, 1) << "call " << i;  // exactly once, on whichever thread
    if (where == caller) {
      EXPECT_TRUE(side_after_main) << "call " << i;
      ++on_caller;
    }
  }
  // With one CPU, the caller nearly always returns from main before the helper wakes.
  EXPECT_GT(on_caller, 0);
  // A side run by the caller still reports its error first.
  int side_runs = 0;
  EXPECT_EQ(RunConcurrently([&] { return ++side_runs, Corrupt("side"); }, [] { return Corrupt("main"); }).message(), "side");
  EXPECT_EQ(side_runs, 1);
}

TEST(WakeHelperAhead, WakesTheSleepingHelperTheNextCallTakesWithoutGivingItWork) {
  // The helper this thread's calls take (main waits for side, so side runs on it).
  auto helper_of_a_call = [] {
    std::thread::id id;
    std::atomic<bool> started{false};
    int runs = 0;
    EXPECT_TRUE(RunConcurrently([&] { return id = std::this_thread::get_id(), ++runs, started = true, Status::Ok(); },
                                [&] {
                                  while (!started.load()) std::this_thread::yield();
                                  return Status::Ok();
                                })
                    .ok());
    EXPECT_EQ(runs, 1);
    return id;
  };
  const std::thread::id helper = helper_of_a_call();
  for (int i = 0; i < 20; ++i) {
    LetHelpersSleep();
    const uint64_t before = HelperWakeupsAheadForTests();
    // The helper wakes with no task (a nudge that comes while it still polls is not one: nudged
    // again until it wakes, without a time limit, so that a nudge that never wakes it fails by
    // the test's timeout), then serves the next call as before, running its side once.
    while (HelperWakeupsAheadForTests() == before) {
      WakeHelperAhead();
      LetHelpersSleep();
    }
    EXPECT_EQ(helper_of_a_call(), helper) << "nudge " << i;
  }
}

TEST(OfferToHelper, DropsASideNoHelperHasStartedAndClaimsSplitTheWork) {
  OneCpu pin;
  ASSERT_TRUE(pin.pinned());
  int dropped = 0;
  for (int i = 0; i < 200; ++i) {
    LetHelpersSleep();
    // Two pieces of work, each claimed once: the side takes what main has not.
    ClaimOnce a, b;
    std::atomic<int> done_a{0}, done_b{0};
    std::atomic<bool> side_ran{false};
    ASSERT_TRUE(OfferToHelper(
                    [&] {
                      side_ran = true;
                      if (b.Claim()) ++done_b;
                      if (a.Claim()) ++done_a;
                      return Status::Ok();
                    },
                    [&] {
                      if (a.Claim()) ++done_a;
                      if (b.Claim()) ++done_b;
                      return Status::Ok();
                    })
                    .ok());
    ASSERT_EQ(done_a.load(), 1) << "call " << i;
    ASSERT_EQ(done_b.load(), 1) << "call " << i;
    dropped += !side_ran.load();
  }
  EXPECT_GT(dropped, 0);
  // A side that ran and failed reports its error first; one that was dropped reports nothing.
  std::atomic<bool> started{false};
  EXPECT_EQ(OfferToHelper([&] { return started = true, Corrupt("side"); },
                          [&] {
                            while (!started.load()) std::this_thread::yield();
                            return Corrupt("main");
                          })
                .message(),
            "side");
}

// A chain of steps: RunIfUnclaimed runs every step no thread has claimed, in order, each once;
// two threads share the steps; result() is the step's own.
TEST(ClaimableTask, AChainRunsEachStepOnceAndThreadsShareIt) {
  std::atomic<int> ran[3] = {0, 0, 0};
  ClaimableTask c([&] { return ++ran[2], Corrupt("third"); });
  ClaimableTask b([&] { return ++ran[1], Status::Ok(); });
  ClaimableTask a([&] { return ++ran[0], Status::Ok(); });
  a.Then(&b);
  b.Then(&c);
  EXPECT_TRUE(b.RunIfUnclaimed());  // b and c: a chain's tail runs from where it is entered
  EXPECT_EQ(ran[0].load(), 0);
  EXPECT_TRUE(a.RunIfUnclaimed());  // a only: b and c are claimed
  EXPECT_FALSE(a.RunIfUnclaimed());
  for (auto& r : ran) EXPECT_EQ(r.load(), 1);
  EXPECT_TRUE(a.result().ok());
  EXPECT_EQ(c.result().message(), "third");
  for (int i = 0; i < 200; ++i) {
    std::atomic<int> runs[4] = {0, 0, 0, 0};
    std::vector<std::unique_ptr<ClaimableTask>> steps;
    for (int k = 0; k < 4; ++k) steps.push_back(std::make_unique<ClaimableTask>([&runs, k] { return ++runs[k], Status::Ok(); }));
    for (int k = 0; k + 1 < 4; ++k) steps[static_cast<size_t>(k)]->Then(steps[static_cast<size_t>(k) + 1].get());
    ASSERT_TRUE(OfferToHelper([&] { return steps[0]->RunIfUnclaimed(), Status::Ok(); },
                              [&] { return steps[0]->RunIfUnclaimed(), Status::Ok(); })
                    .ok());
    for (auto& r : runs) ASSERT_EQ(r.load(), 1) << "call " << i;
  }
}


TEST(ParallelForItems, TheLastItemsShareTheThreadsThatWouldIdle) {
  for (int threads : {1, 2, 3})
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{7}}) {
      std::vector<std::atomic<int>> runs(n), given(n);
      ASSERT_TRUE(ParallelForItems(n, threads, [&](size_t i, int item_threads) {
                    ++runs[i];
                    given[i] = item_threads;
                    return Status::Ok();
                  }).ok());
      const size_t tail = n % static_cast<size_t>(threads);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(runs[i].load(), 1) << threads << " threads, " << n << " items, item " << i;
        EXPECT_EQ(given[i].load(), i < n - tail ? 1 : ThreadsPerItem(tail, threads))
            << threads << " threads, " << n << " items, item " << i;
      }
    }
  // Errors: the failing item's; a failure among the first items keeps the last from running.
  std::atomic<int> last_ran{0};
  Status s = ParallelForItems(5, 2, [&](size_t i, int) {
    if (i == 4) ++last_ran;
    return i == 1 ? Corrupt("item 1") : Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "item 1");
  EXPECT_EQ(last_ran.load(), 0);
  s = ParallelForItems(5, 2, [&](size_t i, int) { return i == 4 ? Corrupt("item 4") : Status::Ok(); });
  EXPECT_EQ(s.message(), "item 4");
}

TEST(TwoEndedClaims, EachIndexOnceTheFrontAscendingTheBackDescending) {
  TwoEndedClaims one(2, 6);  // [2, 6) alone, taken by one thread from both ends
  EXPECT_EQ(one.Take(false), 2u);
  EXPECT_EQ(one.Take(true), 5u);
  EXPECT_EQ(one.Take(true), 4u);
  EXPECT_EQ(one.Take(false), 3u);
  EXPECT_EQ(one.Take(false), std::nullopt);
  EXPECT_EQ(one.Take(true), std::nullopt);
  EXPECT_EQ(TwoEndedClaims(0).Take(false), std::nullopt);
  // Two threads at once: together every index exactly once, each its own end in order, the
  // front's all below the back's.
  for (int round = 0; round < 200; ++round) {
    constexpr uint32_t kN = 1000;
    TwoEndedClaims claims(kN);
    std::vector<uint32_t> taken[2];
    std::thread back([&] {
      while (auto i = claims.Take(true)) taken[1].push_back(*i);
    });
    while (auto i = claims.Take(false)) taken[0].push_back(*i);
    back.join();
    ASSERT_EQ(taken[0].size() + taken[1].size(), kN) << "round " << round;
    for (size_t k = 0; k < taken[0].size(); ++k) ASSERT_EQ(taken[0][k], k);
    for (size_t k = 0; k < taken[1].size(); ++k) ASSERT_EQ(taken[1][k], kN - 1 - k);
  }
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

// This thread's minor page faults so far.
long ThreadMinorFaults() {
  struct rusage u {};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// Writes one byte into each page of `bytes`; returns the faults that took.
long FaultsOfWritingEveryPage(std::span<uint8_t> bytes, uint8_t value) {
  const long before = ThreadMinorFaults();
  for (size_t i = 0; i < bytes.size(); i += 4096) bytes[i] = value;
  return ThreadMinorFaults() - before;
}

// A prefaulted range takes its stores without a fault per page, keeps its bytes, and its stores
// reach the file; the same stores into a range not prefaulted fault once per page. Ranges not
// on page boundaries and empty ones are taken. The file is written a page per write() call:
// written in larger calls, a file system may cache it in multi-page folios, which one fault
// maps whole, and then there would be no per-page faults to spare.
TEST(MappedFile, PrefaultForWriteSparesAFaultPerPage) {
  constexpr size_t kPages = 256;
  auto dir = std::filesystem::temp_directory_path() / ("dcr_prefault_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.bin").string();
  std::vector<uint8_t> want(2 * kPages * 4096 + 100);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<uint8_t>(i * 7 + 1);
  {
    const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    for (size_t at = 0; at < want.size(); at += 4096) {
      const size_t n = std::min<size_t>(4096, want.size() - at);
      ASSERT_EQ(::write(fd, want.data() + at, n), static_cast<ssize_t>(n));
    }
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  {
    auto f = MappedFile::Open(path, MappedFile::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    const std::span<uint8_t> all = f->mutable_bytes();
    const std::span<uint8_t> first = all.subspan(0, kPages * 4096), second = all.subspan(kPages * 4096);
    // Read first, as `dcr apply` digests its target before writing: the pages are then mapped
    // read-only, and each one's first store faults to make it writable.
    EXPECT_TRUE(std::equal(all.begin(), all.end(), want.begin(), want.end()));
    EXPECT_TRUE(PrefaultForWrite({}));
    if (!PrefaultForWrite(first.subspan(10, first.size() - 20))) {
      std::filesystem::remove_all(dir);
      GTEST_SKIP() << "this kernel does not prefault for writing (MADV_POPULATE_WRITE, Linux 5.14)";
    }
    EXPECT_TRUE(std::equal(all.begin(), all.end(), want.begin(), want.end())) << "prefaulting changed bytes";
    const long prefaulted = FaultsOfWritingEveryPage(first, 0xaa), not_prefaulted = FaultsOfWritingEveryPage(second, 0xbb);
    if (not_prefaulted < static_cast<long>(kPages) / 2) {
      std::filesystem::remove_all(dir);
      GTEST_SKIP() << "this file system mapped several pages per write fault (" << not_prefaulted << " for " << kPages
                   << " pages): nothing to compare";
    }
    EXPECT_LT(prefaulted, static_cast<long>(kPages / 8)) << "against " << not_prefaulted << " without";
    for (size_t i = 0; i < all.size(); i += 4096) want[i] = i < first.size() ? 0xaa : 0xbb;
    ASSERT_TRUE(f->Sync().ok());
  }
  auto g = MappedFile::Open(path);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(std::equal(g->bytes().begin(), g->bytes().end(), want.begin(), want.end()));
  std::filesystem::remove_all(dir);
}

// Eviction writes dirty lines back: the bytes read afterwards are the ones written before, for
// a heap buffer whose ends are not line-aligned and for a read-only file mapping.
TEST(EvictFromCaches, KeepsContentsOfDirtyAndReadOnlyMemory) {
  std::vector<uint8_t> heap(100003);
  for (size_t i = 0; i < heap.size(); ++i) heap[i] = static_cast<uint8_t>(i * 131 + 7);
  const std::vector<uint8_t> want = heap;
#if defined(__x86_64__) || defined(__aarch64__)
  EXPECT_TRUE(EvictFromCaches(std::span<const uint8_t>(heap).subspan(3, heap.size() - 5)));
#endif
  EXPECT_EQ(heap, want);
  EXPECT_TRUE(EvictFromCaches({}));

  auto dir = std::filesystem::temp_directory_path() / ("dcr_evict_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.bin").string();
  ASSERT_TRUE(WriteFileAtomic(path, want).ok());
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  (void)EvictFromCaches(f->bytes());
  EXPECT_TRUE(std::equal(f->bytes().begin(), f->bytes().end(), want.begin(), want.end()));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dcr
