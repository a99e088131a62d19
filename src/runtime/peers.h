// Request/reply with a set of peers (receivers or the coordinator) over DEALER sockets: send a
// request to each, gather the replies whose "req" matches, each wait bounded by a deadline.
// Replies to older requests (a peer answering late) are discarded.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/messages.h"
#include "transport/zmq_socket.h"

namespace dcr {

class PeerSet {
 public:
  static Result<PeerSet> Connect(const std::vector<std::string>& endpoints);

  size_t size() const { return sockets_.size(); }
  const std::string& endpoint(size_t i) const { return sockets_[i].endpoint(); }

  // Sends requests[i] (its "req" is filled in) to peer i for every i with a request; returns
  // replies[i] for those, nullopt where the peer did not answer before the deadline or could
  // not be sent to.
  std::vector<std::optional<Json>> Call(std::vector<std::optional<Json>> requests, int timeout_ms);
  // The same request to every peer.
  std::vector<std::optional<Json>> CallAll(const Json& request, int timeout_ms);

 private:
  std::vector<ZmqSocket> sockets_;
  uint64_t next_req_ = 0;
};

}  // namespace dcr
