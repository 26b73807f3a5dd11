// Names and parsing of the shared vocabulary.
#include "kernels/op_args.h"
#include "kernels/types.h"

#include <iterator>
#include <vector>

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

TEST(TypesTest, NewOpNamesAndAliases) {
  EXPECT_EQ(OpName(Op::kRmsNorm), "rms_norm");
  EXPECT_EQ(OpName(Op::kReduceScale), "reduce_scale");
  EXPECT_EQ(OpName(Op::kScaledMaskedSoftmax), "scaled_masked_softmax");
  EXPECT_EQ(*ParseOp("RMSNorm"), Op::kRmsNorm);
  EXPECT_EQ(*ParseOp("Reduce_Scale"), Op::kReduceScale);
  EXPECT_EQ(*ParseOp("attention_softmax"), Op::kScaledMaskedSoftmax);
  absl::StatusOr<std::vector<Op>> ops = ParseOpList("rms_norm,reduce_scale,scaled_masked_softmax");
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ(*ops, (std::vector<Op>{Op::kRmsNorm, Op::kReduceScale, Op::kScaledMaskedSoftmax}));
  // The error lists every op, the new ones included.
  const absl::Status bad = ParseOp("rms").status();
  EXPECT_NE(bad.message().find("rms_norm"), absl::string_view::npos) << bad;
  EXPECT_NE(bad.message().find("scaled_masked_softmax"), absl::string_view::npos) << bad;
}

TEST(TypesTest, OperandsEachOpTakes) {
  struct Row {
    Op op;
    int stats;
    bool gamma, beta, epsilon, inner;
  };
  const Row table[] = {
      {Op::kSoftmax, 0, false, false, false, true},
      {Op::kLogSoftmax, 0, false, false, false, true},
      {Op::kLayerNorm, 2, true, true, true, false},
      {Op::kRmsNorm, 1, true, false, true, false},
      {Op::kReduceScale, 1, false, false, false, false},
      {Op::kScaledMaskedSoftmax, 0, false, false, false, false},
  };
  ASSERT_EQ(std::size(table), std::size(kAllOps));
  for (const Row& row : table) {
    SCOPED_TRACE(OpName(row.op));
    int stats = 0;
    for (Operand operand : kAllOperands) stats += IsRowStat(operand) && TakesOperand(row.op, operand);
    EXPECT_EQ(stats, row.stats);
    EXPECT_EQ(TakesOperand(row.op, Operand::kGamma), row.gamma);
    EXPECT_EQ(TakesOperand(row.op, Operand::kBeta), row.beta);
    EXPECT_EQ(TakesEpsilon(row.op), row.epsilon);
    EXPECT_EQ(SupportsInnerAxis(row.op), row.inner);
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
  // RMSNorm: its weight and one float per row (1/rms); no beta.
  EXPECT_EQ(MinimumBytesMoved(Op::kRmsNorm, DType::kBFloat16, shape, true, true, true),
            2 * 1000 * 2 + 100 * 2 + 10 * 4);
  EXPECT_EQ(MinimumBytesMoved(Op::kRmsNorm, DType::kBFloat16, shape, false, false, false),
            2 * 1000 * 2);
  // ReduceScale: one float per row (the scale); no weight.
  EXPECT_EQ(MinimumBytesMoved(Op::kReduceScale, DType::kFloat16, shape, true, true, true),
            2 * 1000 * 2 + 10 * 4);
  // The masked softmax reads its (mask_rows, cols) mask once; other ops
  // ignore mask_rows.
  EXPECT_EQ(MinimumBytesMoved(Op::kScaledMaskedSoftmax, DType::kFloat16, shape, false, false,
                              false, /*mask_rows=*/5),
            2 * 1000 * 2 + 5 * 100 * 2);
  EXPECT_EQ(MinimumBytesMoved(Op::kScaledMaskedSoftmax, DType::kFloat16, shape, false, false,
                              false),
            2 * 1000 * 2);
  EXPECT_EQ(MinimumBytesMoved(Op::kSoftmax, DType::kFloat16, shape, false, false, false, 5),
            2 * 1000 * 2);
  // Middle-axis shapes count every element.
  EXPECT_EQ(MinimumBytesMoved(Op::kSoftmax, DType::kFloat32, {2, 3, 5}, false, false, false),
            2 * 30 * 4);
}

}  // namespace
}  // namespace kt::kernels
