// The two parallel transfers of the s3:// backend: multipart upload and ranged download of one
// object, each request through s3::Client (retries, signing, counters).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/s3_client.h"

namespace dcr::s3 {

// The bytes [offset, offset + length) of what is uploaded; read into `scratch` unless they are
// already in memory. Called from several threads at once.
using PartReader =
    std::function<Result<std::span<const uint8_t>>(uint64_t offset, uint64_t length, std::vector<uint8_t>& scratch)>;

// CreateMultipartUpload, UploadPart of max(part_bytes, size/10000) bytes each (signed
// payloads), `parallelism` at a time, then CompleteMultipartUpload with every part's ETag. A
// Complete answered 200 with an error body is retried; a retried Complete that finds the upload
// gone (its first answer was lost) succeeds if the object has the expected size. On any failure
// the upload is aborted (best effort) and the first error returned. `where` names the object.
Status MultipartUpload(Client& client, const std::string& object, const std::string& where, uint64_t size,
                       const PartReader& read);

// Told the object's size before any bytes (again if the download restarts).
using SizeSink = std::function<Status(uint64_t size)>;
// Given each range once it is complete and verified; called from several threads at once.
using ByteSink = std::function<Status(uint64_t offset, std::span<const uint8_t> bytes)>;

// Downloads the whole object. A plain GET brings an object of at most part_bytes in one
// request; for a larger one it reads only the headers (size, ETag) and the object then comes in
// ranges of part_bytes, `parallelism` at a time, each with If-Match: ETAG. A 412 or a changed
// total size restarts the download (up to max_attempts times, then kIoError). Every body must
// match its Content-Length, and every range its Content-Range, else it is retried. A server that
// ignores Range (200) is read for the slice asked.
Status FetchObject(Client& client, const std::string& object, const std::string& where, const SizeSink& on_size,
                   const ByteSink& write);

}  // namespace dcr::s3
