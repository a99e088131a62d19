// A store receiver's registration (docs/store.md §Objects): keeps receivers/<name>.json
// current, rewritten on every change and every heartbeat interval by one thread of its own, so
// writes of the record never race and the push sees a fresh heartbeat while the receiver is busy
// applying. A failed write is logged and retried at the next beat.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "runtime/store_records.h"
#include "store/object_store.h"

namespace dcr {

class Heartbeat {
 public:
  // Starts writing `reg` (heartbeat_ms is set at each write) at once.
  Heartbeat(ObjectStore& store, Registration reg, int interval_ms, FILE* log);
  // Stops the thread; the registration stays in the store (it pins the chain the replica needs).
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // The replica's committed version and pending transfer changed: written without waiting for
  // the next beat.
  void Update(const Version& v, uint64_t pending);

 private:
  void Run();

  ObjectStore& store_;
  std::mutex mu_;
  std::condition_variable cv_;
  Registration reg_;
  int interval_ms_;
  FILE* log_;
  bool stop_ = false, dirty_ = false;
  std::thread thread_;
};

}  // namespace dcr
