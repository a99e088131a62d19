#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

bool PrefaultForWrite(std::span<uint8_t> bytes) {
#ifdef MADV_POPULATE_WRITE
  if (bytes.empty()) return true;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t from = reinterpret_cast<uintptr_t>(bytes.data()) & ~(page - 1);
  const uintptr_t to = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size() + page - 1) & ~(page - 1);
  return ::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) == 0;
#else
  (void)bytes;
  return false;
#endif
}

}  // namespace dcr
