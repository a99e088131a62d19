// Control messages of the live refit (docs/refit.md §Messages). Every message is a JSON header
// frame, optionally followed by one frame of payload bytes. Requests carry "type" and "req"
// (an id the reply echoes); replies carry "type":"reply", "req", and either "ok":true plus
// fields, or "ok":false with "code" (a StatusCode name) and "error".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "protocol/version.h"
#include "transport/zmq_socket.h"

namespace dcr {

using Json = nlohmann::json;

Frame HeaderFrame(const Json& header);
// kCorrupt naming `from` when the frame is not a JSON object with a string "type".
Result<Json> ParseHeader(const Frame& frame, const std::string& from);

Json OkReply(uint64_t req);
Json ErrorReply(uint64_t req, const Status& status);
// The Status a reply stands for (Ok for "ok":true), with `peer` named in the message.
Status ReplyStatus(const Json& reply, const std::string& peer);

Result<uint64_t> ParseHex64(const Json& j, const char* field);
Result<Digest128> ParseDigest(const Json& j, const char* field);
Json VersionJson(const Version& v);  // {"id": "<32 hex>", "number": N}
Result<Version> ParseVersion(const Json& j, const char* field);

}  // namespace dcr
