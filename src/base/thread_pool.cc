#include "base/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dcr {

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  if (threads <= 0) threads = HardwareThreads();
  size_t workers = std::min<size_t>(static_cast<size_t>(threads), n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t first_failed = n;
  Status first_error;
  auto run = [&] {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= n || failed.load(std::memory_order_relaxed)) return;
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        failed = true;
        if (i < first_failed) first_failed = i, first_error = s;
      }
    }
  };
  if (workers <= 1) {
    run();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < workers; ++t) pool.emplace_back(run);
    for (auto& t : pool) t.join();
  }
  return first_error;
}

int ThreadsPerItem(size_t items, int threads) {
  if (threads <= 0) threads = HardwareThreads();
  return items == 0 || items >= static_cast<size_t>(threads) ? 1 : threads / static_cast<int>(items);
}

namespace {

// Threads that RunConcurrently hands its side task to. They wait for work between calls, so a call
// costs two wake-ups instead of starting and joining a thread (tens of microseconds on some
// machines, as much as decoding a small payload's value section). A helper serves one call at a
// time; concurrent calls take other helpers, started as needed and kept.
class HelperPool {
 public:
  struct Helper {
    std::mutex mu;
    std::condition_variable cv;
    const std::function<Status()>* task = nullptr;  // set by the caller; null again when done
    Status result;
  };

  static HelperPool& Get() {
    static HelperPool* pool = new HelperPool;  // never destroyed: helpers may outlive main()
    return *pool;
  }

  Helper* Acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ != ::getpid()) {  // a forked child has none of the parent's threads
      idle_.clear();
      pid_ = ::getpid();
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
  void Release(Helper* h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pid_ == ::getpid()) idle_.push_back(h);
  }

 private:
  static void Serve(Helper* h) {
    std::unique_lock<std::mutex> lock(h->mu);
    for (;;) {
      h->cv.wait(lock, [h] { return h->task != nullptr; });
      const std::function<Status()>* task = h->task;
      lock.unlock();
      Status result = (*task)();
      lock.lock();
      h->result = std::move(result);
      h->task = nullptr;
      h->cv.notify_all();
    }
  }

  std::mutex mu_;
  std::vector<Helper*> idle_;
  pid_t pid_ = ::getpid();
};

}  // namespace

Status RunConcurrently(const std::function<Status()>& side, const std::function<Status()>& main) {
  HelperPool& pool = HelperPool::Get();
  HelperPool::Helper* h = pool.Acquire();
  {
    std::lock_guard<std::mutex> lock(h->mu);
    h->task = &side;
  }
  h->cv.notify_all();
  Status main_status = main();
  Status side_status;
  {
    std::unique_lock<std::mutex> lock(h->mu);
    h->cv.wait(lock, [h] { return h->task == nullptr; });
    side_status = std::move(h->result);
  }
  pool.Release(h);
  return side_status.ok() ? main_status : side_status;
}

}  // namespace dcr
