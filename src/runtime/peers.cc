#include "runtime/peers.h"

#include "base/timing.h"

namespace dcr {

Result<PeerSet> PeerSet::Connect(const std::vector<std::string>& endpoints) {
  PeerSet set;
  for (const std::string& e : endpoints) {
    DCR_ASSIGN_OR_RETURN(ZmqSocket s, ZmqSocket::Connect(e, /*send_timeout_ms=*/0));
    set.sockets_.push_back(std::move(s));
  }
  return set;
}

std::vector<std::optional<Json>> PeerSet::Call(std::vector<std::optional<Json>> requests, int timeout_ms) {
  const size_t n = sockets_.size();
  std::vector<std::optional<Json>> replies(n);
  std::vector<uint64_t> reqs(n, 0);
  std::vector<bool> waiting(n, false);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  // A peer that is not connected yet refuses the send (ZMQ_IMMEDIATE); retry until the deadline.
  std::vector<bool> sent(n, false);
  size_t outstanding = 0;
  for (size_t i = 0; i < n; ++i)
    if (requests[i]) {
      reqs[i] = ++next_req_;
      (*requests[i])["req"] = reqs[i];
      waiting[i] = true;
      ++outstanding;
    }
  while (outstanding > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < n; ++i)
      if (waiting[i] && !sent[i]) sent[i] = sockets_[i].Send({HeaderFrame(*requests[i])}).ok();
    std::vector<const ZmqSocket*> polled;
    for (const ZmqSocket& s : sockets_) polled.push_back(&s);
    auto ready = PollReadable(polled, 20);
    if (!ready.ok()) break;
    for (size_t i = 0; i < n; ++i) {
      if (!(*ready)[i]) continue;
      Message m;
      for (;;) {
        auto got = sockets_[i].Receive(&m, 0);
        if (!got.ok() || !*got) break;
        if (m.empty()) continue;
        auto h = ParseHeader(m[0], sockets_[i].endpoint());
        if (!h.ok() || !waiting[i] || (*h).value("req", uint64_t{0}) != reqs[i]) continue;
        replies[i] = std::move(*h);
        waiting[i] = false;
        --outstanding;
      }
    }
  }
  return replies;
}

std::vector<std::optional<Json>> PeerSet::CallAll(const Json& request, int timeout_ms) {
  return Call(std::vector<std::optional<Json>>(sockets_.size(), request), timeout_ms);
}

}  // namespace dcr
