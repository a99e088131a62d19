#include "runtime/store_status.h"

#include "runtime/store_lineage.h"
#include "runtime/store_records.h"

namespace dcr {

Result<Json> DescribeStore(ObjectStore& store) {
  DCR_ASSIGN_OR_RETURN(auto info, GetRecord<StoreInfo>(store, StoreInfoKey(), ParseStoreInfo));
  if (!info) return NotFound(store.url() + ": not a refit store (no " + StoreInfoKey() + "; the first push creates it)");
  DCR_ASSIGN_OR_RETURN(auto head, GetRecord<HeadRecord>(store, HeadKey(), ParseHead));
  if (!head) return Corrupt(store.url() + ": store.json without head.json");
  Json j{{"store", store.url()},
         {"catalog", Hex64(info->catalog)},
         {"anchor_every", info->anchor_every},
         {"head", {{"version", VersionJson(head->version)}, {"last_transfer", Hex64(head->last_transfer)}}}};
  if (head->open) {
    const uint64_t t = head->open;
    DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> payloads, store.List(PayloadsPrefix(t)));
    DCR_ASSIGN_OR_RETURN(auto manifest, store.Head(ManifestKey(t)));
    Json votes = Json::object();
    DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> vote_objects, store.List(VotesPrefix(t)));
    for (const ObjectInfo& v : vote_objects) {
      DCR_ASSIGN_OR_RETURN(auto vote, GetRecord<VoteRecord>(store, v.key, ParseVote));
      if (vote) votes[vote->receiver] = vote->yes;
    }
    j["open"] = {{"transfer", Hex64(t)}, {"payloads", payloads.size()}, {"manifest", manifest.has_value()}, {"votes", votes}};
  }
  DCR_ASSIGN_OR_RETURN(std::vector<AnchorRecord> anchors, ListAnchors(store));
  j["anchors"] = Json::array();
  for (const AnchorRecord& a : anchors) j["anchors"].push_back(a.version.number);
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> links, store.List(ChainPrefix()));
  uint64_t first = UINT64_MAX, last = 0;
  for (const ObjectInfo& l : links) {
    uint64_t n = 0;
    if (!ParseChainKey(l.key, &n)) continue;
    first = std::min(first, n);
    last = std::max(last, n);
  }
  if (first != UINT64_MAX) j["chain"] = {{"first", first}, {"last", last}};
  j["receivers"] = Json::array();
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> regs, store.List(RegistrationsPrefix()));
  const int64_t now = UnixMillis();
  for (const ObjectInfo& r : regs) {
    DCR_ASSIGN_OR_RETURN(auto reg, GetRecord<Registration>(store, r.key, ParseRegistration));
    if (!reg) continue;
    Json e{{"name", reg->receiver}, {"version", VersionJson(reg->version)}, {"heartbeat_age_s", (now - reg->heartbeat_ms) / 1000.0},
           {"host", reg->host}};
    if (reg->pending) e["pending"] = Hex64(reg->pending);
    j["receivers"].push_back(e);
  }
  return j;
}

}  // namespace dcr
