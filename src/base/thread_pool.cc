#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
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

Status RunConcurrently(const std::function<Status()>& side, const std::function<Status()>& main) {
  Status side_status;
  std::thread t([&] { side_status = side(); });
  Status main_status = main();
  t.join();
  return side_status.ok() ? main_status : side_status;
}

}  // namespace dcr
