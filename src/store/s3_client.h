// One S3 bucket's request engine for the s3:// backend: signs (store/s3_request.h), sends
// (store/http_client.h), retries transient failures with backoff and counts. The object-level
// logic is in s3_store.cc and s3_transfer.cc. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/http_client.h"
#include "store/object_store.h"
#include "store/s3_request.h"
#include "store/sigv4.h"

namespace dcr::s3 {

bool Success(const HttpResponse& r);
// "HTTP 403 InvalidAccessKeyId: The AWS Access Key Id ..." (S3's Code and Message when present).
std::string Describe(const HttpResponse& r);
std::string ErrorCode(const HttpResponse& r);
// A response that is neither a success nor transient: 404 NoSuchKey (or a bodiless 404, as
// HEAD gets) is kNotFound "<what>: no such key"; anything else kInvalidArgument naming S3's
// Code and Message.
Status Refusal(const HttpResponse& r, const std::string& what);

// The bytes [first, last] of the object in the answer to a ranged GET: a 206 whose
// Content-Range covers them and whose body is exactly that Content-Range (a server may send
// more than asked), or a 200 (Range ignored) whose body is the whole object. `total` is the
// object's size when the answer tells it.
struct RangeAnswer {
  bool ok = false;
  std::span<const uint8_t> bytes;
  std::optional<uint64_t> total;
};
RangeAnswer RangeOf(const HttpResponse& r, uint64_t first, uint64_t last);

class Client {
 public:
  Client(std::string bucket, Endpoint endpoint, sigv4::Credentials credentials, std::string region,
         const StoreOptions& options)
      : bucket_(std::move(bucket)),
        endpoint_(std::move(endpoint)),
        credentials_(std::move(credentials)),
        region_(std::move(region)),
        options_(options) {}

  // Judges a response that is not a transient failure: Ok accepts it, kIoError retries it (a
  // short body, say), anything else is the final answer.
  using Check = std::function<Status(const HttpResponse&)>;

  // Sends `request` (signed afresh each attempt) until `check` accepts or refuses the answer.
  // Transport errors and HTTP 5xx/408/429 are retried like kIoError from `check`; attempt n>0
  // waits uniform(0, min(5 s, base_backoff_ms·2^n)). After max_attempts: kIoError
  // "<what>: failed after N attempts; last: ...". `what` ("GET s3://b/key") names the request.
  // max_body_bytes: see HttpRequest.
  Result<HttpResponse> Call(const Request& request, std::span<const uint8_t> body, const std::string& what,
                            const Check& check, uint64_t max_body_bytes = 0);

  Request Make(const std::string& method, const std::string& object, std::vector<sigv4::QueryParam> query = {},
               std::vector<sigv4::Header> headers = {},
               std::string payload_hash = std::string(sigv4::kEmptyPayloadHash)) const {
    return {method, bucket_, object, std::move(query), std::move(headers), std::move(payload_hash)};
  }

  const std::string& bucket() const { return bucket_; }
  const StoreOptions& options() const { return options_; }

  void CountRetry() { ++retries_; }
  void CountPut(uint64_t n) { bytes_put_ += n; }
  void CountGot(uint64_t n) { bytes_got_ += n; }
  StoreCounters counters() const { return {requests_.load(), retries_.load(), bytes_put_.load(), bytes_got_.load()}; }

 private:
  const std::string bucket_;
  const Endpoint endpoint_;
  const sigv4::Credentials credentials_;
  const std::string region_;
  const StoreOptions options_;
  HttpClient http_;
  std::atomic<uint64_t> requests_{0}, retries_{0}, bytes_put_{0}, bytes_got_{0};
};

}  // namespace dcr::s3
