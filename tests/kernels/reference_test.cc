// The fp64 reference against values worked out by hand, and the storage-
// dtype wrapper (the CPU backend) against the per-row function.
#include "kernels/reference.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
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
  for (Op op : kAllOps) {
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
}

}  // namespace
}  // namespace kt::kernels
