// The layout type, its JSON form and its validation: exact cover of local tensors and of the
// canonical tensors by owners, with errors that name the tensor and element.
#include <gtest/gtest.h>

#include <filesystem>

#include "layout/box_cover.h"
#include "layout/generators.h"
#include "layout/layout.h"
#include "layout/layout_json.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

// Two ranks splitting canonical "w" [4, 6] by rows, each with a replicated copy of "n" [6] (rank 0
// owns it) and a padded local tensor.
LayoutSet TwoRankLayout() {
  LayoutSet set(2);
  for (uint32_t r = 0; r < 2; ++r) {
    RankLayout& l = set[r];
    l.role = LayoutRole::kTrain;
    l.framework = "test";
    l.rank = r;
    l.world_size = 2;
    l.canonical = {{"n", DType::kBF16, {6}}, {"w", DType::kBF16, {4, 6}}};
    l.tensors.push_back({"local_n", DType::kBF16, {6}, {{"n", {0}, {0}, {6}, PieceTransform::kNone, r == 0}}, {}});
    l.tensors.push_back({"local_w", DType::kBF16, {3, 6},
                         {{"w", {0, 0}, {2 * r, 0}, {2, 6}, PieceTransform::kNone, true}},
                         {{{2, 0}, {1, 6}, PaddingFill::kZero, ""}}});
  }
  return set;
}

TEST(LayoutValidation, AcceptsAnExactCoverWithOneOwnerPerElement) { EXPECT_TRUE(ValidateLayoutSet(TwoRankLayout()).ok()); }

TEST(LayoutValidation, OverlappingPiecesNameTheTensorAndElement) {
  LayoutSet set = TwoRankLayout();
  set[1].tensors[1].padding[0].start = {1, 0};
  set[1].tensors[1].padding[0].extent = {2, 6};
  Status s = ValidateLayoutSet(set);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1 tensor 'local_w': element [1, 0] is covered by both piece 0"), std::string::npos) << s.message();
}

TEST(LayoutValidation, UncoveredLocalElementIsRefused) {
  LayoutSet set = TwoRankLayout();
  set[0].tensors[1].padding.clear();
  Status s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("rank 0 tensor 'local_w': element [2, 0] is covered by no piece"), std::string::npos) << s.message();
}

TEST(LayoutValidation, CanonicalElementWithoutOwnerIsNamed) {
  LayoutSet set = TwoRankLayout();
  set[0].tensors[0].pieces[0].owner = false;
  Status s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("canonical tensor 'n' [6] element [0] has no owner piece"), std::string::npos) << s.message();
}

TEST(LayoutValidation, CanonicalElementWithTwoOwnersNamesBoth) {
  LayoutSet set = TwoRankLayout();
  set[1].tensors[0].pieces[0].owner = true;
  Status s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("has more than one owner: rank 0 tensor 'local_n'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 1 tensor 'local_n'"), std::string::npos) << s.message();
}

TEST(LayoutValidation, PartiallyCoveredCanonicalTensorNamesTheFirstGap) {
  LayoutSet set = TwoRankLayout();
  set[1].tensors[1].pieces[0].extent = {1, 6};
  set[1].tensors[1].padding[0] = {{1, 0}, {2, 6}, PaddingFill::kZero, ""};
  Status s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("canonical tensor 'w' [4, 6] element [3, 0] has no owner"), std::string::npos) << s.message();
}

TEST(LayoutValidation, PieceOutsideItsTensorsIsRefused) {
  LayoutSet set = TwoRankLayout();
  set[1].tensors[1].pieces[0].canonical_start = {3, 0};
  Status s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("canonical box [3, 5) x [0, 6) is empty or outside [4, 6]"), std::string::npos) << s.message();
  set = TwoRankLayout();
  set[0].tensors[1].pieces[0].local_start = {2, 0};
  s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("local box [2, 4) x [0, 6) is outside [3, 6]"), std::string::npos) << s.message();
}

TEST(LayoutValidation, TransformMustAgreeWithTheDtypes) {
  LayoutSet set = TwoRankLayout();
  set[0].tensors[0].dtype = DType::kF32;
  EXPECT_NE(ValidateLayoutSet(set).message().find("transform \"none\" but the local dtype F32"), std::string::npos);
  set[0].tensors[0].pieces[0].transform = PieceTransform::kConvert;
  EXPECT_TRUE(ValidateLayoutSet(set).ok());
  set[0].tensors[0].dtype = DType::kI32;
  EXPECT_NE(ValidateLayoutSet(set).message().find("cannot convert BF16 to I32"), std::string::npos);
}

TEST(LayoutValidation, RanksMustAgreeOnTheModel) {
  LayoutSet set = TwoRankLayout();
  set[1].canonical[1].shape = {4, 7};
  Status s = ValidateLayoutSet(set);
  EXPECT_NE(s.message().find("ranks disagree on the model"), std::string::npos) << s.message();
  set = TwoRankLayout();
  set[1].world_size = 3;
  EXPECT_NE(ValidateLayoutSet(set).message().find("world_size 3"), std::string::npos);
}

TEST(LayoutValidation, RepeatLastRowPaddingNeedsWholeRowsOfItsSource) {
  LayoutSet set = TwoRankLayout();
  set[0].tensors[1].padding[0] = {{2, 0}, {1, 6}, PaddingFill::kRepeatLastRow, "w"};
  EXPECT_TRUE(ValidateLayoutSet(set).ok());
  set[0].tensors[1].padding[0].source = "n";
  EXPECT_NE(ValidateLayoutSet(set).message().find("repeat_last_row needs whole rows"), std::string::npos);
}

TEST(BoxCover, FindsTheFirstGapAndOverlapInRowMajorOrder) {
  EXPECT_FALSE(FindCoverFault({4, 4}, {{{0, 0}, {4, 2}}, {{0, 2}, {4, 2}}}));
  auto gap = FindCoverFault({4, 4}, {{{0, 0}, {4, 2}}, {{0, 2}, {3, 2}}});
  ASSERT_TRUE(gap);
  EXPECT_EQ(gap->element, (std::vector<uint64_t>{3, 2}));
  EXPECT_TRUE(gap->boxes.empty());
  auto overlap = FindCoverFault({4, 4}, {{{0, 0}, {4, 4}}, {{1, 2}, {3, 2}}});
  ASSERT_TRUE(overlap);
  EXPECT_EQ(overlap->element, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(overlap->boxes, (std::vector<size_t>{0, 1}));
  EXPECT_FALSE(FindCoverFault({}, {{{}, {}}}));  // a scalar covered once
  EXPECT_TRUE(FindCoverFault({}, {}));
}

TEST(LayoutJson, RoundTripsGeneratedLayoutsExactly) {
  auto model = ParseHfConfig(R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 8,
      "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 300,
      "num_experts": 4, "moe_intermediate_size": 32, "mlp_only_layers": [1]})", "config");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto train = GenerateMegatronLayouts(*model, {2, 2, 2});
  auto serve = GenerateVllmLayouts(*model, {4, 1, 1}, DType::kF32);
  ASSERT_TRUE(train.ok() && serve.ok());
  for (const LayoutSet* set : {&*train, &*serve})
    for (const RankLayout& l : *set) {
      auto back = LayoutFromJson(LayoutToJson(l), "json");
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, l);
    }
}

TEST(LayoutJson, IsStrictAboutKeysTypesAndVersion) {
  const std::string good = LayoutToJson(TwoRankLayout()[0]);
  ASSERT_TRUE(LayoutFromJson(good, "x").ok());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return LayoutFromJson(s, "x.json").status();
  };
  EXPECT_EQ(with("\"version\": 1", "\"version\": 2").code(), StatusCode::kUnsupported);
  EXPECT_NE(with("\"world_size\": 2", "\"world_size\": -2").message().find("world_size: expected a non-negative integer"),
            std::string::npos);
  EXPECT_NE(with("\"owner\":", "\"ownr\":").message().find("tensors[0].pieces[0]: unknown key \"ownr\""), std::string::npos);
  EXPECT_NE(with("\"none\"", "\"cast\"").message().find("expected \"none\" or \"convert\""), std::string::npos);
  EXPECT_NE(with("\"BF16\"", "\"B16\"").message().find("unknown dtype"), std::string::npos);
  EXPECT_EQ(LayoutFromJson("{", "x").status().code(), StatusCode::kInvalidArgument);
}

TEST(LayoutDir, RoundTripsAndNamesMissingOrStrayRanks) {
  test::TempDir dir("dcr_layout_dir_");
  const LayoutSet set = TwoRankLayout();
  ASSERT_TRUE(WriteLayoutDir(dir.str(), set).ok());
  auto back = ReadLayoutDir(dir.str());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, set);
  std::filesystem::copy_file(dir / "rank-00001.json", dir / "rank-00002.json");
  EXPECT_NE(ReadLayoutDir(dir.str()).status().message().find("stray"), std::string::npos);
  EXPECT_EQ(WriteLayoutDir(dir.str(), set).code(), StatusCode::kInvalidArgument);  // would mix two layouts
  std::filesystem::remove(dir / "rank-00002.json");
  std::filesystem::remove(dir / "rank-00001.json");
  Status s = ReadLayoutDir(dir.str()).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing rank-00001.json"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace dcr
