// S3 request shapes for the s3:// backend (store/s3_store.h): endpoint and URL building, the
// headers every request carries, signing, and the few XML documents S3 answers with. Pure
// functions, so that tests/sigv4_botocore.py can check the exact requests against botocore.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "store/object_store.h"
#include "store/sigv4.h"

namespace dcr::s3 {

struct Endpoint {
  std::string scheme;  // "http" or "https"
  std::string host;    // host[:port] as in a Host header: the scheme's default port omitted
  bool virtual_host_style = false;
};

// "http://127.0.0.1:4569", "https://minio.example:9000/" ...; "" is AWS's regional endpoint
// https://s3.REGION.amazonaws.com. kInvalidArgument for other schemes, paths, queries, userinfo.
Result<Endpoint> ParseEndpoint(const std::string& endpoint, const std::string& region, bool virtual_host_style);

// "s3://BUCKET[/PREFIX]" -> bucket and prefix (no leading or trailing '/'). The bucket must be
// a valid S3 bucket name; the prefix a valid object key (CheckObjectKey).
Status ParseS3Url(const std::string& url, std::string* bucket, std::string* prefix);

struct Request {
  std::string method;
  std::string bucket;
  std::string object;                    // the full object name, "" for a bucket request (ListObjectsV2)
  std::vector<sigv4::QueryParam> query;  // decoded; "" values for flags such as "uploads"
  std::vector<sigv4::Header> headers;    // extra headers, all signed: Range, If-Match, Content-Type
  std::string payload_hash;              // sigv4::Sha256Hex of the body, or kEmptyPayloadHash
};

struct SignedRequest {
  std::string url;
  std::vector<sigv4::Header> headers;  // everything to send, Authorization last
  sigv4::Signature signature;
};

// Path style: SCHEME://HOST/BUCKET/OBJECT; virtual-host style: SCHEME://BUCKET.HOST/OBJECT. The
// object is percent-encoded once (sigv4::UriEncode, '/' kept) and the query is the canonical
// query string, so the URL sent is exactly what is signed. Headers: Host, X-Amz-Date,
// X-Amz-Content-SHA256, X-Amz-Security-Token (temporary credentials) and request.headers, all
// signed; then Authorization.
SignedRequest SignRequest(const Endpoint& endpoint, const Request& request, const sigv4::Credentials& credentials,
                          const std::string& region, const std::string& amz_date);

// XML (S3's responses: no CDATA, no namespaces prefixes, entities escaped).
// The decoded text of the first <element> at or after *pos (0 if null), which is advanced past
// its end tag; nullopt when absent or malformed (unknown entity, no end tag).
std::optional<std::string> XmlText(std::string_view xml, std::string_view element, size_t* pos = nullptr);
// Decodes &amp; &lt; &gt; &quot; &apos; &#N; &#xH; (as UTF-8); nullopt on anything else.
std::optional<std::string> XmlDecode(std::string_view text);

// "<Code>: <Message>" of an S3 <Error> body; "" when the body is not one.
std::string ErrorSummary(std::string_view body);

struct ListPage {
  std::vector<ObjectInfo> objects;  // full object names
  bool truncated = false;
  std::string next_continuation_token;
};
// A ListObjectsV2 result; kCorrupt when it is not one.
Result<ListPage> ParseListPage(std::string_view xml);

// "bytes FIRST-LAST/TOTAL" (Content-Range); false if malformed or "*/TOTAL".
bool ParseContentRange(std::string_view value, uint64_t* first, uint64_t* last, uint64_t* total);

}  // namespace dcr::s3
