// Store records (keys, JSON forms) and lineage garbage collection, on a real file:// store.
#include "runtime/store_lineage.h"

#include <gtest/gtest.h>

#include "runtime/store_records.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

using test::TempDir;

Version V(uint64_t n) { return {Digest128{n * 7 + 1, n * 13 + 5}, n}; }
uint64_t T(uint64_t n) { return 0x1000 + n; }  // the transfer into version n

TEST(StoreRecords, KeysHaveFixedWidthNumbersThatSortByValue) {
  EXPECT_EQ(ChainKey(7), "chain/00000000000000000007.json");
  EXPECT_EQ(AnchorModelKey(12), "anchors/00000000000000000012/model.safetensors");
  EXPECT_EQ(PayloadKey(0xab, 3, 42), "transfers/00000000000000ab/payloads/00003-0000000042.dcrp");
  EXPECT_LT(ChainKey(9), ChainKey(10));
  uint32_t p = 0, s = 0;
  EXPECT_TRUE(ParsePayloadName("00003-0000000042.dcrp", &p, &s));
  EXPECT_EQ(p, 3u);
  EXPECT_EQ(s, 42u);
  EXPECT_FALSE(ParsePayloadName("00003-000000042.dcrp", &p, &s));
  EXPECT_FALSE(ParsePayloadName("0000a-0000000042.dcrp", &p, &s));
  EXPECT_FALSE(ParsePayloadName("00003-9999999999.dcrp", &p, &s));  // > 2^32 - 1
  uint64_t n = 0;
  EXPECT_TRUE(ParseVersionNumber("00000000000000000012", &n));
  EXPECT_EQ(n, 12u);
  EXPECT_FALSE(ParseVersionNumber("99999999999999999999", &n));  // overflows u64
  EXPECT_TRUE(ParseChainKey(ChainKey(42), &n));
  EXPECT_EQ(n, 42u);
  EXPECT_FALSE(ParseChainKey("chain/00000000000000000042.json.bak", &n));
  EXPECT_FALSE(ParseChainKey(AnchorRecordKey(42), &n));
  EXPECT_TRUE(ParseAnchorRecordKey(AnchorRecordKey(7), &n));
  EXPECT_EQ(n, 7u);
  EXPECT_FALSE(ParseAnchorRecordKey(AnchorModelKey(7), &n));
  EXPECT_TRUE(CheckReceiverName("host-1_a").ok());
  EXPECT_FALSE(CheckReceiverName("-x").ok());
  EXPECT_FALSE(CheckReceiverName("a/b").ok());
  EXPECT_FALSE(CheckReceiverName(std::string(65, 'a')).ok());
}

TEST(StoreRecords, ManifestRoundTripsAndRejectsDisorder) {
  Manifest m;
  m.transfer = 5, m.base = V(1), m.target = V(2), m.target_digest = Digest128{3, 4};
  m.payloads = {{0, 0, 10, 0xaa}, {0, 2, 20, 0xbb}};
  m.changed = 7, m.elements = 100, m.dense_bytes = 200, m.wire_bytes = 30;
  auto back = ParseManifest(ToJson(m), "k");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->payloads.size(), 2u);
  EXPECT_EQ(back->payloads[1].xxh3, 0xbbu);
  EXPECT_EQ(back->target, V(2));
  Json j = ToJson(m);
  std::swap(j["payloads"][0], j["payloads"][1]);
  EXPECT_EQ(ParseManifest(j, "k").status().code(), StatusCode::kCorrupt);
  j = ToJson(m);
  j["payloads"][0]["size"] = "ten";
  auto bad = ParseManifest(j, "transfers/x/manifest.json");
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("transfers/x/manifest.json"), std::string::npos);
}

TEST(StoreRecords, NoVotesCarryTheirStatusCode) {
  VoteRecord v{"r1", 9, false, 0, "", "payload missing", StatusCode::kNotFound};
  auto back = ParseVote(ToJson(v), "k");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->code, StatusCode::kNotFound);
  Json j = ToJson(v);
  j["code"] = "weird";
  EXPECT_EQ(ParseVote(j, "k").status().code(), StatusCode::kCorrupt);
}

TEST(StoreRecords, UnparsableObjectIsCorruptAfterRereads) {
  TempDir dir("store_records_");
  auto store = std::move(OpenObjectStore("file://" + dir.str())).value();
  const std::string text = "{\"version\":";
  ASSERT_TRUE(store->Put("head.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  auto got = GetRecord<HeadRecord>(*store, HeadKey(), ParseHead);
  EXPECT_EQ(got.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(got.status().message().find("head.json"), std::string::npos);
  auto absent = GetRecord<HeadRecord>(*store, "nothing.json", ParseHead);
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->has_value());
}

// A store with anchors at 0, 3, 6, links 1..7, an aborted transfer, a registration at v2 with a
// pending transfer, and transfer 8 open.
class Lineage : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::move(OpenObjectStore("file://" + dir_.str())).value();
    const std::string model = dir_ / "model.bin";
    test::WriteAll(model, "weights");
    for (uint64_t n : {0, 3, 6}) ASSERT_TRUE(PublishAnchor(*store_, model, {V(n), Digest128{1, 2}, T(n), 7}).ok());
    for (uint64_t n = 1; n <= 7; ++n) {
      ASSERT_TRUE(PutJson(*store_, ChainKey(n), ToJson(ChainLink{V(n - 1), V(n), T(n)})).ok());
      ASSERT_TRUE(PutJson(*store_, ManifestKey(T(n)), Json::object()).ok());
    }
    ASSERT_TRUE(PutJson(*store_, DecisionKey(0xdead), Json::object()).ok());  // aborted
    ASSERT_TRUE(PutJson(*store_, DecisionKey(0xbeef), Json::object()).ok());  // r1's pending
    ASSERT_TRUE(PutJson(*store_, OpenKey(T(8)), Json::object()).ok());
    ASSERT_TRUE(PutJson(*store_, RegistrationKey("r1"), ToJson(Registration{"r1", V(2), 0xbeef, 0, "h"})).ok());
  }
  std::vector<std::string> Keys(const std::string& prefix) {
    std::vector<std::string> out;
    auto list = store_->List(prefix);  // held: a range-for over *List(...) would outlive the Result
    for (const auto& o : *list) out.push_back(o.key);
    return out;
  }
  TempDir dir_{"store_lineage_"};
  std::unique_ptr<ObjectStore> store_;
  HeadRecord head_{V(7), T(7), T(8)};
};

TEST_F(Lineage, ListAnchorsFindsCompleteAnchorsInOrder) {
  ASSERT_TRUE(store_->Put(AnchorModelKey(9), std::vector<uint8_t>{1}).ok());  // no anchor.json: incomplete
  auto a = ListAnchors(*store_);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 3u);
  EXPECT_EQ((*a)[2].version, V(6));
}

TEST_F(Lineage, RegisteredReceiverPinsItsChainAndPendingTransfer) {
  auto r = CollectGarbage(*store_, head_, 1, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->keep_from, 2u);
  EXPECT_EQ(Keys(AnchorPrefix()), (std::vector<std::string>{AnchorRecordKey(6), AnchorModelKey(6)}));  // byte order
  EXPECT_EQ(Keys(ChainPrefix()), (std::vector<std::string>{ChainKey(3), ChainKey(4), ChainKey(5), ChainKey(6), ChainKey(7)}));
  for (uint64_t n = 3; n <= 7; ++n) EXPECT_TRUE((*store_->Head(ManifestKey(T(n))))) << n;
  EXPECT_FALSE(*store_->Head(ManifestKey(T(1))));
  EXPECT_FALSE(*store_->Head(ManifestKey(T(2))));
  EXPECT_FALSE(*store_->Head(DecisionKey(0xdead)));  // aborted: collected
  EXPECT_TRUE(*store_->Head(DecisionKey(0xbeef)));   // r1 still needs its decision
  EXPECT_TRUE(*store_->Head(OpenKey(T(8))));         // the open transfer
}

TEST_F(Lineage, WithoutRegistrationsTheChainIsKeptFromTheOldestKeptAnchor) {
  ASSERT_TRUE(store_->Delete(RegistrationKey("r1")).ok());
  auto r = CollectGarbage(*store_, head_, 2, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->keep_from, 3u);
  EXPECT_EQ(Keys(ChainPrefix()), (std::vector<std::string>{ChainKey(4), ChainKey(5), ChainKey(6), ChainKey(7)}));
  EXPECT_EQ(r->anchors, 1u);
  EXPECT_FALSE(*store_->Head(DecisionKey(0xbeef)));
  // Idempotent: a second collection removes nothing.
  auto again = CollectGarbage(*store_, head_, 2, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->objects, 0u);
}

}  // namespace
}  // namespace dcr
