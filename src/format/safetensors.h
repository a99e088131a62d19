// safetensors files: an 8-byte little-endian header length N, N bytes of JSON, then the data
// region. Each tensor's "data_offsets" [begin, end) are relative to the data region.
// Reading is zero-copy through mmap; the header is validated before any tensor is exposed.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "format/dtype.h"

namespace dcr {

// Largest header accepted (the same bound as the reference implementation).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint64_t num_elements = 0;  // product of shape (1 for a scalar)
  uint64_t data_begin = 0;    // relative to the data region
  uint64_t data_end = 0;

  uint64_t byte_size() const { return data_end - data_begin; }
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data region (8 + N)
};

// Validates everything about the header against a file of `file_size` bytes whose first bytes
// are `prefix` (at least 8 + N of them): size sane, JSON well formed, known dtypes, byte sizes
// agree with shapes, offsets in bounds and non-overlapping. `path` only names the file in errors.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_bytes,
                                                 const std::string& path);

// Product of `shape` with overflow detection; nullopt when it overflows 2^64.
std::optional<uint64_t> ShapeElements(const std::vector<uint64_t>& shape);

std::string ShapeString(const std::vector<uint64_t>& shape);  // "[3, 4]"

// One mapped safetensors file.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> Open(const std::string& path,
                                      MappedFile::Mode mode = MappedFile::Mode::kReadOnly);

  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  std::span<const uint8_t> TensorBytes(const TensorInfo& t) const;
  std::span<uint8_t> MutableTensorBytes(const TensorInfo& t);
  Status Sync() { return file_.Sync(); }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  // Exactly num_elements * width bytes, or empty when `sparse` is set: the data region is then
  // left as a hole (reads as zeros) so files of many GiB cost no disk.
  std::span<const uint8_t> data;
  bool sparse = false;
};

// Writes a safetensors file durably (temp + fsync + rename). Tensors are laid out in the order
// given; the JSON header lists keys sorted and is padded with spaces to a multiple of 8 bytes.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace dcr
