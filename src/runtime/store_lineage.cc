#include "runtime/store_lineage.h"

#include <algorithm>
#include <map>
#include <set>

namespace dcr {

Status PublishAnchor(ObjectStore& store, const std::string& model, const AnchorRecord& record) {
  const uint64_t n = record.version.number;
  DCR_RETURN_IF_ERROR(store.PutFile(AnchorModelKey(n), model).WithContext("publishing anchor " + record.version.ToString()));
  return PutJson(store, AnchorRecordKey(n), ToJson(record));
}

Result<std::vector<AnchorRecord>> ListAnchors(ObjectStore& store) {
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, store.List(AnchorPrefix()));
  std::vector<AnchorRecord> out;
  for (const ObjectInfo& o : objects) {
    uint64_t n = 0;
    if (!ParseAnchorRecordKey(o.key, &n)) continue;
    DCR_ASSIGN_OR_RETURN(auto a, GetRecord<AnchorRecord>(store, o.key, ParseAnchor));
    if (!a) continue;  // removed meanwhile
    if (a->version.number != n) return Corrupt(store.url() + " " + o.key + ": records version " + a->version.ToString());
    out.push_back(*a);
  }
  std::sort(out.begin(), out.end(), [](const AnchorRecord& a, const AnchorRecord& b) { return a.version.number < b.version.number; });
  return out;
}

namespace {

Status DeletePrefix(ObjectStore& store, const std::string& prefix, uint64_t* objects) {
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> list, store.List(prefix));
  for (const ObjectInfo& o : list) {
    DCR_RETURN_IF_ERROR(store.Delete(o.key));
    ++*objects;
  }
  return Status::Ok();
}

}  // namespace

Result<GcReport> CollectGarbage(ObjectStore& store, const HeadRecord& head, uint64_t keep_anchors, FILE* log) {
  GcReport r;
  keep_anchors = std::max<uint64_t>(keep_anchors, 1);
  DCR_ASSIGN_OR_RETURN(std::vector<AnchorRecord> anchors, ListAnchors(store));
  const size_t first_kept = anchors.size() > keep_anchors ? anchors.size() - keep_anchors : 0;
  r.keep_from = anchors.empty() ? 0 : anchors[first_kept].version.number;

  std::set<uint64_t> kept_transfers;  // a registered receiver's pending transfer keeps its decision
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> regs, store.List(RegistrationsPrefix()));
  for (const ObjectInfo& o : regs) {
    DCR_ASSIGN_OR_RETURN(auto reg, GetRecord<Registration>(store, o.key, ParseRegistration));
    if (!reg) continue;
    r.keep_from = std::min(r.keep_from, reg->version.number);
    if (reg->pending) kept_transfers.insert(reg->pending);
  }

  for (size_t i = 0; i < first_kept; ++i) {
    const uint64_t n = anchors[i].version.number;
    DCR_RETURN_IF_ERROR(store.Delete(AnchorRecordKey(n)));
    DCR_RETURN_IF_ERROR(store.Delete(AnchorModelKey(n)));
    r.objects += 2;
    ++r.anchors;
  }

  // Chain links: the transfers of kept links survive; the rest of the links go.
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> links, store.List(ChainPrefix()));
  for (const ObjectInfo& o : links) {
    uint64_t n = 0;
    if (!ParseChainKey(o.key, &n)) continue;
    DCR_ASSIGN_OR_RETURN(auto link, GetRecord<ChainLink>(store, o.key, ParseChainLink));
    if (!link) continue;
    if (n > r.keep_from) {
      kept_transfers.insert(link->transfer);
      continue;
    }
    DCR_RETURN_IF_ERROR(store.Delete(o.key));
    ++r.objects;
    ++r.links;
  }
  if (head.open) kept_transfers.insert(head.open);

  // Transfers: every prefix under transfers/ not kept. A transfer not open and not a kept link
  // is an aborted one, a superseded one, or the link of a removed chain entry.
  DCR_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, store.List(TransfersPrefix()));
  std::set<uint64_t> seen;
  for (const ObjectInfo& o : objects) {
    uint64_t t = 0;
    const std::string rest = o.key.substr(TransfersPrefix().size());
    if (rest.size() < 17 || rest[16] != '/' || !ParseHex64(rest.substr(0, 16), &t)) continue;
    if (kept_transfers.count(t) || !seen.insert(t).second) continue;
    DCR_RETURN_IF_ERROR(DeletePrefix(store, TransferPrefix(t), &r.objects));
    ++r.transfers;
  }
  if (log && r.objects)
    std::fprintf(log, "dcr push [store]: garbage collected %llu anchors, %llu chain links, %llu transfers (%llu objects); chain kept from v%llu\n",
                 static_cast<unsigned long long>(r.anchors), static_cast<unsigned long long>(r.links),
                 static_cast<unsigned long long>(r.transfers), static_cast<unsigned long long>(r.objects),
                 static_cast<unsigned long long>(r.keep_from));
  return r;
}

}  // namespace dcr
