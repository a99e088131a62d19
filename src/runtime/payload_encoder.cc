#include "runtime/payload_encoder.h"

#include "base/thread_pool.h"
#include "base/timing.h"

namespace dcr {
namespace {

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

PayloadEncoder::PayloadEncoder(const PayloadPlan& plan, const std::vector<TensorRef>& base, const std::vector<TensorRef>& next,
                               uint64_t transfer, uint32_t producer, const EncoderOptions& options,
                               std::vector<Digest128> digests)
    : capacity_(static_cast<size_t>(std::max(options.threads, 1)) * 2 + 2), digests_(std::move(digests)) {
  thread_ = std::thread([=, this, &plan, &base, &next] { Run(plan, base, next, transfer, producer, options); });
}

PayloadEncoder::~PayloadEncoder() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    changed_.notify_all();
  }
  thread_.join();
}

void PayloadEncoder::Run(const PayloadPlan& plan, const std::vector<TensorRef>& base, const std::vector<TensorRef>& next,
                         uint64_t transfer, uint32_t producer, const EncoderOptions& options) {
  const int threads = std::max(options.threads, 1);
  const ValueKind kind = options.dense ? ValueKind::kOverwrite : ValueKind::kXor;
  std::vector<EncodedPayload> wave(static_cast<size_t>(threads));
  for (size_t first = 0; first < plan.size(); first += wave.size()) {
    const size_t n = std::min(wave.size(), plan.size() - first);
    auto t0 = Clock::now();
    Status s = ParallelForItems(n, threads, [&](size_t i, int per_payload) {
      const PayloadIdentity id{transfer, producer, static_cast<uint32_t>(first + i)};
      if (options.dense) EncodeDensePayload(plan[first + i], base, next, options.encode, id, &wave[i]);
      else EncodePlannedPayload(plan[first + i], base, next, kind, options.encode, id, &wave[i], per_payload);
      return Status::Ok();
    });
    encode_seconds_ += SecondsSince(t0);
    if (!s.ok()) return Close(s);
    for (size_t i = 0; i < n; ++i) {
      EncodedPayload& e = wave[i];
      for (const auto& [t, d] : e.digest_deltas) digests_[t] += d;
      if (e.bytes.empty()) continue;
      StreamedPayload p{static_cast<uint32_t>(first + i), e.changed, std::make_shared<const Frame>(std::move(e.bytes))};
      e.bytes = {};
      if (!Push(std::move(p))) return;
    }
  }
  Close(Status::Ok());
}

bool PayloadEncoder::Push(StreamedPayload p) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return items_.size() < capacity_ || cancelled_; });
  if (cancelled_) return false;
  items_.push_back(std::move(p));
  changed_.notify_all();
  return true;
}

void PayloadEncoder::Close(Status status) {
  std::lock_guard lock(mu_);
  closed_ = true;
  status_ = std::move(status);
  changed_.notify_all();
}

bool PayloadEncoder::TryPop(StreamedPayload* out, bool* done, Status* status) {
  std::lock_guard lock(mu_);
  *done = items_.empty() && closed_;
  if (*done) *status = status_;
  if (items_.empty()) return false;
  *out = std::move(items_.front());
  items_.pop_front();
  changed_.notify_all();
  return true;
}

bool PayloadEncoder::Pop(StreamedPayload* out, Status* status) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return !items_.empty() || closed_; });
  if (items_.empty()) {
    *status = status_;
    return false;
  }
  *out = std::move(items_.front());
  items_.pop_front();
  changed_.notify_all();
  return true;
}

}  // namespace dcr
