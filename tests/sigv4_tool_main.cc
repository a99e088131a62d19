// dcr_sigv4_tool: signs S3 requests the way the s3:// backend does (store/s3_request.h) and
// prints what it would send, for tests/sigv4_botocore.py to compare with botocore.
//
// stdin: a JSON array of {name, endpoint, virtual_host, region, bucket, key, method,
//   query: [[name, value]...] (decoded), headers: [[name, value]...] (extra, signed),
//   body_hex, unsigned_payload, access_key, secret_key, session_token, amz_date}
// stdout: a JSON array of {name, url, authorization, canonical_request, string_to_sign}
#include <iostream>
#include <nlohmann/json.hpp>

#include "store/s3_request.h"
#include "store/sigv4.h"

namespace {

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

int main() {
  using nlohmann::json;
  json cases = json::parse(std::cin);
  json out = json::array();
  for (const json& c : cases) {
    auto endpoint = dcr::s3::ParseEndpoint(c.at("endpoint"), c.at("region"), c.at("virtual_host"));
    if (!endpoint.ok()) {
      std::cerr << c.at("name").get<std::string>() << ": " << endpoint.status().ToString() << "\n";
      return 1;
    }
    dcr::s3::Request req;
    req.method = c.at("method");
    req.bucket = c.at("bucket");
    req.object = c.at("key");
    for (const json& q : c.at("query")) req.query.emplace_back(q.at(0), q.at(1));
    for (const json& h : c.at("headers")) req.headers.emplace_back(h.at(0), h.at(1));
    req.payload_hash = c.at("unsigned_payload").get<bool>() ? std::string(dcr::sigv4::kUnsignedPayload)
                                                            : dcr::sigv4::Sha256Hex(FromHex(c.at("body_hex")));
    dcr::sigv4::Credentials cred{c.at("access_key"), c.at("secret_key"), c.value("session_token", "")};
    dcr::s3::SignedRequest sr = dcr::s3::SignRequest(*endpoint, req, cred, c.at("region"), c.at("amz_date"));
    out.push_back({{"name", c.at("name")},
                   {"url", sr.url},
                   {"authorization", sr.signature.authorization},
                   {"canonical_request", sr.signature.canonical_request},
                   {"string_to_sign", sr.signature.string_to_sign}});
  }
  std::cout << out.dump(1) << "\n";
  return 0;
}
