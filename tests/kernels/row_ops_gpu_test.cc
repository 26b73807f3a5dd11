// GPU tests (CTest label "gpu") of what is particular to RMSNorm,
// ReduceScale and the scaled-masked softmax, per dtype and over every
// enumerated config: the optional operands and outputs, in-place runs, rows
// of zeros and special values, and each masking mode (mask, causal, both,
// neither; one query or one per row; q != k) with exact one-hot rows. The
// op-generic sweeps (kernels_gpu_test.cc) cover their default operands.
// Then the fused norms (residual add, weight offset, quantized codes) over
// every quant dtype and scale mode, and strided / grouped rows (QK-norm's
// per-head views) for every last-axis op, over a sample of the configs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

  // At most kSampledConfigs of the enumerated configs, evenly spread, the
  // first and the last (the heuristic's families) included: the fused ops'
  // cases multiply by quant dtypes, scale modes and layouts.
  static constexpr size_t kSampledConfigs = 24;
  std::vector<LaunchConfig> SampledConfigs(const DeviceProblem& problem) {
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(problem.op, problem.dtype, problem.shape, device_);
    EXPECT_TRUE(configs.ok()) << configs.status();
    if (!configs.ok() || configs->size() <= kSampledConfigs) {
      return configs.ok() ? *configs : std::vector<LaunchConfig>{};
    }
    std::vector<LaunchConfig> sample;
    for (size_t i = 0; i < kSampledConfigs; ++i) {
      sample.push_back((*configs)[i * (configs->size() - 1) / (kSampledConfigs - 1)]);
    }
    return sample;
  }

  // "" when every byte of y outside its rows is still the poison (0xff).
  std::string CheckGapsUntouched(const DeviceProblem& problem, const RowLayout& layout) {
    std::vector<uint8_t> y(problem.y.bytes());
    if (cudaMemcpy(y.data(), problem.y.data(), y.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
      return "reading y back failed";
    }
    const int64_t element = OutputElementBytes(problem.op, problem.dtype);
    std::vector<bool> in_row(y.size(), false);
    for (int64_t row = 0; row < problem.shape.rows; ++row) {
      const int64_t first = layout.Offset(row) * element;
      std::fill(in_row.begin() + first, in_row.begin() + first + problem.shape.cols * element,
                true);
    }
    for (size_t i = 0; i < y.size(); ++i) {
      if (!in_row[i] && y[i] != 0xff) {
        return absl::StrFormat("byte %d of y, between rows, was written (0x%02x)", i, y[i]);
      }
    }
    return "";
  }

  // The sampled configs on `problem` with `args`, checked against the
  // reference and, for strided y, for writes between rows. Returns the
  // number of launches.
  int SweepSampled(DeviceProblem& problem, const RowOpArgs& args, bool with_stats,
                   const std::string& what,
                   const std::function<absl::Status()>& prepare = nullptr) {
    const std::vector<LaunchConfig> configs = SampledConfigs(problem);
    EXPECT_FALSE(configs.empty()) << what;
    ++gpu_testing::g_cases;
    const RowLayout y_layout = RowLayoutOf(Operand::kOutput, args.params, problem.shape);
    const bool strided_y = !y_layout.contiguous(problem.shape.cols);
    int failures = 0;
    for (const LaunchConfig& config : configs) {
      std::string failure = LaunchAndCheck(problem, config, args, with_stats, prepare);
      if (failure.empty() && strided_y) failure = CheckGapsUntouched(problem, y_layout);
      if (failure.empty()) continue;
      if (++failures <= gpu_testing::kMaxFailuresReported) {
        ADD_FAILURE() << OpName(problem.op) << " " << DTypeName(problem.dtype)
                      << " rows=" << problem.shape.rows << " cols=" << problem.shape.cols << " "
                      << what << " " << ConfigKey(config) << ": " << failure;
      }
    }
    return static_cast<int>(configs.size());
  }

  // MakeProblem + Upload + SweepSampled, with and without the optional
  // per-row outputs (special rows: without; their statistics are compared
  // through y alone, as SpecialValuesMatchTheReference does).
  void SweepFused(Op op, Shape shape, const ProblemOptions& options, InputPattern pattern,
                  const std::string& what) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op, dtype(), shape, FreshSeed(), pattern, /*with_affine=*/true, 0, 0, options);
    ASSERT_TRUE(host.ok()) << what << ": " << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    for (bool with_stats : {true, false}) {
      if (with_stats && pattern == InputPattern::kSpecialValues) continue;
      SweepSampled(*problem, problem->Args(with_stats), with_stats,
                   absl::StrCat(what, with_stats ? " stats" : " no stats"));
    }
  }
};

std::string DescribeQuant(const OpParams& params) {
  return absl::StrCat(QuantDTypeName(params.quant_dtype), " ", ScaleModeName(params.scale_mode),
                      params.group_size > 0 ? absl::StrCat("/", params.group_size) : "",
                      params.scale_ub > 0 ? absl::StrCat(" ub=", params.scale_ub) : "");
}

// The fused norms, which run in 16-byte packs (cols a multiple of 8
// elements serves every dtype). The rows: 8, 40, 1000 columns (no
// per_group: 64 and 128 do not divide them), and 128, 4096, 5120 (LLM
// hidden sizes). Shorter or odd rows are refused (FusedNormsRefuseOddRows).
constexpr int64_t kFusedCols[] = {8, 40, 1000, 128, 4096, 5120};

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

// Every fused norm x quant dtype x scale mode (static, per_row, per_group
// of 64 and 128; the add forms without quantization once), on normal and
// special-value rows (NaN, inf, huge, constant rows): codes within one
// representable value of the reference's, the scales within
// QuantScaleTolerance, the residual written back.
TEST_P(RowOpsGpuTest, FusedNormsEveryQuantDTypeAndScaleMode) {
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    for (int64_t cols : kFusedCols) {
      std::vector<ProblemOptions> variants;
      if (!QuantizesOutput(op)) {
        variants.emplace_back();
      } else {
        for (QuantDType quant : kAllQuantDTypes) {
          for (ScaleMode mode : {ScaleMode::kStatic, ScaleMode::kPerRow, ScaleMode::kPerGroup}) {
            for (int64_t group : {int64_t{64}, int64_t{128}}) {
              if (mode != ScaleMode::kPerGroup && group == 128) continue;
              if (mode == ScaleMode::kPerGroup && cols % group != 0) continue;
              ProblemOptions options;
              options.params.quant_dtype = quant;
              options.params.scale_mode = mode;
              options.params.group_size = mode == ScaleMode::kPerGroup ? group : 0;
              variants.push_back(options);
            }
          }
        }
      }
      for (const ProblemOptions& options : variants) {
        for (InputPattern pattern : {InputPattern::kNormal, InputPattern::kSpecialValues}) {
          const std::string what =
              absl::StrCat(QuantizesOutput(op) ? DescribeQuant(options.params) : "",
                           pattern == InputPattern::kSpecialValues ? " special" : " normal");
          SweepFused(op, {13, cols}, options, pattern, what);
        }
      }
    }
  }
}

// The fused norms at every dispatch boundary of their families (block_regs
// below 512 columns, whole warps of 16 to 64 columns a lane up to 2048,
// block_regs again up to its 16 * 1024 columns), at few and many rows,
// default quantization (fp8_e4m3 per_row).
TEST_P(RowOpsGpuTest, FusedNormsAcrossTheirFamiliesBoundaries) {
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    for (int64_t cols : {8, 32, 64, 504, 512, 520, 1024, 2040, 2048, 2056, 8192, 12288, 16384}) {
      for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{4099}}) {
        const int64_t capped = std::min<int64_t>(rows, std::max<int64_t>(1, (1 << 24) / cols));
        SweepFused(op, {capped, cols}, ProblemOptions(), InputPattern::kNormal, "boundary");
      }
    }
  }
}

// Rows the fused norms' 16-byte packs cannot cover are refused with the
// reason, never launched.
TEST_P(RowOpsGpuTest, FusedNormsRefuseOddRows) {
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    absl::StatusOr<HostProblem> host =
        MakeProblem(op, dtype(), {3, 33}, FreshSeed(), InputPattern::kNormal, true);
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    absl::StatusOr<LaunchConfig> config = HeuristicConfig(op, dtype(), {3, 33}, device_);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << OpName(op);
    EXPECT_NE(config.status().message().find("runs in 16-byte packs"), absl::string_view::npos)
        << config.status();
  }
}

// Gemma's weight offset on the RMSNorm family, and a scale upper bound
// below and above the rows' amax; zero rows (the floor scale) and a zero
// residual.
TEST_P(RowOpsGpuTest, FusedNormsOffsetUpperBoundAndZeroRows) {
  for (Op op : {Op::kRmsNorm, Op::kAddRmsNorm, Op::kRmsNormQuant, Op::kAddRmsNormQuant}) {
    ProblemOptions options;
    options.params.weight_offset = 1.0;
    SweepFused(op, {9, 4096}, options, InputPattern::kNormal, "offset 1");
  }
  for (Op op : {Op::kRmsNormQuant, Op::kAddLayerNormQuant}) {
    for (double ub : {0.5, 1e4}) {
      for (QuantDType quant : kAllQuantDTypes) {
        ProblemOptions options;
        options.params.quant_dtype = quant;
        options.params.scale_ub = ub;
        SweepFused(op, {9, 2048}, options, InputPattern::kNormal, DescribeQuant(options.params));
      }
    }
  }
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    for (ScaleMode mode : {ScaleMode::kPerRow, ScaleMode::kPerGroup}) {
      ProblemOptions options;
      options.params.scale_mode = mode;
      options.params.group_size = mode == ScaleMode::kPerGroup ? 128 : 0;
      absl::StatusOr<HostProblem> host = MakeProblem(op, dtype(), {6, 1024}, FreshSeed(),
                                                     InputPattern::kNormal, true, 0, 0, options);
      ASSERT_TRUE(host.ok()) << host.status();
      // Row 0: x zero (and the residual, for the add forms); row 1: x
      // zero, the residual not; row 2: the residual zero.
      const int64_t cols = 1024;
      for (int64_t c = 0; c < cols; ++c) {
        StoreFromDouble(dtype(), host->x.data(), c, 0.0);
        StoreFromDouble(dtype(), host->x.data(), cols + c, 0.0);
        if (AddsResidual(op)) {
          StoreFromDouble(dtype(), host->residual.data(), c, 0.0);
          StoreFromDouble(dtype(), host->residual.data(), 2 * cols + c, 0.0);
        }
      }
      ASSERT_TRUE(ComputeReference(*host).ok());
      absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
      ASSERT_TRUE(problem.ok()) << problem.status();
      SweepSampled(*problem, problem->Args(true), true,
                   absl::StrCat("zero rows ", ScaleModeName(mode)));
    }
  }
}

// The non-quantizing add forms in place (y is x): the residual still
// written back, y over x.
TEST_P(RowOpsGpuTest, AddNormsInPlace) {
  for (Op op : {Op::kAddRmsNorm, Op::kAddLayerNorm}) {
    for (int64_t cols : {int64_t{40}, int64_t{4096}, int64_t{8192}}) {
      absl::StatusOr<HostProblem> host =
          MakeProblem(op, dtype(), {11, cols}, FreshSeed(), InputPattern::kNormal, true);
      ASSERT_TRUE(host.ok()) << host.status();
      absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
      ASSERT_TRUE(problem.ok()) << problem.status();
      RowOpArgs in_place = problem->Args(true);
      in_place.x = in_place.y;
      SweepSampled(*problem, in_place, true, "in place", CopyXToY(*problem));
    }
  }
}

// One strided layout case: QK-norm's per-head rows of a fused [tokens, 3,
// heads, head_dim] tensor (group_rows = heads), or plain rows further
// apart than cols.
struct LayoutCase {
  int64_t tokens, heads, head_dim;
  bool grouped;     // the qkv view; else rows of stride 2 * head_dim + 8
  bool y_in_place;  // y is x (non-quantizing ops), else its own stride
};

std::string Describe(const LayoutCase& c) {
  return absl::StrCat(c.tokens, " tokens x ", c.heads, " heads x ", c.head_dim,
                      c.grouped ? " qkv view" : " strided rows",
                      c.y_in_place ? " in place" : " y strided");
}

ProblemOptions LayoutOptions(const LayoutCase& c) {
  ProblemOptions options;
  OpParams& p = options.params;
  if (c.grouped) {
    p.group_rows = c.heads;
    p.x_row_stride = c.head_dim;
    p.x_group_stride = 3 * c.heads * c.head_dim;
  } else {
    p.x_row_stride = 2 * c.head_dim + 8;
  }
  if (c.y_in_place) {
    p.y_row_stride = p.x_row_stride;
    p.y_group_stride = p.x_group_stride;
  } else {
    p.y_row_stride = c.head_dim + 16;
  }
  // 16-byte aligned rows in every dtype: the fused norms run in 16-byte
  // packs only.
  p.residual_row_stride = c.head_dim + 8;
  return options;
}

// Every last-axis op on strided rows, and rms_norm (QK-norm) on grouped
// ones: out of place (y strided differently, its gaps never written) and in
// place in x's layout; the quantizing ops per_row out of place.
TEST_P(RowOpsGpuTest, StridedAndGroupedRowsEveryOp) {
  std::vector<LayoutCase> cases;
  for (int64_t head_dim : {int64_t{64}, int64_t{128}, int64_t{256}}) {
    cases.push_back({7, 8, head_dim, true, true});
    cases.push_back({7, 8, head_dim, true, false});
    cases.push_back({5, 1, head_dim, false, false});
  }
  cases.push_back({3, 4, 1000, false, true});  // rows past the warp kernels' reach
  for (Op op : kAllOps) {
    for (const LayoutCase& c : cases) {
      if (c.y_in_place && QuantizesOutput(op)) continue;
      if (c.grouped && op != Op::kRmsNorm) continue;  // ValidateOpArgs refuses groups
      ProblemOptions options = LayoutOptions(c);
      if (op == Op::kScaledMaskedSoftmax) options.attention.mask_rows = c.heads;
      const Shape shape{c.tokens * c.heads, c.head_dim};
      absl::StatusOr<HostProblem> host =
          MakeProblem(op, dtype(), shape, FreshSeed(), InputPattern::kNormal, true, 0, 0, options);
      ASSERT_TRUE(host.ok()) << OpName(op) << " " << Describe(c) << ": " << host.status();
      absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
      ASSERT_TRUE(problem.ok()) << problem.status();
      if (c.y_in_place) {
        RowOpArgs in_place = problem->Args(true);
        in_place.x = in_place.y;
        SweepSampled(*problem, in_place, true, Describe(c), CopyXToY(*problem));
      } else {
        SweepSampled(*problem, problem->Args(true), true, Describe(c));
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
