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
    int stats;  // of mean, inv_std, row_scale
    bool gamma, beta, epsilon, inner, residual, quant;
  };
  const Row table[] = {
      {Op::kSoftmax, 0, false, false, false, true, false, false},
      {Op::kLogSoftmax, 0, false, false, false, true, false, false},
      {Op::kLayerNorm, 2, true, true, true, false, false, false},
      {Op::kRmsNorm, 1, true, false, true, false, false, false},
      {Op::kReduceScale, 1, false, false, false, false, false, false},
      {Op::kScaledMaskedSoftmax, 0, false, false, false, false, false, false},
      {Op::kAddRmsNorm, 1, true, false, true, false, true, false},
      {Op::kAddLayerNorm, 2, true, true, true, false, true, false},
      {Op::kRmsNormQuant, 2, true, false, true, false, false, true},
      {Op::kLayerNormQuant, 3, true, true, true, false, false, true},
      {Op::kAddRmsNormQuant, 2, true, false, true, false, true, true},
      {Op::kAddLayerNormQuant, 3, true, true, true, false, true, true},
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
    EXPECT_EQ(TakesOperand(row.op, Operand::kResidual), row.residual);
    EXPECT_EQ(AddsResidual(row.op), row.residual);
    EXPECT_EQ(TakesOperand(row.op, Operand::kQuantScale), row.quant);
    EXPECT_EQ(QuantizesOutput(row.op), row.quant);
    EXPECT_EQ(IsFusedNorm(row.op), row.residual || row.quant);
    EXPECT_EQ(OutputElementBytes(row.op, DType::kFloat32), row.quant ? 1 : 4);
    // The families: RMSNorm's have no beta, LayerNorm's do.
    const bool norm = row.epsilon;
    EXPECT_EQ(IsRmsNormFamily(row.op), norm && !row.beta);
    EXPECT_EQ(IsLayerNormFamily(row.op), norm && row.beta);
    EXPECT_EQ(BaseNormOp(row.op), !norm ? row.op : row.beta ? Op::kLayerNorm : Op::kRmsNorm);
  }
  // The six old ops are the first six, in order.
  ASSERT_EQ(std::size(kBasicOps), 6u);
  for (size_t i = 0; i < std::size(kBasicOps); ++i) EXPECT_EQ(kBasicOps[i], kAllOps[i]);
}

TEST(TypesTest, FusedNormNamesAndQuantizationVocabulary) {
  EXPECT_EQ(OpName(Op::kAddRmsNorm), "add_rms_norm");
  EXPECT_EQ(OpName(Op::kAddLayerNorm), "add_layer_norm");
  EXPECT_EQ(OpName(Op::kRmsNormQuant), "rms_norm_quant");
  EXPECT_EQ(OpName(Op::kLayerNormQuant), "layer_norm_quant");
  EXPECT_EQ(OpName(Op::kAddRmsNormQuant), "add_rms_norm_quant");
  EXPECT_EQ(OpName(Op::kAddLayerNormQuant), "add_layer_norm_quant");
  const absl::Status bad_op = ParseOp("fused_add_rms_norm").status();
  EXPECT_NE(bad_op.message().find("add_layer_norm_quant"), absl::string_view::npos) << bad_op;

  for (QuantDType dtype : kAllQuantDTypes) {
    absl::StatusOr<QuantDType> parsed = ParseQuantDType(QuantDTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(QuantDTypeName(QuantDType::kFp8E4M3), "fp8_e4m3");
  EXPECT_EQ(*ParseQuantDType("E4M3"), QuantDType::kFp8E4M3);
  EXPECT_EQ(*ParseQuantDType("float8_e4m3fn"), QuantDType::kFp8E4M3);
  EXPECT_EQ(*ParseQuantDType("float8_e5m2"), QuantDType::kFp8E5M2);
  EXPECT_EQ(*ParseQuantDType("INT8"), QuantDType::kInt8);
  const absl::Status bad_dtype = ParseQuantDType("fp4").status();
  EXPECT_EQ(bad_dtype.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_dtype.message().find("\"fp4\""), absl::string_view::npos) << bad_dtype;

  for (ScaleMode mode : {ScaleMode::kStatic, ScaleMode::kPerRow, ScaleMode::kPerGroup}) {
    absl::StatusOr<ScaleMode> parsed = ParseScaleMode(ScaleModeName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_EQ(ScaleModeName(ScaleMode::kPerGroup), "per_group");
  const absl::Status bad_mode = ParseScaleMode("per_tensor").status();
  EXPECT_NE(bad_mode.message().find("per_tensor"), absl::string_view::npos) << bad_mode;

  EXPECT_EQ(QuantMax(QuantDType::kFp8E4M3), 448.0);
  EXPECT_EQ(QuantMax(QuantDType::kFp8E5M2), 57344.0);
  EXPECT_EQ(QuantMax(QuantDType::kInt8), 127.0);
  EXPECT_EQ(OperandName(Operand::kResidual), "residual");
  EXPECT_EQ(OperandName(Operand::kQuantScale), "quant_scale");
  EXPECT_TRUE(IsOutput(Operand::kResidual));
  EXPECT_FALSE(IsOutput(Operand::kQuantScale));
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
  OpParams five_queries;
  five_queries.mask_rows = 5;
  EXPECT_EQ(MinimumBytesMoved(Op::kScaledMaskedSoftmax, DType::kFloat16, shape, false, false, false,
                              five_queries),
            2 * 1000 * 2 + 5 * 100 * 2);
  EXPECT_EQ(MinimumBytesMoved(Op::kScaledMaskedSoftmax, DType::kFloat16, shape, false, false,
                              false),
            2 * 1000 * 2);
  EXPECT_EQ(
      MinimumBytesMoved(Op::kSoftmax, DType::kFloat16, shape, false, false, false, five_queries),
      2 * 1000 * 2);
  // Middle-axis shapes count every element.
  EXPECT_EQ(MinimumBytesMoved(Op::kSoftmax, DType::kFloat32, {2, 3, 5}, false, false, false),
            2 * 30 * 4);
}

// The fused norms: the residual read and written back, one-byte codes out,
// and the scales (one per row, one per group, or the static one read).
TEST(TypesTest, MinimumBytesMovedOfTheFusedNorms) {
  const Shape shape{10, 128};
  const int64_t n = 1280;
  EXPECT_EQ(MinimumBytesMoved(Op::kAddRmsNorm, DType::kFloat16, shape, true, false, true),
            n * 2 + n * 2 + 2 * n * 2 + 128 * 2 + 10 * 4);
  EXPECT_EQ(MinimumBytesMoved(Op::kAddLayerNorm, DType::kBFloat16, shape, true, true, false),
            n * 2 + n * 2 + 2 * n * 2 + 2 * 128 * 2);
  OpParams params;  // fp8_e4m3 per_row by default
  EXPECT_EQ(
      MinimumBytesMoved(Op::kRmsNormQuant, DType::kFloat16, shape, true, false, false, params),
      n * 2 + n + 128 * 2 + 10 * 4);
  params.scale_mode = ScaleMode::kPerGroup;
  params.group_size = 64;
  EXPECT_EQ(
      MinimumBytesMoved(Op::kAddRmsNormQuant, DType::kFloat16, shape, true, false, true, params),
      n * 2 + n + 2 * n * 2 + 128 * 2 + 10 * 4 + 10 * 2 * 4);
  params.scale_mode = ScaleMode::kStatic;
  params.group_size = 0;
  EXPECT_EQ(
      MinimumBytesMoved(Op::kLayerNormQuant, DType::kFloat32, shape, false, false, false, params),
      n * 4 + n + 4);
}

// QK-norm of q in a fused [tokens, 3, heads, head_dim] tensor: 2 tokens,
// 3 heads, head_dim 4. The extents include the gaps; the bytes moved do not.
TEST(TypesTest, StridedOperandExtentsAndBytesMoved) {
  const Shape shape{6, 4};
  OpParams params;
  params.group_rows = 3;
  params.x_row_stride = 4;
  params.x_group_stride = 36;
  params.y_row_stride = 5;
  params.residual_row_stride = 7;
  const RowLayout x = RowLayoutOf(Operand::kInput, params, shape);
  EXPECT_EQ(x.Offset(0), 0);
  EXPECT_EQ(x.Offset(2), 8);
  EXPECT_EQ(x.Offset(3), 36);
  EXPECT_EQ(x.Offset(5), 44);
  const RowLayout y = RowLayoutOf(Operand::kOutput, params, shape);
  EXPECT_EQ(y.group_stride, 15);  // unset: the group's rows packed
  EXPECT_EQ(y.Offset(4), 20);
  EXPECT_EQ(RowLayoutOf(Operand::kResidual, params, shape).Offset(5), 35);  // no groups
  EXPECT_TRUE(RowLayoutOf(Operand::kGamma, params, shape).contiguous(4));
  EXPECT_TRUE(HasRowStrides(params, shape));
  EXPECT_FALSE(HasRowStrides(OpParams(), shape));

  EXPECT_EQ(OperandBytes(Op::kAddRmsNorm, Operand::kInput, DType::kFloat16, shape, params),
            (44 + 4) * 2);
  EXPECT_EQ(OperandBytes(Op::kAddRmsNorm, Operand::kOutput, DType::kFloat16, shape, params),
            (25 + 4) * 2);
  EXPECT_EQ(OperandBytes(Op::kAddRmsNormQuant, Operand::kOutput, DType::kFloat16, shape, params),
            25 + 4);
  EXPECT_EQ(OperandBytes(Op::kAddRmsNorm, Operand::kResidual, DType::kFloat16, shape, params),
            (35 + 4) * 2);
  EXPECT_EQ(OperandBytes(Op::kRmsNorm, Operand::kGamma, DType::kFloat16, shape, params), 4 * 2);
  EXPECT_EQ(OperandBytes(Op::kRmsNormQuant, Operand::kRowScale, DType::kFloat16, shape, params),
            6 * 4);
  EXPECT_EQ(OperandBytes(Op::kRmsNormQuant, Operand::kQuantScale, DType::kFloat16, shape, params),
            0);
  EXPECT_EQ(MinimumBytesMoved(Op::kAddRmsNorm, DType::kFloat16, shape, true, false, false, params),
            MinimumBytesMoved(Op::kAddRmsNorm, DType::kFloat16, shape, true, false, false));
  EXPECT_EQ(MinimumBytesMoved(Op::kRmsNorm, DType::kFloat16, shape, false, false, false, params),
            2 * 24 * 2);
}

}  // namespace
}  // namespace kt::kernels
