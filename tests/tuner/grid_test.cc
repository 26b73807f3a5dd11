// Tuning grids.
#include "tuner/grid.h"

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
  EXPECT_EQ(grid->size(), 2u * (11 + 9 + 5));
  EXPECT_EQ(grid->front().shape.rows, 49152);
  EXPECT_EQ(grid->front().shape.cols, 32);
  EXPECT_EQ(DescribeGrid(*grid),
            "ops=softmax,layer_norm dtypes=float16 groups=main,few_rows,attention points=50");
}

TEST(GridTest, AttentionShapes) {
  absl::StatusOr<std::vector<GridPoint>> grid =
      StandardGrid({"attention"}, {Op::kSoftmax}, {DType::kFloat32});
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->size(), 5u);
  EXPECT_EQ((*grid)[4].shape.rows, 32 * 64 * 512);
  EXPECT_EQ((*grid)[4].shape.cols, 512);
}

TEST(GridTest, BadInputsAreRefused) {
  EXPECT_EQ(StandardGrid({"tiny"}, {Op::kSoftmax}, {DType::kFloat32}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CustomGrid({Op::kSoftmax}, {DType::kFloat32}, {0}, {8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<GridPoint>> custom =
      CustomGrid({Op::kSoftmax}, {DType::kFloat32, DType::kFloat16}, {1, 2}, {3});
  ASSERT_TRUE(custom.ok());
  EXPECT_EQ(custom->size(), 4u);
}

}  // namespace
}  // namespace kt::tuner
