#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/durable_file.h"

namespace dcr {
namespace {

using Json = nlohmann::json;

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Result<uint64_t> JsonUint(const Json& j, const std::string& what) {
  if (!j.is_number_unsigned()) {
    if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
    return Corrupt(what + " is not a non-negative integer");
  }
  return j.get<uint64_t>();
}

Result<TensorInfo> ParseTensorEntry(const std::string& name, const Json& e, uint64_t data_size) {
  const std::string where = "tensor '" + name + "'";
  if (!e.is_object()) return Corrupt(where + ": entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) return Corrupt(where + ": missing \"" + key + "\"");
  TensorInfo t;
  t.name = name;
  if (!e["dtype"].is_string()) return Corrupt(where + ": dtype is not a string");
  auto dt = ParseDType(e["dtype"].get<std::string>());
  if (!dt) return Unsupported(where + ": unknown dtype \"" + e["dtype"].get<std::string>() + "\"");
  t.dtype = *dt;
  if (!e["shape"].is_array()) return Corrupt(where + ": shape is not an array");
  for (const auto& d : e["shape"]) {
    DCR_ASSIGN_OR_RETURN(uint64_t v, JsonUint(d, where + ": shape dimension"));
    t.shape.push_back(v);
  }
  const auto& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2) return Corrupt(where + ": data_offsets is not [begin, end]");
  DCR_ASSIGN_OR_RETURN(t.data_begin, JsonUint(off[0], where + ": data_offsets[0]"));
  DCR_ASSIGN_OR_RETURN(t.data_end, JsonUint(off[1], where + ": data_offsets[1]"));
  if (t.data_begin > t.data_end)
    return Corrupt(where + ": data_offsets begin " + std::to_string(t.data_begin) + " > end " +
                   std::to_string(t.data_end));
  if (t.data_end > data_size)
    return Corrupt(where + ": data_offsets end " + std::to_string(t.data_end) +
                   " beyond the data region of " + std::to_string(data_size) + " bytes");
  auto n = ShapeElements(t.shape);
  if (!n) return Corrupt(where + ": shape " + ShapeString(t.shape) + " overflows");
  t.num_elements = *n;
  uint64_t w = DTypeWidth(t.dtype);
  if (t.num_elements > UINT64_MAX / w || t.num_elements * w != t.byte_size())
    return Corrupt(where + ": " + std::string(DTypeName(t.dtype)) + " " + ShapeString(t.shape) +
                   " needs " + std::to_string(t.num_elements) + "x" + std::to_string(w) +
                   " bytes but data_offsets span " + std::to_string(t.byte_size()));
  return t;
}

}  // namespace

std::optional<uint64_t> ShapeElements(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> bytes,
                                                 const std::string& path) {
  auto fail = [&](const Status& s) { return s.WithContext(path); };
  if (bytes.size() < 8)
    return fail(Corrupt("file of " + std::to_string(bytes.size()) +
                        " bytes is too short for a safetensors header"));
  uint64_t n = LoadLe64(bytes.data());
  if (n > kMaxSafetensorsHeaderBytes)
    return fail(Corrupt("header length " + std::to_string(n) + " exceeds the limit of " +
                        std::to_string(kMaxSafetensorsHeaderBytes)));
  if (n > bytes.size() - 8)
    return fail(Corrupt("header length " + std::to_string(n) + " exceeds the file size " +
                        std::to_string(bytes.size())));
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  Json j = Json::parse(text, text + n, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(Corrupt("header is not well-formed JSON"));
  if (!j.is_object()) return fail(Corrupt("header is not a JSON object"));

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = bytes.size() - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return fail(Corrupt("__metadata__ is not an object"));
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          return fail(Corrupt("__metadata__ value of '" + m.key() + "' is not a string"));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto t = ParseTensorEntry(it.key(), it.value(), data_size);
    if (!t.ok()) return fail(t.status());
    h.tensors.push_back(std::move(t).value());
  }
  // nlohmann's object is ordered by key, so tensors are sorted by name already.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : h.tensors)
    if (t.byte_size() > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->data_begin < b->data_begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data_begin < by_offset[i - 1]->data_end)
      return fail(Corrupt("tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name +
                          "' overlap in the data region"));
  }
  return h;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path, MappedFile::Mode mode) {
  SafetensorsFile f;
  DCR_ASSIGN_OR_RETURN(f.file_, MappedFile::Open(path, mode));
  DCR_ASSIGN_OR_RETURN(f.header_, ParseSafetensorsHeader(f.file_.bytes(), path));
  return f;
}

std::span<const uint8_t> SafetensorsFile::TensorBytes(const TensorInfo& t) const {
  return file_.bytes().subspan(header_.data_start + t.data_begin, t.byte_size());
}

std::span<uint8_t> SafetensorsFile::MutableTensorBytes(const TensorInfo& t) {
  return file_.mutable_bytes().subspan(header_.data_start + t.data_begin, t.byte_size());
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors) {
    auto n = ShapeElements(t.shape);
    if (!n) return InvalidArgument(path + ": tensor '" + t.name + "' shape overflows");
    uint64_t size = *n * DTypeWidth(t.dtype);
    if (!t.sparse && t.data.size() != size)
      return InvalidArgument(path + ": tensor '" + t.name + "' has " +
                             std::to_string(t.data.size()) + " bytes, shape needs " +
                             std::to_string(size));
    if (header.contains(t.name)) return InvalidArgument(path + ": duplicate tensor '" + t.name + "'");
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + size}}};
    offsets.push_back(offset);
    offset += size;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');

  DCR_ASSIGN_OR_RETURN(DurableFileWriter out, DurableFileWriter::Create(path));
  uint8_t len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  const uint64_t data_start = 8 + text.size();
  DCR_RETURN_IF_ERROR(out.Append(len_le, 8));
  DCR_RETURN_IF_ERROR(out.Append(text.data(), text.size()));
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].sparse) DCR_RETURN_IF_ERROR(out.WriteAt(data_start + offsets[i], tensors[i].data));
  DCR_RETURN_IF_ERROR(out.Truncate(data_start + offset));
  return out.Commit();
}

}  // namespace dcr
