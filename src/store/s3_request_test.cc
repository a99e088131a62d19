// The pure parts of the s3:// backend: endpoints, s3:// URLs, request URLs, and the XML and
// headers S3 answers with. (Signing: sigv4_test.cc, tests/sigv4_botocore.py; the store against a
// real server: tests/store_s3.sh.)
#include "store/s3_request.h"

#include <gtest/gtest.h>

namespace dcr::s3 {
namespace {

TEST(S3Endpoint, KeepsHostAndPortDropsDefaultPortsAndRefusesPaths) {
  EXPECT_EQ(ParseEndpoint("http://127.0.0.1:4569", "us-east-1", false)->host, "127.0.0.1:4569");
  EXPECT_EQ(ParseEndpoint("https://minio.example:443/", "us-east-1", false)->host, "minio.example");
  EXPECT_EQ(ParseEndpoint("http://minio.example:80", "us-east-1", false)->host, "minio.example");
  auto aws = ParseEndpoint("", "eu-west-3", true);
  EXPECT_EQ(aws->scheme, "https");
  EXPECT_EQ(aws->host, "s3.eu-west-3.amazonaws.com");
  for (const char* bad : {"ftp://h", "h:9000", "http://", "http://h/path", "http://user@h", "http://h?x=1"}) {
    EXPECT_EQ(ParseEndpoint(bad, "us-east-1", false).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(S3Url, SplitsBucketAndPrefixAndChecksBoth) {
  std::string bucket, prefix;
  ASSERT_TRUE(ParseS3Url("s3://my-bucket.1/a/b/", &bucket, &prefix).ok());
  EXPECT_EQ(bucket, "my-bucket.1");
  EXPECT_EQ(prefix, "a/b");
  ASSERT_TRUE(ParseS3Url("s3://abc", &bucket, &prefix).ok());
  EXPECT_EQ(prefix, "");
  for (const char* bad :
       {"s3://", "s3://ab", "s3://Upper", "s3://under_score", "s3://-dash", "s3://b.c/../x", "file://x"}) {
    EXPECT_EQ(ParseS3Url(bad, &bucket, &prefix).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(S3SignRequest, PathAndVirtualHostUrlsEncodeTheKeyOnceAndSendTheCanonicalQuery) {
  sigv4::Credentials cred{"AK", "SK", "TOKEN"};
  Request req{
      "PUT", "b-1", "k+e y/z", {{"uploadId", "a/b"}, {"partNumber", "2"}}, {}, std::string(sigv4::kEmptyPayloadHash)};
  SignedRequest path = SignRequest(*ParseEndpoint("http://h:1", "r", false), req, cred, "r", "20240101T000000Z");
  EXPECT_EQ(path.url, "http://h:1/b-1/k%2Be%20y/z?partNumber=2&uploadId=a%2Fb");
  SignedRequest vhost = SignRequest(*ParseEndpoint("http://h:1", "r", true), req, cred, "r", "20240101T000000Z");
  EXPECT_EQ(vhost.url, "http://b-1.h:1/k%2Be%20y/z?partNumber=2&uploadId=a%2Fb");
  EXPECT_EQ(vhost.headers.front(), sigv4::Header("Host", "b-1.h:1"));
  EXPECT_EQ(vhost.headers.back().first, "Authorization");
  EXPECT_NE(
      vhost.signature.authorization.find("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"),
      std::string::npos);
}

TEST(S3Xml, DecodesEntitiesAndFindsElementsByExactName) {
  EXPECT_EQ(*XmlDecode("a&amp;b&lt;&gt;&quot;&apos;&#65;&#x42;&#xe9;"), "a&b<>\"'AB\xc3\xa9");
  EXPECT_FALSE(XmlDecode("a&nbsp;b"));
  EXPECT_FALSE(XmlDecode("a&amp"));
  const std::string xml = "<R><KeyCount>2</KeyCount><Key>x&amp;y</Key><Empty/><Key>z</Key></R>";
  size_t pos = 0;
  EXPECT_EQ(*XmlText(xml, "Key", &pos), "x&y");
  EXPECT_EQ(*XmlText(xml, "Key", &pos), "z");
  EXPECT_FALSE(XmlText(xml, "Key", &pos));
  EXPECT_EQ(*XmlText(xml, "Empty"), "");
  EXPECT_EQ(ErrorSummary("<Error><Code>NoSuchKey</Code><Message>gone &amp; lost</Message></Error>"),
            "NoSuchKey: gone & lost");
  EXPECT_EQ(ErrorSummary("<ListBucketResult/>"), "");
}

TEST(S3Xml, ParsesListPagesAndRefusesDamagedOnes) {
  auto page = ParseListPage(
      "<?xml version=\"1.0\"?><ListBucketResult><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
      "<Contents><Key>p/a&amp;b</Key><Size>12</Size></Contents><Contents><Key>p/c</Key><Size>0</Size></Contents>"
      "<NextContinuationToken>t+/=</NextContinuationToken></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "p/a&b");
  EXPECT_EQ(page->objects[0].size, 12u);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_continuation_token, "t+/=");
  EXPECT_EQ(ParseListPage("<Error/>").status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(ParseListPage("<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>").status().code(),
            StatusCode::kCorrupt);
  EXPECT_EQ(ParseListPage("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").status().code(),
            StatusCode::kCorrupt);
  EXPECT_EQ(ParseListPage("<ListBucketResult><Contents><Key>a</Key><Size>1").status().code(), StatusCode::kCorrupt);
}

TEST(S3ContentRange, ParsesOnlyWellFormedSatisfiedRanges) {
  uint64_t a = 0, b = 0, t = 0;
  ASSERT_TRUE(ParseContentRange("bytes 5-9/10", &a, &b, &t));
  EXPECT_EQ(a, 5u);
  EXPECT_EQ(b, 9u);
  EXPECT_EQ(t, 10u);
  for (const char* bad : {"bytes */10", "bytes 5-10/10", "bytes 9-5/10", "items 0-1/2", "bytes 0--1/0", "bytes 0-1/"}) {
    EXPECT_FALSE(ParseContentRange(bad, &a, &b, &t)) << bad;
  }
}

}  // namespace
}  // namespace dcr::s3
