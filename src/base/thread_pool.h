// Data-parallel loops. Work items are claimed dynamically, but every item writes only its own
// output slot, so results never depend on the thread count or scheduling.
#pragma once

#include <cstddef>
#include <functional>

#include "base/status.h"

namespace dcr {

// Number of hardware threads (at least 1).
int HardwareThreads();

// Runs fn(i) for i in [0, n) on up to `threads` threads (0 = all hardware threads).
// Returns the error of the lowest-numbered failing item; after a failure, items not yet
// started are skipped. The calling thread is one of the threads; the others are helpers kept
// waiting between calls (as RunConcurrently's), so their thread-local variables persist.
Status ParallelFor(size_t n, int threads, const std::function<Status(size_t)>& fn);

// Threads each of `items` parallel items may use itself when `threads` (0 = all hardware
// threads) are shared among them: 1 unless there are fewer items than threads.
int ThreadsPerItem(size_t items, int threads);

// Runs `side` on another thread while `main` runs on the calling thread, and waits for both.
// Returns side's error if it failed, else main's: the result of running side, then main. The
// other thread is a helper kept waiting between calls (one per concurrent caller); thread-local
// variables named inside `side` are that helper's, not the caller's.
Status RunConcurrently(const std::function<Status()>& side, const std::function<Status()>& main);

}  // namespace dcr
