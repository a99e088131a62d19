#include "store/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <map>

#include "base/status.h"

namespace dcr::sigv4 {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

std::string Hex(const uint8_t* p, size_t n) {
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  DCR_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const uint8_t*>(data.data()),
                 data.size(), mac, &len) != nullptr);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Trims the value and collapses every inner run of whitespace into one space (botocore's
// ' '.join(value.split())).
std::string TrimAll(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

// RFC 3986 §5.2.4 dot-segment removal, with empty segments (repeated '/') dropped as AWS
// services require; a trailing '/' survives when anything is left. "" becomes "/".
std::string NormalizePath(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
    } else if (!seg.empty() && seg != ".") {
      out.push_back(seg);
    }
    start = end + 1;
  }
  std::string result = path.front() == '/' ? "/" : "";
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) result += '/';
    result += out[i];
  }
  if (path.back() == '/' && !out.empty()) result += '/';
  return result;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '.' || c == '_' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += "0123456789ABCDEF"[c >> 4];
      out += "0123456789ABCDEF"[c & 15];
    }
  }
  return out;
}

std::string CanonicalQueryString(const std::vector<QueryParam>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) encoded.emplace_back(UriEncode(name, false), UriEncode(value, false));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string Sha256Hex(std::span<const uint8_t> bytes) {
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  DCR_CHECK(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) == 1);
  return Hex(md, len);
}

std::string Sha256Hex(std::string_view s) {
  return Sha256Hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  DCR_CHECK(ctx_ != nullptr);
  DCR_CHECK(EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(std::span<const uint8_t> bytes) {
  DCR_CHECK(EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size()) == 1);
}

std::string Sha256::FinishHex() {
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  DCR_CHECK(EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len) == 1);
  return Hex(md, len);
}

Signature Sign(const Request& request, const Credentials& credentials, const Scope& scope, UriRule rule) {
  // Lowercased name -> values in the order given (std::map sorts the names bytewise).
  std::map<std::string, std::vector<std::string>> headers;
  for (const auto& [name, value] : request.headers) headers[ToLower(name)].push_back(TrimAll(value));
  std::string canonical_headers, signed_headers;
  for (const auto& [name, values] : headers) {
    canonical_headers += name;
    canonical_headers += ':';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) canonical_headers += ',';
      canonical_headers += values[i];
    }
    canonical_headers += '\n';
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }

  std::string uri =
      rule == UriRule::kS3 ? (request.path.empty() ? "/" : request.path) : UriEncode(NormalizePath(request.path), true);
  Signature sig;
  sig.canonical_request = request.method + '\n' + uri + '\n' + CanonicalQueryString(request.query) + '\n' +
                          canonical_headers + '\n' + signed_headers + '\n' + request.payload_hash;

  const std::string date = scope.amz_date.substr(0, 8);
  const std::string credential_scope = date + '/' + scope.region + '/' + scope.service + "/aws4_request";
  sig.string_to_sign = std::string(kAlgorithm) + '\n' + scope.amz_date + '\n' + credential_scope + '\n' +
                       Sha256Hex(sig.canonical_request);

  std::string key = HmacSha256("AWS4" + credentials.secret_access_key, date);
  key = HmacSha256(key, scope.region);
  key = HmacSha256(key, scope.service);
  key = HmacSha256(key, "aws4_request");
  const std::string mac = HmacSha256(key, sig.string_to_sign);
  sig.authorization = std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + '/' + credential_scope +
                      ", SignedHeaders=" + signed_headers +
                      ", Signature=" + Hex(reinterpret_cast<const uint8_t*>(mac.data()), mac.size());
  return sig;
}

}  // namespace dcr::sigv4
