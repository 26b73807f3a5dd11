// Names and parsing of the shared vocabulary.
#include "kernels/types.h"

#include "gtest/gtest.h"

namespace kt::kernels {
namespace {

TEST(TypesTest, OpNamesRoundTrip) {
  for (Op op : kAllOps) {
    absl::StatusOr<Op> parsed = ParseOp(OpName(op));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, op);
  }
}

TEST(TypesTest, DTypeNamesAndAliases) {
  for (DType dtype : kAllDTypes) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(*ParseDType("fp16"), DType::kFloat16);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType("float"), DType::kFloat32);
}

TEST(TypesTest, UnknownNamesAreClearErrors) {
  absl::StatusOr<Op> op = ParseOp("gelu");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(op.status().message().find("gelu"), absl::string_view::npos);
  absl::StatusOr<DType> dtype = ParseDType("int8");
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("int8"), absl::string_view::npos);
}

TEST(TypesTest, CommaListsParseOrNameTheBadItem) {
  absl::StatusOr<std::vector<Op>> ops = ParseOpList("softmax,,layer_norm");
  ASSERT_TRUE(ops.ok());
  EXPECT_EQ(*ops, (std::vector<Op>{Op::kSoftmax, Op::kLayerNorm}));
  absl::StatusOr<std::vector<DType>> dtypes = ParseDTypeList("bf16,float32");
  ASSERT_TRUE(dtypes.ok());
  EXPECT_EQ(*dtypes, (std::vector<DType>{DType::kBFloat16, DType::kFloat32}));
  absl::StatusOr<std::vector<DType>> bad = ParseDTypeList("float16,fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp8"), absl::string_view::npos);
}

TEST(TypesTest, MinimumBytesMoved) {
  const Shape shape{10, 100};
  EXPECT_EQ(MinimumBytesMoved(Op::kSoftmax, DType::kFloat16, shape, false, false, false),
            2 * 1000 * 2);
  EXPECT_EQ(MinimumBytesMoved(Op::kLayerNorm, DType::kFloat32, shape, true, true, true),
            2 * 1000 * 4 + 2 * 100 * 4 + 2 * 10 * 4);
  // Affine and stats only count for LayerNorm.
  EXPECT_EQ(MinimumBytesMoved(Op::kLogSoftmax, DType::kFloat32, shape, true, true, true),
            2 * 1000 * 4);
}

}  // namespace
}  // namespace kt::kernels
