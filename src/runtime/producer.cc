#include "runtime/producer.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "base/thread_pool.h"
#include "base/timing.h"
#include "protocol/ownership.h"
#include "protocol/payload_plan.h"

namespace dcr {
namespace {

// Encoded payloads waiting for the socket, in sequence order. Bounded: the encoder blocks
// when it is full (backpressure from the network to the diff).
class PayloadQueue {
 public:
  explicit PayloadQueue(size_t capacity) : capacity_(capacity) {}
  // false if the consumer has gone away.
  bool Push(StreamedPayload p) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || cancelled_; });
    if (cancelled_) return false;
    items_.push_back(std::move(p));
    return true;
  }
  void Close(Status status) {
    std::lock_guard lock(mu_);
    closed_ = true;
    status_ = std::move(status);
  }
  void Cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    not_full_.notify_all();
  }
  // Pops without waiting; `done` is set when the queue is closed and drained.
  bool TryPop(StreamedPayload* out, bool* done, Status* status) {
    std::lock_guard lock(mu_);
    *done = items_.empty() && closed_;
    if (*done) *status = status_;
    if (items_.empty()) return false;
    *out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_all();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_;
  std::deque<StreamedPayload> items_;
  size_t capacity_;
  bool closed_ = false, cancelled_ = false;
  Status status_;
};

struct InFlight {
  StreamedPayload payload;
  Clock::time_point sent;
  int resends = 0;
};

// A payload refused as damaged in transit is resent at most this many times.
constexpr int kMaxResends = 8;

// The whole planned payload as overwrites of every element: what a full-checkpoint refit sends
// through the same path (`dcr push --dense`), for comparison.
void EncodeDensePayload(const std::vector<PlannedSegment>& segments, const std::vector<TensorRef>& base,
                        const std::vector<TensorRef>& next, const EncodeOptions& encode, const PayloadIdentity& identity,
                        EncodedPayload* out) {
  *out = EncodedPayload{};
  EncodeOptions o = encode;
  o.context = EncodeOptions::Context::kNever;
  PayloadBuilder builder(o);
  ChangeSet changes;
  for (const PlannedSegment& seg : segments) {
    const TensorRef& b = base[seg.tensor];
    const TensorRef& x = next[seg.tensor];
    const uint32_t w = DTypeWidth(x.dtype());
    const auto old_bytes = b.bytes.subspan(seg.start * w, seg.count * w);
    const auto new_bytes = x.bytes.subspan(seg.start * w, seg.count * w);
    changes.width = w;
    changes.positions.resize(seg.count);
    for (uint64_t i = 0; i < seg.count; ++i) changes.positions[i] = static_cast<uint32_t>(i);
    changes.values.assign(new_bytes.begin(), new_bytes.end());
    builder.AddChanges({seg.tensor, x.dtype(), ValueKind::kOverwrite, seg.start, seg.count}, changes);
    const uint64_t key = TensorKey(x.name());
    Digest128 d = DigestElements(key, new_bytes, w, seg.start);
    d -= DigestElements(key, old_bytes, w, seg.start);
    out->digest_deltas.emplace_back(seg.tensor, d);
    out->changed += seg.count;
  }
  builder.Finish(identity, &out->bytes);
}

}  // namespace

Result<StreamResult> StreamPart(const BaselineState& baseline, const Checkpoint& next, uint64_t transfer,
                                const std::string& root, const StreamOptions& options) {
  const int threads = options.threads > 0 ? options.threads : HardwareThreads();
  const uint32_t producer = baseline.producer();
  const std::vector<uint32_t> owned = OwnedTensors(next.catalog(), producer, baseline.producers());
  // Another model (names, dtypes or shapes) is refused before anything is sent.
  DCR_ASSIGN_OR_RETURN(const std::vector<TensorRef> base, baseline.TensorsByCatalogIndex(next.catalog()));
  const PayloadPlan plan = PlanPayloads(next.tensors(), owned, std::max<uint64_t>(options.chunk_bytes, 8));
  DCR_ASSIGN_OR_RETURN(ZmqSocket socket, ZmqSocket::Connect(root, 1000));

  StreamResult result;
  for (uint32_t t : owned) {
    result.elements += next.tensors()[t].num_elements();
    result.dense_bytes += next.tensors()[t].bytes.size();
  }
  std::vector<Digest128> digests(next.tensors().size());
  for (uint32_t t : owned) digests[t] = baseline.tensor_digests().at(next.tensors()[t].name());

  // Encoder: waves of `threads` payloads, pushed in sequence order.
  PayloadQueue queue(static_cast<size_t>(threads) * 2 + 2);
  std::mutex digest_mu;
  double encode_seconds = 0;
  const auto t_start = Clock::now();
  std::thread encoder([&] {
    const ValueKind kind = options.dense ? ValueKind::kOverwrite : ValueKind::kXor;
    std::vector<EncodedPayload> wave(static_cast<size_t>(threads));
    for (size_t first = 0; first < plan.size(); first += wave.size()) {
      const size_t n = std::min(wave.size(), plan.size() - first);
      auto t0 = Clock::now();
      Status s = ParallelFor(n, threads, [&](size_t i) {
        const PayloadIdentity id{transfer, producer, static_cast<uint32_t>(first + i)};
        if (options.dense) EncodeDensePayload(plan[first + i], base, next.tensors(), options.encode, id, &wave[i]);
        else EncodePlannedPayload(plan[first + i], base, next.tensors(), kind, options.encode, id, &wave[i]);
        return Status::Ok();
      });
      encode_seconds += SecondsSince(t0);
      if (!s.ok()) return queue.Close(s);
      for (size_t i = 0; i < n; ++i) {
        EncodedPayload& e = wave[i];
        {
          std::lock_guard lock(digest_mu);
          for (const auto& [t, d] : e.digest_deltas) digests[t] += d;
        }
        if (e.bytes.empty()) continue;
        StreamedPayload p{static_cast<uint32_t>(first + i), e.changed, std::make_shared<const Frame>(std::move(e.bytes))};
        e.bytes = {};
        if (!queue.Push(std::move(p))) return;
      }
    }
    queue.Close(Status::Ok());
  });
  struct JoinOnExit {
    std::thread& t;
    PayloadQueue& q;
    ~JoinOnExit() {
      q.Cancel();
      t.join();
    }
  } join{encoder, queue};

  uint64_t req = 0;
  std::map<uint32_t, InFlight> inflight;
  auto send = [&](const StreamedPayload& p, bool damage) -> Status {
    Json h{{"type", "payload"}, {"req", ++req}, {"transfer", Hex64(transfer)}, {"producer", producer}, {"seq", p.sequence}};
    result.sent_bytes += p.bytes->size();
    if (!damage) return socket.Send({HeaderFrame(h)}, *p.bytes);
    Frame bad(*p.bytes);
    bad[bad.size() / 2] ^= 0x40;
    return socket.Send({HeaderFrame(h)}, bad);
  };
  auto last_progress = Clock::now();
  bool encoder_done = false;
  Status encoder_status;
  while (!encoder_done || !inflight.empty()) {
    StreamedPayload p;
    while (inflight.size() < options.window && queue.TryPop(&p, &encoder_done, &encoder_status)) {
      const bool damage = options.corrupt_first_send.count(p.sequence) > 0;
      DCR_RETURN_IF_ERROR(send(p, damage).WithContext("streaming to root receiver " + root));
      if (options.duplicate_sends) DCR_RETURN_IF_ERROR(send(p, false).WithContext("streaming to root receiver " + root));
      inflight[p.sequence] = {p, Clock::now()};
      result.payloads.push_back({p.sequence, p.changed, nullptr});  // bytes are held only until acknowledged
      result.wire_bytes += p.bytes->size();
      result.changed += p.changed;
    }
    if (encoder_done && !encoder_status.ok()) return encoder_status;
    Message m;
    DCR_ASSIGN_OR_RETURN(bool got, socket.Receive(&m, inflight.empty() ? 5 : 50));
    if (got && !m.empty()) {
      DCR_ASSIGN_OR_RETURN(Json r, ParseHeader(m[0], root));
      auto it = inflight.find(r.value("seq", 0u));
      if (it != inflight.end() && r.value("transfer", std::string()) == Hex64(transfer)) {
        Status s = ReplyStatus(r, root);
        if (s.ok()) {
          inflight.erase(it);
          last_progress = Clock::now();
        } else if (r.value("resend", false) && ++it->second.resends <= kMaxResends) {
          ++result.resends;  // damaged in transit: the identical bytes again
          DCR_RETURN_IF_ERROR(send(it->second.payload, false));
          it->second.sent = Clock::now();
        } else {
          return s.WithContext("payload " + std::to_string(producer) + "/" + std::to_string(it->first) + " refused");
        }
      }
    }
    const auto now = Clock::now();
    for (auto& [seq, f] : inflight)
      if (now - f.sent > std::chrono::milliseconds(options.ack_timeout_ms)) {
        ++result.resends;
        DCR_RETURN_IF_ERROR(send(f.payload, false));
        f.sent = now;
      }
    if (!inflight.empty() && now - last_progress > std::chrono::milliseconds(options.deadline_ms))
      return IoError("root receiver " + root + " acknowledged nothing for " + std::to_string(options.deadline_ms / 1000) +
                     " s (" + std::to_string(inflight.size()) + " payloads outstanding)");
  }
  result.stream_seconds = SecondsSince(t_start);
  result.encode_seconds = encode_seconds;
  for (uint32_t t : owned) result.target_digests[next.tensors()[t].name()] = digests[t];
  return result;
}

}  // namespace dcr
