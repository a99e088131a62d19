// The objects of a refit store (DESIGN.md §6; every key and field in docs/store.md): where each
// object lives and its JSON form. A store holds one model's lineage:
//
//   store.json                          format, catalog digest, anchor interval (first push)
//   head.json                           latest committed version; the open transfer, if any
//   anchors/<N>/model.safetensors       the full model at version number N (N: 20 digits)
//   anchors/<N>/anchor.json             its version and state digest; written last
//   chain/<N>.json                      the committed link into version N (base, target, transfer)
//   transfers/<T>/open.json             transfer T (16 hex) is under way from its base
//   transfers/<T>/payloads/<P>-<S>.dcrp payload S of producer P (5 and 10 digits)
//   transfers/<T>/manifest.json         every payload with size and checksum; expected digests
//   transfers/<T>/votes/<R>.json        receiver R's vote
//   transfers/<T>/decision.json         commit or abort (runtime/decision_log.h's record)
//   receivers/<R>.json                  a registered receiver: its version and heartbeat
//
// One writer per object: the coordinating producer writes everything but votes and
// registrations, which each receiver writes for itself. Readers treat a malformed object as
// kCorrupt naming its key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "protocol/version.h"
#include "runtime/decision_log.h"
#include "runtime/messages.h"
#include "store/object_store.h"

namespace dcr {

inline constexpr int kStoreFormat = 1;

std::string StoreInfoKey();
std::string HeadKey();
std::string AnchorPrefix();  // "anchors/"
std::string AnchorModelKey(uint64_t number);
std::string AnchorRecordKey(uint64_t number);
std::string ChainKey(uint64_t number);
std::string ChainPrefix();  // "chain/"
std::string TransferPrefix(uint64_t transfer);  // "transfers/<T>/"
std::string TransfersPrefix();                  // "transfers/"
std::string OpenKey(uint64_t transfer);
std::string PayloadKey(uint64_t transfer, uint32_t producer, uint32_t sequence);
std::string PayloadsPrefix(uint64_t transfer);
std::string ManifestKey(uint64_t transfer);
std::string VoteKey(uint64_t transfer, const std::string& receiver);
std::string VotesPrefix(uint64_t transfer);
std::string DecisionKey(uint64_t transfer);
std::string RegistrationKey(const std::string& receiver);
std::string RegistrationsPrefix();

// Parses "<P>-<S>.dcrp" (the last segment of a payload key); false if it is not one.
bool ParsePayloadName(const std::string& name, uint32_t* producer, uint32_t* sequence);
// Parses the 20-digit number segment of anchors/<N>/… and chain/<N>.json keys.
bool ParseVersionNumber(const std::string& digits, uint64_t* number);
// N of a key that is exactly ChainKey(N) / AnchorRecordKey(N); false for any other key.
bool ParseChainKey(const std::string& key, uint64_t* number);
bool ParseAnchorRecordKey(const std::string& key, uint64_t* number);
// kInvalidArgument unless `name` can name a receiver: 1–64 of [A-Za-z0-9_-], not starting with '-'.
Status CheckReceiverName(const std::string& name);

struct StoreInfo {
  uint64_t catalog = 0;  // CatalogDigest64 of the model
  uint64_t anchor_every = 0;
};

struct HeadRecord {
  Version version;             // the latest committed version
  uint64_t last_transfer = 0;  // the transfer that produced it (0: the store's first anchor)
  uint64_t open = 0;           // the transfer under way from `version`; 0 if none
};

struct AnchorRecord {
  Version version;
  Digest128 digest;  // state digest of the model's bits
  uint64_t last_transfer = 0;
  uint64_t size = 0;  // bytes of model.safetensors
};

struct ChainLink {
  Version base, target;
  uint64_t transfer = 0;
};

struct OpenRecord {
  uint64_t transfer = 0;
  Version base;
  uint64_t catalog = 0;
};

struct ManifestPayload {
  uint32_t producer = 0, sequence = 0;
  uint64_t size = 0;
  uint64_t xxh3 = 0;  // XXH3-64 (seed 0) of the payload object's bytes
};

struct Manifest {
  uint64_t transfer = 0;
  Version base, target;
  Digest128 target_digest;
  std::vector<ManifestPayload> payloads;  // ascending (producer, sequence)
  uint64_t changed = 0, elements = 0, dense_bytes = 0, wire_bytes = 0;
};

struct VoteRecord {
  std::string receiver;
  uint64_t transfer = 0;
  bool yes = false;
  uint64_t applied = 0;
  std::string digest, reason;
  StatusCode code = StatusCode::kOk;  // a no vote: what kind of failure (StatusCodeName in JSON)
};

struct Registration {
  std::string receiver;
  Version version;
  uint64_t pending = 0;  // transfer applied but not yet committed; 0 if none
  int64_t heartbeat_ms = 0;  // Unix time of the last heartbeat
  std::string host;
};

Json ToJson(const StoreInfo& r);
Json ToJson(const HeadRecord& r);
Json ToJson(const AnchorRecord& r);
Json ToJson(const ChainLink& r);
Json ToJson(const OpenRecord& r);
Json ToJson(const Manifest& r);
Json ToJson(const VoteRecord& r);
Json ToJson(const Registration& r);

Result<StoreInfo> ParseStoreInfo(const Json& j, const std::string& key);
Result<HeadRecord> ParseHead(const Json& j, const std::string& key);
Result<AnchorRecord> ParseAnchor(const Json& j, const std::string& key);
Result<ChainLink> ParseChainLink(const Json& j, const std::string& key);
Result<OpenRecord> ParseOpen(const Json& j, const std::string& key);
Result<Manifest> ParseManifest(const Json& j, const std::string& key);
Result<VoteRecord> ParseVote(const Json& j, const std::string& key);
Result<Registration> ParseRegistration(const Json& j, const std::string& key);

// Puts `j` (compact JSON and a newline) under `key`.
Status PutJson(ObjectStore& store, const std::string& key, const Json& j);
// Some S3-compatible servers (s3rver among them) and shared filesystems without atomic rename
// do not publish atomically: an object being written can be read as a prefix of its bytes. A
// record that does not parse is therefore read again, this many times in all (20·n ms apart).
inline constexpr int kTornReadAttempts = 5;

// The object under `key` parsed as JSON; nullopt when it is absent; kCorrupt naming the key
// when it still is not JSON after kTornReadAttempts reads.
Result<std::optional<Json>> GetJson(ObjectStore& store, const std::string& key);

// GetJson + a Parse* function: nullopt when absent.
template <typename T, typename Parse>
Result<std::optional<T>> GetRecord(ObjectStore& store, const std::string& key, Parse parse) {
  DCR_ASSIGN_OR_RETURN(std::optional<Json> j, GetJson(store, key));
  if (!j) return std::optional<T>();
  DCR_ASSIGN_OR_RETURN(T r, parse(*j, store.url() + " " + key));
  return std::optional<T>(std::move(r));
}

int64_t UnixMillis();

}  // namespace dcr
