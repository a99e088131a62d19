#include "store/object_store.h"

#include "store/file_store.h"
#include "store/s3_store.h"

namespace dcr {

Status CheckObjectKey(const std::string& key) {
  auto bad = [&](const char* why) { return InvalidArgument("object key \"" + key + "\": " + why); };
  if (key.empty()) return bad("empty");
  if (key.size() > 1024) return bad("longer than 1024 bytes");
  size_t start = 0;
  for (;;) {
    size_t end = key.find('/', start);
    std::string seg = key.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (seg.empty()) return bad("empty path segment");
    if (seg[0] == '.') return bad("a path segment starts with '.'");
    if (end == std::string::npos) break;
    start = end + 1;
  }
  for (unsigned char c : key) {
    if (c < 0x21 || c > 0x7e || c == '\\') return bad("only printable ASCII without spaces or '\\' is allowed");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const std::string& url, const StoreOptions& options) {
  const std::string file = "file://";
  if (url.compare(0, file.size(), file) == 0) return OpenFileStore(url, url.substr(file.size()));
  if (url.starts_with("s3://")) return OpenS3Store(url, options);
  return InvalidArgument("store URL \"" + url + "\": expected file://DIR or s3://BUCKET[/PREFIX]");
}

}  // namespace dcr
