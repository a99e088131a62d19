#include "runtime/messages.h"

#include <cstdio>

namespace dcr {

Frame HeaderFrame(const Json& header) { return FrameOf(header.dump()); }

Result<Json> ParseHeader(const Frame& frame, const std::string& from) {
  Json j = Json::parse(FrameText(frame), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string())
    return Corrupt("malformed message header from " + from);
  return j;
}

Json OkReply(uint64_t req) { return {{"type", "reply"}, {"req", req}, {"ok", true}}; }

Json ErrorReply(uint64_t req, const Status& status) {
  return {{"type", "reply"}, {"req", req}, {"ok", false}, {"code", StatusCodeName(status.code())}, {"error", status.message()}};
}

Status ReplyStatus(const Json& reply, const std::string& peer) {
  if (reply.value("ok", false)) return Status::Ok();
  const std::string code = reply.value("code", std::string("internal"));
  const std::string msg = peer + ": " + reply.value("error", std::string("unspecified error"));
  StatusCode c;
  if (StatusCodeFromName(code, &c) && c != StatusCode::kOk) return Status(c, msg);
  return Internal(msg);
}

Result<uint64_t> ParseHex64(const Json& j, const char* field) {
  uint64_t v = 0;
  if (!j.contains(field) || !j[field].is_string() || !ParseHex64(j[field].get<std::string>(), &v))
    return Corrupt(std::string("message field '") + field + "' is not 16 lowercase hex digits");
  return v;
}

Result<Digest128> ParseDigest(const Json& j, const char* field) {
  Digest128 d;
  if (!j.contains(field) || !j[field].is_string() || !Digest128::FromHex(j[field].get<std::string>(), &d))
    return Corrupt(std::string("message field '") + field + "' is not a 32-hex-digit digest");
  return d;
}

Json VersionJson(const Version& v) { return {{"id", v.id.ToHex()}, {"number", v.number}}; }

Result<Version> ParseVersion(const Json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_object() || !j[field].contains("number") || !j[field]["number"].is_number_unsigned())
    return Corrupt(std::string("message field '") + field + "' is not a version");
  Version v;
  DCR_ASSIGN_OR_RETURN(v.id, ParseDigest(j[field], "id"));
  v.number = j[field]["number"].get<uint64_t>();
  return v;
}

}  // namespace dcr
