// Tuning grids.
#include "tuner/grid.h"

#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace kt::tuner {
namespace {

using kernels::DType;
using kernels::Op;

TEST(GridTest, StandardGridHasPerfMdPoints) {
  absl::StatusOr<std::vector<GridPoint>> grid =
      StandardGrid({"main", "few_rows", "attention"}, {Op::kSoftmax, Op::kLayerNorm},
                   {DType::kFloat16});
  ASSERT_TRUE(grid.ok());
  // Softmax in all three; LayerNorm is a row op: not at attention shapes.
  EXPECT_EQ(grid->size(), (11u + 9 + 5) + (11 + 9));
  EXPECT_EQ(grid->front().shape.rows, 49152);
  EXPECT_EQ(grid->front().shape.cols, 32);
  EXPECT_EQ(grid->front().shape.inner, 1);
  EXPECT_EQ(DescribeGrid(*grid),
            "ops=softmax,layer_norm dtypes=float16 groups=main,few_rows,attention points=45");
}

TEST(GridTest, EveryOpLandsInTheGroupsOfItsKind) {
  absl::StatusOr<std::vector<GridPoint>> grid = StandardGrid(
      {"main", "few_rows", "attention", "axis"},
      std::vector<Op>(std::begin(kernels::kAllOps), std::end(kernels::kAllOps)),
      {DType::kBFloat16});
  ASSERT_TRUE(grid.ok()) << grid.status();
  std::map<std::string, std::set<std::string>> ops_of_group;
  for (const GridPoint& p : *grid) {
    ops_of_group[p.group].insert(std::string(kernels::OpName(p.op)));
    EXPECT_EQ(p.shape.inner > 1, p.group == "axis") << PointName(p);
    EXPECT_EQ(p.with_mask, p.op == Op::kScaledMaskedSoftmax) << PointName(p);
    EXPECT_FALSE(p.causal);
    if (p.with_mask) EXPECT_EQ(p.shape.rows % p.mask_rows, 0) << PointName(p);
  }
  const std::set<std::string> row_ops = {"softmax", "log_softmax", "layer_norm", "rms_norm",
                                         "reduce_scale"};
  EXPECT_EQ(ops_of_group["main"], row_ops);
  EXPECT_EQ(ops_of_group["few_rows"], row_ops);
  EXPECT_EQ(ops_of_group["attention"],
            (std::set<std::string>{"softmax", "scaled_masked_softmax"}));
  EXPECT_EQ(ops_of_group["axis"], (std::set<std::string>{"softmax", "log_softmax"}));
  EXPECT_EQ(grid->size(), 5u * (11 + 9) + 2 * 5 + 2 * 2);
}

TEST(GridTest, LlmShapesAreLogitsOfFourVocabulariesAndFourHiddenSizes) {
  absl::StatusOr<std::vector<GridPoint>> grid = StandardGrid(
      {"llm"}, std::vector<Op>(std::begin(kernels::kAllOps), std::end(kernels::kAllOps)),
      {DType::kFloat16});
  ASSERT_TRUE(grid.ok()) << grid.status();
  // Softmax and log-softmax over rows {1, 16, 2048} x 4 vocabularies;
  // LayerNorm and RMSNorm over rows {1, 64, 8192} x 4 hidden sizes.
  ASSERT_EQ(grid->size(), 2u * 3 * 4 + 2u * 3 * 4);
  std::set<int64_t> logit_rows, vocabs, norm_rows, hidden;
  for (const GridPoint& p : *grid) {
    EXPECT_EQ(p.group, "llm");
    if (p.op == Op::kSoftmax || p.op == Op::kLogSoftmax) {
      logit_rows.insert(p.shape.rows);
      vocabs.insert(p.shape.cols);
    } else {
      EXPECT_TRUE(p.op == Op::kLayerNorm || p.op == Op::kRmsNorm) << PointName(p);
      norm_rows.insert(p.shape.rows);
      hidden.insert(p.shape.cols);
    }
  }
  EXPECT_EQ(logit_rows, (std::set<int64_t>{1, 16, 2048}));
  EXPECT_EQ(vocabs, (std::set<int64_t>{32000, 50257, 128256, 151936}));
  EXPECT_EQ(norm_rows, (std::set<int64_t>{1, 64, 8192}));
  EXPECT_EQ(hidden, (std::set<int64_t>{4096, 5120, 8192, 12288}));
  EXPECT_EQ(PointName(grid->back()), "rms_norm float16 8192x12288");
  EXPECT_FALSE(StandardGrid({"llm"}, {Op::kReduceScale}, {DType::kFloat16}).ok());
}

TEST(GridTest, AttentionShapes) {
  absl::StatusOr<std::vector<GridPoint>> grid =
      StandardGrid({"attention"}, {Op::kSoftmax, Op::kScaledMaskedSoftmax}, {DType::kFloat32});
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->size(), 10u);
  EXPECT_EQ((*grid)[4].shape.rows, 32 * 64 * 512);
  EXPECT_EQ((*grid)[4].shape.cols, 512);
  EXPECT_FALSE((*grid)[4].with_mask);
  const GridPoint& masked = (*grid)[9];
  EXPECT_EQ(masked.op, Op::kScaledMaskedSoftmax);
  EXPECT_EQ(masked.shape.rows, 32 * 64 * 512);
  EXPECT_EQ(masked.shape.cols, 512);
  EXPECT_TRUE(masked.with_mask);
  EXPECT_EQ(masked.mask_rows, 512);  // q = k = s, the mask (s, s)
  // The (s, s) mask is read once on top of x and y.
  EXPECT_EQ(PointBytes(masked), int64_t{2} * 32 * 64 * 512 * 512 * 4 + 512 * 512 * 4);
  EXPECT_EQ(PointBytes((*grid)[4]), int64_t{2} * 32 * 64 * 512 * 512 * 4);
}

TEST(GridTest, AxisShapesAreSeed001s) {
  absl::StatusOr<std::vector<GridPoint>> grid =
      StandardGrid({"axis"}, {Op::kSoftmax, Op::kLogSoftmax, Op::kLayerNorm}, {DType::kFloat16});
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->size(), 4u);  // LayerNorm reduces the last axis only
  EXPECT_EQ((*grid)[0].shape, (kernels::Shape{1, 128, 32768}));
  EXPECT_EQ((*grid)[1].shape, (kernels::Shape{512, 896, 48}));
  EXPECT_EQ((*grid)[3].op, Op::kLogSoftmax);
  EXPECT_EQ(PointName((*grid)[1]), "softmax float16 512x896x48");
  EXPECT_EQ(PointBytes((*grid)[1]), int64_t{2} * 512 * 896 * 48 * 2);
}

TEST(GridTest, RowOutputsAreTimedOnlyWhenTheyAreTheResult) {
  EXPECT_TRUE(TimedWithRowOutputs(Op::kReduceScale));
  EXPECT_FALSE(TimedWithRowOutputs(Op::kLayerNorm));
  EXPECT_FALSE(TimedWithRowOutputs(Op::kRmsNorm));
  const GridPoint scale{"main", Op::kReduceScale, DType::kFloat16, {49152, 1024}};
  EXPECT_EQ(PointBytes(scale), int64_t{2} * 49152 * 1024 * 2 + 49152 * 4);
  const GridPoint rms{"main", Op::kRmsNorm, DType::kFloat16, {49152, 1024}};
  EXPECT_EQ(PointBytes(rms), int64_t{2} * 49152 * 1024 * 2 + 1024 * 2);  // the weight
}

TEST(GridTest, BadInputsAreRefused) {
  EXPECT_EQ(StandardGrid({"tiny"}, {Op::kSoftmax}, {DType::kFloat32}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<GridPoint>> none =
      StandardGrid({"main"}, {Op::kScaledMaskedSoftmax}, {DType::kFloat32});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("hold no point"), absl::string_view::npos)
      << none.status();
  EXPECT_EQ(CustomGrid({Op::kSoftmax}, {DType::kFloat32}, {0}, {8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CustomGrid({Op::kSoftmax}, {DType::kFloat32}, {2}, {8}, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<GridPoint>> custom =
      CustomGrid({Op::kSoftmax}, {DType::kFloat32, DType::kFloat16}, {1, 2}, {3});
  ASSERT_TRUE(custom.ok());
  EXPECT_EQ(custom->size(), 4u);
}

TEST(GridTest, CustomGridTakesInnerForTheOpsThatReduceAMiddleAxis) {
  absl::StatusOr<std::vector<GridPoint>> custom =
      CustomGrid({Op::kLogSoftmax, Op::kRmsNorm, Op::kScaledMaskedSoftmax}, {DType::kFloat32},
                 {96}, {64}, {1, 16});
  ASSERT_TRUE(custom.ok());
  ASSERT_EQ(custom->size(), 4u);  // log_softmax x2, rms_norm and the masked softmax at inner 1
  EXPECT_EQ((*custom)[1].shape, (kernels::Shape{96, 64, 16}));
  EXPECT_EQ((*custom)[2].op, Op::kRmsNorm);
  EXPECT_EQ((*custom)[2].shape.inner, 1);
  const GridPoint& masked = (*custom)[3];
  EXPECT_TRUE(masked.with_mask);
  EXPECT_EQ(masked.mask_rows, 48);  // the largest divisor of 96 that is <= 64
}

}  // namespace
}  // namespace kt::tuner
