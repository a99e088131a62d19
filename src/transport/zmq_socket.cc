#include "transport/zmq_socket.h"

#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace dcr {
namespace {

// One context per process, never destroyed: zmq_ctx_term would wait for sockets that other
// threads may still hold at exit.
void* Context() {
  static void* ctx = [] {
    void* c = zmq_ctx_new();
    DCR_CHECK(c != nullptr);
    return c;
  }();
  return ctx;
}

Status ZmqError(const std::string& what) { return IoError(what + ": " + zmq_strerror(zmq_errno())); }

Status SetInt(void* s, int option, int value, const std::string& endpoint) {
  if (zmq_setsockopt(s, option, &value, sizeof(value)) != 0) return ZmqError("zmq_setsockopt on " + endpoint);
  return Status::Ok();
}

Status SendFrame(void* s, const void* data, size_t n, bool more, const std::string& endpoint) {
  for (;;) {
    if (zmq_send(s, data, n, more ? ZMQ_SNDMORE : 0) >= 0) return Status::Ok();
    if (zmq_errno() == EINTR) continue;
    if (zmq_errno() == EAGAIN) return IoError("send to " + endpoint + " timed out (peer unreachable or not reading)");
    return ZmqError("send to " + endpoint);
  }
}

}  // namespace

ZmqSocket& ZmqSocket::operator=(ZmqSocket&& o) noexcept {
  if (this != &o) {
    if (socket_) zmq_close(socket_);
    socket_ = o.socket_;
    endpoint_ = std::move(o.endpoint_);
    o.socket_ = nullptr;
  }
  return *this;
}

ZmqSocket::~ZmqSocket() {
  if (socket_) zmq_close(socket_);
}

Result<ZmqSocket> ZmqSocket::Bind(const std::string& endpoint) {
  void* s = zmq_socket(Context(), ZMQ_ROUTER);
  if (!s) return ZmqError("zmq_socket");
  ZmqSocket socket(s, endpoint);
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_LINGER, 0, endpoint));
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_SNDTIMEO, 5000, endpoint));
  // A reply to a client that vanished is dropped instead of blocking the server.
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_ROUTER_MANDATORY, 0, endpoint));
  if (zmq_bind(s, endpoint.c_str()) != 0) return ZmqError("cannot listen on " + endpoint);
  return socket;
}

Result<ZmqSocket> ZmqSocket::Connect(const std::string& endpoint, int send_timeout_ms, bool queue_until_connected) {
  void* s = zmq_socket(Context(), ZMQ_DEALER);
  if (!s) return ZmqError("zmq_socket");
  ZmqSocket socket(s, endpoint);
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_LINGER, 0, endpoint));
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_SNDTIMEO, send_timeout_ms, endpoint));
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_IMMEDIATE, queue_until_connected ? 0 : 1, endpoint));
  if (queue_until_connected) DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_SNDHWM, 64, endpoint));
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_RECONNECT_IVL, 50, endpoint));
  DCR_RETURN_IF_ERROR(SetInt(s, ZMQ_RECONNECT_IVL_MAX, 1000, endpoint));
  if (zmq_connect(s, endpoint.c_str()) != 0) return ZmqError("cannot connect to " + endpoint);
  return socket;
}

Status ZmqSocket::SetLinger(int ms) { return SetInt(socket_, ZMQ_LINGER, ms, endpoint_); }

void ShutdownTransport() { zmq_ctx_term(Context()); }

Status ZmqSocket::Send(const Message& message) { return Send(message, {}); }

Status ZmqSocket::Send(const Message& head, std::span<const uint8_t> tail) {
  const bool has_tail = tail.data() != nullptr;
  DCR_CHECK(!head.empty() || has_tail);
  for (size_t i = 0; i < head.size(); ++i)
    DCR_RETURN_IF_ERROR(SendFrame(socket_, head[i].data(), head[i].size(), has_tail || i + 1 < head.size(), endpoint_));
  if (has_tail) DCR_RETURN_IF_ERROR(SendFrame(socket_, tail.data(), tail.size(), false, endpoint_));
  return Status::Ok();
}

Result<bool> ZmqSocket::Receive(Message* out, int timeout_ms) {
  out->clear();
  zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
  const int rc = zmq_poll(&item, 1, timeout_ms);
  if (rc < 0) {
    if (zmq_errno() == EINTR) return false;
    return ZmqError("poll on " + endpoint_);
  }
  if (rc == 0) return false;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket_, 0) < 0) {
      const int err = zmq_errno();
      zmq_msg_close(&msg);
      if (err == EINTR) continue;
      return ZmqError("receive on " + endpoint_);
    }
    const auto* p = static_cast<const uint8_t*>(zmq_msg_data(&msg));
    out->emplace_back(p, p + zmq_msg_size(&msg));
    const bool more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
    if (!more) return true;
  }
}

Result<std::vector<bool>> PollReadable(const std::vector<const ZmqSocket*>& sockets, int timeout_ms) {
  std::vector<zmq_pollitem_t> items;
  for (const ZmqSocket* s : sockets) items.push_back({s->raw(), 0, ZMQ_POLLIN, 0});
  std::vector<bool> ready(sockets.size(), false);
  const int rc = zmq_poll(items.data(), static_cast<int>(items.size()), timeout_ms);
  if (rc < 0) {
    if (zmq_errno() == EINTR) return ready;
    return ZmqError("zmq_poll");
  }
  for (size_t i = 0; i < items.size(); ++i) ready[i] = (items[i].revents & ZMQ_POLLIN) != 0;
  return ready;
}

}  // namespace dcr
