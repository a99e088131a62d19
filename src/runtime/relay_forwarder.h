// A receiver's forwarding to its children in the relay tree (DESIGN.md §6): every payload it
// has staged goes to its children in the producer's tree (runtime/relay_tree.h), and is resent
// with identical bytes until each child ACKs it: on a child's "damaged in transit" refusal (at
// most kMaxForwardResends attempts) and when no ACK came within the retry interval. Any other
// refusal is logged and dropped: that child votes no and the transfer aborts.
//
// Child connections persist across transfers. Replies are matched by (producer, sequence) and
// transfer, so a late reply about an older transfer never settles a current forward.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/timing.h"
#include "transport/zmq_socket.h"

namespace dcr {

inline constexpr int kMaxForwardResends = 8;

class RelayForwarder {
 public:
  using PayloadKey = std::pair<uint32_t, uint32_t>;  // (producer, sequence)

  RelayForwarder(int retry_ms, std::function<void(const std::string&)> log) : retry_ms_(retry_ms), log_(std::move(log)) {}

  // The tree of the current transfer (from its prepare): the receiver list and this receiver's
  // index in it. Drops every forward not yet ACKed (they belong to an earlier transfer).
  void SetTree(uint64_t transfer, std::vector<std::string> receivers, size_t me, size_t arity);
  // Drops every forward not yet ACKed (the transfer ended) and resets the counters.
  void Clear();

  void Forward(const PayloadKey& key, const std::shared_ptr<const Frame>& bytes);

  // The child sockets, for polling; Drain(i) handles the replies waiting on sockets()[i].
  std::vector<const ZmqSocket*> sockets() const;
  Status Drain(size_t i);
  void ResendOverdue();

  uint64_t forwarded_bytes() const { return forwarded_bytes_; }      // first copies
  uint64_t reforwarded_bytes() const { return reforwarded_bytes_; }  // resends

 private:
  struct Pending {
    std::shared_ptr<const Frame> bytes;
    Clock::time_point sent;
    int attempts = 0;
  };
  struct Child {
    ZmqSocket socket;
    std::map<PayloadKey, Pending> unacked;
  };

  void Send(Child& child, const PayloadKey& key, Pending& p);
  void HandleReply(Child& child, const Message& m);

  int retry_ms_;
  std::function<void(const std::string&)> log_;
  uint64_t transfer_ = 0;
  std::vector<std::string> receivers_;
  size_t me_ = 0, arity_ = 2;
  std::map<std::string, std::unique_ptr<Child>> children_;  // by endpoint
  uint64_t next_req_ = 0, forwarded_bytes_ = 0, reforwarded_bytes_ = 0;
};

}  // namespace dcr
