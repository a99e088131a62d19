// The s3:// backend of ObjectStore (store/object_store.h): any S3-compatible service, AWS
// Signature V4 (store/sigv4.h). docs/store.md "S3 backend" describes the requests.
//
// Object KEY of s3://BUCKET/PREFIX is the S3 object PREFIX/KEY (KEY without a prefix).
//  - Put of up to multipart_threshold bytes is one PUT with a signed payload (S3 checks the
//    body's SHA-256); above it, and PutFile above it, a multipart upload of part_bytes parts,
//    `parallelism` at once, completed only when every part is in, aborted on failure. A
//    multipart object appears at once on completion, so both publish atomically.
//  - Get and GetFile fetch ranges of part_bytes, `parallelism` at once; every range after the
//    first carries If-Match with the first one's ETag, so a replaced object restarts the fetch
//    instead of mixing versions. Every body is checked against Content-Length/Content-Range and
//    the requested range; a short one is retried, never returned. GetFile writes a temporary
//    file, fsyncs it and renames it over PATH.
//  - Transient failures (transport errors, timeouts, short bodies, HTTP 5xx, 408, 429) are
//    retried up to max_attempts per request with backoff uniform(0, min(5 s, base·2^n)); then
//    kIoError. 404 NoSuchKey is kNotFound; any other refusal is kInvalidArgument naming the key
//    and S3's error Code and Message.
// Thread-safe: requests share a pool of kept-alive connections.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "store/object_store.h"

namespace dcr {

// `url` is s3://BUCKET[/PREFIX]. Endpoint, addressing style, region and transfer parameters come
// from `options`; credentials from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and optional
// $AWS_SESSION_TOKEN; region from options.region, $AWS_REGION, $AWS_DEFAULT_REGION, else
// us-east-1. Nothing is sent until the first call.
Result<std::unique_ptr<ObjectStore>> OpenS3Store(const std::string& url, const StoreOptions& options);

}  // namespace dcr
