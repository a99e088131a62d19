// A minimal HTTP/1.1 client over libcurl for the S3 backend. One request per call, no retries
// (the caller retries); connections are kept alive in a pool of curl handles, so one client
// serves any number of threads at once.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dcr {

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST or DELETE
  std::string url;
  // Sent exactly as given (a "Host" entry replaces curl's own). curl adds Content-Length for a
  // body, and nothing else that matters: no "Expect: 100-continue", no Content-Type.
  std::vector<std::pair<std::string, std::string>> headers;
  std::span<const uint8_t> body;  // PUT and POST only; must stay alive during Send
  int timeout_ms = 0;             // whole request, connect included; 0: none
  // A 2xx answer that declares a longer Content-Length is not read: Send returns its status
  // and headers with body_omitted set (and drops the connection). 0: no limit.
  uint64_t max_body_bytes = 0;
};

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased, values trimmed
  std::vector<uint8_t> body;
  bool body_omitted = false;  // see HttpRequest::max_body_bytes

  // The value of the last header of that (lowercase) name, or nullptr.
  const std::string* Header(std::string_view lower_name) const;
  std::string BodyText() const { return std::string(body.begin(), body.end()); }
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Any HTTP status is a response. kIoError for transport failures: refused or reset
  // connections, timeouts, and a body shorter than its Content-Length (curl reports it).
  Result<HttpResponse> Send(const HttpRequest& request);

 private:
  void* Acquire();  // CURL*
  void Release(void* handle);

  std::mutex mu_;
  std::vector<void*> idle_;  // CURL* handles with live connections
};

}  // namespace dcr
