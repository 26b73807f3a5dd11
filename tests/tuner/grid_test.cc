// Tuning grids.
#include "tuner/grid.h"

#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/op_args.h"

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

TEST(GridTest, LlmNormHoldsTheFusedNormsAndPerHeadRmsNorm) {
  const std::vector<Op> all(std::begin(kernels::kAllOps), std::end(kernels::kAllOps));
  absl::StatusOr<std::vector<GridPoint>> grid = StandardGrid({"llm_norm"}, all, {DType::kFloat16});
  ASSERT_TRUE(grid.ok()) << grid.status();
  // 6 fused ops x 5 row counts x 7 hidden sizes, and rms_norm per head for
  // 5 token counts x 3 head sizes.
  ASSERT_EQ(grid->size(), 6u * 5 * 7 + 5 * 3);
  std::map<std::string, int> points_of_op;
  std::set<int64_t> rows, hidden, tokens, head_dims;
  for (const GridPoint& p : *grid) {
    EXPECT_EQ(p.group, "llm_norm");
    ++points_of_op[std::string(kernels::OpName(p.op))];
    if (p.op == Op::kRmsNorm) {
      // q of a fused [tokens, 3, 32, head_dim] qkv tensor, into a contiguous y.
      EXPECT_EQ(p.shape.rows % 32, 0) << PointName(p);
      tokens.insert(p.shape.rows / 32);
      head_dims.insert(p.shape.cols);
      EXPECT_EQ(p.x_row_stride, p.shape.cols);
      EXPECT_EQ(p.group_rows, 32);
      EXPECT_EQ(p.x_group_stride, 3 * 32 * p.shape.cols);
      EXPECT_EQ(p.y_row_stride, 0);
      EXPECT_EQ(p.y_group_stride, 0);
      EXPECT_TRUE(kernels::HasRowStrides(ParamsOf(p), p.shape)) << PointName(p);
    } else {
      EXPECT_TRUE(kernels::IsFusedNorm(p.op)) << PointName(p);
      rows.insert(p.shape.rows);
      hidden.insert(p.shape.cols);
      EXPECT_FALSE(kernels::HasRowStrides(ParamsOf(p), p.shape)) << PointName(p);
      // The representative quantization: fp8 e4m3, per-row dynamic scales.
      EXPECT_EQ(p.quant_dtype, kernels::QuantDType::kFp8E4M3);
      EXPECT_EQ(p.scale_mode, kernels::ScaleMode::kPerRow);
      EXPECT_EQ(p.group_size, 0);
    }
  }
  for (const char* op : {"add_rms_norm", "add_layer_norm", "rms_norm_quant", "layer_norm_quant",
                         "add_rms_norm_quant", "add_layer_norm_quant"}) {
    EXPECT_EQ(points_of_op[op], 35) << op;
  }
  EXPECT_EQ(points_of_op["rms_norm"], 15);
  EXPECT_EQ(points_of_op.size(), 7u);  // no layer_norm, softmax, ...
  EXPECT_EQ(rows, (std::set<int64_t>{1, 16, 64, 512, 8192}));
  EXPECT_EQ(hidden, (std::set<int64_t>{2048, 4096, 5120, 7168, 8192, 12288, 16384}));
  EXPECT_EQ(tokens, (std::set<int64_t>{1, 16, 64, 512, 8192}));
  EXPECT_EQ(head_dims, (std::set<int64_t>{64, 128, 256}));
  EXPECT_EQ(DescribeGrid(*grid),
            "ops=rms_norm,add_rms_norm,add_layer_norm,rms_norm_quant,layer_norm_quant,"
            "add_rms_norm_quant,add_layer_norm_quant dtypes=float16 groups=llm_norm points=225 "
            "quant=fp8_e4m3/per_row strided_points=15");
  // The basic ops other than rms_norm are not in it.
  EXPECT_FALSE(StandardGrid({"llm_norm"}, {Op::kLayerNorm, Op::kSoftmax}, {DType::kFloat16}).ok());
}

TEST(GridTest, TheOlderGroupsHoldNoFusedNorm) {
  const std::vector<Op> fused = {Op::kAddRmsNorm,     Op::kAddLayerNorm,    Op::kRmsNormQuant,
                                 Op::kLayerNormQuant, Op::kAddRmsNormQuant, Op::kAddLayerNormQuant};
  absl::StatusOr<std::vector<GridPoint>> grid =
      StandardGrid({"main", "few_rows", "attention", "axis", "llm"}, fused, {DType::kFloat16});
  EXPECT_EQ(grid.status().code(), absl::StatusCode::kInvalidArgument) << grid.status();
}

// Every llm_norm point is a problem the kernels accept: its params pass
// kernels::ValidateOpArgs with every operand the op needs.
TEST(GridTest, LlmNormPointsAreValidProblems) {
  const std::vector<Op> all(std::begin(kernels::kAllOps), std::end(kernels::kAllOps));
  absl::StatusOr<std::vector<GridPoint>> grid = StandardGrid({"llm_norm"}, all, {DType::kBFloat16});
  ASSERT_TRUE(grid.ok()) << grid.status();
  char storage[kernels::kOperandCount] = {};
  for (const GridPoint& p : *grid) {
    kernels::RowOpArgs args;
    args.params = ParamsOf(p);
    for (int i = 0; i < kernels::kOperandCount; ++i) {
      const kernels::Operand operand = kernels::kAllOperands[i];
      const bool needed =
          operand == kernels::Operand::kQuantScale
              ? p.scale_mode == kernels::ScaleMode::kStatic
              : operand != kernels::Operand::kMean && operand != kernels::Operand::kInvStd;
      if (kernels::TakesOperand(p.op, operand) && needed) args.set_operand(operand, &storage[i]);
    }
    EXPECT_TRUE(kernels::ValidateOpArgs(p.op, p.dtype, p.shape, args).ok())
        << PointName(p) << ": " << kernels::ValidateOpArgs(p.op, p.dtype, p.shape, args);
  }
}

TEST(GridTest, NamesShowTheQuantizationAndTheRowLayout) {
  GridPoint quant{"llm_norm", Op::kAddRmsNormQuant, DType::kFloat16, {64, 4096}};
  EXPECT_EQ(PointName(quant), "add_rms_norm_quant float16 64x4096 fp8_e4m3 per_row");
  quant.quant_dtype = kernels::QuantDType::kInt8;
  quant.scale_mode = kernels::ScaleMode::kPerGroup;
  quant.group_size = 128;
  EXPECT_EQ(PointName(quant), "add_rms_norm_quant float16 64x4096 int8 per_group 128");
  // Quantization fields mean nothing to the other ops.
  const GridPoint plain{"llm_norm", Op::kAddRmsNorm, DType::kFloat16, {64, 4096}};
  EXPECT_EQ(PointName(plain), "add_rms_norm float16 64x4096");
  EXPECT_EQ(PointVariant(plain), "");
  EXPECT_EQ(PointVariant(quant), " int8 per_group 128");
  absl::StatusOr<std::vector<GridPoint>> grid =
      StandardGrid({"llm_norm"}, {Op::kRmsNorm}, {DType::kBFloat16});
  ASSERT_TRUE(grid.ok()) << grid.status();
  EXPECT_EQ(PointName((*grid)[4]),
            "rms_norm bfloat16 512x128 x_stride=128 group_rows=32 x_group_stride=12288");
}

TEST(GridTest, ParamsOfCarriesTheQuantizationOnlyToTheQuantizingOps) {
  GridPoint p{"custom", Op::kLayerNormQuant, DType::kFloat16, {8, 256}};
  p.quant_dtype = kernels::QuantDType::kFp8E5M2;
  p.scale_mode = kernels::ScaleMode::kPerGroup;
  p.group_size = 64;
  kernels::OpParams params = ParamsOf(p);
  EXPECT_EQ(params.quant_dtype, kernels::QuantDType::kFp8E5M2);
  EXPECT_EQ(params.scale_mode, kernels::ScaleMode::kPerGroup);
  EXPECT_EQ(params.group_size, 64);
  p.op = Op::kAddLayerNorm;  // a group_size would fail its validation
  params = ParamsOf(p);
  EXPECT_EQ(params.group_size, 0);
  EXPECT_EQ(params.scale_mode, kernels::OpParams().scale_mode);
  const GridPoint masked{"attention",        Op::kScaledMaskedSoftmax, DType::kFloat16, {64, 16},
                         /*with_mask=*/true, /*causal=*/true,          /*mask_rows=*/16};
  params = ParamsOf(masked);
  EXPECT_TRUE(params.causal);
  EXPECT_EQ(params.mask_rows, 16);
}

TEST(GridTest, FusedNormBytesCountTheResidualTheCodesAndTheScales) {
  const kernels::Shape shape{64, 4096};
  const int64_t n = 64 * 4096;
  // x read, residual read and written back, y written, the weight read.
  const GridPoint add{"llm_norm", Op::kAddRmsNorm, DType::kBFloat16, shape};
  EXPECT_EQ(PointBytes(add), 4 * n * 2 + 4096 * 2);
  // LayerNorm: gamma and beta.
  const GridPoint add_ln{"llm_norm", Op::kAddLayerNorm, DType::kBFloat16, shape};
  EXPECT_EQ(PointBytes(add_ln), 4 * n * 2 + 2 * 4096 * 2);
  // One-byte codes and a float32 scale per row.
  const GridPoint quant{"llm_norm", Op::kRmsNormQuant, DType::kFloat16, shape};
  EXPECT_EQ(PointBytes(quant), n * 2 + n + 64 * 4 + 4096 * 2);
  const GridPoint add_quant{"llm_norm", Op::kAddLayerNormQuant, DType::kFloat16, shape};
  EXPECT_EQ(PointBytes(add_quant), 3 * n * 2 + n + 64 * 4 + 2 * 4096 * 2);
  // Per-group scales: cols / 128 of them per row.
  GridPoint grouped = quant;
  grouped.scale_mode = kernels::ScaleMode::kPerGroup;
  grouped.group_size = 128;
  EXPECT_EQ(PointBytes(grouped), n * 2 + n + 64 * 32 * 4 + 4096 * 2);
  // Per-head rows count their elements, not the k and v between them.
  absl::StatusOr<std::vector<GridPoint>> heads =
      StandardGrid({"llm_norm"}, {Op::kRmsNorm}, {DType::kBFloat16});
  ASSERT_TRUE(heads.ok()) << heads.status();
  const GridPoint& q = (*heads)[4];  // 16 tokens x 32 heads of 128
  ASSERT_EQ(q.shape, (kernels::Shape{16 * 32, 128}));
  EXPECT_EQ(PointBytes(q), 2 * 16 * 32 * 128 * 2 + 128 * 2);
}

TEST(GridTest, CustomQuantPointsGetTheRepresentativeQuantization) {
  absl::StatusOr<std::vector<GridPoint>> custom =
      CustomGrid({Op::kAddRmsNormQuant}, {DType::kBFloat16}, {4}, {1024});
  ASSERT_TRUE(custom.ok());
  ASSERT_EQ(custom->size(), 1u);
  EXPECT_EQ(PointName(custom->front()), "add_rms_norm_quant bfloat16 4x1024 fp8_e4m3 per_row");
  EXPECT_FALSE(kernels::HasRowStrides(ParamsOf(custom->front()), custom->front().shape));
}

}  // namespace
}  // namespace kt::tuner
