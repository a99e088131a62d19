#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace dcr {

Result<MappedFile> MappedFile::Open(const std::string& path, Mode mode) {
  MappedFile f;
  f.path_ = path;
  f.mode_ = mode;
  f.fd_ = ::open(path.c_str(), (mode == Mode::kReadWrite ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (f.fd_ < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return ErrnoError("open " + path);
  }
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ > 0) {
    int prot = PROT_READ | (mode == Mode::kReadWrite ? PROT_WRITE : 0);
    void* p = ::mmap(nullptr, f.size_, prot, MAP_SHARED, f.fd_, 0);
    if (p == MAP_FAILED) return ErrnoError("mmap " + path);
    f.data_ = static_cast<uint8_t*>(p);
  }
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    Reset();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mode_ = o.mode_;
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

std::span<uint8_t> MappedFile::mutable_bytes() {
  DCR_CHECK(mode_ == Mode::kReadWrite);
  return {data_, static_cast<size_t>(size_)};
}

Status MappedFile::Sync() {
  if (mode_ != Mode::kReadWrite) return Status::Ok();
  if (data_ != nullptr && ::msync(data_, size_, MS_SYNC) != 0) return ErrnoError("msync " + path_);
  if (::fsync(fd_) != 0) return ErrnoError("fsync " + path_);
  return Status::Ok();
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
  std::filesystem::path p(path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmp = dir + "/." + p.filename().string() + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create " + tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = ErrnoError("write " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = ErrnoError("fsync " + tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp + " -> " + path);
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDirectory(dir);
}

}  // namespace dcr
