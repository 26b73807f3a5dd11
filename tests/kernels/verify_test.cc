// The host side of verification (kernels/verify.h), no GPU needed: problems
// of the fused norms with their references, and CheckHostOutputs on what the
// daemon's CPU backend (RunReference in the storage dtype) writes, good and
// spoiled: codes by rank, the residual and its gaps, the scales.
#include "kernels/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/host_dtype.h"
#include "kernels/reference.h"

namespace kt::kernels {
namespace {

// What the CPU backend writes for `p`.
HostOutputs RunLikeTheCpuBackend(const HostProblem& p) {
  absl::StatusOr<HostOutputs> out = RunReferenceOnHost(p);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : HostOutputs{};
}

ProblemOptions Quantized(QuantDType dtype, ScaleMode mode) {
  ProblemOptions options;
  options.params.quant_dtype = dtype;
  options.params.scale_mode = mode;
  options.params.group_size = mode == ScaleMode::kPerGroup ? 64 : 0;
  return options;
}

TEST(VerifyTest, FusedNormProblemsHoldEveryOperandAndReference) {
  const Shape shape{5, 128};
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    for (ScaleMode mode : {ScaleMode::kStatic, ScaleMode::kPerRow, ScaleMode::kPerGroup}) {
      if (!QuantizesOutput(op) && mode != ScaleMode::kPerRow) continue;
      SCOPED_TRACE(::testing::Message() << OpName(op) << " " << ScaleModeName(mode));
      absl::StatusOr<HostProblem> p =
          MakeProblem(op, DType::kBFloat16, shape, 7, InputPattern::kNormal, true, 0, 0,
                      Quantized(QuantDType::kFp8E4M3, mode));
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_EQ(p->x.size(), 5u * 128 * 2);
      EXPECT_EQ(p->residual.size(), AddsResidual(op) ? 5u * 128 * 2 : 0u);
      EXPECT_EQ(p->residual_ref.size(), p->residual.size());
      if (AddsResidual(op)) {
        EXPECT_NE(p->residual_ref, p->residual);
      }
      EXPECT_EQ(p->code_ref.size(), QuantizesOutput(op) ? 5u * 128 : 0u);
      EXPECT_EQ(p->y_ref.size(), 5u * 128);  // the quantizing ops': y before the codes
      EXPECT_EQ(p->inv_std_ref.size(), 5u);
      EXPECT_EQ(p->mean_ref.size(), IsLayerNormFamily(op) ? 5u : 0u);
      const bool dynamic = QuantizesOutput(op) && mode != ScaleMode::kStatic;
      EXPECT_EQ(p->row_scale_ref.size(), !dynamic ? 0u : mode == ScaleMode::kPerGroup ? 10u : 5u);
      EXPECT_EQ(p->quant_scale.size(), QuantizesOutput(op) && mode == ScaleMode::kStatic ? 1u : 0u);
      EXPECT_TRUE(CheckHostOutputs(*p, RunLikeTheCpuBackend(*p)).passed);
    }
  }
}

// The static scale MakeProblem picks is the largest per-row dynamic one: the
// codes reach QuantMax and no further.
TEST(VerifyTest, PickedStaticScaleSpansTheCodes) {
  for (QuantDType dtype : kAllQuantDTypes) {
    absl::StatusOr<HostProblem> p =
        MakeProblem(Op::kRmsNormQuant, DType::kFloat32, {16, 256}, 3, InputPattern::kNormal, true,
                    0, 0, Quantized(dtype, ScaleMode::kStatic));
    ASSERT_TRUE(p.ok()) << p.status();
    absl::StatusOr<HostProblem> dynamic =
        MakeProblem(Op::kRmsNormQuant, DType::kFloat32, {16, 256}, 3, InputPattern::kNormal, true,
                    0, 0, Quantized(dtype, ScaleMode::kPerRow));
    ASSERT_TRUE(dynamic.ok());
    ASSERT_EQ(p->quant_scale.size(), 1u);
    EXPECT_EQ(p->quant_scale[0],
              *std::max_element(dynamic->row_scale_ref.begin(), dynamic->row_scale_ref.end()));
    double largest = 0;
    for (uint8_t code : p->code_ref)
      largest = std::max(largest, std::fabs(DecodeQuant(dtype, code)));
    EXPECT_EQ(largest, QuantMax(dtype)) << QuantDTypeName(dtype);
    // A given scale is kept.
    ProblemOptions options = Quantized(dtype, ScaleMode::kStatic);
    options.static_scale = 0.25f;
    p = MakeProblem(Op::kRmsNormQuant, DType::kFloat32, {16, 256}, 3, InputPattern::kNormal, true,
                    0, 0, options);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->quant_scale, std::vector<float>{0.25f});
  }
}

// QK-norm's strided rows: x and the residual hold their stored rows where
// their layouts put them, 0xff between; a grouped problem stores whole
// groups; every op's CPU-backend output passes on that layout (grouped for
// rms_norm, plain strides for the others).
TEST(VerifyTest, StridedProblemsLayOutTheirRows) {
  ProblemOptions options;
  options.params.group_rows = 4;     // heads
  options.params.x_row_stride = 64;  // head_dim
  options.params.x_group_stride = 3 * 4 * 64;
  options.params.y_row_stride = 80;
  options.params.residual_row_stride = 96;
  const Shape shape{32, 64};  // 8 tokens x 4 heads
  for (Op op : kAllOps) {
    SCOPED_TRACE(OpName(op));
    ProblemOptions op_options = options;
    if (op != Op::kRmsNorm) {
      // Groups are rms_norm's (QK-norm); the others take plain strides.
      op_options.params.group_rows = 0;
      op_options.params.x_group_stride = 0;
      op_options.params.x_row_stride = 72;
    }
    absl::StatusOr<HostProblem> p =
        MakeProblem(op, DType::kFloat16, shape, 11, InputPattern::kNormal, true, 0, 0, op_options);
    ASSERT_TRUE(p.ok()) << p.status();
    const RowLayout x = RowLayoutOf(Operand::kInput, p->params, shape);
    ASSERT_EQ(p->x.size(), static_cast<size_t>((x.Offset(31) + 64) * 2));
    for (int64_t row = 0; row < 32; ++row) {
      for (int64_t c = 0; c < 64; ++c) {
        ASSERT_FALSE(std::isnan(LoadAsDouble(DType::kFloat16, p->x.data(), x.Offset(row) + c)));
      }
    }
    // Between rows (after row 3, the next group's first row is 3 * 4 * 64 on).
    EXPECT_EQ(p->x[(x.Offset(3) + 64) * 2], 0xff);
    EXPECT_TRUE(CheckHostOutputs(*p, RunLikeTheCpuBackend(*p)).passed);
  }
  // Five distinct rows of a grouped problem store two whole groups.
  absl::StatusOr<HostProblem> p = MakeProblem(Op::kRmsNorm, DType::kFloat16, shape, 11,
                                              InputPattern::kNormal, true, 0, 5, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->stored_rows, 8);
}

// Spoiled outputs are caught and named: a code two steps off (one step is
// allowed), the residual off by two ulps or written between rows, a scale
// off by 1e-3, a missing residual.
TEST(VerifyTest, HostCheckCatchesSpoiledCodesResidualsAndScales) {
  ProblemOptions options = Quantized(QuantDType::kFp8E4M3, ScaleMode::kPerGroup);
  options.params.residual_row_stride = 160;
  absl::StatusOr<HostProblem> p = MakeProblem(Op::kAddRmsNormQuant, DType::kFloat16, {6, 128}, 5,
                                              InputPattern::kNormal, true, 0, 0, options);
  ASSERT_TRUE(p.ok()) << p.status();
  const HostOutputs good = RunLikeTheCpuBackend(*p);
  ASSERT_TRUE(CheckHostOutputs(*p, good).passed);

  // Codes: the reference's code of element (2, 5), moved by 1 and by 2.
  const uint8_t code = p->code_ref[2 * 128 + 5];
  ASSERT_LT(code & 0x7f, 0x7c);  // room to move up
  HostOutputs out = good;
  out.y[2 * 128 + 5] = static_cast<char>(code + 1);
  EXPECT_TRUE(CheckHostOutputs(*p, out).passed);
  out.y[2 * 128 + 5] = static_cast<char>(code + 2);
  CheckReport report = CheckHostOutputs(*p, out);
  EXPECT_FALSE(report.passed);
  EXPECT_EQ(report.bad_elements, 1);
  EXPECT_NE(report.detail.find("y[2, 5] = code 0x"), std::string::npos) << report.detail;

  // The residual: element (1, 3) two float16 steps up; a gap written.
  out = good;
  uint16_t bits;
  std::memcpy(&bits, out.residual.data() + (160 + 3) * 2, 2);
  bits += 2;
  std::memcpy(out.residual.data() + (160 + 3) * 2, &bits, 2);
  report = CheckHostOutputs(*p, out);
  EXPECT_FALSE(report.passed);
  EXPECT_NE(report.detail.find("residual element 163"), std::string::npos) << report.detail;
  out = good;
  out.residual[(128 + 1) * 2] = 0;  // between rows 0 and 1: a number, not NaN
  out.residual[(128 + 1) * 2 + 1] = 0x3c;
  EXPECT_FALSE(CheckHostOutputs(*p, out).passed);
  out = good;
  out.residual.clear();
  EXPECT_FALSE(CheckHostOutputs(*p, out).passed);

  // A scale 1e-3 off; 1e-5 off passes.
  out = good;
  out.row_scale[3] *= 1.00001f;
  EXPECT_TRUE(CheckHostOutputs(*p, out).passed);
  out.row_scale[3] = good.row_scale[3] * 1.001f;
  report = CheckHostOutputs(*p, out);
  EXPECT_FALSE(report.passed);
  EXPECT_NE(report.detail.find("row_scale[3]"), std::string::npos) << report.detail;
}

// A code more than one step off passes only where its value (times the
// scale) is within y's tolerance of the reference's y: codes finer than
// float32 resolves y, as on a constant row whose dynamic scale is the floor.
TEST(VerifyTest, CodesFinerThanYsToleranceAreCheckedByValue) {
  const Tolerance f32 = OutputTolerance(Op::kLayerNormQuant, DType::kFloat32);
  const double floor_scale = 1.0 / (448.0 * 512);  // e4m3's least dynamic scale
  // 0x38 is 1.0: 2.2e-6 against 0 passes at the floor scale, not at 0.01.
  EXPECT_TRUE(CodeWithin(RankedFormat::kFp8E4M3, 0x38, 0x00, 1, floor_scale, 0.0, f32.rtol,
                         f32.atol, 0));
  EXPECT_FALSE(
      CodeWithin(RankedFormat::kFp8E4M3, 0x38, 0x00, 1, 0.01, 0.0, f32.rtol, f32.atol, 0));
  // LayerNorm's slack widens it.
  EXPECT_TRUE(
      CodeWithin(RankedFormat::kFp8E4M3, 0x38, 0x00, 1, 0.01, 0.0, f32.rtol, f32.atol, 0.01));
  // int8: 3 codes of 1e-5 against 1e-5.
  EXPECT_TRUE(CodeWithin(RankedFormat::kInt8, 3, 1, 1, 1e-5, 1e-5, f32.rtol, f32.atol, 0));
  EXPECT_FALSE(CodeWithin(RankedFormat::kInt8, 3, 1, 1, 1.0, 1.0, f32.rtol, f32.atol, 0));
  // NaN meets NaN only, whatever the scale.
  EXPECT_FALSE(CodeWithin(RankedFormat::kFp8E4M3, 0x7f, 0x00, 1, 1e-9, 0.0, f32.rtol, f32.atol,
                          0));
  EXPECT_TRUE(CodeWithin(RankedFormat::kFp8E4M3, 0xff, 0x7f, 0, 1.0, NAN, f32.rtol, f32.atol, 0));
  EXPECT_EQ(CodeValue(RankedFormat::kFp8E4M3, 0xb8), -1.0);
  EXPECT_EQ(CodeValue(RankedFormat::kFp8E5M2, 0x7b), 57344.0);
  EXPECT_EQ(CodeValue(RankedFormat::kInt8, 0x80), -128.0);
}

// The host check on a constant LayerNorm row: codes scattered by float32's
// x - mean noise (what the GPU writes) pass, the same miss on an ordinary
// row fails.
TEST(VerifyTest, HostCheckTakesConstantRowsCodesByValue) {
  absl::StatusOr<HostProblem> p =
      MakeProblem(Op::kLayerNormQuant, DType::kFloat32, {6, 256}, 11, InputPattern::kSpecialValues,
                  /*with_affine=*/false, 0, 0, Quantized(QuantDType::kFp8E4M3, ScaleMode::kPerRow));
  ASSERT_TRUE(p.ok()) << p.status();
  const HostOutputs good = RunLikeTheCpuBackend(*p);
  ASSERT_TRUE(CheckHostOutputs(*p, good).passed);
  // Row 1 is constant (verify.cc FillSpecialLine): y 0, the floor scale.
  ASSERT_EQ(p->code_ref[256 + 7], 0);
  ASSERT_FLOAT_EQ(p->row_scale_ref[1], static_cast<float>(1.0 / (448.0 * 512)));
  HostOutputs out = good;
  out.y[256 + 7] = static_cast<char>(0x40);  // 2: 4.4e-6
  out.y[256 + 9] = static_cast<char>(0xc8);  // -4: -8.7e-6
  EXPECT_TRUE(CheckHostOutputs(*p, out).passed);
  // Row 5 (large offset, small spread) has ordinary codes.
  const uint8_t code = p->code_ref[5 * 256 + 3];
  ASSERT_LT(code & 0x7f, 0x7c);
  out.y[5 * 256 + 3] = static_cast<char>(code + 2);
  const CheckReport report = CheckHostOutputs(*p, out);
  EXPECT_FALSE(report.passed);
  EXPECT_EQ(report.bad_elements, 1);
}

// The fused norms' y (unquantized) has its base norm's tolerance.
TEST(VerifyTest, FusedNormsTakeTheirBaseNormsTolerance) {
  for (Op op : kAllOps) {
    for (DType dtype : kAllDTypes) {
      const Tolerance got = OutputTolerance(op, dtype);
      const Tolerance want = OutputTolerance(BaseNormOp(op), dtype);
      EXPECT_EQ(got.rtol, want.rtol) << OpName(op);
      EXPECT_EQ(got.atol, want.atol) << OpName(op);
    }
  }
}

TEST(VerifyTest, RanksCountRepresentableValues) {
  // float16: 1.0 and its two neighbours; +0 and -0 are the same value.
  // fp8 codes: one step, however small the values.
  EXPECT_FALSE(RanksWithin(RankedFormat::kFp8E5M2, 0x0a, 0x12, 1));  // 1.8e-4, 7.3e-4
  EXPECT_TRUE(RanksWithin(RankedFormat::kFp8E5M2, 0xb1, 0xb0, 1));   // -0.15625, -0.125
  EXPECT_FALSE(RanksWithin(RankedFormat::kFp8E5M2, 0xb2, 0xb0, 1));  // -0.1875, -0.125
  EXPECT_FALSE(RanksWithin(RankedFormat::kFp8E5M2, 0x3c, 0x38, 1));  // 1, 0.5
  EXPECT_FALSE(RanksWithin(RankedFormat::kFp8E4M3, 0x08, 0x00, 1));  // 2^-6, 0
  EXPECT_FALSE(RanksWithin(RankedFormat::kFp8E4M3, 0x03, 0x00, 1));  // 3 * 2^-9, 0
  EXPECT_FALSE(RanksWithin(RankedFormat::kInt8, 3, 0, 1));
  EXPECT_TRUE(RanksWithin(RankedFormat::kFloat16, 0x3c01, 0x3c00, 1));
  EXPECT_FALSE(RanksWithin(RankedFormat::kFloat16, 0x3c02, 0x3c00, 1));
  EXPECT_TRUE(RanksWithin(RankedFormat::kFloat16, 0x8000, 0x0000, 0));
  EXPECT_TRUE(RanksWithin(RankedFormat::kFloat16, 0x8001, 0x0001, 2));
  EXPECT_FALSE(RanksWithin(RankedFormat::kFloat16, 0x8001, 0x0001, 1));
  // NaN meets any NaN, nothing else.
  EXPECT_TRUE(RanksWithin(RankedFormat::kFloat32, 0xffffffff, 0x7fc00000, 0));
  EXPECT_FALSE(RanksWithin(RankedFormat::kFloat32, 0x7f800000, 0x7fc00000, 1));
  EXPECT_TRUE(RanksWithin(RankedFormat::kFp8E4M3, 0xff, 0x7f, 0));
  EXPECT_FALSE(RanksWithin(RankedFormat::kFp8E4M3, 0x7e, 0x7f, 1));  // 448 is not NaN
  EXPECT_TRUE(RanksWithin(RankedFormat::kFp8E5M2, 0x7e, 0x7d, 0));
  EXPECT_TRUE(RanksWithin(RankedFormat::kFp8E5M2, 0x7c, 0x7b, 1));  // inf next to 57344
  // int8 codes rank as their values: -1 and 0 are neighbours, -128 and 127
  // the ends.
  EXPECT_TRUE(RanksWithin(RankedFormat::kInt8, 0xff, 0x00, 1));
  EXPECT_FALSE(RanksWithin(RankedFormat::kInt8, 0x80, 0x7f, 254));
  // Every fp8 code's decoded neighbours are one rank apart.
  for (QuantDType dtype : {QuantDType::kFp8E4M3, QuantDType::kFp8E5M2}) {
    for (int code = 0; code < 0x7b; ++code) {
      EXPECT_LT(DecodeQuant(dtype, code), DecodeQuant(dtype, code + 1));
      EXPECT_EQ(
          RankOf(RankedFormatOf(dtype), code + 1).rank - RankOf(RankedFormatOf(dtype), code).rank,
          1);
    }
  }
}

}  // namespace
}  // namespace kt::kernels
