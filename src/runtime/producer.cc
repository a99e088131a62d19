#include "runtime/producer.h"

#include "base/thread_pool.h"
#include "base/timing.h"
#include "protocol/ownership.h"
#include "protocol/payload_plan.h"
#include "runtime/payload_encoder.h"

namespace dcr {
namespace {

struct InFlight {
  StreamedPayload payload;
  Clock::time_point sent;
  int resends = 0;
};

// A payload refused as damaged in transit is resent at most this many times.
constexpr int kMaxResends = 8;

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

  // Encoding runs ahead of the socket; the encoder's queue bounds how far.
  const auto t_start = Clock::now();
  PayloadEncoder encoder(plan, base, next.tensors(), transfer, producer, {threads, options.encode, options.dense}, digests);

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
    while (inflight.size() < options.window && encoder.TryPop(&p, &encoder_done, &encoder_status)) {
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
  result.encode_seconds = encoder.encode_seconds();
  for (uint32_t t : owned) result.target_digests[next.tensors()[t].name()] = encoder.digests()[t];
  return result;
}

}  // namespace dcr
