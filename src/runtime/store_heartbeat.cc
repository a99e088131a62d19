#include "runtime/store_heartbeat.h"

namespace dcr {

Heartbeat::Heartbeat(ObjectStore& store, Registration reg, int interval_ms, FILE* log)
    : store_(store), reg_(std::move(reg)), interval_ms_(interval_ms), log_(log) {
  thread_ = std::thread([this] { Run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::Update(const Version& v, uint64_t pending) {
  {
    std::lock_guard lock(mu_);
    reg_.version = v;
    reg_.pending = pending;
    dirty_ = true;
  }
  cv_.notify_all();
}

void Heartbeat::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    Registration r = reg_;
    dirty_ = false;
    lock.unlock();
    r.heartbeat_ms = UnixMillis();
    if (Status s = PutJson(store_, RegistrationKey(r.receiver), ToJson(r)); !s.ok()) {
      std::fprintf(log_, "dcr serve [store]: heartbeat not written (retrying): %s\n", s.ToString().c_str());
      std::fflush(log_);
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [&] { return stop_ || dirty_; });
  }
}

}  // namespace dcr
