#include "base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <utility>

namespace dcr {

Result<DurableFileWriter> DurableFileWriter::Create(const std::string& path) {
  DurableFileWriter w;
  std::filesystem::path p(path);
  w.path_ = path;
  w.dir_ = p.has_parent_path() ? p.parent_path().string() : ".";
  // Unique per writer (pid and a process-wide counter), so concurrent writers of one final path,
  // in one process or several, never share a temporary file; the last Commit wins.
  static std::atomic<uint64_t> counter{0};
  w.tmp_path_ = w.dir_ + "/." + p.filename().string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return ErrnoError("create " + w.tmp_path_);
  return w;
}

DurableFileWriter::DurableFileWriter(DurableFileWriter&& o) noexcept
    : path_(std::move(o.path_)), tmp_path_(std::move(o.tmp_path_)), dir_(std::move(o.dir_)),
      fd_(std::exchange(o.fd_, -1)), appended_(o.appended_) {}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

Status DurableFileWriter::WriteAt(uint64_t offset, std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write " + tmp_path_);
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status DurableFileWriter::Append(std::span<const uint8_t> bytes) {
  DCR_RETURN_IF_ERROR(WriteAt(appended_, bytes));
  appended_ += bytes.size();
  return Status::Ok();
}

Status DurableFileWriter::Truncate(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return ErrnoError("truncate " + tmp_path_);
  return Status::Ok();
}

Status DurableFileWriter::Commit() {
  DCR_CHECK(fd_ >= 0);
  if (::fsync(fd_) != 0) return ErrnoError("fsync " + tmp_path_);  // the destructor cleans up
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp_path_ + " -> " + path_);
    ::unlink(tmp_path_.c_str());
    return s;
  }
  return SyncDirectory(dir_);
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory " + dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync directory " + dir);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes) {
  DCR_ASSIGN_OR_RETURN(DurableFileWriter w, DurableFileWriter::Create(path));
  DCR_RETURN_IF_ERROR(w.Append(bytes));
  return w.Commit();
}

}  // namespace dcr
