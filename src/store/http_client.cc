#include "store/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

namespace dcr {
namespace {

std::once_flag g_curl_init;

struct Upload {
  std::span<const uint8_t> body;
  size_t sent = 0;
};

size_t ReadBody(char* out, size_t size, size_t n, void* user) {
  auto* up = static_cast<Upload*>(user);
  size_t take = std::min(size * n, up->body.size() - up->sent);
  if (take > 0) std::memcpy(out, up->body.data() + up->sent, take);
  up->sent += take;
  return take;
}

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::vector<uint8_t>*>(user);
  body->insert(body->end(), data, data + size * n);
  return size * n;
}

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) --e;
  return std::string(s.substr(b, e - b));
}

struct HeaderState {
  std::vector<std::pair<std::string, std::string>>* headers;
  uint64_t max_body_bytes;
  int status = 0;
  bool over_limit = false;
};

// Called once per header line, status lines included; a new status line (after "100
// Continue" or a redirect) starts a new header block. Returning less than the line's size
// stops the transfer: done at the end of a 2xx block that announces too long a body.
size_t WriteHeader(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<HeaderState*>(user);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    st->headers->clear();
    size_t sp = line.find(' ');
    st->status = sp == std::string_view::npos ? 0 : std::atoi(std::string(line.substr(sp + 1, 3)).c_str());
  } else if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    std::string name = Trim(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    st->headers->emplace_back(std::move(name), Trim(line.substr(colon + 1)));
  } else if (Trim(line).empty() && st->max_body_bytes > 0 && st->status / 100 == 2) {
    for (const auto& [name, value] : *st->headers) {
      if (name == "content-length" && std::strtoull(value.c_str(), nullptr, 10) > st->max_body_bytes) {
        st->over_limit = true;
        return 0;
      }
    }
  }
  return size * n;
}

struct HeaderList {
  curl_slist* list = nullptr;
  ~HeaderList() { curl_slist_free_all(list); }
  void Add(const std::string& line) { list = curl_slist_append(list, line.c_str()); }
};

}  // namespace

const std::string* HttpResponse::Header(std::string_view lower_name) const {
  const std::string* found = nullptr;
  for (const auto& [name, value] : headers) {
    if (name == lower_name) found = &value;
  }
  return found;
}

HttpClient::HttpClient() {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpClient::~HttpClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::Acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  CURL* h = curl_easy_init();
  DCR_CHECK(h != nullptr);
  return h;
}

void HttpClient::Release(void* handle) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(handle);
}

Result<HttpResponse> HttpClient::Send(const HttpRequest& request) {
  CURL* h = static_cast<CURL*>(Acquire());
  curl_easy_reset(h);  // keeps the handle's connection cache

  HttpResponse response;
  Upload upload{request.body, 0};
  HeaderList headers;
  for (const auto& [name, value] : request.headers) headers.Add(name + ": " + value);
  headers.Add("Expect:");  // no 100-continue round trip before bodies

  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  if (request.timeout_ms > 0) {
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout_ms));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.timeout_ms));
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.list);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &response.body);
  HeaderState header_state{&response.headers, request.max_body_bytes};
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &header_state);

  if (request.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT" || request.method == "POST") {
    // An upload of exactly body.size() bytes; POST only renames the method.
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(h, CURLOPT_READDATA, &upload);
    if (request.method == "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "POST");
  } else if (request.method == "DELETE") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  } else {
    Release(h);
    return InvalidArgument("HTTP method " + request.method + " is not supported");
  }

  CURLcode rc = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_WRITE_ERROR && header_state.over_limit) {
    curl_easy_cleanup(h);  // the unread body is still on the connection
    response.status = header_state.status;
    response.body_omitted = true;
    return response;
  }
  if (rc != CURLE_OK) {
    // A failed handle may hold a half-used connection; do not reuse it.
    curl_easy_cleanup(h);
    std::string what = error[0] ? error : curl_easy_strerror(rc);
    return IoError(request.method + " " + request.url + ": " + what);
  }
  Release(h);
  response.status = static_cast<int>(status);
  return response;
}

}  // namespace dcr
