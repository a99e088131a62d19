// AWS Signature Version 4 (header form, HMAC-SHA256): a pure function of the request, the
// credentials, the scope and the time. Reference:
// https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html
//
// Conformance is tested against every vector of the AWS SigV4 test suite (sigv4_test.cc) and
// against botocore's S3SigV4Auth on S3 request shapes (tests/sigv4_botocore.py).
#pragma once

#include <cstdint>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dcr::sigv4 {

// The payload-hash value for a body that is not hashed (S3 only).
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  // Temporary credentials only; sent as X-Amz-Security-Token. Sign() signs exactly
  // request.headers, so a caller that signs the token (S3 does) puts that header there.
  std::string session_token;
};

// How the request path becomes the canonical URI.
enum class UriRule {
  // S3: the path as sent, already percent-encoded once (see UriEncode); no normalization.
  kS3,
  // Every other service (the generic test suite): the path as sent is normalized (dot segments
  // removed, repeated '/' collapsed) and then percent-encoded a second time.
  kNormalizeAndEncodeAgain,
};

using Header = std::pair<std::string, std::string>;
using QueryParam = std::pair<std::string, std::string>;

struct Request {
  std::string method;             // "GET", "PUT", ...
  std::string path;               // as sent on the wire: percent-encoded, starting with '/'
  std::vector<QueryParam> query;  // decoded names and values, in any order; "" for "?uploads"
  std::vector<Header> headers;    // exactly the headers to sign, Host included, as sent
  std::string payload_hash;       // lowercase hex SHA-256 of the body, or kUnsignedPayload
};

struct Scope {
  std::string region;    // "us-east-1"
  std::string service;   // "s3"
  std::string amz_date;  // ISO 8601 basic UTC, "20150830T123600Z"; its first 8 chars are the date
};

struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string authorization;  // the Authorization header value
};

// Signs every header of request.headers. Header names are compared case-insensitively; values
// are trimmed and inner runs of spaces collapsed; repeated names are joined with ',' in order.
Signature Sign(const Request& request, const Credentials& credentials, const Scope& scope, UriRule rule);

// Percent-encodes per SigV4: every byte except A-Z a-z 0-9 '-' '.' '_' '~' becomes %XX (upper
// hex); '/' is kept when keep_slash (object paths) and encoded otherwise (query names/values).
std::string UriEncode(std::string_view s, bool keep_slash);

// The canonical query string: pairs encoded with UriEncode, sorted by name then value, joined
// with '&' ("name=" for an empty value). Also the query string to send, so that what is signed
// is what goes on the wire.
std::string CanonicalQueryString(const std::vector<QueryParam>& query);

// "20150830T123600Z" for a UTC time.
std::string AmzDate(std::time_t t);

// Lowercase hex SHA-256.
std::string Sha256Hex(std::span<const uint8_t> bytes);
std::string Sha256Hex(std::string_view s);

// Incremental SHA-256 (for streamed bodies).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::span<const uint8_t> bytes);
  // Lowercase hex digest; the object is spent afterwards.
  std::string FinishHex();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

// The hash of an empty body.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

}  // namespace dcr::sigv4
