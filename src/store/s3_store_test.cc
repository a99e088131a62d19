// The s3:// backend against a real s3rver (run by tests/store_s3.sh; see s3_store_test_env.h):
// bit-exact transfers of every size and path, List continuation, addressing styles, refusals.
#include <algorithm>
#include <atomic>
#include <thread>

#include "store/s3_store_test_env.h"

namespace dcr::test {
namespace {

TEST_F(S3StoreTest, PutGetHeadAreBitExactFromEmptyToMultiMiB) {
  auto store = Open("exact", Options());
  ASSERT_TRUE(store);
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{(1 << 20) + 7}, size_t{(1 << 20) + 8}, size_t{3 << 20}}) {
    SCOPED_TRACE(n);
    auto bytes = RandomBytes(n, static_cast<uint32_t>(n));
    const std::string key = "obj/" + std::to_string(n) + ".bin";
    ASSERT_TRUE(store->Put(key, bytes).ok());
    auto got = store->Get(key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == bytes);
    auto head = store->Head(key);
    ASSERT_TRUE(head.ok() && head->has_value());
    EXPECT_EQ((*head)->size, n);
    EXPECT_EQ((*head)->key, key);
  }
  StoreCounters c = store->counters();
  EXPECT_GT(c.requests, 12u);
  EXPECT_EQ(c.retries, 0u);
  EXPECT_EQ(c.bytes_put, c.bytes_got);
}

TEST_F(S3StoreTest, MultipartPutFileAndParallelRangedGetFileAreBitExact) {
  TempDir dir("dcr_s3_");
  auto store = Open("multipart", Options());
  ASSERT_TRUE(store);
  const auto bytes = RandomBytes((11 << 19) + 3, 7);  // 5.5 MiB + 3: 6 parts of 1 MiB + 7
  WriteAll(dir / "src.bin", bytes);
  const StoreCounters before = store->counters();
  ASSERT_TRUE(store->PutFile("big/file.bin", dir / "src.bin").ok());
  // CreateMultipartUpload + 6 UploadPart + CompleteMultipartUpload.
  EXPECT_EQ(store->counters().requests - before.requests, 8u);
  ASSERT_TRUE(store->GetFile("big/file.bin", dir / "dst.bin").ok());
  EXPECT_TRUE(ReadAll(dir / "dst.bin") == bytes);
  // + a GET that reads only the headers (the object is over one part) + 6 ranged GETs.
  EXPECT_EQ(store->counters().requests - before.requests, 15u);
  // Nothing but the two files: GetFile's temporary file is gone.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2);

  ASSERT_TRUE(store->Put("big/memory.bin", bytes).ok());  // Put above the threshold: multipart too
  auto got = store->Get("big/memory.bin");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == bytes);
  WriteAll(dir / "small.bin", std::span<const uint8_t>(bytes.data(), 100));
  ASSERT_TRUE(store->PutFile("big/small.bin", dir / "small.bin").ok());
  ASSERT_TRUE(store->GetFile("big/small.bin", dir / "small-back.bin").ok());
  EXPECT_EQ(ReadAll(dir / "small-back.bin"), std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100));
  EXPECT_EQ(store->PutFile("big/x", dir / "absent").code(), StatusCode::kIoError);
}

TEST_F(S3StoreTest, GetRangeReturnsExactlyTheRangeAndRefusesRangesOutsideTheObject) {
  auto store = Open("range", Options());
  ASSERT_TRUE(store);
  const auto bytes = RandomBytes(10000, 3);
  ASSERT_TRUE(store->Put("r.bin", bytes).ok());
  for (auto [offset, length] :
       std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}, {0, 10000}, {9999, 1}, {1234, 5678}, {10000, 0}}) {
    auto got = store->GetRange("r.bin", offset, length);
    ASSERT_TRUE(got.ok()) << offset << "+" << length << ": " << got.status().ToString();
    EXPECT_TRUE(*got == std::vector<uint8_t>(bytes.begin() + offset, bytes.begin() + offset + length));
  }
  for (auto [offset, length] :
       std::vector<std::pair<uint64_t, uint64_t>>{{9999, 2}, {10000, 1}, {20000, 5}, {10001, 0}}) {
    auto got = store->GetRange("r.bin", offset, length);
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << offset << "+" << length;
  }
  EXPECT_EQ(store->GetRange("absent.bin", 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->GetRange("absent.bin", 0, 0).status().code(), StatusCode::kNotFound);
}

TEST_F(S3StoreTest, MissingKeysAreNotFoundAndDeleteIsIdempotent) {
  TempDir dir("dcr_s3_");
  auto store = Open("missing", Options());
  ASSERT_TRUE(store);
  auto get = store->Get("nope/x.bin");
  EXPECT_EQ(get.status().code(), StatusCode::kNotFound);
  EXPECT_NE(get.status().message().find("missing/nope/x.bin"), std::string::npos) << get.status().message();
  EXPECT_EQ(store->GetFile("nope/x.bin", dir / "x").code(), StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
  auto head = store->Head("nope/x.bin");
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head->has_value());
  ASSERT_TRUE(store->Put("d.bin", RandomBytes(10, 1)).ok());
  ASSERT_TRUE(store->Delete("d.bin").ok());
  EXPECT_EQ(store->Get("d.bin").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Delete("d.bin").ok());
  EXPECT_TRUE(store->Delete("never/was.bin").ok());
  EXPECT_EQ(store->Put("bad//key", {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("../up").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(S3StoreTest, ListFollowsContinuationTokensPastOneThousandKeysInByteOrder) {
  auto store = Open("list", Options());
  ASSERT_TRUE(store);
  const int n = 1100;  // s3rver answers at most 1000 keys a page
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < n; i += 8) {
        std::vector<uint8_t> bytes(static_cast<size_t>(i % 7));
        if (!store->Put("many/k" + std::to_string(i) + "&x", bytes).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(store->Put("other/a", RandomBytes(3, 1)).ok());
  // Not "many-x/": s3rver 3.7.1 lists in directory-walk order, which puts "many/..." first, and
  // its continuation then skips keys that sort between ("many-x/" < "many/").
  ASSERT_TRUE(store->Put("manyz/a", RandomBytes(3, 1)).ok());

  const uint64_t before = store->counters().requests;
  auto listed = store->List("many/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(store->counters().requests - before, 2u);  // two pages
  ASSERT_EQ(listed->size(), static_cast<size_t>(n));
  std::vector<std::string> want;
  for (int i = 0; i < n; ++i) want.push_back("many/k" + std::to_string(i) + "&x");
  std::sort(want.begin(), want.end());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*listed)[i].key, want[i]);
    EXPECT_EQ((*listed)[i].size, static_cast<uint64_t>(std::stoi(want[i].substr(6)) % 7));
  }
  auto all = store->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(n + 2));
  EXPECT_TRUE(std::is_sorted(all->begin(), all->end(), [](auto& a, auto& b) { return a.key < b.key; }));
  auto none = store->List("nothing/");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // The store prefix is not part of listed keys, and another prefix does not see them.
  auto outer = Open("", Options());
  auto under = outer->List("list/other/");
  ASSERT_TRUE(under.ok());
  ASSERT_EQ(under->size(), 1u);
  EXPECT_EQ((*under)[0].key, "list/other/a");
}

TEST_F(S3StoreTest, VirtualHostStyleAddressesTheBucketByHostName) {
  StoreOptions o = Options();
  o.endpoint = Env("S3_VHOST_ENDPOINT");
  o.virtual_host_style = true;
  auto store = Open("vhost", o);
  ASSERT_TRUE(store);
  const auto bytes = RandomBytes((5 << 19) + 1, 11);                            // multipart and ranged too
  EXPECT_EQ(store->Put("v/a b.bin", {}).code(), StatusCode::kInvalidArgument);  // keys have no spaces
  ASSERT_TRUE(store->Put("v/a+b=c.bin", bytes).ok());
  auto got = store->Get("v/a+b=c.bin");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == bytes);
  // The same object through path style.
  auto path_style = Open("vhost", Options());
  auto listed = path_style->List("v/");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "v/a+b=c.bin");
  EXPECT_EQ((*listed)[0].size, bytes.size());
}

TEST_F(S3StoreTest, RefusalsAreInvalidArgumentNamingTheKeyAndTheS3ErrorCode) {
  auto no_bucket = OpenObjectStore("s3://no-such-bucket-dcr/p", Options());
  ASSERT_TRUE(no_bucket.ok());
  auto get = (*no_bucket)->Get("k.bin");
  EXPECT_EQ(get.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(get.status().message().find("NoSuchBucket"), std::string::npos) << get.status().message();
  EXPECT_NE(get.status().message().find("s3://no-such-bucket-dcr/p/k.bin"), std::string::npos)
      << get.status().message();
  EXPECT_EQ((*no_bucket)->Put("k.bin", RandomBytes(5, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*no_bucket)->List("").status().code(), StatusCode::kInvalidArgument);

  const std::string key_id = Env("AWS_ACCESS_KEY_ID");
  setenv("AWS_ACCESS_KEY_ID", "WRONGKEY", 1);
  auto bad_key = Open("auth", Options());
  setenv("AWS_ACCESS_KEY_ID", key_id.c_str(), 1);
  ASSERT_TRUE(bad_key);
  Status put = bad_key->Put("k.bin", RandomBytes(5, 1));
  EXPECT_EQ(put.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(put.message().find("InvalidAccessKeyId"), std::string::npos) << put.message();
  EXPECT_NE(put.message().find("auth/k.bin"), std::string::npos) << put.message();
  EXPECT_EQ(bad_key->counters().retries, 0u);

  unsetenv("AWS_ACCESS_KEY_ID");
  auto no_credentials = OpenObjectStore("s3://" + Env("S3_BUCKET"), Options());
  setenv("AWS_ACCESS_KEY_ID", key_id.c_str(), 1);
  EXPECT_EQ(no_credentials.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_credentials.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
  EXPECT_EQ(OpenObjectStore("s3://Bad_Bucket", Options()).status().code(), StatusCode::kInvalidArgument);
  StoreOptions bad_endpoint = Options();
  bad_endpoint.endpoint = "ftp://host";
  EXPECT_EQ(OpenObjectStore("s3://" + Env("S3_BUCKET"), bad_endpoint).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(S3StoreTest, ConcurrentUseOfOneStoreFromManyThreadsIsExact) {
  auto store = Open("threads", Options());
  ASSERT_TRUE(store);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        auto bytes = RandomBytes(static_cast<size_t>(100000 * (t + 1) + i * 777777), static_cast<uint32_t>(t * 10 + i));
        const std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        auto got = store->Put(key, bytes).ok() ? store->Get(key) : Result<std::vector<uint8_t>>(Internal("put"));
        if (!got.ok() || *got != bytes) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace dcr::test
