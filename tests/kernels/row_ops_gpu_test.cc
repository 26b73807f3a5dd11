// GPU tests (CTest label "gpu") of what is particular to RMSNorm,
// ReduceScale and the scaled-masked softmax, per dtype and over every
// enumerated config: the optional operands and outputs, in-place runs, rows
// of zeros and special values, and each masking mode (mask, causal, both,
// neither; one query or one per row; q != k) with exact one-hot rows. The
// op-generic sweeps (kernels_gpu_test.cc) cover their default operands.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/host_dtype.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/verify.h"
#include "tests/kernels/gpu_sweep.h"

namespace kt::kernels {
namespace {

using gpu_testing::FreshSeed;
using gpu_testing::ReadBack;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class RowOpsGpuTest : public gpu_testing::GpuSweepTest,
                      public ::testing::WithParamInterface<DType> {
 protected:
  DType dtype() const { return GetParam(); }

  // Copies x into y on the test stream: the in-place runs' preparation.
  std::function<absl::Status()> CopyXToY(const DeviceProblem& d) {
    return [this, &d] {
      const cudaError_t err = cudaMemcpyAsync(d.y.data(), d.x.data(), d.x.bytes(),
                                              cudaMemcpyDeviceToDevice, stream_);
      return err == cudaSuccess ? absl::OkStatus()
                                : absl::InternalError(cudaGetErrorString(err));
    };
  }
};

// RMSNorm with and without its weight, with and without the 1/rms output,
// across each implementation's range of cols.
TEST_P(RowOpsGpuTest, RmsNormWithAndWithoutWeightAndInvRms) {
  const int64_t limit = SharedMemoryLimitCols(Op::kRmsNorm, dtype());
  for (int64_t cols : {int64_t{1}, int64_t{33}, int64_t{1024}, int64_t{2049}, limit + 1}) {
    for (bool with_weight : {false, true}) {
      absl::StatusOr<HostProblem> host =
          MakeProblem(Op::kRmsNorm, dtype(), {23, cols}, FreshSeed(), InputPattern::kNormal,
                      with_weight);
      ASSERT_TRUE(host.ok()) << host.status();
      ASSERT_EQ(host->gamma.empty(), !with_weight);
      for (bool with_stats : {false, true}) {
        SweepAllConfigs(*host, with_stats,
                        absl::StrCat("weight=", with_weight, " inv_rms=", with_stats));
      }
    }
  }
}

// RMSNorm's 1/rms of an all-zero row is 1/sqrt(epsilon) and its outputs 0;
// a large offset (no cancellation in a sum of squares) stays accurate.
TEST_P(RowOpsGpuTest, RmsNormZeroAndOffsetRows) {
  for (int64_t cols : {int64_t{8}, int64_t{1000}, int64_t{4096}}) {
    absl::StatusOr<HostProblem> host = MakeProblem(Op::kRmsNorm, dtype(), {4, cols},
                                                   FreshSeed(), InputPattern::kNormal, true);
    ASSERT_TRUE(host.ok());
    for (int64_t c = 0; c < cols; ++c) {
      StoreFromDouble(dtype(), host->x.data(), 0 * cols + c, 0.0);
      StoreFromDouble(dtype(), host->x.data(), 2 * cols + c, 100.0 + (c % 7) * 0.125);
    }
    ASSERT_TRUE(ComputeReference(*host).ok());
    SweepAllConfigs(*host, /*with_stats=*/true, "zero/offset rows");
  }
}

// ReduceScale, out of place and in place, on rows of: zeros, signed zeros
// and values, a NaN among values (skipped by the max, NaN in y), an inf
// (scale inf, y NaN there and 0 elsewhere), values far below 1, subnormal
// values (float32 and bfloat16: 1 / max overflows float there), and normal
// values.
TEST_P(RowOpsGpuTest, ReduceScaleSpecialRowsOutOfPlaceAndInPlace) {
  const int64_t limit = SharedMemoryLimitCols(Op::kReduceScale, dtype());
  const double tiny = dtype() == DType::kFloat16 ? 1e-6 : 3e-40;
  for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1025}, int64_t{2048},
                       int64_t{5000}, limit + 1}) {
    constexpr int64_t kRows = 8;
    absl::StatusOr<HostProblem> host = MakeProblem(Op::kReduceScale, dtype(), {kRows, cols},
                                                   FreshSeed(), InputPattern::kNormal, false);
    ASSERT_TRUE(host.ok());
    const auto set = [&](int64_t row, int64_t c, double v) {
      StoreFromDouble(dtype(), host->x.data(), row * cols + c, v);
    };
    for (int64_t c = 0; c < cols; ++c) {
      const double normal = LoadAsDouble(dtype(), host->x.data(), 7 * cols + c);
      set(0, c, 0.0);
      set(1, c, c % 3 == 0 ? -0.0 : (c % 2 ? -1.5 : 0.75));
      set(2, c, c == cols / 2 ? kNaN : normal);
      set(3, c, c == cols - 1 ? kInf : normal);
      set(4, c, normal * 1e-3);
      set(5, c, (c % 2 ? -tiny : tiny) * (1 + c % 5));
      set(6, c, c == 0 ? -kInf : kNaN);
    }
    ASSERT_TRUE(ComputeReference(*host).ok());
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    SweepUploaded(*problem, problem->Args(true), /*with_stats=*/true, "out of place");
    SweepUploaded(*problem, problem->Args(false), /*with_stats=*/false, "no row_scale");
    RowOpArgs in_place = problem->Args(true);
    in_place.x = in_place.y;
    SweepUploaded(*problem, in_place, /*with_stats=*/true, "in place", CopyXToY(*problem));
  }
}

// One scaled-masked softmax case: (batch x heads x q, k) with q = mask_rows.
struct AttentionCase {
  int64_t rows;
  int64_t cols;
  int64_t mask_rows;  // 0: the default (largest divisor of rows <= cols)
  bool with_mask;
  bool causal;
  double scale = 0;   // 0: 1 / sqrt(cols)
};

std::string Describe(const AttentionCase& c) {
  return absl::StrCat("rows=", c.rows, " cols=", c.cols, " q=", c.mask_rows,
                      c.with_mask ? " mask" : "", c.causal ? " causal" : "", " scale=", c.scale);
}

// Every masking mode over every config: mask only, causal only, both,
// neither; q != k both ways, a single query (mask_rows 1) and one query per
// row (mask_rows = rows); cols across every implementation's boundaries.
TEST_P(RowOpsGpuTest, ScaledMaskedSoftmaxEveryMaskingMode) {
  const int64_t limit = SharedMemoryLimitCols(Op::kScaledMaskedSoftmax, dtype());
  std::vector<AttentionCase> cases;
  for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{128}, int64_t{1025},
                       int64_t{2048}, int64_t{2049}, int64_t{32768}, limit + 1}) {
    for (bool with_mask : {false, true}) {
      for (bool causal : {false, true}) {
        // q = 5 < k (or > k for the shortest rows), 2 batches x 3 heads.
        cases.push_back({30, cols, (with_mask || causal) ? 5 : 0, with_mask, causal});
      }
    }
  }
  cases.push_back({64, 64, 64, true, true});         // square: q == k
  cases.push_back({3 * 96, 40, 96, false, true});    // q > k: late queries see every column
  cases.push_back({24, 300, 1, true, false});        // one mask row for every row
  cases.push_back({24, 300, 1, true, true});         // causal with q = 1: column 0 only
  cases.push_back({24, 300, 24, true, true});        // one query per row
  cases.push_back({24, 300, 0, false, false, 0.3});  // a scale alone
  cases.push_back({24, 300, 8, true, false, -2.5});  // a negative scale with a mask
  for (const AttentionCase& c : cases) {
    AttentionOptions options;
    options.scale = c.scale;
    options.with_mask = c.with_mask;
    options.causal = c.causal;
    options.mask_rows = c.mask_rows;
    absl::StatusOr<HostProblem> host =
        MakeProblem(Op::kScaledMaskedSoftmax, dtype(), {c.rows, c.cols}, FreshSeed(),
                    InputPattern::kNormal, false, 0, 0, options);
    ASSERT_TRUE(host.ok()) << Describe(c) << ": " << host.status();
    ASSERT_EQ(host->params.mask_rows, c.mask_rows) << Describe(c);
    ASSERT_EQ(host->mask.empty(), !c.with_mask);
    SweepAllConfigs(*host, /*with_stats=*/false, Describe(c));
  }
}

// Query rows whose mask keeps a single column give exactly one-hot outputs
// (1 and 0, not merely close), rows the mask removes entirely give NaN like
// the reference, and inputs the causal mask removes are never looked at: a
// NaN there must not reach the row.
TEST_P(RowOpsGpuTest, ScaledMaskedSoftmaxOneHotAllMaskedAndHiddenNaN) {
  const int64_t limit = SharedMemoryLimitCols(Op::kScaledMaskedSoftmax, dtype());
  for (int64_t cols : {int64_t{1}, int64_t{9}, int64_t{64}, int64_t{2048}, int64_t{2049},
                       limit + 1}) {
    for (bool causal : {false, true}) {
      constexpr int64_t kQueries = 6;
      constexpr int64_t kRows = 2 * kQueries;
      AttentionOptions options;
      options.causal = causal;
      options.mask_rows = kQueries;
      absl::StatusOr<HostProblem> host =
          MakeProblem(Op::kScaledMaskedSoftmax, dtype(), {kRows, cols}, FreshSeed(),
                      InputPattern::kNormal, false, 0, 0, options);
      ASSERT_TRUE(host.ok()) << host.status();
      // Query q % 3 == 0 keeps one column (<= q, so causal keeps it too);
      // q % 3 == 1 keeps none; q % 3 == 2 keeps all (mask 0).
      const auto kept = [&](int64_t q) { return std::min(q, cols - 1); };
      for (int64_t q = 0; q < kQueries; ++q) {
        for (int64_t c = 0; c < cols; ++c) {
          double m = 0.0;
          if (q % 3 == 0) m = c == kept(q) ? 0.0 : -kInf;
          if (q % 3 == 1) m = -kInf;
          StoreFromDouble(dtype(), host->mask.data(), q * cols + c, m);
        }
      }
      // Behind the causal diagonal, x is NaN: hidden when causal, and
      // poisoning the row (as in the reference) when not.
      for (int64_t row = 0; row < kRows; ++row) {
        const int64_t q = row % kQueries;
        if (q % 3 != 2 || q + 1 >= cols) continue;
        StoreFromDouble(dtype(), host->x.data(), row * cols + q + 1, kNaN);
      }
      ASSERT_TRUE(ComputeReference(*host).ok());
      absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
      ASSERT_TRUE(problem.ok()) << problem.status();
      absl::StatusOr<std::vector<LaunchConfig>> configs = EnumerateConfigs(
          Op::kScaledMaskedSoftmax, dtype(), problem->shape, device_);
      ASSERT_TRUE(configs.ok()) << configs.status();
      int failures = 0;
      for (const LaunchConfig& config : *configs) {
        const std::string what = absl::StrCat("cols=", cols, causal ? " causal " : " ",
                                              ConfigKey(config));
        const std::string failure =
            LaunchAndCheck(*problem, config, problem->Args(false), false);
        if (!failure.empty()) {
          if (++failures <= gpu_testing::kMaxFailuresReported) {
            ADD_FAILURE() << what << ": " << failure;
          }
          continue;
        }
        const std::vector<double> y = ReadBack(dtype(), problem->y.data(), kRows * cols);
        for (int64_t row = 0; row < kRows; ++row) {
          const int64_t q = row % kQueries;
          for (int64_t c = 0; c < cols; ++c) {
            const double v = y[row * cols + c];
            bool ok = true;
            if (q % 3 == 0) ok = v == (c == kept(q) ? 1.0 : 0.0);
            if (q % 3 == 1) ok = std::isnan(v);
            if (q % 3 == 2 && causal) ok = std::isfinite(v) && (c <= q || v == 0.0);
            if (!ok && ++failures <= gpu_testing::kMaxFailuresReported) {
              ADD_FAILURE() << what << ": row " << row << " (query " << q << ") col " << c
                            << " = " << v;
            }
          }
        }
      }
    }
  }
}

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return std::string(DTypeName(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, RowOpsGpuTest, ::testing::ValuesIn(kAllDTypes),
                         DTypeParamName);

}  // namespace
}  // namespace kt::kernels
