#include "runtime/store_records.h"

#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <thread>

namespace dcr {
namespace {

std::string Number20(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020" PRIu64, n);
  return buf;
}

// Field readers: kCorrupt naming the object's key and the field.
Status Bad(const std::string& key, const std::string& what) { return Corrupt(key + ": " + what); }

Result<uint64_t> U64(const Json& j, const char* f, const std::string& key) {
  if (!j.contains(f) || !j[f].is_number_unsigned()) return Bad(key, std::string("field '") + f + "' is not an unsigned integer");
  return j[f].get<uint64_t>();
}
Result<int64_t> I64(const Json& j, const char* f, const std::string& key) {
  if (!j.contains(f) || !j[f].is_number_integer()) return Bad(key, std::string("field '") + f + "' is not an integer");
  return j[f].get<int64_t>();
}
Result<std::string> Str(const Json& j, const char* f, const std::string& key) {
  if (!j.contains(f) || !j[f].is_string()) return Bad(key, std::string("field '") + f + "' is not a string");
  return j[f].get<std::string>();
}
Result<bool> Bool(const Json& j, const char* f, const std::string& key) {
  if (!j.contains(f) || !j[f].is_boolean()) return Bad(key, std::string("field '") + f + "' is not a boolean");
  return j[f].get<bool>();
}
template <typename T>
Result<T> In(Result<T> r, const std::string& key) {
  if (r.ok()) return r;
  return r.status().WithContext(key);
}
Status Object(const Json& j, const std::string& key) { return j.is_object() ? Status::Ok() : Bad(key, "not a JSON object"); }

}  // namespace

std::string StoreInfoKey() { return "store.json"; }
std::string HeadKey() { return "head.json"; }
std::string AnchorPrefix() { return "anchors/"; }
std::string AnchorModelKey(uint64_t n) { return AnchorPrefix() + Number20(n) + "/model.safetensors"; }
std::string AnchorRecordKey(uint64_t n) { return AnchorPrefix() + Number20(n) + "/anchor.json"; }
std::string ChainPrefix() { return "chain/"; }
std::string ChainKey(uint64_t n) { return ChainPrefix() + Number20(n) + ".json"; }
std::string TransfersPrefix() { return "transfers/"; }
std::string TransferPrefix(uint64_t t) { return TransfersPrefix() + Hex64(t) + "/"; }
std::string OpenKey(uint64_t t) { return TransferPrefix(t) + "open.json"; }
std::string PayloadsPrefix(uint64_t t) { return TransferPrefix(t) + "payloads/"; }
std::string PayloadKey(uint64_t t, uint32_t p, uint32_t s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%05u-%010u.dcrp", p, s);
  return PayloadsPrefix(t) + buf;
}
std::string ManifestKey(uint64_t t) { return TransferPrefix(t) + "manifest.json"; }
std::string VotesPrefix(uint64_t t) { return TransferPrefix(t) + "votes/"; }
std::string VoteKey(uint64_t t, const std::string& r) { return VotesPrefix(t) + r + ".json"; }
std::string DecisionKey(uint64_t t) { return TransferPrefix(t) + "decision.json"; }
std::string RegistrationsPrefix() { return "receivers/"; }
std::string RegistrationKey(const std::string& r) { return RegistrationsPrefix() + r + ".json"; }

bool ParsePayloadName(const std::string& name, uint32_t* producer, uint32_t* sequence) {
  // 5 digits, '-', 10 digits, ".dcrp"
  if (name.size() != 21 || name[5] != '-' || name.compare(16, 5, ".dcrp") != 0) return false;
  uint64_t p = 0, s = 0;
  for (size_t i = 0; i < 16; ++i) {
    if (i == 5) continue;
    if (name[i] < '0' || name[i] > '9') return false;
    (i < 5 ? p : s) = (i < 5 ? p : s) * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  if (s > UINT32_MAX) return false;
  *producer = static_cast<uint32_t>(p);
  *sequence = static_cast<uint32_t>(s);
  return true;
}

bool ParseVersionNumber(const std::string& digits, uint64_t* number) {
  if (digits.size() != 20) return false;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    if (n > (UINT64_MAX - static_cast<uint64_t>(c - '0')) / 10) return false;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  *number = n;
  return true;
}

namespace {
// N of a key that is exactly make(N), where the 20 digits of N follow `prefix`.
template <typename Make>
bool ParseNumberedKey(const std::string& key, const std::string& prefix, Make make, uint64_t* number) {
  return key.size() >= prefix.size() + 20 && key.compare(0, prefix.size(), prefix) == 0 &&
         ParseVersionNumber(key.substr(prefix.size(), 20), number) && key == make(*number);
}
}  // namespace

bool ParseChainKey(const std::string& key, uint64_t* number) { return ParseNumberedKey(key, ChainPrefix(), ChainKey, number); }
bool ParseAnchorRecordKey(const std::string& key, uint64_t* number) {
  return ParseNumberedKey(key, AnchorPrefix(), AnchorRecordKey, number);
}

Status CheckReceiverName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && name[0] != '-';
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  return ok ? Status::Ok() : InvalidArgument("receiver name \"" + name + "\": use 1-64 of A-Z a-z 0-9 _ - (not starting with -)");
}

Json ToJson(const StoreInfo& r) {
  return {{"format", kStoreFormat}, {"catalog", Hex64(r.catalog)}, {"anchor_every", r.anchor_every}};
}
Result<StoreInfo> ParseStoreInfo(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  DCR_ASSIGN_OR_RETURN(uint64_t format, U64(j, "format", key));
  if (format != kStoreFormat)
    return Unsupported(key + ": store format " + std::to_string(format) + "; this dcr reads format " + std::to_string(kStoreFormat));
  StoreInfo r;
  DCR_ASSIGN_OR_RETURN(r.catalog, In(ParseHex64(j, "catalog"), key));
  DCR_ASSIGN_OR_RETURN(r.anchor_every, U64(j, "anchor_every", key));
  return r;
}

Json ToJson(const HeadRecord& r) {
  Json j{{"version", VersionJson(r.version)}, {"last_transfer", Hex64(r.last_transfer)}};
  if (r.open) j["open"] = Hex64(r.open);
  return j;
}
Result<HeadRecord> ParseHead(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  HeadRecord r;
  DCR_ASSIGN_OR_RETURN(r.version, In(ParseVersion(j, "version"), key));
  DCR_ASSIGN_OR_RETURN(r.last_transfer, In(ParseHex64(j, "last_transfer"), key));
  if (j.contains("open")) {
    DCR_ASSIGN_OR_RETURN(r.open, In(ParseHex64(j, "open"), key));
  }
  return r;
}

Json ToJson(const AnchorRecord& r) {
  return {{"version", VersionJson(r.version)}, {"digest", r.digest.ToHex()}, {"last_transfer", Hex64(r.last_transfer)},
          {"size", r.size}};
}
Result<AnchorRecord> ParseAnchor(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  AnchorRecord r;
  DCR_ASSIGN_OR_RETURN(r.version, In(ParseVersion(j, "version"), key));
  DCR_ASSIGN_OR_RETURN(r.digest, In(ParseDigest(j, "digest"), key));
  DCR_ASSIGN_OR_RETURN(r.last_transfer, In(ParseHex64(j, "last_transfer"), key));
  DCR_ASSIGN_OR_RETURN(r.size, U64(j, "size", key));
  return r;
}

Json ToJson(const ChainLink& r) {
  return {{"base", VersionJson(r.base)}, {"target", VersionJson(r.target)}, {"transfer", Hex64(r.transfer)}};
}
Result<ChainLink> ParseChainLink(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  ChainLink r;
  DCR_ASSIGN_OR_RETURN(r.base, In(ParseVersion(j, "base"), key));
  DCR_ASSIGN_OR_RETURN(r.target, In(ParseVersion(j, "target"), key));
  DCR_ASSIGN_OR_RETURN(r.transfer, In(ParseHex64(j, "transfer"), key));
  if (r.target.number != r.base.number + 1) return Bad(key, "target is not the version after base");
  return r;
}

Json ToJson(const OpenRecord& r) {
  return {{"transfer", Hex64(r.transfer)}, {"base", VersionJson(r.base)}, {"catalog", Hex64(r.catalog)}};
}
Result<OpenRecord> ParseOpen(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  OpenRecord r;
  DCR_ASSIGN_OR_RETURN(r.transfer, In(ParseHex64(j, "transfer"), key));
  DCR_ASSIGN_OR_RETURN(r.base, In(ParseVersion(j, "base"), key));
  DCR_ASSIGN_OR_RETURN(r.catalog, In(ParseHex64(j, "catalog"), key));
  return r;
}

Json ToJson(const Manifest& r) {
  Json j{{"transfer", Hex64(r.transfer)}, {"base", VersionJson(r.base)}, {"target", VersionJson(r.target)},
         {"target_digest", r.target_digest.ToHex()}, {"changed", r.changed}, {"elements", r.elements},
         {"dense_bytes", r.dense_bytes}, {"wire_bytes", r.wire_bytes}, {"payloads", Json::array()}};
  for (const ManifestPayload& p : r.payloads)
    j["payloads"].push_back({{"producer", p.producer}, {"seq", p.sequence}, {"size", p.size}, {"xxh3", Hex64(p.xxh3)}});
  return j;
}
Result<Manifest> ParseManifest(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  Manifest r;
  DCR_ASSIGN_OR_RETURN(r.transfer, In(ParseHex64(j, "transfer"), key));
  DCR_ASSIGN_OR_RETURN(r.base, In(ParseVersion(j, "base"), key));
  DCR_ASSIGN_OR_RETURN(r.target, In(ParseVersion(j, "target"), key));
  DCR_ASSIGN_OR_RETURN(r.target_digest, In(ParseDigest(j, "target_digest"), key));
  DCR_ASSIGN_OR_RETURN(r.changed, U64(j, "changed", key));
  DCR_ASSIGN_OR_RETURN(r.elements, U64(j, "elements", key));
  DCR_ASSIGN_OR_RETURN(r.dense_bytes, U64(j, "dense_bytes", key));
  DCR_ASSIGN_OR_RETURN(r.wire_bytes, U64(j, "wire_bytes", key));
  if (!j.contains("payloads") || !j["payloads"].is_array()) return Bad(key, "field 'payloads' is not an array");
  for (const Json& p : j["payloads"]) {
    if (!p.is_object()) return Bad(key, "a payload entry is not an object");
    ManifestPayload m;
    DCR_ASSIGN_OR_RETURN(uint64_t producer, U64(p, "producer", key));
    DCR_ASSIGN_OR_RETURN(uint64_t seq, U64(p, "seq", key));
    if (producer > 99999 || seq > UINT32_MAX) return Bad(key, "payload producer or sequence out of range");
    m.producer = static_cast<uint32_t>(producer), m.sequence = static_cast<uint32_t>(seq);
    DCR_ASSIGN_OR_RETURN(m.size, U64(p, "size", key));
    DCR_ASSIGN_OR_RETURN(m.xxh3, In(ParseHex64(p, "xxh3"), key));
    if (!r.payloads.empty() && std::make_pair(r.payloads.back().producer, r.payloads.back().sequence) >=
                                   std::make_pair(m.producer, m.sequence))
      return Bad(key, "payloads are not in ascending (producer, sequence) order");
    r.payloads.push_back(m);
  }
  return r;
}

Json ToJson(const VoteRecord& r) {
  Json j{{"receiver", r.receiver}, {"transfer", Hex64(r.transfer)}, {"vote", r.yes}, {"applied", r.applied}, {"digest", r.digest}};
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (!r.yes) j["code"] = StatusCodeName(r.code);
  return j;
}
Result<VoteRecord> ParseVote(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  VoteRecord r;
  DCR_ASSIGN_OR_RETURN(r.receiver, Str(j, "receiver", key));
  DCR_ASSIGN_OR_RETURN(r.transfer, In(ParseHex64(j, "transfer"), key));
  DCR_ASSIGN_OR_RETURN(r.yes, Bool(j, "vote", key));
  DCR_ASSIGN_OR_RETURN(r.applied, U64(j, "applied", key));
  DCR_ASSIGN_OR_RETURN(r.digest, Str(j, "digest", key));
  if (j.contains("reason")) {
    DCR_ASSIGN_OR_RETURN(r.reason, Str(j, "reason", key));
  }
  if (!r.yes) {
    DCR_ASSIGN_OR_RETURN(std::string code, Str(j, "code", key));
    if (!StatusCodeFromName(code, &r.code) || r.code == StatusCode::kOk) return Bad(key, "unknown code '" + code + "'");
  }
  return r;
}

Json ToJson(const Registration& r) {
  Json j{{"receiver", r.receiver}, {"version", VersionJson(r.version)}, {"heartbeat_ms", r.heartbeat_ms}, {"host", r.host}};
  if (r.pending) j["pending"] = Hex64(r.pending);
  return j;
}
Result<Registration> ParseRegistration(const Json& j, const std::string& key) {
  DCR_RETURN_IF_ERROR(Object(j, key));
  Registration r;
  DCR_ASSIGN_OR_RETURN(r.receiver, Str(j, "receiver", key));
  DCR_ASSIGN_OR_RETURN(r.version, In(ParseVersion(j, "version"), key));
  DCR_ASSIGN_OR_RETURN(r.heartbeat_ms, I64(j, "heartbeat_ms", key));
  DCR_ASSIGN_OR_RETURN(r.host, Str(j, "host", key));
  if (j.contains("pending")) {
    DCR_ASSIGN_OR_RETURN(r.pending, In(ParseHex64(j, "pending"), key));
  }
  return r;
}

Status PutJson(ObjectStore& store, const std::string& key, const Json& j) {
  const std::string text = j.dump() + "\n";
  return store.Put(key, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Result<std::optional<Json>> GetJson(ObjectStore& store, const std::string& key) {
  for (int attempt = 1;; ++attempt) {
    auto bytes = store.Get(key);
    if (!bytes.ok()) {
      if (bytes.status().code() == StatusCode::kNotFound) return std::optional<Json>();
      return bytes.status();
    }
    Json j = Json::parse(bytes->begin(), bytes->end(), nullptr, false);
    if (!j.is_discarded()) return std::optional<Json>(std::move(j));
    if (attempt >= kTornReadAttempts)
      return Corrupt(store.url() + " " + key + ": not JSON (" + std::to_string(bytes->size()) + " bytes, read " +
                     std::to_string(attempt) + " times)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * attempt));
  }
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace dcr
