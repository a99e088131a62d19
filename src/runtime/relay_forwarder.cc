#include "runtime/relay_forwarder.h"

#include "runtime/messages.h"
#include "runtime/relay_tree.h"

namespace dcr {

void RelayForwarder::SetTree(uint64_t transfer, std::vector<std::string> receivers, size_t me, size_t arity) {
  if (transfer != transfer_) Clear();
  transfer_ = transfer;
  receivers_ = std::move(receivers);
  me_ = me;
  arity_ = arity;
}

void RelayForwarder::Clear() {
  for (auto& [endpoint, child] : children_) child->unacked.clear();
  forwarded_bytes_ = reforwarded_bytes_ = 0;
}

void RelayForwarder::Forward(const PayloadKey& key, const std::shared_ptr<const Frame>& bytes) {
  const size_t n = receivers_.size();
  if (n == 0) return;
  for (size_t c : TreeChildren(n, arity_, TreeRoot(key.first, n), me_)) {
    const std::string& endpoint = receivers_[c];
    auto it = children_.find(endpoint);
    if (it == children_.end()) {
      // Queued until connected: the first forward to a new child is not lost to connection set-up.
      auto socket = ZmqSocket::Connect(endpoint, /*send_timeout_ms=*/0, /*queue_until_connected=*/true);
      if (!socket.ok()) {
        log_("cannot reach child " + endpoint + ": " + socket.status().ToString());
        continue;
      }
      it = children_.emplace(endpoint, std::make_unique<Child>(Child{std::move(*socket), {}})).first;
    }
    Pending& p = it->second->unacked[key];
    p.bytes = bytes;
    Send(*it->second, key, p);
  }
}

void RelayForwarder::Send(Child& child, const PayloadKey& key, Pending& p) {
  Json h{{"type", "payload"}, {"req", ++next_req_}, {"transfer", Hex64(transfer_)}, {"producer", key.first}, {"seq", key.second}};
  p.sent = Clock::now();
  ++p.attempts;
  if (child.socket.Send({HeaderFrame(h)}, *p.bytes).ok()) (p.attempts == 1 ? forwarded_bytes_ : reforwarded_bytes_) += p.bytes->size();
}

std::vector<const ZmqSocket*> RelayForwarder::sockets() const {
  std::vector<const ZmqSocket*> out;
  for (const auto& [endpoint, child] : children_) out.push_back(&child->socket);
  return out;
}

Status RelayForwarder::Drain(size_t i) {
  auto it = children_.begin();
  std::advance(it, static_cast<std::ptrdiff_t>(i));
  Child& child = *it->second;
  Message m;
  for (;;) {
    DCR_ASSIGN_OR_RETURN(bool got, child.socket.Receive(&m, 0));
    if (!got) return Status::Ok();
    try {
      HandleReply(child, m);
    } catch (const Json::exception& e) {  // a field of the wrong type: ignored, never fatal
      log_("malformed reply from child " + child.socket.endpoint() + ": " + e.what());
    }
  }
}

void RelayForwarder::HandleReply(Child& child, const Message& m) {
  if (m.empty()) return;
  auto h = ParseHeader(m[0], child.socket.endpoint());
  if (!h.ok()) return;
  const PayloadKey key{(*h).value("producer", 0u), (*h).value("seq", 0u)};
  auto it = child.unacked.find(key);
  // A late reply about the same (producer, sequence) of an earlier transfer (delivered to a
  // child that restarted) must not settle this transfer's forward.
  if (it == child.unacked.end() || (*h).value("transfer", std::string()) != Hex64(transfer_)) return;
  Status s = ReplyStatus(*h, child.socket.endpoint());
  if (s.ok()) {
    child.unacked.erase(it);
  } else if ((*h).value("resend", false) && it->second.attempts < kMaxForwardResends) {
    Send(child, key, it->second);  // damaged in transit: the identical bytes again
  } else {
    log_("child refused payload " + std::to_string(key.first) + "/" + std::to_string(key.second) + ": " + s.ToString());
    child.unacked.erase(it);  // the child votes no; the coordinator aborts
  }
}

void RelayForwarder::ResendOverdue() {
  const auto now = Clock::now();
  for (auto& [endpoint, child] : children_)
    for (auto& [key, p] : child->unacked)
      if (now - p.sent > std::chrono::milliseconds(retry_ms_)) Send(*child, key, p);
}

}  // namespace dcr
