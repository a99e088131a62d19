// ZeroMQ over TCP, bytes only (DESIGN.md §6): transports move opaque frames and know nothing
// of deltas. A message is a list of frames. Servers bind a ROUTER socket; clients connect
// DEALER sockets, so one server talks to many clients and replies find their way back through
// the routing frame that ROUTER prepends to everything it receives.
//
// Contract: sends never block longer than the socket's send timeout (a peer that is down or not
// reading makes Send fail with kIoError once the queue is full); receives wait at most the
// given timeout. Sockets close with linger 0 unless SetLinger says otherwise: a process exits
// without waiting for peers, except for what ShutdownTransport flushes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dcr {

using Frame = std::vector<uint8_t>;
using Message = std::vector<Frame>;

inline Frame FrameOf(std::string_view s) { return Frame(s.begin(), s.end()); }
inline std::string_view FrameText(const Frame& f) { return {reinterpret_cast<const char*>(f.data()), f.size()}; }

class ZmqSocket {
 public:
  enum class Type { kRouter, kDealer };

  // A ROUTER bound to `endpoint` ("tcp://127.0.0.1:7000"). kIoError naming the endpoint if it
  // is malformed or in use.
  static Result<ZmqSocket> Bind(const std::string& endpoint);
  // A DEALER connected to `endpoint`; the connection is made (and remade) in the background.
  // By default a send waits up to send_timeout_ms for a live connection and then fails, so
  // nothing piles up for a peer that is down. With `queue_until_connected`, up to 64 messages
  // queue while the connection is being made (no message is lost to connection set-up; a send
  // beyond that fails after send_timeout_ms).
  static Result<ZmqSocket> Connect(const std::string& endpoint, int send_timeout_ms = 5000,
                                   bool queue_until_connected = false);

  ZmqSocket(ZmqSocket&& o) noexcept : socket_(o.socket_), endpoint_(std::move(o.endpoint_)) { o.socket_ = nullptr; }
  ZmqSocket& operator=(ZmqSocket&& o) noexcept;
  ~ZmqSocket();

  Status Send(const Message& message);
  // Sends the frames of `head`, then `tail` as one last frame, without copying `tail` into a
  // Message first (payload bytes).
  Status Send(const Message& head, std::span<const uint8_t> tail);
  // true: a message arrived in `out`; false: none within timeout_ms (0 = poll; -1 = forever).
  Result<bool> Receive(Message* out, int timeout_ms);

  // How long queued messages may still be delivered after the socket is closed (default 0:
  // dropped). Only ShutdownTransport waits for them.
  Status SetLinger(int ms);

  const std::string& endpoint() const { return endpoint_; }
  void* raw() const { return socket_; }

 private:
  ZmqSocket(void* socket, std::string endpoint) : socket_(socket), endpoint_(std::move(endpoint)) {}
  void* socket_ = nullptr;
  std::string endpoint_;
};

// Ends the process's use of ZeroMQ: waits until every message still queued on a closed socket
// with linger is delivered or its linger ran out. Every socket must be closed first; a process
// calls it once, just before it exits, so that its last messages are not lost.
void ShutdownTransport();

// Waits up to timeout_ms until at least one socket has a message to read; returns one flag per
// socket. An interrupted wait (a signal) returns all-false, so callers can check their stop flag.
Result<std::vector<bool>> PollReadable(const std::vector<const ZmqSocket*>& sockets, int timeout_ms);

}  // namespace dcr
