// The encoding half of a producer (DESIGN.md §3): diffs the owned tensors of NEW against the
// baseline and encodes the planned payloads on a pool of threads, in waves of `threads`
// payloads, on a thread of its own. Payloads come out in sequence order through a bounded queue
// (at most 2·threads + 2 wait), so a slow consumer (a socket, a store upload) holds the diff
// back instead of letting memory grow. Payloads without changes are skipped (their sequence
// numbers are not used). Output is byte-identical for every thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "codec/payload_codec.h"
#include "format/checkpoint.h"
#include "protocol/payload_plan.h"
#include "protocol/state_digest.h"
#include "transport/zmq_socket.h"

namespace dcr {

struct StreamedPayload {
  uint32_t sequence = 0;
  uint64_t changed = 0;
  std::shared_ptr<const Frame> bytes;
};

struct EncoderOptions {
  int threads = 1;
  EncodeOptions encode;
  bool dense = false;  // every element as an overwrite: a full-checkpoint refit through the same path
};

class PayloadEncoder {
 public:
  // `base` and `next` are indexed by catalog index (base: BaselineState::TensorsByCatalogIndex);
  // `digests` holds the base state digest of every tensor the plan touches, by catalog index.
  // Everything referenced must outlive the encoder. Starts encoding at once.
  PayloadEncoder(const PayloadPlan& plan, const std::vector<TensorRef>& base, const std::vector<TensorRef>& next,
                 uint64_t transfer, uint32_t producer, const EncoderOptions& options, std::vector<Digest128> digests);
  // Stops the encoder (a consumer that gives up early) and joins it.
  ~PayloadEncoder();
  PayloadEncoder(const PayloadEncoder&) = delete;
  PayloadEncoder& operator=(const PayloadEncoder&) = delete;

  // Without waiting: true and the next payload, or false; `done` is set once every payload has
  // been taken (then `status` is the encoder's result).
  bool TryPop(StreamedPayload* out, bool* done, Status* status);
  // Waits for the next payload: true and the payload, or false when done (`status` as above).
  bool Pop(StreamedPayload* out, Status* status);

  // Valid once done: the target state digests (base + every payload's digest deltas) by catalog
  // index, and the wall time spent in encoder waves.
  const std::vector<Digest128>& digests() const { return digests_; }
  double encode_seconds() const { return encode_seconds_; }

 private:
  void Run(const PayloadPlan& plan, const std::vector<TensorRef>& base, const std::vector<TensorRef>& next,
           uint64_t transfer, uint32_t producer, const EncoderOptions& options);
  bool Push(StreamedPayload p);
  void Close(Status status);

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<StreamedPayload> items_;
  size_t capacity_;
  bool closed_ = false, cancelled_ = false;
  Status status_;
  std::vector<Digest128> digests_;
  double encode_seconds_ = 0;
  std::thread thread_;
};

}  // namespace dcr
