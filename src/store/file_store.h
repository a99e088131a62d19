// The file:// backend of ObjectStore (store/object_store.h): object KEY is the file DIR/KEY.
// Put publishes by temp file + fsync + rename + directory fsync (base/durable_file.h), so a
// reader on the same or a shared filesystem sees a whole object or none; directories a key
// needs are created and fsynced up to DIR. Temp files are dot-files, which keys may not name,
// and List never shows them. Filesystem errors are kIoError naming the path; nothing is retried
// (a local filesystem has no transient failures worth retrying).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "store/object_store.h"

namespace dcr {

// `dir` is created if absent. `url` is kept for messages.
Result<std::unique_ptr<ObjectStore>> OpenFileStore(const std::string& url, const std::string& dir);

}  // namespace dcr
