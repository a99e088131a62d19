#include "format/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/durable_file.h"

namespace dcr {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// One catalog entry, read where it is held (a CatalogEntry, or a checkpoint's TensorInfo).
struct EntryView {
  const std::string& name;
  DType dtype;
  const std::vector<uint64_t>& shape;
};

// CompareCatalogs over two catalogs of na and nb entries, entry i given by a(i) and b(i).
template <typename A, typename B>
Status CompareEntries(size_t na, const A& a, const std::string& a_label, size_t nb, const B& b,
                      const std::string& b_label) {
  size_t i = 0, j = 0;
  while (i < na && j < nb) {
    const EntryView x = a(i), y = b(j);
    if (x.name < y.name) return Mismatch("tensor '" + x.name + "' is in " + a_label + " but not in " + b_label);
    if (y.name < x.name) return Mismatch("tensor '" + y.name + "' is in " + b_label + " but not in " + a_label);
    if (x.dtype != y.dtype)
      return Mismatch("tensor '" + x.name + "' has dtype " + std::string(DTypeName(x.dtype)) + " in " +
                      a_label + " but " + std::string(DTypeName(y.dtype)) + " in " + b_label);
    if (x.shape != y.shape)
      return Mismatch("tensor '" + x.name + "' has shape " + ShapeString(x.shape) + " in " + a_label +
                      " but " + ShapeString(y.shape) + " in " + b_label);
    ++i, ++j;
  }
  if (i < na) return Mismatch("tensor '" + a(i).name + "' is in " + a_label + " but not in " + b_label);
  if (j < nb) return Mismatch("tensor '" + b(j).name + "' is in " + b_label + " but not in " + a_label);
  return Status::Ok();
}

}  // namespace

Status CompareCatalogs(const Catalog& a, const std::string& a_label, const Catalog& b,
                       const std::string& b_label) {
  auto view = [](const Catalog& c) {
    return [&c](size_t i) { return EntryView{c[i].name, c[i].dtype, c[i].shape}; };
  };
  return CompareEntries(a.size(), view(a), a_label, b.size(), view(b), b_label);
}

Status CompareCheckpointCatalogs(const Checkpoint& a, const Checkpoint& b) {
  auto view = [](const Checkpoint& c) {
    return [&c](size_t i) {
      const TensorInfo& t = *c.tensors()[i].info;
      return EntryView{t.name, t.dtype, t.shape};
    };
  };
  return CompareEntries(a.tensors().size(), view(a), a.path(), b.tensors().size(), view(b), b.path());
}

Status Checkpoint::AddFile(const std::string& file_path, MappedFile::Mode mode) {
  DCR_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(file_path, mode));
  files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
  return Status::Ok();
}

Result<Checkpoint> Checkpoint::Open(const std::string& path, MappedFile::Mode mode) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound(path + ": no such file or directory");
  std::map<std::string, int> owner;  // tensor name -> file index expected by the index
  if (fs::is_directory(path, ec)) {
    fs::path index = fs::path(path) / kShardIndexFile;
    if (fs::exists(index, ec)) {
      c.sharded_ = true;
      std::ifstream in(index);
      std::stringstream ss;
      ss << in.rdbuf();
      Json j = Json::parse(ss.str(), nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        return Corrupt(index.string() + ": not a JSON object with a \"weight_map\" object");
      std::map<std::string, int> file_ids;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          return Corrupt(index.string() + ": weight_map entry '" + it.key() + "' is not a string");
        std::string file = it.value().get<std::string>();
        if (file.find('/') != std::string::npos || file == ".." || file.empty())
          return Corrupt(index.string() + ": weight_map entry '" + it.key() + "' names '" + file +
                         "', which is not a file inside the directory");
        auto [fit, inserted] = file_ids.emplace(file, static_cast<int>(file_ids.size()));
        owner[it.key()] = fit->second;
      }
      std::vector<std::string> names(file_ids.size());
      for (auto& [f, id] : file_ids) names[static_cast<size_t>(id)] = f;
      for (auto& f : names) DCR_RETURN_IF_ERROR(c.AddFile((fs::path(path) / f).string(), mode));
    } else {
      std::vector<std::string> found;
      for (auto& e : fs::directory_iterator(path, ec))
        if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
      if (found.size() != 1)
        return NotFound(path + ": directory has no " + kShardIndexFile + " and " +
                        std::to_string(found.size()) + " .safetensors files (need exactly one)");
      DCR_RETURN_IF_ERROR(c.AddFile(found[0], mode));
    }
  } else {
    DCR_RETURN_IF_ERROR(c.AddFile(path, mode));
  }

  for (size_t fi = 0; fi < c.files_.size(); ++fi) {
    SafetensorsFile& f = *c.files_[fi];
    for (const TensorInfo& t : f.header().tensors) {
      if (c.sharded_) {
        auto o = owner.find(t.name);
        if (o == owner.end())
          return Corrupt(f.path() + ": tensor '" + t.name + "' is not listed in " + kShardIndexFile);
        if (o->second != static_cast<int>(fi))
          return Corrupt(f.path() + ": tensor '" + t.name + "' is mapped to another shard by " + kShardIndexFile);
      }
      TensorRef r;
      r.info = &t;
      r.file_index = static_cast<int>(fi);
      r.bytes = f.TensorBytes(t);
      if (mode == MappedFile::Mode::kReadWrite) r.mutable_bytes = f.MutableTensorBytes(t);
      c.tensors_.push_back(r);
    }
  }
  std::sort(c.tensors_.begin(), c.tensors_.end(),
            [](const TensorRef& a, const TensorRef& b) { return a.name() < b.name(); });
  for (size_t i = 1; i < c.tensors_.size(); ++i)
    if (c.tensors_[i].name() == c.tensors_[i - 1].name())
      return Corrupt(path + ": tensor '" + c.tensors_[i].name() + "' appears in two shards");
  if (c.sharded_) {
    for (auto& [name, fi] : owner)
      if (!c.Find(name))
        return Corrupt(path + ": tensor '" + name + "' is listed in " + kShardIndexFile +
                       " but missing from " + c.files_[static_cast<size_t>(fi)]->path());
  }
  return c;
}

const TensorRef* Checkpoint::Find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorRef& t, const std::string& n) { return t.name() < n; });
  return (it != tensors_.end() && it->name() == name) ? &*it : nullptr;
}

Catalog Checkpoint::catalog() const {
  Catalog c;
  c.reserve(tensors_.size());
  for (const auto& t : tensors_) c.push_back({t.name(), t.dtype(), t.info->shape});
  return c;
}

uint64_t Checkpoint::total_elements() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.num_elements();
  return n;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.info->byte_size();
  return n;
}

Status Checkpoint::Sync() {
  for (auto& f : files_) DCR_RETURN_IF_ERROR(f->Sync());
  return Status::Ok();
}

Status WriteShardedCheckpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                              uint64_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("create directory " + dir + ": " + ec.message());
  std::vector<std::vector<TensorToWrite>> shards(1);
  uint64_t in_shard = 0;
  for (const auto& t : tensors) {
    uint64_t size = ShapeElements(t.shape).value_or(0) * DTypeWidth(t.dtype);
    if (!shards.back().empty() && in_shard + size > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += size;
  }
  Json weight_map = Json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    DCR_RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / name).string(), shards[i]));
    for (const auto& t : shards[i]) {
      weight_map[t.name] = name;
      total += ShapeElements(t.shape).value_or(0) * DTypeWidth(t.dtype);
    }
  }
  Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::string text = index.dump(2) + "\n";
  return WriteFileAtomic((fs::path(dir) / kShardIndexFile).string(),
                         {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace dcr

namespace dcr {

std::optional<TensorDifference> FirstTensorDifference(const TensorRef& x, const TensorRef& y) {
  DCR_CHECK(x.dtype() == y.dtype() && x.bytes.size() == y.bytes.size());
  if (x.bytes.empty() || std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0) return std::nullopt;
  const uint32_t w = DTypeWidth(x.dtype());
  // Find the first differing byte in 1 MiB steps, then its element.
  size_t off = 0;
  const size_t step = 1 << 20;
  while (off + step < x.bytes.size() && std::memcmp(x.bytes.data() + off, y.bytes.data() + off, step) == 0) off += step;
  while (x.bytes[off] == y.bytes[off]) ++off;
  TensorDifference d;
  d.tensor = x.name();
  d.shape = x.info->shape;
  d.width = w;
  d.element = off / w;
  std::memcpy(&d.a_bits, x.bytes.data() + d.element * w, w);
  std::memcpy(&d.b_bits, y.bytes.data() + d.element * w, w);
  return d;
}

Result<std::optional<TensorDifference>> FirstDifference(const Checkpoint& a, const Checkpoint& b) {
  DCR_RETURN_IF_ERROR(CompareCheckpointCatalogs(a, b));
  for (size_t i = 0; i < a.tensors().size(); ++i)
    if (auto d = FirstTensorDifference(a.tensors()[i], b.tensors()[i])) return d;
  return std::optional<TensorDifference>();
}

std::string ElementCoordinates(const std::vector<uint64_t>& shape, uint64_t element) {
  std::vector<uint64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 0) break;
    idx[k] = element % shape[k];
    element /= shape[k];
  }
  return ShapeString(idx);
}

}  // namespace dcr
