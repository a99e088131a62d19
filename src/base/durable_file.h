// Durable, atomic file publication: a file appears at its final path complete and fsynced, or
// not at all. Bytes go to a temporary file in the same directory; Commit fsyncs it, renames it
// over the final path and fsyncs the directory.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace dcr {

class DurableFileWriter {
 public:
  static Result<DurableFileWriter> Create(const std::string& path);
  DurableFileWriter(DurableFileWriter&& other) noexcept;
  DurableFileWriter& operator=(DurableFileWriter&&) = delete;
  // An uncommitted writer removes its temporary file; the final path is never touched.
  ~DurableFileWriter();

  // Appends at the end of what Append has written so far.
  Status Append(std::span<const uint8_t> bytes);
  Status Append(const void* data, size_t n) { return Append({static_cast<const uint8_t*>(data), n}); }
  // Writes at an absolute offset (leaving holes is allowed); does not move the append position.
  Status WriteAt(uint64_t offset, std::span<const uint8_t> bytes);
  // Sets the file size; a larger size leaves a hole that reads as zeros and costs no disk.
  Status Truncate(uint64_t size);
  // fsync, rename over the final path, fsync of the directory. The writer is spent afterwards.
  Status Commit();

  uint64_t appended() const { return appended_; }

 private:
  DurableFileWriter() = default;

  std::string path_, tmp_path_, dir_;
  int fd_ = -1;
  uint64_t appended_ = 0;
};

// Writes `bytes` to `path` durably and atomically; on failure `path` is untouched.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes);

// fsyncs a directory so a rename or create inside it is durable.
Status SyncDirectory(const std::string& dir);

}  // namespace dcr
