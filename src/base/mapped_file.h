// Memory-mapped files. Reads are zero-copy views into the page cache; a writable mapping is
// MAP_SHARED so stores reach the file, and Sync() makes them durable (msync + fsync).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace dcr {

class MappedFile {
 public:
  enum class Mode { kReadOnly, kReadWrite };

  static Result<MappedFile> Open(const std::string& path, Mode mode = Mode::kReadOnly);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  bool writable() const { return mode_ == Mode::kReadWrite; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }
  // Only valid for kReadWrite mappings (checked).
  std::span<uint8_t> mutable_bytes();

  // Flushes written pages and fsyncs the file. No-op for read-only mappings.
  Status Sync();

 private:
  void Reset();

  std::string path_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  Mode mode_ = Mode::kReadOnly;
};

}  // namespace dcr
