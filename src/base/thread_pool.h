// Data-parallel loops. Work items are claimed dynamically, but every item writes only its own
// output slot, so results never depend on the thread count or scheduling.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "base/status.h"

namespace dcr {

// Number of hardware threads (at least 1), counted once per process.
int HardwareThreads();

// Runs fn(i) for i in [0, n) on up to `threads` threads (0 = all hardware threads).
// Returns the error of the lowest-numbered failing item; after a failure, items not yet
// started are skipped. The calling thread is one of the threads; the others are helpers kept
// waiting between calls (as RunConcurrently's), so their thread-local variables persist. Items
// are claimed one at a time, so a helper still waking when the others have claimed every item
// runs none, and the call does not wait for it.
Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn);

// Threads each of `items` parallel items may use itself when `threads` (0 = all hardware
// threads) are shared among them: 1 unless there are fewer items than threads.
int ThreadsPerItem(size_t items, int threads);

// ParallelFor of items that can each use several threads themselves: fn(i, item_threads).
// Items [0, n - n % threads) run one thread each, as ParallelFor's; the last n % threads, which
// would leave threads idle (3 items on 2 threads: 2 item-times, one thread idle in the second),
// then share the threads (ThreadsPerItem). Errors as ParallelFor's: the lowest failing item's;
// after a failure among the first items the last ones do not run.
Status ParallelForItems(size_t n, int threads, const std::function<Status(size_t, int)>& fn);

// Runs `side` on another thread while `main` runs on the calling thread, and waits for both.
// Returns side's error if it failed, else main's: the result of running side, then main. The
// other thread is a helper kept waiting between calls (one per concurrent caller). A helper that
// has not started side by the time main returns (waking a sleeping thread takes up to ~0.1 ms on
// some virtual machines) never does: the calling thread runs side itself after main. So main
// must never wait for side, and side's thread-local variables may be either thread's.
Status RunConcurrently(const std::function<Status()>& side, const std::function<Status()>& main);

// Wakes the helper that this thread's next RunConcurrently, OfferToHelper or ParallelFor would
// hand work to, if it is blocked, so that it polls for that work (for as long as a helper polls
// after a task) instead of being woken when the work comes: a blocked thread takes tens of
// microseconds to wake on some virtual machines. For a caller about to hand work over after a
// few microseconds of its own (a payload's decode, before its checksum and parse). A hint: no
// work is handed over, and the next call works the same if another caller took that helper.
void WakeHelperAhead();
// For tests: how many times a helper has woken from WakeHelperAhead, without a task, so far.
uint64_t HelperWakeupsAheadForTests();

// Like RunConcurrently, except that a side a helper has not started when main returns is dropped,
// not run: for work that main claims (ClaimOnce) and does itself when no helper has come for it.
Status OfferToHelper(const std::function<Status()>& side, const std::function<Status()>& main);

// Waits for another thread's step that has already started: tries `ready` until it is true,
// yielding the CPU every 64 tries (the other thread may share this core).
template <typename F>
void YieldUntil(F&& ready) {
  for (int tries = 0; !ready(); ++tries)
    if (tries % 64 == 63) std::this_thread::yield();
}

// A piece of work that whichever thread claims first does: Claim() is true exactly once.
class ClaimOnce {
 public:
  bool Claim() { return !taken_.exchange(true, std::memory_order_acq_rel); }

 private:
  std::atomic<bool> taken_{false};
};

// Indices [0, n) shared by two threads, one taking them from the front (ascending), the other
// from the back (descending), until they meet: each index is taken exactly once, and what each
// thread makes of its indices lies together, at one end.
class TwoEndedClaims {
 public:
  explicit TwoEndedClaims(uint32_t n) : ends_(n) {}
  // Indices [begin, end) only.
  TwoEndedClaims(uint32_t begin, uint32_t end) : ends_(uint64_t{begin} << 32 | end) {}
  // Indices [0, n) again, none taken: before the threads that take them start.
  void Reset(uint32_t n) { ends_.store(n, std::memory_order_relaxed); }
  // The next index: from the back (descending) if from_back, else from the front (ascending);
  // none when all are taken.
  std::optional<uint32_t> Take(bool from_back) {
    uint64_t ends = ends_.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = ends >> 32, back = ends & 0xffffffffu;
      if (front >= back) return std::nullopt;
      if (ends_.compare_exchange_weak(ends, from_back ? ends - 1 : ends + (uint64_t{1} << 32), std::memory_order_relaxed))
        return static_cast<uint32_t>(from_back ? back - 1 : front);
    }
  }

 private:
  std::atomic<uint64_t> ends_;  // front << 32 | back: [front, back) not taken yet
};

// A step that either of two threads may do, done once by whichever claims it first. Its result
// is read after both threads are joined (or on the thread that ran it).
class ClaimableTask {
 public:
  explicit ClaimableTask(std::function<Status()> fn) : fn_(std::move(fn)) {}
  // Chains `next` (and its chain) after this step, before any thread may run either.
  void Then(ClaimableTask* next) { next_ = next; }
  // Runs each step of the chain that no thread has claimed yet here, in order; true if any ran
  // here. Two threads arriving one after the other so share a chain's steps.
  bool RunIfUnclaimed() {
    bool ran = false;
    for (ClaimableTask* t = this; t != nullptr; t = t->next_)
      if (t->claim_.Claim()) t->result_ = t->fn_(), ran = true;
    return ran;
  }
  // This step's result (not the chain's).
  const Status& result() const { return result_; }

 private:
  std::function<Status()> fn_;
  ClaimOnce claim_;
  Status result_;
  ClaimableTask* next_ = nullptr;
};

// Runs `main` on the calling thread while a helper runs `also` unless some thread has claimed it
// (OfferToHelper); returns main's status. `also` may still be unclaimed afterwards, when no helper
// came in time: the caller runs it then (RunIfUnclaimed).
Status OfferClaimable(ClaimableTask& also, const std::function<Status()>& main);

}  // namespace dcr
