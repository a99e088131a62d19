// An object store (DESIGN.md §6): a flat namespace of immutable-by-convention objects under one
// root, addressed by keys ("a/b/c.json": '/'-separated, no empty segment, no "." or "..", no
// leading '/', printable ASCII without '\\'). The store moves opaque bytes and knows nothing of
// deltas. Backends:
//   file://DIR            a local or shared filesystem directory (store/file_store.h)
//   s3://BUCKET[/PREFIX]  any S3-compatible service, AWS Signature V4 (store/s3_store.h)
//
// Contract every backend keeps (the refit protocol relies on it):
//  - Put/PutFile publish atomically: a reader sees the whole new object or none of it (or the
//    previous object under that key), never a prefix. Durable when they return Ok.
//  - Get returns exactly the bytes that were put; a short or damaged transfer is retried and
//    then reported (kIoError), never returned.
//  - A missing key is kNotFound (not retried); refused requests (4xx other than 404/408/429) are
//    kInvalidArgument naming the key and the service's error code; transient failures (5xx,
//    timeouts, resets, 408, 429) are retried with exponential backoff and jitter, then kIoError.
//  - List returns every key under a prefix in ascending byte order, with sizes.
//  - Delete of a missing key is Ok.
//  - Thread-safe: one store object may be used from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace dcr {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

// What the stores count (for progress lines and metrics). Monotonic.
struct StoreCounters {
  uint64_t requests = 0, retries = 0;
  uint64_t bytes_put = 0, bytes_got = 0;
};

struct StoreOptions {
  // S3 only.
  std::string endpoint;             // e.g. http://127.0.0.1:4569; empty: https://s3.<region>.amazonaws.com
  std::string region;               // empty: $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1
  bool virtual_host_style = false;  // BUCKET.host/key instead of host/BUCKET/key
  uint64_t multipart_threshold = 64ull << 20;  // PutFile/Put above this use multipart upload
  uint64_t part_bytes = 16ull << 20;           // multipart part size and ranged-GET chunk size
  int parallelism = 4;              // concurrent part uploads / ranged GETs of one object
  // Both backends.
  int max_attempts = 6;             // per request, first try included
  int base_backoff_ms = 100;        // attempt n waits uniform(0, base·2^n) ms, capped at 5 s
  int request_timeout_ms = 30000;   // per HTTP request (S3); 0: none
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // The URL the store was opened from (for messages).
  virtual const std::string& url() const = 0;

  virtual Status Put(const std::string& key, std::span<const uint8_t> bytes) = 0;
  // Publishes the contents of a local file (streamed; multipart on S3 above the threshold).
  virtual Status PutFile(const std::string& key, const std::string& path) = 0;
  virtual Result<std::vector<uint8_t>> Get(const std::string& key) = 0;
  // Bytes [offset, offset + length) of an object; kInvalidArgument when the range does not lie
  // within the object.
  virtual Result<std::vector<uint8_t>> GetRange(const std::string& key, uint64_t offset, uint64_t length) = 0;
  // Writes the object to `path` durably (temp file + fsync + rename); parallel ranged GETs on S3.
  virtual Status GetFile(const std::string& key, const std::string& path) = 0;
  // nullopt when absent.
  virtual Result<std::optional<ObjectInfo>> Head(const std::string& key) = 0;
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;
  virtual Status Delete(const std::string& key) = 0;

  virtual StoreCounters counters() const = 0;
};

// kInvalidArgument naming the key unless it is a valid key (see above).
Status CheckObjectKey(const std::string& key);

// Opens file://DIR (DIR is created if absent) or s3://BUCKET[/PREFIX]. S3 credentials come from
// $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and optional $AWS_SESSION_TOKEN (kInvalidArgument
// when absent). Any other scheme is kInvalidArgument.
Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const std::string& url, const StoreOptions& options = {});

}  // namespace dcr
