#include "layout/layout_json.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "base/durable_file.h"
#include "base/mapped_file.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const char* TransformName(PieceTransform t) { return t == PieceTransform::kNone ? "none" : "convert"; }
const char* FillName(PaddingFill f) { return f == PaddingFill::kZero ? "zero" : "repeat_last_row"; }

// Strict reading helpers: each names the JSON path of the value it rejects.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  Status Fail(const std::string& path, const std::string& what) const {
    return InvalidArgument(origin_ + ": " + path + ": " + what);
  }
  Status Keys(const Json& j, const std::string& path, std::initializer_list<const char*> required,
              std::initializer_list<const char*> optional) const {
    if (!j.is_object()) return Fail(path, "expected an object");
    for (const char* k : required)
      if (!j.contains(k)) return Fail(path, std::string("missing \"") + k + "\"");
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      for (const char* k : required) known |= it.key() == k;
      for (const char* k : optional) known |= it.key() == k;
      if (!known) return Fail(path, "unknown key \"" + it.key() + "\"");
    }
    return Status::Ok();
  }
  Status String(const Json& j, const std::string& path, std::string* out) const {
    if (!j.is_string()) return Fail(path, "expected a string");
    *out = j.get<std::string>();
    return Status::Ok();
  }
  Status U64(const Json& j, const std::string& path, uint64_t* out) const {
    if (!j.is_number_unsigned()) return Fail(path, "expected a non-negative integer");
    *out = j.get<uint64_t>();
    return Status::Ok();
  }
  Status U32(const Json& j, const std::string& path, uint32_t* out) const {
    uint64_t v = 0;
    DCR_RETURN_IF_ERROR(U64(j, path, &v));
    if (v > UINT32_MAX) return Fail(path, "too large");
    *out = static_cast<uint32_t>(v);
    return Status::Ok();
  }
  Status Dims(const Json& j, const std::string& path, std::vector<uint64_t>* out) const {
    if (!j.is_array()) return Fail(path, "expected an array of non-negative integers");
    out->clear();
    for (size_t i = 0; i < j.size(); ++i) {
      uint64_t v = 0;
      DCR_RETURN_IF_ERROR(U64(j[i], path + "[" + std::to_string(i) + "]", &v));
      out->push_back(v);
    }
    return Status::Ok();
  }
  Status Dtype(const Json& j, const std::string& path, DType* out) const {
    std::string s;
    DCR_RETURN_IF_ERROR(String(j, path, &s));
    auto t = ParseDType(s);
    if (!t) return Fail(path, "unknown dtype \"" + s + "\"");
    *out = *t;
    return Status::Ok();
  }

 private:
  std::string origin_;
};

Status ReadPiece(const Reader& rd, const Json& j, const std::string& path, Piece* p) {
  DCR_RETURN_IF_ERROR(rd.Keys(j, path, {"canonical", "local_start", "canonical_start", "extent"}, {"owner", "transform"}));
  DCR_RETURN_IF_ERROR(rd.String(j["canonical"], path + ".canonical", &p->canonical));
  DCR_RETURN_IF_ERROR(rd.Dims(j["local_start"], path + ".local_start", &p->local_start));
  DCR_RETURN_IF_ERROR(rd.Dims(j["canonical_start"], path + ".canonical_start", &p->canonical_start));
  DCR_RETURN_IF_ERROR(rd.Dims(j["extent"], path + ".extent", &p->extent));
  p->owner = true;
  if (j.contains("owner")) {
    if (!j["owner"].is_boolean()) return rd.Fail(path + ".owner", "expected true or false");
    p->owner = j["owner"].get<bool>();
  }
  p->transform = PieceTransform::kNone;
  if (j.contains("transform")) {
    std::string t;
    DCR_RETURN_IF_ERROR(rd.String(j["transform"], path + ".transform", &t));
    if (t == "convert") p->transform = PieceTransform::kConvert;
    else if (t != "none") return rd.Fail(path + ".transform", "expected \"none\" or \"convert\"");
  }
  return Status::Ok();
}

Status ReadPadding(const Reader& rd, const Json& j, const std::string& path, PaddingRegion* r) {
  DCR_RETURN_IF_ERROR(rd.Keys(j, path, {"start", "extent"}, {"fill", "source"}));
  DCR_RETURN_IF_ERROR(rd.Dims(j["start"], path + ".start", &r->start));
  DCR_RETURN_IF_ERROR(rd.Dims(j["extent"], path + ".extent", &r->extent));
  r->fill = PaddingFill::kZero;
  if (j.contains("fill")) {
    std::string f;
    DCR_RETURN_IF_ERROR(rd.String(j["fill"], path + ".fill", &f));
    if (f == "repeat_last_row") r->fill = PaddingFill::kRepeatLastRow;
    else if (f != "zero") return rd.Fail(path + ".fill", "expected \"zero\" or \"repeat_last_row\"");
  }
  if (j.contains("source")) DCR_RETURN_IF_ERROR(rd.String(j["source"], path + ".source", &r->source));
  return Status::Ok();
}

Status ReadTensor(const Reader& rd, const Json& j, const std::string& path, LocalTensor* t) {
  DCR_RETURN_IF_ERROR(rd.Keys(j, path, {"name", "dtype", "shape", "pieces"}, {"padding"}));
  DCR_RETURN_IF_ERROR(rd.String(j["name"], path + ".name", &t->name));
  DCR_RETURN_IF_ERROR(rd.Dtype(j["dtype"], path + ".dtype", &t->dtype));
  DCR_RETURN_IF_ERROR(rd.Dims(j["shape"], path + ".shape", &t->shape));
  if (!j["pieces"].is_array()) return rd.Fail(path + ".pieces", "expected an array");
  for (size_t i = 0; i < j["pieces"].size(); ++i)
    DCR_RETURN_IF_ERROR(ReadPiece(rd, j["pieces"][i], path + ".pieces[" + std::to_string(i) + "]", &t->pieces.emplace_back()));
  if (j.contains("padding")) {
    if (!j["padding"].is_array()) return rd.Fail(path + ".padding", "expected an array");
    for (size_t i = 0; i < j["padding"].size(); ++i)
      DCR_RETURN_IF_ERROR(
          ReadPadding(rd, j["padding"][i], path + ".padding[" + std::to_string(i) + "]", &t->padding.emplace_back()));
  }
  return Status::Ok();
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return ss.str();
}

}  // namespace

std::string LayoutFileName(uint32_t rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05u.json", rank);
  return buf;
}

// One JSON value per line for canonical entries, local tensors and their pieces: readable and
// diffable, and a fraction of the size of a fully indented dump.
std::string LayoutToJson(const RankLayout& l) {
  Json parallel = Json::object();
  for (const auto& [k, v] : l.parallel) parallel[k] = v;
  std::string out = "{\n";
  out += " \"format\": \"dcr-layout\",\n \"version\": " + std::to_string(kLayoutFormatVersion) + ",\n";
  out += " \"role\": " + Json(LayoutRoleName(l.role)).dump() + ",\n \"framework\": " + Json(l.framework).dump() + ",\n";
  out += " \"rank\": " + std::to_string(l.rank) + ",\n \"world_size\": " + std::to_string(l.world_size) + ",\n";
  out += " \"parallel\": " + parallel.dump() + ",\n \"canonical\": [";
  for (size_t i = 0; i < l.canonical.size(); ++i) {
    const CatalogEntry& c = l.canonical[i];
    out += (i ? ",\n  " : "\n  ") + Json{{"name", c.name}, {"dtype", std::string(DTypeName(c.dtype))}, {"shape", c.shape}}.dump();
  }
  out += "\n ],\n \"tensors\": [";
  for (size_t i = 0; i < l.tensors.size(); ++i) {
    const LocalTensor& t = l.tensors[i];
    Json head = {{"name", t.name}, {"dtype", std::string(DTypeName(t.dtype))}, {"shape", t.shape}};
    std::string h = head.dump();
    h.pop_back();  // reopen the object to append pieces and padding
    out += (i ? ",\n  " : "\n  ") + h + ", \"pieces\": [";
    for (size_t k = 0; k < t.pieces.size(); ++k) {
      const Piece& p = t.pieces[k];
      out += (k ? ",\n    " : "\n    ") +
             Json{{"canonical", p.canonical}, {"local_start", p.local_start}, {"canonical_start", p.canonical_start},
                  {"extent", p.extent}, {"owner", p.owner}, {"transform", TransformName(p.transform)}}
                 .dump();
    }
    out += "]";
    if (!t.padding.empty()) {
      out += ", \"padding\": [";
      for (size_t k = 0; k < t.padding.size(); ++k) {
        const PaddingRegion& r = t.padding[k];
        Json rj = {{"start", r.start}, {"extent", r.extent}, {"fill", FillName(r.fill)}};
        if (r.fill == PaddingFill::kRepeatLastRow) rj["source"] = r.source;
        out += (k ? ",\n    " : "\n    ") + rj.dump();
      }
      out += "]";
    }
    out += "}";
  }
  return out + "\n ]\n}\n";
}

Result<RankLayout> LayoutFromJson(std::string_view text, const std::string& origin) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, false);
  Reader rd(origin);
  if (j.is_discarded()) return rd.Fail("(document)", "not valid JSON");
  DCR_RETURN_IF_ERROR(rd.Keys(j, "(document)", {"format", "version", "role", "rank", "world_size", "canonical", "tensors"},
                              {"framework", "parallel"}));
  if (j["format"] != "dcr-layout") return rd.Fail("format", "expected \"dcr-layout\"");
  uint64_t version = 0;
  DCR_RETURN_IF_ERROR(rd.U64(j["version"], "version", &version));
  if (version != kLayoutFormatVersion)
    return Unsupported(origin + ": layout format version " + std::to_string(version) + " (this build reads version " +
                       std::to_string(kLayoutFormatVersion) + ")");
  RankLayout l;
  std::string role;
  DCR_RETURN_IF_ERROR(rd.String(j["role"], "role", &role));
  if (role == "train") l.role = LayoutRole::kTrain;
  else if (role == "serve") l.role = LayoutRole::kServe;
  else return rd.Fail("role", "expected \"train\" or \"serve\"");
  if (j.contains("framework")) DCR_RETURN_IF_ERROR(rd.String(j["framework"], "framework", &l.framework));
  DCR_RETURN_IF_ERROR(rd.U32(j["rank"], "rank", &l.rank));
  DCR_RETURN_IF_ERROR(rd.U32(j["world_size"], "world_size", &l.world_size));
  if (j.contains("parallel")) {
    if (!j["parallel"].is_object()) return rd.Fail("parallel", "expected an object");
    for (auto it = j["parallel"].begin(); it != j["parallel"].end(); ++it)
      DCR_RETURN_IF_ERROR(rd.U32(it.value(), "parallel." + it.key(), &l.parallel[it.key()]));
  }
  if (!j["canonical"].is_array()) return rd.Fail("canonical", "expected an array");
  for (size_t i = 0; i < j["canonical"].size(); ++i) {
    const Json& c = j["canonical"][i];
    const std::string path = "canonical[" + std::to_string(i) + "]";
    DCR_RETURN_IF_ERROR(rd.Keys(c, path, {"name", "dtype", "shape"}, {}));
    CatalogEntry& e = l.canonical.emplace_back();
    DCR_RETURN_IF_ERROR(rd.String(c["name"], path + ".name", &e.name));
    DCR_RETURN_IF_ERROR(rd.Dtype(c["dtype"], path + ".dtype", &e.dtype));
    DCR_RETURN_IF_ERROR(rd.Dims(c["shape"], path + ".shape", &e.shape));
  }
  if (!j["tensors"].is_array()) return rd.Fail("tensors", "expected an array");
  for (size_t i = 0; i < j["tensors"].size(); ++i)
    DCR_RETURN_IF_ERROR(ReadTensor(rd, j["tensors"][i], "tensors[" + std::to_string(i) + "]", &l.tensors.emplace_back()));
  return l;
}

Status WriteLayoutDir(const std::string& dir, const LayoutSet& set) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  const std::regex pattern("rank-([0-9]{5})\\.json");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern) && std::stoul(m[1].str()) >= set.size())
      return InvalidArgument(dir + " already holds " + name + " of a larger layout; use an empty directory");
  }
  if (ec) return IoError(dir + ": cannot list: " + ec.message());
  for (const RankLayout& l : set) {
    const std::string text = LayoutToJson(l);
    DCR_RETURN_IF_ERROR(WriteFileAtomic((fs::path(dir) / LayoutFileName(l.rank)).string(),
                                        {reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  }
  return Status::Ok();
}

Result<LayoutSet> ReadLayoutDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a layout directory");
  const std::regex pattern("rank-([0-9]{5})\\.json");
  std::set<uint32_t> present;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) present.insert(static_cast<uint32_t>(std::stoul(m[1].str())));
  }
  if (ec) return IoError(dir + ": cannot list: " + ec.message());
  if (present.empty()) return NotFound(dir + ": no layout files (rank-00000.json, ...)");
  LayoutSet set;
  for (uint32_t r = 0;; ++r) {
    if (!present.count(r)) return NotFound(dir + ": missing " + LayoutFileName(r));
    const std::string path = (fs::path(dir) / LayoutFileName(r)).string();
    DCR_ASSIGN_OR_RETURN(std::string text, ReadText(path));
    DCR_ASSIGN_OR_RETURN(RankLayout l, LayoutFromJson(text, path));
    if (l.rank != r) return InvalidArgument(path + ": says it is rank " + std::to_string(l.rank));
    set.push_back(std::move(l));
    if (set.size() == set[0].world_size) break;
    if (set.size() > set[0].world_size) break;
  }
  if (present.size() != set.size())
    return InvalidArgument(dir + ": holds " + std::to_string(present.size()) + " layout files but the layout has " +
                           std::to_string(set.size()) + " ranks (world_size); stray files from another layout?");
  DCR_RETURN_IF_ERROR(ValidateLayoutSet(set).WithContext(dir));
  return set;
}

}  // namespace dcr
