// The fp64 reference against values worked out by hand, and the storage-
// dtype wrapper (the CPU backend) against the per-row function: the add,
// offset and quantizing forms of the norms, and strided / grouped row
// layouts that leave the gaps between rows alone.
#include "kernels/reference.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/host_dtype.h"
#include "tests/testing/without_threads.h"

namespace kt::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> Row(Op op, std::vector<double> x) {
  std::vector<double> y(x.size());
  ReferenceRow(op, static_cast<int64_t>(x.size()), x.data(), nullptr, nullptr, 1e-5, y.data(),
               nullptr, nullptr);
  return y;
}

TEST(ReferenceTest, SoftmaxOfKnownValues) {
  const std::vector<double> y = Row(Op::kSoftmax, {0.0, std::log(2.0)});
  EXPECT_NEAR(y[0], 1.0 / 3.0, 1e-15);
  EXPECT_NEAR(y[1], 2.0 / 3.0, 1e-15);
}

TEST(ReferenceTest, SoftmaxIsShiftInvariantAndSumsToOne) {
  const std::vector<double> a = Row(Op::kSoftmax, {1.0, 2.0, 3.0, 4.0});
  const std::vector<double> b = Row(Op::kSoftmax, {1001.0, 1002.0, 1003.0, 1004.0});
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-15);
    sum += a[i];
  }
  EXPECT_NEAR(sum, 1.0, 1e-15);
}

TEST(ReferenceTest, LogSoftmaxIsLogOfSoftmax) {
  const std::vector<double> x = {-3.0, 0.5, 2.0, 7.25};
  const std::vector<double> s = Row(Op::kSoftmax, x);
  const std::vector<double> l = Row(Op::kLogSoftmax, x);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(l[i], std::log(s[i]), 1e-13);
}

TEST(ReferenceTest, SpecialValues) {
  // -inf everywhere but one finite value: a one-hot distribution.
  std::vector<double> y = Row(Op::kSoftmax, {-kInf, 5.0, -kInf});
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 1.0);
  y = Row(Op::kLogSoftmax, {-kInf, 5.0, -kInf});
  EXPECT_EQ(y[0], -kInf);
  EXPECT_EQ(y[1], 0.0);
  // All -inf: undefined, NaN as in PyTorch.
  y = Row(Op::kSoftmax, {-kInf, -kInf});
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  // A NaN anywhere poisons the whole row.
  y = Row(Op::kSoftmax, {1.0, std::nan(""), 2.0});
  for (double v : y) EXPECT_TRUE(std::isnan(v));
  y = Row(Op::kLayerNorm, {1.0, std::nan(""), 2.0});
  for (double v : y) EXPECT_TRUE(std::isnan(v));
}

TEST(ReferenceTest, LayerNormWithAffineAndStats) {
  const std::vector<double> x = {1.0, 2.0, 3.0, 4.0};
  const std::vector<double> gamma = {1.0, 2.0, 0.5, -1.0};
  const std::vector<double> beta = {0.0, 1.0, 0.0, 0.25};
  std::vector<double> y(4);
  double mean = 0, inv_std = 0;
  const double eps = 1e-5;
  ReferenceRow(Op::kLayerNorm, 4, x.data(), gamma.data(), beta.data(), eps, y.data(), &mean,
               &inv_std);
  EXPECT_DOUBLE_EQ(mean, 2.5);
  EXPECT_NEAR(inv_std, 1.0 / std::sqrt(1.25 + eps), 1e-15);  // biased variance 1.25
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], (x[i] - 2.5) * inv_std * gamma[i] + beta[i], 1e-15);
  }
}

TEST(ReferenceTest, LayerNormOfConstantRowIsBeta) {
  const std::vector<double> x(8, 3.25);
  const std::vector<double> beta(8, 0.75);
  std::vector<double> y(8);
  ReferenceRow(Op::kLayerNorm, 8, x.data(), nullptr, beta.data(), 1e-5, y.data(), nullptr,
               nullptr);
  for (double v : y) EXPECT_EQ(v, 0.75);
}

TEST(ReferenceTest, RmsNormWithWeightAndInvRms) {
  const std::vector<double> x = {1.0, -2.0, 3.0, 4.0};
  const std::vector<double> gamma = {1.0, 2.0, 0.5, -1.0};
  const double eps = 1e-5;
  std::vector<double> y(4);
  double inv_rms = 0;
  ReferenceRow(Op::kRmsNorm, 4, x.data(), gamma.data(), nullptr, eps, y.data(), nullptr,
               &inv_rms);
  // mean(x^2) = (1 + 4 + 9 + 16) / 4 = 7.5; no mean is subtracted.
  EXPECT_NEAR(inv_rms, 1.0 / std::sqrt(7.5 + eps), 1e-15);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i] * inv_rms * gamma[i], 1e-15);
  // Without a weight: x / rms, whose mean square is 1 (up to epsilon).
  y = Row(Op::kRmsNorm, x);
  double mean_square = 0;
  for (double v : y) mean_square += v * v / 4;
  EXPECT_NEAR(mean_square, 7.5 / (7.5 + eps), 1e-15);
}

TEST(ReferenceTest, RmsNormOfZerosAndSpecialValues) {
  std::vector<double> y(3);
  double inv_rms = 0;
  const std::vector<double> zeros(3, 0.0);
  ReferenceRow(Op::kRmsNorm, 3, zeros.data(), nullptr, nullptr, 1e-4, y.data(), nullptr,
               &inv_rms);
  EXPECT_DOUBLE_EQ(inv_rms, 100.0);  // 1 / sqrt(0 + 1e-4)
  for (double v : y) EXPECT_EQ(v, 0.0);
  y = Row(Op::kRmsNorm, {1.0, std::nan(""), 2.0});
  for (double v : y) EXPECT_TRUE(std::isnan(v));
  // An infinite element: 1/rms is 0, so y is NaN there and 0 elsewhere.
  y = Row(Op::kRmsNorm, {1.0, kInf, 2.0});
  EXPECT_EQ(y[0], 0.0);
  EXPECT_TRUE(std::isnan(y[1]));
}

std::vector<double> ReduceScaleRow(std::vector<double> x, double* scale) {
  std::vector<double> y(x.size());
  ReferenceRow(Op::kReduceScale, static_cast<int64_t>(x.size()), x.data(), nullptr, nullptr,
               1e-5, y.data(), nullptr, nullptr, scale);
  return y;
}

TEST(ReferenceTest, ReduceScaleDividesByTheAbsoluteMax) {
  double scale = 0;
  std::vector<double> y = ReduceScaleRow({-4.0, 2.0, 1.0, 0.0}, &scale);
  EXPECT_EQ(scale, 4.0);
  EXPECT_EQ(y, (std::vector<double>{-1.0, 0.5, 0.25, 0.0}));
  // An all-zero row: zeros out, scale 0 (no division by zero).
  y = ReduceScaleRow({0.0, -0.0, 0.0}, &scale);
  EXPECT_EQ(scale, 0.0);
  for (double v : y) EXPECT_EQ(v, 0.0);
  // The max skips NaN (like fmax); the NaN itself stays NaN.
  y = ReduceScaleRow({std::nan(""), -2.0, 1.0}, &scale);
  EXPECT_EQ(scale, 2.0);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], -1.0);
  EXPECT_EQ(y[2], 0.5);
  // An infinite max: scale inf, the infinity becomes NaN and the rest 0.
  y = ReduceScaleRow({-kInf, 3.0}, &scale);
  EXPECT_EQ(scale, kInf);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0);
  // Magnitudes subnormal in float (1 / max overflows float) scale to [-1, 1].
  y = ReduceScaleRow({1e-40, -2e-40}, &scale);
  EXPECT_EQ(scale, 2e-40);
  EXPECT_NEAR(y[0], 0.5, 1e-12);
  EXPECT_NEAR(y[1], -1.0, 1e-12);
}

// The scaled-masked softmax through RunReference, which applies scale, mask
// and causal masking per query row q = row % mask_rows before the softmax.
struct MaskedRun {
  std::vector<float> y;
  absl::Status status;
};
MaskedRun RunMasked(const std::vector<float>& x, int64_t rows, int64_t cols, double scale,
                    const std::vector<float>* mask, int64_t mask_rows, bool causal) {
  MaskedRun run;
  run.y.assign(rows * cols, -1.f);
  RowOpArgs args;
  args.x = x.data();
  args.y = run.y.data();
  args.params.scale = scale;
  args.mask = mask != nullptr ? mask->data() : nullptr;
  args.params.mask_rows = mask_rows;
  args.params.causal = causal;
  run.status = RunReference(Op::kScaledMaskedSoftmax, DType::kFloat32, {rows, cols}, args, 0,
                            rows, DType::kFloat32);
  return run;
}

TEST(ReferenceTest, ScaledMaskedSoftmaxWithAMaskPerQuery) {
  const float inf = std::numeric_limits<float>::infinity();
  const float ln2 = std::log(2.f);
  // (4, 3): two (batch, head) blocks of q = 2 queries; the mask is (2, 3).
  const std::vector<float> x = {0.f, 0.5f, 1.f,  1.f, 1.f, 1.f,
                                0.f, 0.f,  0.f,  0.5f, 0.f, 0.f};
  const std::vector<float> mask = {0.f, -inf, 0.f, ln2, 0.f, -inf};
  const MaskedRun run = RunMasked(x, 4, 3, /*scale=*/2.0, &mask, 2, /*causal=*/false);
  ASSERT_TRUE(run.status.ok()) << run.status;
  const double e2 = std::exp(2.0), e1 = std::exp(1.0);
  const std::vector<double> want = {
      1 / (1 + e2),         0, e2 / (1 + e2),  // query 0: logits 0, -inf, 2
      2.0 / 3,        1.0 / 3, 0,              // query 1: 2 + ln2, 2, -inf
      0.5,                  0, 0.5,            // query 0: 0, -inf, 0
      2 * e1 / (2 * e1 + 1), 1 / (2 * e1 + 1), 0};  // query 1: 1 + ln2, 0, -inf
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(run.y[i], want[i], 1e-6) << i;
}

TEST(ReferenceTest, ScaledMaskedSoftmaxCausal) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // q = 2, k = 3, top-left aligned: query 0 sees column 0, query 1 columns
  // 0 and 1. What the causal mask hides, even NaN or inf, does not matter.
  const std::vector<float> x = {5.f, nan, inf,  0.f, std::log(3.f), 7.f};
  MaskedRun run = RunMasked(x, 2, 3, 1.0, nullptr, 2, /*causal=*/true);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.y[0], 1.f);
  EXPECT_EQ(run.y[1], 0.f);
  EXPECT_EQ(run.y[2], 0.f);
  EXPECT_NEAR(run.y[3], 0.25, 1e-7);
  EXPECT_NEAR(run.y[4], 0.75, 1e-7);
  EXPECT_EQ(run.y[5], 0.f);
  // Causal and a mask: query 1's mask removes column 0, causal column 2:
  // one-hot on column 1. Query 0's mask removes its only column: NaN.
  const std::vector<float> mask = {-inf, 0.f, 0.f, -inf, 0.f, 0.f};
  run = RunMasked(x, 2, 3, 1.0, &mask, 2, /*causal=*/true);
  ASSERT_TRUE(run.status.ok()) << run.status;
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(run.y[c])) << c;
  EXPECT_EQ(run.y[3], 0.f);
  EXPECT_EQ(run.y[4], 1.f);
  EXPECT_EQ(run.y[5], 0.f);
}

TEST(ReferenceTest, ScaledMaskedSoftmaxWithoutMaskIsScaledSoftmax) {
  const std::vector<float> x = {0.f, 1.f, 2.f, -1.f};
  const MaskedRun run = RunMasked(x, 2, 2, /*scale=*/std::log(3.0), nullptr, 0, false);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_NEAR(run.y[0], 0.25, 1e-7);  // logits 0, ln 3
  EXPECT_NEAR(run.y[1], 0.75, 1e-7);
  EXPECT_NEAR(run.y[2], 27.0 / 28.0, 1e-7);  // logits 2 ln 3, -ln 3: 9 : 1/3
  EXPECT_NEAR(run.y[3], 1.0 / 28.0, 1e-7);
}

TEST(ReferenceTest, ScaledMaskedSoftmaxRefusesAQueryLengthNotDividingRows) {
  const std::vector<float> x(12, 0.f), mask(12, 0.f);
  EXPECT_EQ(RunMasked(x, 4, 3, 1.0, &mask, 3, false).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunMasked(x, 4, 3, 1.0, &mask, 0, false).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunMasked(x, 4, 3, 1.0, nullptr, 3, true).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RunMasked(x, 4, 3, 1.0, &mask, 4, false).status.ok());
  EXPECT_TRUE(RunMasked(x, 4, 3, 1.0, &mask, 1, true).status.ok());
}

TEST(ReferenceTest, StorageWrapperMatchesRowFunctionOnEveryThreadCount) {
  const Shape shape{37, 19};
  std::vector<uint16_t> x(shape.elements());
  for (int64_t i = 0; i < shape.elements(); ++i) {
    StoreFromDouble(DType::kFloat16, x.data(), i, std::sin(0.37 * static_cast<double>(i)) * 4);
  }
  // The fused forms: NewNormsGiveTheSameBitsOnEveryThreadCount.
  for (Op op : kBasicOps) {
    for (int threads : {1, 3, 8}) {
      std::vector<float> y(shape.elements());
      std::vector<float> mean(shape.rows), inv_std(shape.rows), row_scale(shape.rows);
      RowOpArgs args;
      args.x = x.data();
      args.y = y.data();
      // The per-row outputs the op has.
      for (auto [operand, values] : {std::pair(Operand::kMean, &mean),
                                     std::pair(Operand::kInvStd, &inv_std),
                                     std::pair(Operand::kRowScale, &row_scale)}) {
        if (TakesOperand(op, operand)) args.set_operand(operand, values->data());
      }
      ASSERT_TRUE(RunReference(op, DType::kFloat16, shape, args, 0, shape.rows,
                               DType::kFloat32, threads)
                      .ok());
      for (int64_t row = 0; row < shape.rows; ++row) {
        std::vector<double> in(shape.cols), want(shape.cols);
        for (int64_t c = 0; c < shape.cols; ++c) {
          in[c] = LoadAsDouble(DType::kFloat16, x.data(), row * shape.cols + c);
        }
        double m = 0, s = 0, scale = 0;
        ReferenceRow(op, shape.cols, in.data(), nullptr, nullptr, 1e-5, want.data(), &m, &s,
                     &scale);
        for (int64_t c = 0; c < shape.cols; ++c) {
          ASSERT_EQ(y[row * shape.cols + c], static_cast<float>(want[c]))
              << OpName(op) << " threads=" << threads << " row=" << row << " col=" << c;
        }
        if (op == Op::kLayerNorm) {
          EXPECT_EQ(mean[row], static_cast<float>(m));
        }
        if (op == Op::kLayerNorm || op == Op::kRmsNorm) {
          EXPECT_EQ(inv_std[row], static_cast<float>(s)) << OpName(op);
        }
        if (op == Op::kReduceScale) {
          EXPECT_EQ(row_scale[row], static_cast<float>(scale));
        }
      }
    }
  }
}

// The add forms normalize r = x + residual as the residual stores it:
// rounded to the storage dtype, and written back.
TEST(ReferenceTest, AddRmsNormNormalizesTheRoundedSumAndWritesItBack) {
  const DType dtype = DType::kFloat16;
  const std::vector<double> xs = {1.0, -2.0, 0.5, 3.0}, rs = {0.25, 1.0, 1e-4, 1.0},
                            ws = {1.0, 2.0, -0.5, 0.25};
  std::vector<uint16_t> x(4), residual(4), gamma(4);
  for (int c = 0; c < 4; ++c) {
    StoreFromDouble(dtype, x.data(), c, xs[c]);
    StoreFromDouble(dtype, residual.data(), c, rs[c]);
    StoreFromDouble(dtype, gamma.data(), c, ws[c]);
  }
  std::vector<float> y(4), inv_rms(1);
  RowOpArgs args;
  args.x = x.data();
  args.y = y.data();
  args.gamma = gamma.data();
  args.residual = residual.data();
  args.inv_std = inv_rms.data();
  ASSERT_TRUE(RunReference(Op::kAddRmsNorm, dtype, {1, 4}, args, 0, 1, DType::kFloat32).ok());
  // 0.5 + 1e-4 is 0.5 in float16 (its step there is 2^-11): the norm sees 0.5.
  const std::vector<double> r = {1.25, -1.0, 0.5, 4.0};
  const double want_inv_rms = 1.0 / std::sqrt((1.5625 + 1.0 + 0.25 + 16.0) / 4 + 1e-5);
  EXPECT_NEAR(inv_rms[0], want_inv_rms, 1e-7);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(LoadAsDouble(dtype, residual.data(), c), r[c]) << c;
    EXPECT_NEAR(y[c], r[c] * want_inv_rms * ws[c], 1e-6) << c;
  }
}

TEST(ReferenceTest, AddLayerNormInPlaceWithStatsOfTheSum) {
  std::vector<float> x = {1.f, 2.f, 3.f, 4.f}, residual = {1.f, 1.f, -1.f, 0.f};
  const std::vector<float> gamma = {1.f, 2.f, 0.5f, -1.f}, beta = {0.f, 1.f, 0.f, 0.25f};
  std::vector<float> mean(1), inv_std(1);
  RowOpArgs args;
  args.x = x.data();
  args.y = x.data();  // in place
  args.gamma = gamma.data();
  args.beta = beta.data();
  args.residual = residual.data();
  args.mean = mean.data();
  args.inv_std = inv_std.data();
  ASSERT_TRUE(
      RunReference(Op::kAddLayerNorm, DType::kFloat32, {1, 4}, args, 0, 1, DType::kFloat32).ok());
  // r = {2, 3, 2, 4}: mean 2.75, biased variance (0.5625 + 0.0625 + 0.5625 + 1.5625) / 4.
  EXPECT_EQ(residual, (std::vector<float>{2.f, 3.f, 2.f, 4.f}));
  EXPECT_EQ(mean[0], 2.75f);
  const double want_inv_std = 1.0 / std::sqrt(0.6875 + 1e-5);
  EXPECT_NEAR(inv_std[0], want_inv_std, 1e-7);
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR(x[c], (residual[c] - 2.75) * want_inv_std * gamma[c] + beta[c], 1e-6) << c;
  }
}

// Gemma's RMSNorm: y = x_hat * (offset + w), in the plain and the add form;
// the row function without a weight ignores the offset.
TEST(ReferenceTest, WeightOffsetAddsToTheRmsNormWeight) {
  const std::vector<double> x = {1.0, -2.0, 3.0, 4.0}, w = {0.0, -0.5, 1.0, -1.0};
  std::vector<double> y(4);
  double inv_rms = 0;
  ReferenceRow(Op::kRmsNorm, 4, x.data(), w.data(), nullptr, 1e-5, y.data(), nullptr, &inv_rms,
               nullptr, /*weight_offset=*/1.0);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(y[c], x[c] * inv_rms * (1.0 + w[c]), 1e-15) << c;
  ReferenceRow(Op::kRmsNorm, 4, x.data(), nullptr, nullptr, 1e-5, y.data(), nullptr, &inv_rms,
               nullptr, 1.0);
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(y[c], x[c] * inv_rms, 1e-15) << c;

  // Through RunReference: offset 1 with w equals offset 0 with 1 + w.
  const std::vector<float> xf = {1.f, -2.f, 3.f, 4.f}, wf = {0.f, -0.5f, 1.f, -1.f},
                           one_plus_w = {1.f, 0.5f, 2.f, 0.f};
  for (Op op : {Op::kRmsNorm, Op::kAddRmsNorm}) {
    std::vector<float> with_offset(4), plain(4), residual(4, 0.5f), residual_plain(4, 0.5f);
    RowOpArgs args;
    args.x = xf.data();
    args.y = with_offset.data();
    args.gamma = wf.data();
    if (AddsResidual(op)) args.residual = residual.data();
    args.params.weight_offset = 1.0;
    ASSERT_TRUE(RunReference(op, DType::kFloat32, {1, 4}, args, 0, 1, DType::kFloat32).ok());
    args.y = plain.data();
    args.gamma = one_plus_w.data();
    if (AddsResidual(op)) args.residual = residual_plain.data();
    args.params.weight_offset = 0;
    ASSERT_TRUE(RunReference(op, DType::kFloat32, {1, 4}, args, 0, 1, DType::kFloat32).ok());
    EXPECT_EQ(with_offset, plain) << OpName(op);
  }
  // An offset is refused outside the RMSNorm family.
  std::vector<float> y4(4);
  RowOpArgs args;
  args.x = xf.data();
  args.y = y4.data();
  args.gamma = wf.data();
  args.params.weight_offset = 1.0;
  EXPECT_EQ(
      RunReference(Op::kLayerNorm, DType::kFloat32, {1, 4}, args, 0, 1, DType::kFloat32).code(),
      absl::StatusCode::kInvalidArgument);
}

// The new ops' ids in the row function: their base norm, unquantized.
TEST(ReferenceTest, RowFunctionOfTheFusedFormsIsTheBaseNorm) {
  const std::vector<double> x = {1.0, -2.0, 3.5, 4.0}, g = {1.0, 2.0, 0.5, -1.0},
                            b = {0.0, 1.0, 0.0, 0.25};
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    std::vector<double> want(4), got(4);
    double want_mean = 0, want_inv = 0, got_mean = 0, got_inv = 0;
    ReferenceRow(BaseNormOp(op), 4, x.data(), g.data(), b.data(), 1e-5, want.data(), &want_mean,
                 &want_inv);
    ReferenceRow(op, 4, x.data(), g.data(), b.data(), 1e-5, got.data(), &got_mean, &got_inv);
    EXPECT_EQ(got, want) << OpName(op);
    EXPECT_EQ(got_mean, want_mean) << OpName(op);
    EXPECT_EQ(got_inv, want_inv) << OpName(op);
  }
}

// rms_norm_quant of float32 rows: codes and the scales written.
struct QuantRun {
  absl::Status status;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
QuantRun RunQuant(const std::vector<float>& x, int64_t rows, int64_t cols, OpParams params,
                  const std::vector<float>* gamma = nullptr, float static_scale = 0) {
  QuantRun run;
  run.codes.assign(rows * cols, 0xab);
  const int64_t per_row = params.scale_mode == ScaleMode::kPerGroup && params.group_size > 0
                              ? cols / params.group_size
                              : 1;
  run.scales.assign(rows * per_row, -1.f);
  RowOpArgs args;
  args.x = x.data();
  args.y = run.codes.data();
  args.gamma = gamma != nullptr ? gamma->data() : nullptr;
  if (params.scale_mode == ScaleMode::kStatic) {
    args.quant_scale = &static_scale;
  } else {
    args.row_scale = run.scales.data();
  }
  args.params = params;
  run.status = RunReference(Op::kRmsNormQuant, DType::kFloat32, {rows, cols}, args, 0, rows,
                            DType::kFloat32);
  return run;
}

OpParams Quant(QuantDType dtype, ScaleMode mode, int64_t group_size = 0) {
  OpParams params;
  params.quant_dtype = dtype;
  params.scale_mode = mode;
  params.group_size = group_size;
  return params;
}

// Dynamic scales: the code of y_c is that of QuantMax * x_c / amax (the rms
// cancels), whose hand-worked values here sit on no rounding tie. Ratios
// 1, -0.625, 0.25, -0.125: e4m3 448, -280 -> -288, 112, -56; e5m2 57344,
// -35840 -> -32768, 14336, -7168; int8 127, -79.375, 31.75, -15.875.
TEST(ReferenceTest, QuantCodesAndScalesPerRowAndPerGroup) {
  const std::vector<float> row = {2.f, -1.25f, 0.5f, -0.25f};
  const double inv_rms = 1.0 / std::sqrt((4.0 + 1.5625 + 0.25 + 0.0625) / 4 + 1e-5);
  const struct {
    QuantDType dtype;
    std::vector<uint8_t> codes;
  } cases[] = {{QuantDType::kFp8E4M3, {0x7e, 0xf9, 0x6e, 0xe6}},
               {QuantDType::kFp8E5M2, {0x7b, 0xf8, 0x73, 0xef}},
               {QuantDType::kInt8, {0x7f, 0xb1, 0x20, 0xf0}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(QuantDTypeName(c.dtype));
    const double qmax = QuantMax(c.dtype);
    QuantRun run = RunQuant(row, 1, 4, Quant(c.dtype, ScaleMode::kPerRow));
    ASSERT_TRUE(run.status.ok()) << run.status;
    EXPECT_EQ(run.codes, c.codes);
    ASSERT_EQ(run.scales.size(), 1u);
    EXPECT_NEAR(run.scales[0], 2 * inv_rms / qmax, 1e-7 * run.scales[0]);
    // Two rows of two groups of 64: the second group is the first times 4,
    // its scale exactly 4 times the first's, its codes the same.
    std::vector<float> x(2 * 128);
    for (int64_t i = 0; i < 256; ++i) x[i] = row[i % 4] * (i % 128 < 64 ? 1.f : 4.f);
    run = RunQuant(x, 2, 128, Quant(c.dtype, ScaleMode::kPerGroup, 64));
    ASSERT_TRUE(run.status.ok()) << run.status;
    for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(run.codes[i], c.codes[i % 4]) << i;
    ASSERT_EQ(run.scales.size(), 4u);
    const double group_inv_rms = 1.0 / std::sqrt(8.5 * (4.0 + 1.5625 + 0.25 + 0.0625) / 4 + 1e-5);
    EXPECT_NEAR(run.scales[0], 2 * group_inv_rms / qmax, 1e-7 * run.scales[0]);
    EXPECT_EQ(run.scales[1], 4 * run.scales[0]);
    EXPECT_EQ(run.scales[2], run.scales[0]);
    EXPECT_EQ(run.scales[3], run.scales[1]);
  }
}

// A static scale (0.5) as given: y / 0.5 = {2, -1, 6, -0.5, 2000} (times
// 1 / sqrt(1 + 1e-5)): e4m3 saturates 2000 to 448, e5m2 rounds it to 2048,
// int8 saturates it to 127 and rounds -0.4999975 to 0.
TEST(ReferenceTest, QuantCodesWithAStaticScale) {
  const std::vector<float> x = {1.f, -1.f, 1.f, -1.f, 1.f};
  const std::vector<float> gamma = {1.f, 0.5f, 3.f, 0.25f, 1000.f};
  const struct {
    QuantDType dtype;
    std::vector<uint8_t> codes;
  } cases[] = {{QuantDType::kFp8E4M3, {0x40, 0xb8, 0x4c, 0xb0, 0x7e}},
               {QuantDType::kFp8E5M2, {0x40, 0xbc, 0x46, 0xb8, 0x68}},
               {QuantDType::kInt8, {0x02, 0xff, 0x06, 0x00, 0x7f}}};
  for (const auto& c : cases) {
    QuantRun run = RunQuant(x, 1, 5, Quant(c.dtype, ScaleMode::kStatic), &gamma, 0.5f);
    ASSERT_TRUE(run.status.ok()) << run.status;
    EXPECT_EQ(run.codes, c.codes) << QuantDTypeName(c.dtype);
    EXPECT_EQ(run.scales, std::vector<float>{-1.f}) << "a static scale writes no row_scale";
  }
  // Scale 0 divides by zero: +-inf saturates, 0 / 0 is NaN (of either
  // sign: x86's default NaN is negative); a NaN scale gives NaN codes
  // (int8: 0).
  const std::vector<float> signs = {1.f, -1.f, 0.f, 1.f};
  QuantRun run =
      RunQuant(signs, 1, 4, Quant(QuantDType::kFp8E4M3, ScaleMode::kStatic), nullptr, 0.f);
  EXPECT_EQ(run.codes[0], 0x7e);
  EXPECT_EQ(run.codes[1], 0xfe);
  EXPECT_TRUE(std::isnan(DecodeQuant(QuantDType::kFp8E4M3, run.codes[2])));
  EXPECT_EQ(run.codes[3], 0x7e);
  run = RunQuant(signs, 1, 4, Quant(QuantDType::kInt8, ScaleMode::kStatic), nullptr, 0.f);
  EXPECT_EQ(run.codes, (std::vector<uint8_t>{0x7f, 0x80, 0x00, 0x7f}));
  run = RunQuant(signs, 1, 4, Quant(QuantDType::kFp8E5M2, ScaleMode::kStatic), nullptr,
                 std::numeric_limits<float>::quiet_NaN());
  for (uint8_t code : run.codes) EXPECT_TRUE(std::isnan(DecodeQuant(QuantDType::kFp8E5M2, code)));
}

// scale_ub bounds amax: the scale is ub / QuantMax and what lies beyond ub
// saturates. y = x / rms = {1.650, -1.031, 0.4126, -0.2063}; y * 896:
// 1478 and -924 saturate, 369.7 -> 384, -184.8 -> -192.
TEST(ReferenceTest, QuantScaleUpperBound) {
  OpParams params = Quant(QuantDType::kFp8E4M3, ScaleMode::kPerRow);
  params.scale_ub = 0.5;
  QuantRun run = RunQuant({2.f, -1.25f, 0.5f, -0.25f}, 1, 4, params);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.scales[0], static_cast<float>(0.5 / 448));
  EXPECT_EQ(run.codes, (std::vector<uint8_t>{0x7e, 0xfe, 0x7c, 0xf4}));
  // A bound above amax changes nothing.
  params.scale_ub = 1e6;
  const QuantRun unbounded = RunQuant({2.f, -1.25f, 0.5f, -0.25f}, 1, 4, params);
  params.scale_ub = 0;
  const QuantRun plain = RunQuant({2.f, -1.25f, 0.5f, -0.25f}, 1, 4, params);
  EXPECT_EQ(unbounded.codes, plain.codes);
  EXPECT_EQ(unbounded.scales, plain.scales);
}

// A zero row takes the floor scale 1 / (QuantMax * 512) and codes 0. A NaN
// makes RMSNorm's whole row NaN: amax skips it (floor scale), the codes are
// NaN (int8: 0). An infinity makes 1/rms 0: y is NaN there and 0 elsewhere.
TEST(ReferenceTest, QuantOfZeroNaNAndInfiniteRows) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.f, 0.f, -0.f, 0.f,  //
                                1.f, nan, 2.f,  3.f,  //
                                1.f, inf, 2.f,  -3.f};
  for (QuantDType dtype : kAllQuantDTypes) {
    SCOPED_TRACE(QuantDTypeName(dtype));
    const QuantRun run = RunQuant(x, 3, 4, Quant(dtype, ScaleMode::kPerRow));
    ASSERT_TRUE(run.status.ok()) << run.status;
    const float floor = static_cast<float>(1.0 / (QuantMax(dtype) * 512));
    EXPECT_EQ(run.scales, (std::vector<float>{floor, floor, floor}));
    // Values, not codes: the NaNs' signs are the platform's, zeros signed.
    const auto is_nan_code = [&](uint8_t code) {
      return dtype == QuantDType::kInt8 ? code == 0 : std::isnan(DecodeQuant(dtype, code));
    };
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(DecodeQuant(dtype, run.codes[c]), 0.0) << c;
      EXPECT_TRUE(is_nan_code(run.codes[4 + c])) << c;
      if (c == 1) {
        EXPECT_TRUE(is_nan_code(run.codes[8 + c]));
      } else {
        EXPECT_EQ(DecodeQuant(dtype, run.codes[8 + c]), 0.0) << c;
      }
    }
  }
}

// Row layouts: QK-norm's per-head rows of a fused [tokens, 3, heads,
// head_dim] x (2 tokens, 3 heads, head_dim 4: row stride 4, group stride
// 36), y at row stride 5 (groups packed), the residual at row stride 7.
// Every op gives, row for row, what it gives on dense buffers, and leaves
// every element between rows as it was; in place (y is x, x's layout) too.
TEST(ReferenceTest, StridedAndGroupedRowsMatchDenseRowsAndLeaveTheGaps) {
  const Shape shape{6, 4};
  OpParams strided;
  strided.group_rows = 3;
  strided.x_row_stride = 4;
  strided.x_group_stride = 36;
  strided.y_row_stride = 5;
  strided.residual_row_stride = 7;
  const float x_gap = std::numeric_limits<float>::quiet_NaN(), y_gap = -777.f, residual_gap = 555.f;
  const uint8_t code_gap = 0xab;
  for (Op op : kAllOps) {
    SCOPED_TRACE(OpName(op));
    OpParams dense_params;
    if (QuantizesOutput(op)) dense_params = Quant(QuantDType::kFp8E5M2, ScaleMode::kPerRow);
    OpParams params = strided;
    params.quant_dtype = dense_params.quant_dtype;
    params.scale_mode = dense_params.scale_mode;
    if (op != Op::kRmsNorm) {
      // Groups are rms_norm's (QK-norm); the others take plain strides.
      params.group_rows = 0;
      params.x_group_stride = 0;
      params.x_row_stride = 9;
    }
    const RowLayout x_layout = RowLayoutOf(Operand::kInput, params, shape);
    const RowLayout y_layout = RowLayoutOf(Operand::kOutput, params, shape);
    const RowLayout r_layout = RowLayoutOf(Operand::kResidual, params, shape);
    ASSERT_EQ(x_layout.Offset(5), op == Op::kRmsNorm ? 36 + 8 : 45);
    ASSERT_EQ(y_layout.Offset(5), op == Op::kRmsNorm ? 15 + 10 : 25);
    const int64_t x_extent = x_layout.Offset(5) + 4, y_extent = y_layout.Offset(5) + 4,
                  r_extent = r_layout.Offset(5) + 4;
    std::vector<float> dense_x(24), dense_residual(24), strided_x(x_extent, x_gap),
        strided_residual(r_extent, residual_gap);
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t c = 0; c < 4; ++c) {
        dense_x[r * 4 + c] = strided_x[x_layout.Offset(r) + c] =
            std::sin(1.7 * static_cast<double>(r * 4 + c)) * 3;
        dense_residual[r * 4 + c] = strided_residual[r_layout.Offset(r) + c] =
            std::cos(0.3 * static_cast<double>(r * 4 + c));
      }
    }
    const std::vector<float> gamma = {1.f, 0.5f, -2.f, 1.5f}, beta = {0.f, 1.f, -1.f, 0.25f};
    const bool codes = QuantizesOutput(op);
    // Outputs: y as float32 or as codes, both with gaps.
    std::vector<float> dense_y(24), strided_y(y_extent, y_gap);
    std::vector<uint8_t> dense_codes(24), strided_codes(y_extent, code_gap);
    std::vector<float> dense_stats(3 * 6), strided_stats(3 * 6);
    const auto args_for = [&](const void* x, void* y, void* residual, float* stats,
                              const OpParams& p) {
      RowOpArgs args;
      args.x = x;
      args.y = y;
      args.params = p;
      if (TakesOperand(op, Operand::kGamma)) args.gamma = gamma.data();
      if (TakesOperand(op, Operand::kBeta)) args.beta = beta.data();
      if (TakesOperand(op, Operand::kMean)) args.mean = stats;
      if (TakesOperand(op, Operand::kInvStd)) args.inv_std = stats + 6;
      if (TakesOperand(op, Operand::kRowScale)) args.row_scale = stats + 12;
      if (AddsResidual(op)) args.residual = residual;
      return args;
    };
    ASSERT_TRUE(
        RunReference(op, DType::kFloat32, shape,
                     args_for(dense_x.data(),
                              codes ? static_cast<void*>(dense_codes.data()) : dense_y.data(),
                              dense_residual.data(), dense_stats.data(), dense_params),
                     0, 6, DType::kFloat32)
            .ok());
    const std::vector<float> x_before = strided_x;
    ASSERT_TRUE(
        RunReference(op, DType::kFloat32, shape,
                     args_for(strided_x.data(),
                              codes ? static_cast<void*>(strided_codes.data()) : strided_y.data(),
                              strided_residual.data(), strided_stats.data(), params),
                     0, 6, DType::kFloat32)
            .ok());
    EXPECT_EQ(std::memcmp(strided_x.data(), x_before.data(), x_extent * sizeof(float)), 0)
        << "x was written";
    EXPECT_EQ(strided_stats, dense_stats);
    // Rows equal, gaps untouched.
    const auto expect_rows = [&](const auto& dense, const auto& got, const RowLayout& layout,
                                 auto gap, const char* name) {
      std::vector<bool> in_row(got.size(), false);
      for (int64_t r = 0; r < 6; ++r) {
        for (int64_t c = 0; c < 4; ++c) {
          in_row[layout.Offset(r) + c] = true;
          EXPECT_EQ(std::memcmp(&got[layout.Offset(r) + c], &dense[r * 4 + c], sizeof(gap)), 0)
              << name << "[" << r << ", " << c << "]";
        }
      }
      for (size_t i = 0; i < got.size(); ++i) {
        if (in_row[i]) continue;
        EXPECT_EQ(std::memcmp(&got[i], &gap, sizeof(gap)), 0) << name << " gap " << i;
      }
    };
    if (codes) {
      expect_rows(dense_codes, strided_codes, y_layout, code_gap, "codes");
    } else {
      expect_rows(dense_y, strided_y, y_layout, y_gap, "y");
    }
    if (AddsResidual(op)) {
      expect_rows(dense_residual, strided_residual, r_layout, residual_gap, "residual");
    }
    if (codes) continue;
    // In place: y is x, with x's layout.
    OpParams in_place = params;
    in_place.y_row_stride = in_place.x_row_stride;
    in_place.y_group_stride = in_place.x_group_stride;
    std::vector<float> x = x_before;
    std::vector<float> residual(r_extent, residual_gap);
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t c = 0; c < 4; ++c)
        residual[r_layout.Offset(r) + c] = std::cos(0.3 * (r * 4 + c));
    }
    ASSERT_TRUE(
        RunReference(op, DType::kFloat32, shape,
                     args_for(x.data(), x.data(), residual.data(), strided_stats.data(), in_place),
                     0, 6, DType::kFloat32)
            .ok());
    expect_rows(dense_y, x, x_layout, x_gap, "in-place y");
  }
}

// The fused forms' results do not depend on the thread count (each row is
// one thread's).
TEST(ReferenceTest, FusedNormsGiveTheSameBitsOnEveryThreadCount) {
  const Shape shape{300, 1024};  // 4.7 threads' worth at 64Ki elements each
  const DType dtype = DType::kBFloat16;
  std::vector<uint16_t> x(shape.elements()), residual_in(shape.elements()), gamma(shape.cols),
      beta(shape.cols);
  for (int64_t i = 0; i < shape.elements(); ++i) {
    StoreFromDouble(dtype, x.data(), i, std::sin(0.37 * static_cast<double>(i)) * 4);
    StoreFromDouble(dtype, residual_in.data(), i, std::cos(0.11 * static_cast<double>(i)));
  }
  for (int64_t c = 0; c < shape.cols; ++c) {
    StoreFromDouble(dtype, gamma.data(), c, 1 + 0.01 * c);
    StoreFromDouble(dtype, beta.data(), c, -0.005 * c);
  }
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    struct Result {
      std::vector<uint8_t> y;
      std::vector<uint16_t> residual;
      std::vector<float> mean, inv_std, scales;
    };
    const auto run = [&](int threads) {
      Result r;
      r.y.assign(shape.elements() * 4, 0);
      r.residual = residual_in;
      r.mean.assign(shape.rows, 0.f);
      r.inv_std.assign(shape.rows, 0.f);
      r.scales.assign(shape.rows * shape.cols / 128, 0.f);
      RowOpArgs args;
      args.x = x.data();
      args.y = r.y.data();
      args.gamma = gamma.data();
      args.inv_std = r.inv_std.data();
      if (TakesOperand(op, Operand::kBeta)) {
        args.beta = beta.data();
        args.mean = r.mean.data();
      }
      if (AddsResidual(op)) args.residual = r.residual.data();
      if (QuantizesOutput(op)) {
        args.params = Quant(QuantDType::kInt8, ScaleMode::kPerGroup, 128);
        args.row_scale = r.scales.data();
      }
      EXPECT_TRUE(
          RunReference(op, dtype, shape, args, 0, shape.rows, DType::kFloat32, threads).ok());
      return r;
    };
    const Result one = run(1);
    for (int threads : {3, 8}) {
      const Result many = run(threads);
      EXPECT_EQ(many.y, one.y) << OpName(op) << " threads=" << threads;
      EXPECT_EQ(many.residual, one.residual) << OpName(op);
      EXPECT_EQ(many.mean, one.mean) << OpName(op);
      EXPECT_EQ(many.inv_std, one.inv_std) << OpName(op);
      EXPECT_EQ(many.scales, one.scales) << OpName(op);
    }
    if (AddsResidual(op)) {
      EXPECT_NE(one.residual, residual_in) << "written back";
    }
  }
}

// A daemon that ran out of memory maps aborted on the next CPU Run above
// 64Ki elements: the reference's std::thread threw and nothing caught it.
// Now the rows the threads would have taken run on the caller.
TEST(ReferenceTest, StorageWrapperRunsOnTheCallerWhenNoThreadStarts) {
  if (testing::kSanitizerBuild) GTEST_SKIP() << "sanitizer build";
  const Shape shape{64, 4096};  // 4 threads' worth at 64Ki elements each
  std::vector<float> x(shape.elements());
  for (int64_t i = 0; i < shape.elements(); ++i) x[i] = std::sin(0.01 * static_cast<double>(i));
  std::vector<float> want(shape.elements()), got(shape.elements(), -1.0f);
  RowOpArgs args;
  args.x = x.data();
  args.y = want.data();
  ASSERT_TRUE(
      RunReference(Op::kSoftmax, DType::kFloat32, shape, args, 0, shape.rows, DType::kFloat32, 1)
          .ok());
  args.y = got.data();
  const int status = testing::WaitStatusWithoutThreads([&] {
    if (!RunReference(Op::kSoftmax, DType::kFloat32, shape, args, 0, shape.rows,
                      DType::kFloat32, 8)
             .ok()) {
      return 1;
    }
    return got == want ? 0 : 2;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: an error status; 2: wrong values";
}

// The CPU backend runs rows as long as a client's registered memory: a
// line buffer too large to allocate is an error, not std::bad_alloc.
TEST(ReferenceTest, StorageWrapperRefusesLinesTooLongToAllocate) {
  if (testing::kSanitizerBuild) GTEST_SKIP() << "a sanitizer's allocator aborts instead";
  float x = 0, y = 0;  // never read: the buffers are refused first
  RowOpArgs args;
  args.x = &x;
  args.y = &y;
  const absl::Status refused = RunReference(Op::kSoftmax, DType::kFloat32, {1, int64_t{1} << 50},
                                            args, 0, 1, DType::kFloat32, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("cols=1125899906842624"), absl::string_view::npos)
      << refused;
}

TEST(ReferenceTest, StorageWrapperRejectsBadArguments) {
  std::vector<float> x(4), y(4);
  RowOpArgs args;
  args.x = x.data();
  args.y = y.data();
  EXPECT_EQ(RunReference(Op::kSoftmax, DType::kFloat32, {2, 2}, args, 0, 3, DType::kFloat32)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunReference(Op::kSoftmax, DType::kFloat32, {0, 2}, args, 0, 0, DType::kFloat32)
                .code(),
            absl::StatusCode::kInvalidArgument);
  args.y = nullptr;
  EXPECT_EQ(RunReference(Op::kSoftmax, DType::kFloat32, {2, 2}, args, 0, 2, DType::kFloat32)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // The fused forms' own operands: a residual, the scales their mode needs.
  args.y = y.data();
  EXPECT_EQ(
      RunReference(Op::kAddRmsNorm, DType::kFloat32, {2, 2}, args, 0, 2, DType::kFloat32).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RunReference(Op::kRmsNormQuant, DType::kFloat32, {2, 2}, args, 0, 2, DType::kFloat32).code(),
      absl::StatusCode::kInvalidArgument);
  args.params.scale_mode = ScaleMode::kStatic;
  EXPECT_EQ(
      RunReference(Op::kRmsNormQuant, DType::kFloat32, {2, 2}, args, 0, 2, DType::kFloat32).code(),
      absl::StatusCode::kInvalidArgument);
  // Rows closer than cols.
  args.params = OpParams();
  args.params.x_row_stride = 1;
  EXPECT_EQ(RunReference(Op::kSoftmax, DType::kFloat32, {2, 2}, args, 0, 2, DType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kt::kernels
