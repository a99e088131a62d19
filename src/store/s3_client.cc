#include "store/s3_client.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

namespace dcr::s3 {
namespace {

bool TransientStatus(int status) { return status >= 500 || status == 408 || status == 429; }

std::string_view Text(const HttpResponse& r) {
  return std::string_view(reinterpret_cast<const char*>(r.body.data()), r.body.size());
}

}  // namespace

bool Success(const HttpResponse& r) { return r.status / 100 == 2; }

std::string Describe(const HttpResponse& r) {
  std::string summary = ErrorSummary(Text(r));
  return "HTTP " + std::to_string(r.status) + (summary.empty() ? "" : " " + summary);
}

std::string ErrorCode(const HttpResponse& r) { return XmlText(Text(r), "Code").value_or(""); }

Status Refusal(const HttpResponse& r, const std::string& what) {
  if (r.status == 404 && (r.body.empty() || ErrorCode(r) == "NoSuchKey")) return NotFound(what + ": no such key");
  return InvalidArgument(what + ": refused: " + Describe(r));
}

RangeAnswer RangeOf(const HttpResponse& r, uint64_t first, uint64_t last) {
  RangeAnswer answer;
  if (r.status == 200) {
    answer.total = r.body.size();
    if (last < r.body.size()) {
      answer.ok = true;
      answer.bytes = std::span(r.body).subspan(first, last - first + 1);
    }
    return answer;
  }
  uint64_t a = 0, b = 0, total = 0;
  const std::string* range = r.Header("content-range");
  if (r.status != 206 || !range || !ParseContentRange(*range, &a, &b, &total)) return answer;
  answer.total = total;
  if (a <= first && last <= b && r.body.size() == b - a + 1) {
    answer.ok = true;
    answer.bytes = std::span(r.body).subspan(first - a, last - first + 1);
  }
  return answer;
}

Result<HttpResponse> Client::Call(const Request& request, std::span<const uint8_t> body, const std::string& what,
                                  const Check& check, uint64_t max_body_bytes) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  Status last;
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      ++retries_;
      const int64_t cap = std::min<int64_t>(5000, int64_t{options_.base_backoff_ms} << std::min(attempt, 20));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(0, cap)(rng)));
    }
    ++requests_;
    SignedRequest sr = SignRequest(endpoint_, request, credentials_, region_, sigv4::AmzDate(std::time(nullptr)));
    Result<HttpResponse> r =
        http_.Send({request.method, sr.url, std::move(sr.headers), body, options_.request_timeout_ms, max_body_bytes});
    if (!r.ok()) {
      last = r.status();
      continue;
    }
    if (TransientStatus(r->status)) {
      last = IoError(Describe(*r));
      continue;
    }
    Status s = check(*r);
    if (s.ok()) return r;
    if (s.code() != StatusCode::kIoError) return s;
    last = s;
  }
  return IoError(what + ": failed after " + std::to_string(options_.max_attempts) +
                 " attempts; last: " + last.message());
}

}  // namespace dcr::s3
