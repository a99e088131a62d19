#include "base/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dcr {

// Counted once: std::thread::hardware_concurrency() reads /sys (7-8 us on a VM), and a receiver
// passing threads = 0 asks at every payload and ParallelFor.
int HardwareThreads() {
  static const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads;
}

int ThreadsPerItem(size_t items, int threads) {
  if (threads <= 0) threads = HardwareThreads();
  return items == 0 || items >= static_cast<size_t>(threads) ? 1 : threads / static_cast<int>(items);
}

namespace {

// Polls `ready` for up to kSpinMicros before the caller blocks: a thread that blocks is woken by
// the kernel, which on a virtual machine whose CPU went idle takes tens of microseconds, as long
// as a small payload's whole section decode. Hand-offs within one operation (a payload's two
// phases, ParallelFor's items ending together) come sooner than that and so cost no wake-up.
template <typename F>
bool SpinUntil(F&& ready) {
  constexpr int64_t kSpinMicros = 50;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - start > std::chrono::microseconds(kSpinMicros)) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

std::atomic<uint64_t> g_wakeups_ahead{0};  // helpers woken by WakeHelperAhead, for tests

// Forks so far in this process's line (a child inherits its parent's count, then adds one): a
// forked child has none of its parent's helper threads. Counted by a pthread_atfork handler
// instead of comparing getpid() at every call, a system call that took ~1 us on a VM, three
// times per two-thread call (Nudge, Acquire, Release), each on the calling thread's path.
std::atomic<uint64_t> g_forks{0};

// Threads that ParallelFor and RunConcurrently hand work to. They wait for work between calls, so
// a call costs at most two wake-ups instead of starting and joining a thread (tens of
// microseconds on some machines, as much as decoding a small payload's value section), and what
// they keep in thread-local buffers is reused instead of page-faulted in again. A helper serves one call at a
// time; concurrent and nested calls take other helpers, started as needed and kept.
class HelperPool {
 public:
  struct Helper {
    std::mutex mu;
    std::condition_variable cv;
    // Set by the caller (under mu). Whoever exchanges it back to null owns the task: the helper
    // to run it, or the caller to withdraw it unstarted.
    std::atomic<const std::function<Status()>*> task{nullptr};
    std::atomic<bool> done{false};
    Status result;  // written by the helper before `done`, read by the caller after it
    bool sleeping = false;  // under mu: the helper is blocked on cv
    bool nudged = false;    // under mu: WakeHelperAhead woke it to poll for a task to come
  };

  static HelperPool& Get() {
    static HelperPool* pool = [] {
      ::pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1, std::memory_order_relaxed); });
      return new HelperPool;  // never destroyed: helpers may outlive main()
    }();
    return *pool;
  }

  Helper* Acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    if (Forked()) {  // a forked child: no helpers yet
      idle_.clear();
      forks_ = g_forks.load(std::memory_order_relaxed);
    }
    if (!idle_.empty()) {
      Helper* h = idle_.back();
      idle_.pop_back();
      return h;
    }
    Helper* h = new Helper;  // lives as long as its thread, which is the process
    std::thread(Serve, h).detach();
    return h;
  }
  // Wakes the helper that Acquire would hand out next, if it is blocked, to poll for a task.
  void Nudge() {
    std::lock_guard<std::mutex> lock(mu_);
    if (Forked() || idle_.empty()) return;
    Helper* h = idle_.back();
    {
      std::lock_guard<std::mutex> helper_lock(h->mu);
      if (!h->sleeping) return;
      h->nudged = true;
    }
    h->cv.notify_all();
  }
  void Release(Helper* h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Forked()) idle_.push_back(h);
  }

 private:
  static void Serve(Helper* h) {
    for (;;) {
      const std::function<Status()>* task = nullptr;
      // Claims the task; a task withdrawn between the load and the exchange is not this helper's.
      auto claim = [&] {
        return h->task.load(std::memory_order_relaxed) != nullptr &&
               (task = h->task.exchange(nullptr, std::memory_order_acquire)) != nullptr;
      };
      if (!SpinUntil(claim)) {
        std::unique_lock<std::mutex> lock(h->mu);
        h->sleeping = true;
        h->cv.wait(lock, [&] { return claim() || h->nudged; });
        h->sleeping = h->nudged = false;
      }
      if (task == nullptr) {  // nudged ahead of a task: poll for it
        g_wakeups_ahead.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      Status result = (*task)();
      h->result = std::move(result);
      {
        std::lock_guard<std::mutex> lock(h->mu);
        h->done.store(true, std::memory_order_release);
      }
      h->cv.notify_all();
    }
  }

  // Whether this process forked since idle_ was last valid (its helpers are the parent's). Under mu_.
  bool Forked() const { return forks_ != g_forks.load(std::memory_order_relaxed); }

  std::mutex mu_;
  std::vector<Helper*> idle_;
  uint64_t forks_ = g_forks.load(std::memory_order_relaxed);  // g_forks when idle_ was last valid
};

// Hands `task` to a helper when constructed; Wait returns its status once it has run.
class HelperCall {
 public:
  explicit HelperCall(const std::function<Status()>* task) : h_(HelperPool::Get().Acquire()) {
    h_->done.store(false, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(h_->mu);
      h_->task.store(task, std::memory_order_release);
    }
    h_->cv.notify_all();
  }
  HelperCall(const HelperCall&) = delete;
  HelperCall& operator=(const HelperCall&) = delete;
  // True if the helper had not started the task, which then never runs; the call is over. False
  // if it had: Wait for it.
  bool Withdraw() {
    if (h_->task.exchange(nullptr, std::memory_order_acq_rel) == nullptr) return false;
    HelperPool::Get().Release(h_);
    return true;
  }
  Status Wait() {
    auto done = [this] { return h_->done.load(std::memory_order_acquire); };
    if (!SpinUntil(done)) {
      std::unique_lock<std::mutex> lock(h_->mu);
      h_->cv.wait(lock, done);
    }
    Status s = std::move(h_->result);
    HelperPool::Get().Release(h_);
    return s;
  }

 private:
  HelperPool::Helper* h_;
};

}  // namespace

Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  if (threads <= 0) threads = HardwareThreads();
  const size_t workers = std::min<size_t>(static_cast<size_t>(threads), n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t first_failed = n;
  Status first_error;
  const std::function<Status()> run = [&] {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= n || failed.load(std::memory_order_relaxed)) return Status::Ok();
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failed = true;
        if (i < first_failed) first_failed = i, first_error = s;
      }
    }
  };
  if (workers > 1) {
    // The calling thread is one of the workers; the others are kept helpers, so thread-local
    // buffers (a decoder's scratch) survive from one call to the next.
    std::vector<std::unique_ptr<HelperCall>> calls;
    for (size_t t = 1; t < workers; ++t) calls.push_back(std::make_unique<HelperCall>(&run));
    (void)run();
    // Every item is claimed; a helper that has not started yet (still waking) has none to run.
    for (auto& c : calls)
      if (!c->Withdraw()) (void)c->Wait();
  } else {
    (void)run();
  }
  return first_error;
}

void WakeHelperAhead() { HelperPool::Get().Nudge(); }
uint64_t HelperWakeupsAheadForTests() { return g_wakeups_ahead.load(); }

Status RunConcurrently(const std::function<Status()>& side, const std::function<Status()>& main) {
  HelperCall call(&side);
  Status main_status = main();
  Status side_status = call.Withdraw() ? side() : call.Wait();
  return side_status.ok() ? main_status : side_status;
}

Status OfferToHelper(const std::function<Status()>& side, const std::function<Status()>& main) {
  HelperCall call(&side);
  Status main_status = main();
  Status side_status = call.Withdraw() ? Status::Ok() : call.Wait();
  return side_status.ok() ? main_status : side_status;
}

Status OfferClaimable(ClaimableTask& also, const std::function<Status()>& main) {
  return OfferToHelper(
      [&] {
        (void)also.RunIfUnclaimed();  // its result is read through also, not returned
        return Status::Ok();
      },
      main);
}

Status ParallelForItems(size_t n, int threads, const std::function<Status(size_t, int)>& fn) {
  if (threads <= 0) threads = HardwareThreads();
  const size_t tail = n % static_cast<size_t>(threads), head = n - tail;
  DCR_RETURN_IF_ERROR(ParallelFor(head, threads, [&](size_t i) { return fn(i, 1); }));
  const int per_item = ThreadsPerItem(tail, threads);
  return ParallelFor(tail, threads, [&](size_t k) { return fn(head + k, per_item); });
}

}  // namespace dcr
