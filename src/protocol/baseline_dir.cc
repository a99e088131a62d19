#include "protocol/baseline_dir.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/durable_file.h"

namespace dcr::baseline_dir {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string TensorsFileName(uint64_t transfer) { return "baseline-" + Hex64(transfer) + ".safetensors"; }

bool ParseTensorsFileName(const std::string& name, uint64_t* transfer) {
  constexpr std::string_view kPrefix = "baseline-", kSuffix = ".safetensors";
  if (name.size() != kPrefix.size() + 16 + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix))
    return false;
  return ParseHex64(std::string_view(name).substr(kPrefix.size(), 16), transfer);
}

bool ParseStagedName(const std::string& name, uint64_t* transfer) {
  return name.size() == 16 + 5 && name.ends_with(".json") && ParseHex64(std::string_view(name).substr(0, 16), transfer);
}

bool IsTempName(const std::string& name) { return name.starts_with(".") && name.find(".tmp.") != std::string::npos; }

std::string Join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }
std::string StagedDir(const std::string& dir) { return Join(dir, kBaselineStagedDir); }
std::string StagedJsonPath(const std::string& dir, uint64_t transfer) {
  return Join(StagedDir(dir), Hex64(transfer) + ".json");
}

Result<std::string> ReadText(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path + ": cannot open for reading");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return IoError(path + ": read failed");
  return s;
}

Status RemoveFile(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return IoError("remove " + path + ": " + ec.message());
  return Status::Ok();
}

namespace {

Status WriteJson(const std::string& path, const Json& j) {
  const std::string text = j.dump(2) + "\n";
  return WriteFileAtomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Json ToJson(const Manifest& m, bool staged) {
  Json j;
  j["format"] = kBaselineFormat;
  j["producer"] = m.producer;
  j["producers"] = m.producers;
  j["version"] = m.version.id.ToHex();
  j["number"] = m.version.number;
  j["catalog_digest"] = Hex64(m.catalog_digest);
  Json d = Json::object();
  for (const auto& [name, digest] : m.tensor_digests) d[name] = digest.ToHex();
  j["tensor_digests"] = d;
  j["file"] = m.file;
  if (staged) {
    j["transfer"] = Hex64(m.transfer);
    j["base_version"] = m.base.id.ToHex();
    j["base_number"] = m.base.number;
  } else {
    j["last_transfer"] = Hex64(m.transfer);
  }
  return j;
}

}  // namespace

Status WriteManifest(const std::string& path, const Manifest& m, bool staged) { return WriteJson(path, ToJson(m, staged)); }

Result<Manifest> ParseManifest(const std::string& path, const std::string& text, bool staged) {
  const Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(path + ": not a JSON object");
  auto bad = [&](const char* field, const char* what) {
    return Corrupt(path + ": field \"" + field + "\" is missing or not " + what);
  };
  auto u64 = [&](const char* f, uint64_t* v) {
    if (!j.contains(f) || !j[f].is_number_unsigned()) return false;
    *v = j[f].get<uint64_t>();
    return true;
  };
  auto hex64 = [&](const char* f, uint64_t* v) {
    return j.contains(f) && j[f].is_string() && ParseHex64(j[f].get<std::string>(), v);
  };
  auto hex128 = [&](const char* f, Digest128* v) {
    return j.contains(f) && j[f].is_string() && Digest128::FromHex(j[f].get<std::string>(), v);
  };
  uint64_t format = 0, producer = 0, producers = 0;
  if (!u64("format", &format)) return bad("format", "an unsigned integer");
  if (format != kBaselineFormat)
    return Unsupported(path + ": baseline format " + std::to_string(format) + ", this build reads " +
                       std::to_string(kBaselineFormat));
  Manifest m;
  if (!u64("producer", &producer) || producer > UINT32_MAX) return bad("producer", "a 32-bit unsigned integer");
  if (!u64("producers", &producers) || producers == 0 || producers > UINT32_MAX || producer >= producers)
    return bad("producers", "a 32-bit unsigned integer above \"producer\"");
  m.producer = static_cast<uint32_t>(producer);
  m.producers = static_cast<uint32_t>(producers);
  if (!hex128("version", &m.version.id)) return bad("version", "32 lowercase hex digits");
  if (!u64("number", &m.version.number)) return bad("number", "an unsigned integer");
  if (!hex64("catalog_digest", &m.catalog_digest)) return bad("catalog_digest", "16 lowercase hex digits");
  if (!j.contains("tensor_digests") || !j["tensor_digests"].is_object())
    return bad("tensor_digests", "an object of 32-hex-digit strings");
  for (auto it = j["tensor_digests"].begin(); it != j["tensor_digests"].end(); ++it) {
    Digest128 d;
    if (!it.value().is_string() || !Digest128::FromHex(it.value().get<std::string>(), &d))
      return Corrupt(path + ": tensor_digests[\"" + it.key() + "\"] is not 32 lowercase hex digits");
    m.tensor_digests.emplace(it.key(), d);
  }
  if (!hex64(staged ? "transfer" : "last_transfer", &m.transfer))
    return bad(staged ? "transfer" : "last_transfer", "16 lowercase hex digits");
  if (!j.contains("file") || !j["file"].is_string()) return bad("file", "a string");
  m.file = j["file"].get<std::string>();
  if (m.file != TensorsFileName(m.transfer))
    return Corrupt(path + ": \"file\" is '" + m.file + "', expected '" + TensorsFileName(m.transfer) + "'");
  if (staged) {
    if (!hex128("base_version", &m.base.id)) return bad("base_version", "32 lowercase hex digits");
    if (!u64("base_number", &m.base.number)) return bad("base_number", "an unsigned integer");
    if (m.version.number != m.base.number + 1)
      return Corrupt(path + ": \"number\" " + std::to_string(m.version.number) + " does not follow \"base_number\" " +
                     std::to_string(m.base.number));
  }
  return m;
}

Result<Manifest> ReadManifest(const std::string& path, bool staged) {
  DCR_ASSIGN_OR_RETURN(std::string text, ReadText(path));
  return ParseManifest(path, text, staged);
}

Result<std::vector<fs::directory_entry>> ListDir(const std::string& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) out.push_back(*it);
  if (ec) return IoError("list " + dir + ": " + ec.message());
  return out;
}

Result<std::map<uint64_t, Manifest>> ReadStaged(const std::string& dir) {
  std::map<uint64_t, Manifest> staged;
  DCR_ASSIGN_OR_RETURN(auto entries, ListDir(StagedDir(dir)));
  for (const auto& e : entries) {
    uint64_t t = 0;
    const std::string name = e.path().filename().string();
    if (!ParseStagedName(name, &t)) continue;
    DCR_ASSIGN_OR_RETURN(Manifest m, ReadManifest(e.path().string(), true));
    if (m.transfer != t) return Corrupt(e.path().string() + ": \"transfer\" " + Hex64(m.transfer) + " differs from its name");
    staged.emplace(t, std::move(m));
  }
  return staged;
}

}  // namespace dcr::baseline_dir
