#include "store/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <system_error>

#include "base/durable_file.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

class FileStore final : public ObjectStore {
 public:
  FileStore(std::string url, std::string dir) : url_(std::move(url)), dir_(std::move(dir)) {}

  const std::string& url() const override { return url_; }

  Status Put(const std::string& key, std::span<const uint8_t> bytes) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    DCR_RETURN_IF_ERROR(MakeParents(key));
    DCR_RETURN_IF_ERROR(WriteFileAtomic(PathOf(key), bytes).WithContext(Where(key)));
    Count(bytes.size(), 0);
    return Status::Ok();
  }

  Status PutFile(const std::string& key, const std::string& path) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    DCR_RETURN_IF_ERROR(MakeParents(key));
    DCR_ASSIGN_OR_RETURN(uint64_t n, CopyFile(path, PathOf(key)));
    Count(n, 0);
    return Status::Ok();
  }

  Result<std::vector<uint8_t>> Get(const std::string& key) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    return ReadRange(key, 0, UINT64_MAX);
  }

  Result<std::vector<uint8_t>> GetRange(const std::string& key, uint64_t offset, uint64_t length) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    return ReadRange(key, offset, length);
  }

  Status GetFile(const std::string& key, const std::string& path) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    struct stat st;
    if (::stat(PathOf(key).c_str(), &st) != 0) return Missing(key);
    DCR_ASSIGN_OR_RETURN(uint64_t n, CopyFile(PathOf(key), path));
    Count(0, n);
    return Status::Ok();
  }

  Result<std::optional<ObjectInfo>> Head(const std::string& key) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    requests_++;
    struct stat st;
    if (::stat(PathOf(key).c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::optional<ObjectInfo>();
      return ErrnoError("stat " + PathOf(key));
    }
    if (!S_ISREG(st.st_mode)) return std::optional<ObjectInfo>();
    return std::optional<ObjectInfo>(ObjectInfo{key, static_cast<uint64_t>(st.st_size)});
  }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    requests_++;
    // Walk the deepest directory that the prefix names completely; filter by the whole prefix.
    std::string base = prefix.substr(0, prefix.rfind('/') == std::string::npos ? 0 : prefix.rfind('/'));
    std::vector<ObjectInfo> out;
    std::error_code ec;
    fs::path root = base.empty() ? fs::path(dir_) : fs::path(dir_) / base;
    if (!fs::is_directory(root, ec)) return out;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {  // temp files and anything else no key can name
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file()) continue;
      std::string key = fs::relative(it->path(), dir_).generic_string();
      if (key.compare(0, prefix.size(), prefix) != 0) continue;
      out.push_back({std::move(key), static_cast<uint64_t>(it->file_size())});
    }
    if (ec) return IoError("list " + root.string() + ": " + ec.message());
    std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Status Delete(const std::string& key) override {
    DCR_RETURN_IF_ERROR(CheckObjectKey(key));
    requests_++;
    if (::unlink(PathOf(key).c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
      return ErrnoError("delete " + PathOf(key));
    }
    // Empty directories left behind are pruned (best effort: a concurrent Put may refill one).
    fs::path p = fs::path(PathOf(key)).parent_path();
    std::error_code ec;
    while (p != fs::path(dir_) && fs::is_empty(p, ec) && !ec && fs::remove(p, ec)) p = p.parent_path();
    return Status::Ok();
  }

  StoreCounters counters() const override {
    return {requests_.load(), 0, bytes_put_.load(), bytes_got_.load()};
  }

 private:
  std::string PathOf(const std::string& key) const { return dir_ + "/" + key; }
  std::string Where(const std::string& key) const { return url_ + " object " + key; }
  Status Missing(const std::string& key) const { return NotFound(Where(key) + ": no such object"); }

  void Count(uint64_t put, uint64_t got) {
    requests_++;
    bytes_put_ += put;
    bytes_got_ += got;
  }

  // Creates the directories between dir_ and the key's file, fsyncing each parent of a new one.
  Status MakeParents(const std::string& key) {
    size_t pos = 0;
    while ((pos = key.find('/', pos)) != std::string::npos) {
      std::string d = dir_ + "/" + key.substr(0, pos);
      if (::mkdir(d.c_str(), 0755) == 0) {
        DCR_RETURN_IF_ERROR(SyncDirectory(fs::path(d).parent_path().string()));
      } else if (errno != EEXIST) {
        return ErrnoError("mkdir " + d);
      }
      ++pos;
    }
    return Status::Ok();
  }

  Result<std::vector<uint8_t>> ReadRange(const std::string& key, uint64_t offset, uint64_t length) {
    const std::string path = PathOf(key);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return (errno == ENOENT || errno == ENOTDIR) ? Status(Missing(key)) : ErrnoError("open " + path);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      Status s = ErrnoError("stat " + path);
      ::close(fd);
      return s;
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (length == UINT64_MAX) length = size - std::min(offset, size);
    if (offset > size || length > size - offset) {
      ::close(fd);
      return InvalidArgument(Where(key) + ": range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                             ") is outside the object's " + std::to_string(size) + " bytes");
    }
    std::vector<uint8_t> out(length);
    uint64_t done = 0;
    while (done < length) {
      ssize_t r = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        Status s = r < 0 ? ErrnoError("read " + path) : IoError("read " + path + ": file shrank while read");
        ::close(fd);
        return s;
      }
      done += static_cast<uint64_t>(r);
    }
    ::close(fd);
    Count(0, length);
    return out;
  }

  // Streams `from` into a durable copy at `to`; returns the bytes copied.
  static Result<uint64_t> CopyFile(const std::string& from, const std::string& to) {
    int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open " + from);
    auto w = DurableFileWriter::Create(to);
    if (!w.ok()) {
      ::close(fd);
      return w.status();
    }
    std::vector<uint8_t> buf(8 << 20);
    uint64_t total = 0;
    for (;;) {
      ssize_t r = ::read(fd, buf.data(), buf.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        Status s = ErrnoError("read " + from);
        ::close(fd);
        return s;
      }
      if (r == 0) break;
      Status s = w->Append(buf.data(), static_cast<size_t>(r));
      if (!s.ok()) {
        ::close(fd);
        return s;
      }
      total += static_cast<uint64_t>(r);
    }
    ::close(fd);
    DCR_RETURN_IF_ERROR(w->Commit());
    return total;
  }

  std::string url_, dir_;
  std::atomic<uint64_t> requests_{0}, bytes_put_{0}, bytes_got_{0};
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenFileStore(const std::string& url, const std::string& dir) {
  if (dir.empty()) return InvalidArgument("store " + url + ": empty directory");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("store " + url + ": create " + dir + ": " + ec.message());
  if (!fs::is_directory(dir, ec)) return InvalidArgument("store " + url + ": " + dir + " is not a directory");
  std::string abs = fs::absolute(dir, ec).lexically_normal().string();
  if (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  return std::unique_ptr<ObjectStore>(new FileStore(url, abs));
}

}  // namespace dcr
