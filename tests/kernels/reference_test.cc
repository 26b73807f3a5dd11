// The fp64 reference against values worked out by hand, and the storage-
// dtype wrapper (the CPU backend) against the per-row function.
#include "kernels/reference.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/host_dtype.h"

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

TEST(ReferenceTest, StorageWrapperMatchesRowFunctionOnEveryThreadCount) {
  const Shape shape{37, 19};
  std::vector<uint16_t> x(shape.elements());
  for (int64_t i = 0; i < shape.elements(); ++i) {
    StoreFromDouble(DType::kFloat16, x.data(), i, std::sin(0.37 * static_cast<double>(i)) * 4);
  }
  for (Op op : kAllOps) {
    for (int threads : {1, 3, 8}) {
      std::vector<float> y(shape.elements());
      std::vector<float> mean(shape.rows), inv_std(shape.rows);
      HostRowOpArgs args;
      args.x = x.data();
      args.y = y.data();
      args.mean = mean.data();
      args.inv_std = inv_std.data();
      ASSERT_TRUE(RunReference(op, DType::kFloat16, shape, args, 0, shape.rows,
                               DType::kFloat32, threads)
                      .ok());
      for (int64_t row = 0; row < shape.rows; ++row) {
        std::vector<double> in(shape.cols), want(shape.cols);
        for (int64_t c = 0; c < shape.cols; ++c) {
          in[c] = LoadAsDouble(DType::kFloat16, x.data(), row * shape.cols + c);
        }
        double m = 0, s = 0;
        ReferenceRow(op, shape.cols, in.data(), nullptr, nullptr, 1e-5, want.data(), &m, &s);
        for (int64_t c = 0; c < shape.cols; ++c) {
          ASSERT_EQ(y[row * shape.cols + c], static_cast<float>(want[c]))
              << OpName(op) << " threads=" << threads << " row=" << row << " col=" << c;
        }
        if (op == Op::kLayerNorm) EXPECT_EQ(mean[row], static_cast<float>(m));
      }
    }
  }
}

TEST(ReferenceTest, StorageWrapperRejectsBadArguments) {
  std::vector<float> x(4), y(4);
  HostRowOpArgs args;
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
