// The fixture of the s3:// backend tests (s3_store_test.cc, s3_store_fault_test.cc) against a
// real S3-compatible server. tests/store_s3.sh (ctest store_s3) starts s3rver and
// tests/s3_fault_proxy.py in front of it and sets:
//   S3_ENDPOINT, S3_VHOST_ENDPOINT, S3_BUCKET     s3rver, path and virtual-host style
//   S3_PROXY_ENDPOINT, S3_PROXY_CONTROL           the fault proxy and its control file
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY      s3rver's credentials
// Without them every test fails: there is no in-process fake to fall back on.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "store/object_store.h"
#include "testing/test_files.h"

namespace dcr::test {

inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class S3StoreTest : public ::testing::Test {
 public:
  void SetUp() override {
    for (const char* name : {"S3_ENDPOINT", "S3_VHOST_ENDPOINT", "S3_BUCKET", "S3_PROXY_ENDPOINT", "S3_PROXY_CONTROL",
                             "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) {
      ASSERT_FALSE(Env(name).empty()) << "$" << name << " is not set: run this through tests/store_s3.sh "
                                      << "(ctest -R store_s3), which starts s3rver and the fault proxy";
    }
    SetFaults("{}");
  }
  void TearDown() override {
    if (!Env("S3_PROXY_CONTROL").empty()) SetFaults("{}");
  }

  // Options for s3rver directly (or through the proxy), small parts so multipart and ranged
  // paths run on a few MiB.
  static StoreOptions Options(bool proxy = false) {
    StoreOptions o;
    o.endpoint = Env(proxy ? "S3_PROXY_ENDPOINT" : "S3_ENDPOINT");
    o.multipart_threshold = 2 << 20;
    o.part_bytes = (1 << 20) + 7;
    o.parallelism = 3;
    o.base_backoff_ms = 5;
    o.request_timeout_ms = 10000;
    return o;
  }
  static std::unique_ptr<ObjectStore> Open(const std::string& prefix, const StoreOptions& options) {
    std::string url = "s3://" + Env("S3_BUCKET") + (prefix.empty() ? "" : "/" + prefix);
    auto store = OpenObjectStore(url, options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  // The proxy's faults (tests/s3_fault_proxy.py); a change restarts its request count.
  static void SetFaults(const std::string& json) {
    const std::string path = Env("S3_PROXY_CONTROL"), tmp = path + ".tmp";
    WriteAll(tmp, json);
    std::filesystem::rename(tmp, path);
  }
  static std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  }
};

}  // namespace dcr::test
