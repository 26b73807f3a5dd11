// GPU suite (CTest label "gpu"): every config EnumerateConfigs returns, on
// shapes that straddle every dispatch boundary, for every op and dtype,
// checked against the fp64 CPU reference on fresh random data with the
// outputs poisoned before each launch. Fails (does not skip) without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/verify.h"
#include "tests/kernels/gpu_sweep.h"

namespace kt::kernels {
namespace {

using gpu_testing::FreshSeed;
using gpu_testing::g_cases;
using gpu_testing::g_launches;

class CoverageReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("[coverage] %lld (op, dtype, shape) cases, %lld checked launches\n",
                static_cast<long long>(g_cases.load()), static_cast<long long>(g_launches.load()));
  }
};
const auto* const g_report = ::testing::AddGlobalTestEnvironment(new CoverageReport);

// Largest problem a sweep case uses, so one case stays around a second.
constexpr int64_t kMaxElements = int64_t{1} << 28;

class KernelGpuTest : public gpu_testing::GpuSweepTest,
                      public ::testing::WithParamInterface<std::tuple<Op, DType>> {
 protected:
  Op op() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  int64_t SharedMemoryLimitCols() const {
    return GpuSweepTest::SharedMemoryLimitCols(op(), dtype());
  }
  // Every config at each shape, on fresh normal data with the affine
  // operands, statistics checked too; prints the launches under `label`.
  void SweepShapes(const std::vector<Shape>& shapes, const char* label) {
    int64_t launches = 0;
    for (const Shape& shape : shapes) {
      absl::StatusOr<HostProblem> host = MakeProblem(op(), dtype(), shape, FreshSeed(),
                                                     InputPattern::kNormal, /*with_affine=*/true);
      ASSERT_TRUE(host.ok()) << host.status();
      launches += SweepAllConfigs(*host, /*with_stats=*/true);
    }
    std::printf("[%s] %s %s: %lld launches\n", label, OpName(op()).data(),
                DTypeName(dtype()).data(), static_cast<long long>(launches));
  }
  // CheckMisalignedOperandsNarrowThePack on fresh normal data of `shape`,
  // without the affine operands.
  void CheckMisalignedNarrowing(
      Shape shape, Narrowing narrowing,
      const std::function<std::vector<LaunchConfig>(int widest)>& configs) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    CheckMisalignedOperandsNarrowThePack(op(), dtype(), shape, *problem, narrowing, configs);
  }
};

// cols straddling each boundary: sub-warp groups (1, 2, 31..33), the warp
// limits (1023..1025 for the seeds' rule, 2048/2049 for ours), packs (odd
// cols), the shared-memory limit +-1, and rows too long for it.
TEST_P(KernelGpuTest, EveryEnumeratedConfigMatchesTheReference) {
  const int64_t limit = SharedMemoryLimitCols();
  const std::vector<int64_t> cols_list = {1,    2,    31,        32,    33,        127,
                                          1023, 1024, 1025,      2048,  2049,      4096,
                                          limit - 1, limit, limit + 1, 32768, 65536};
  int64_t launches = 0;
  for (int64_t cols : cols_list) {
    for (int64_t rows : {1, 2, 3, 49152}) {
      // Cap the largest problems (2^28 elements): still tens of waves of
      // blocks, so grid-stride loops run many times.
      const int64_t capped_rows = std::min<int64_t>(rows, std::max<int64_t>(1, kMaxElements / cols));
      absl::StatusOr<HostProblem> host =
          MakeProblem(op(), dtype(), {capped_rows, cols}, FreshSeed(), InputPattern::kNormal,
                      /*with_affine=*/true);
      ASSERT_TRUE(host.ok()) << host.status();
      launches += SweepAllConfigs(*host, /*with_stats=*/true);
    }
  }
  std::printf("[sweep] %s %s: %lld launches, smem limit %lld cols\n", OpName(op()).data(),
              DTypeName(dtype()).data(), static_cast<long long>(launches),
              static_cast<long long>(limit));
}

// The layouts that hold more than one pack per thread before using any:
// narrow groups with two 16-byte packs per lane (16..128 columns), and the
// block kernels' batched loads (ForEachLoadedPack) at few rows, with a
// slice of a batch (4104 columns) and several batches per thread. Every
// config, so the full sweep above need not run to cover them. 49152 x 64
// takes the warp kernel's exact instance (no bounds checks, no row loop) at
// every one-step config whose packs fill the row; 49151 x 64, one row short,
// takes the checked one at the same configs.
TEST_P(KernelGpuTest, NarrowRowsAndBatchedBlockLoadsMatchTheReference) {
  SweepShapes({{3, 16}, {4099, 32}, {49152, 64}, {49151, 64}, {777, 128}, {1, 4096}, {8, 4104},
               {64, 12288}, {3, 65536}},
              "narrow+batched");
}

// block_reread launches the instance with the fewest packs per thread that
// cover the row (1, 2, 3, 4, 6, 8, 12 or 16 in the enumerated 8- and
// 16-byte packs; narrowed packs also 24 and 32). A row one 16-byte pack short
// of k such packs per thread at 512 threads needs k of them there, about
// k / 2 at 1024 threads and twice as many in 8-byte packs: over the
// enumerated block sizes these eight lengths take every instance that
// fits, each with a partial last round of packs. Every config.
TEST_P(KernelGpuTest, BlockRereadInstancesForEachRowLengthMatchTheReference) {
  if (!BlockRereadServes(op())) GTEST_SKIP() << "LayerNorm and RMSNorm only";
  const int64_t pack16 = 16 / static_cast<int64_t>(DTypeSize(dtype()));
  std::vector<Shape> shapes;
  for (int64_t k : {1, 2, 3, 4, 6, 8, 12, 16}) shapes.push_back({3, (k * 512 - 1) * pack16});
  SweepShapes(shapes, "block_reread packs");
}

// Block kernels whose blocks loop over several rows: their reducer
// alternates two shared-memory slots from one reduction to the next (the
// softmax takes two per row), with no barrier after a reduction, and float32
// norms prefetch the next row's weights before its reduction. Every config,
// at row counts well above any grid the occupancy sizing gives.
TEST_P(KernelGpuTest, BlockRowLoopsMatchTheReference) {
  SweepShapes({{10000, 1032}, {4000, 4104}}, "row loops");
}

// -inf rows with one finite value, constant rows, huge magnitudes, a NaN,
// all -inf, a large offset: every config, each implementation's range.
TEST_P(KernelGpuTest, SpecialValuesMatchTheReference) {
  const int64_t limit = SharedMemoryLimitCols();
  for (int64_t cols : {int64_t{1}, int64_t{33}, int64_t{1024}, int64_t{2049}, int64_t{5000},
                       limit + 1}) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), {12, cols}, FreshSeed(), InputPattern::kSpecialValues,
                    /*with_affine=*/true);
    ASSERT_TRUE(host.ok()) << host.status();
    // Statistics of pathological rows are compared through y alone.
    SweepAllConfigs(*host, /*with_stats=*/false);
  }
}

// y == x works for every implementation (each thread rewrites only what it
// read, or the row is cached first).
TEST_P(KernelGpuTest, InPlace) {
  const int64_t limit = SharedMemoryLimitCols();
  for (int64_t cols : {int64_t{33}, int64_t{1024}, int64_t{4096}, limit + 1}) {
    absl::StatusOr<HostProblem> host = MakeProblem(op(), dtype(), {37, cols}, FreshSeed(),
                                                   InputPattern::kNormal, true);
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    RowOpArgs args = problem->Args();
    args.x = args.y;
    const DeviceProblem& d = *problem;
    SweepUploaded(*problem, args, /*with_stats=*/true, "in place", [&] {
      const cudaError_t err = cudaMemcpyAsync(d.y.data(), d.x.data(), d.x.bytes(),
                                              cudaMemcpyDeviceToDevice, stream_);
      return err == cudaSuccess ? absl::OkStatus()
                                : absl::InternalError(cudaGetErrorString(err));
    });
  }
}

// Issue 26: block_smem and block_uncached at odd cols, where each row
// starts off the pack grid (row r at element r * cols) and still takes the
// full pack for the ops whose operands follow x: every pack, block and grid
// policy those impls enumerate, out of place and in place, at rows of
// every head (7 and 64 odd rows cycle through all of them), a row shorter
// than a pack, and an LLM vocabulary (50257) at up to 128 rows, so the
// fp64 reference stays cheap. Grid waves make blocks loop over rows.
TEST_P(KernelGpuTest, BlockImplsAtOddColsMatchTheReference) {
  if (!OperandsFollowRowLayout(op())) {
    GTEST_SKIP() << "softmax, log-softmax and ReduceScale (operands that follow x)";
  }
  const int widest = 16 / static_cast<int>(DTypeSize(dtype()));
  const auto block_impl = [](const LaunchConfig& c) {
    return c.impl == Impl::kBlockSmem || c.impl == Impl::kBlockUncached;
  };
  int64_t launches = 0;
  for (const Shape shape : {Shape{1, 5}, Shape{7, 33}, Shape{64, 1000 + 3}, Shape{7, 4096 + 1},
                            Shape{256, 4096 + 1}, Shape{1, 50257}, Shape{7, 50257},
                            Shape{128, 50257}}) {
    SCOPED_TRACE(absl::StrCat("rows=", shape.rows, " cols=", shape.cols));
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(op(), dtype(), shape, device_);
    ASSERT_TRUE(configs.ok()) << configs.status();
    for (Impl impl : {Impl::kBlockSmem, Impl::kBlockUncached}) {
      EXPECT_TRUE(std::any_of(configs->begin(), configs->end(), [&](const LaunchConfig& c) {
        return c.impl == impl && c.pack_size == widest;
      })) << ImplName(impl) << " at pack " << widest;
    }
    absl::StatusOr<HostProblem> host = MakeProblem(op(), dtype(), shape, FreshSeed(),
                                                   InputPattern::kNormal, /*with_affine=*/true);
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    launches += SweepUploaded(*problem, problem->Args(), /*with_stats=*/true, "odd cols",
                              nullptr, block_impl);
    RowOpArgs in_place = problem->Args();
    in_place.x = in_place.y;
    const DeviceProblem& d = *problem;
    launches += SweepUploaded(
        *problem, in_place, /*with_stats=*/true, "odd cols in place",
        [&] {
          const cudaError_t err = cudaMemcpyAsync(d.y.data(), d.x.data(), d.x.bytes(),
                                                  cudaMemcpyDeviceToDevice, stream_);
          return err == cudaSuccess ? absl::OkStatus()
                                    : absl::InternalError(cudaGetErrorString(err));
        },
        block_impl);
  }
  std::printf("[odd cols] %s %s: %lld launches\n", OpName(op()).data(),
              DTypeName(dtype()).data(), static_cast<long long>(launches));
}

// Odd cols with pointers off the 16-byte grid: Launch narrows a block
// config's pack to what the pointers allow (x and y share their offset
// here), and each row's head still starts its packs on that grid.
TEST_P(KernelGpuTest, BlockImplsAtOddColsWithMisalignedPointersNarrowThePack) {
  if (!OperandsFollowRowLayout(op())) {
    GTEST_SKIP() << "softmax, log-softmax and ReduceScale (operands that follow x)";
  }
  CheckMisalignedNarrowing({9, 50257}, Narrowing::kExactly, [](int widest) {
    return std::vector<LaunchConfig>{LaunchConfig{Impl::kBlockSmem, 512, widest, 32, 1, 0},
                                     LaunchConfig{Impl::kBlockUncached, 1024, widest, 32, 1, 0}};
  });
}

// block_reread narrows its pack as the other block impls do when x or y is
// off the 16-byte grid, down to plain loads for packs under 4 bytes; the
// narrower packs take the row-sized instances too, up to 32 a thread
// (12288 and 32768 columns in packs of one element).
TEST_P(KernelGpuTest, BlockRereadNarrowsItsPackForMisalignedPointers) {
  if (!BlockRereadServes(op())) GTEST_SKIP() << "LayerNorm and RMSNorm only";
  for (const auto& [shape, block] : {std::pair<Shape, int>{{9, 4096}, 512},
                                     std::pair<Shape, int>{{5, 12288}, 512},
                                     std::pair<Shape, int>{{3, 32768}, 1024}}) {
    CheckMisalignedNarrowing(shape, Narrowing::kExactly, [block = block](int widest) {
      return std::vector<LaunchConfig>{LaunchConfig{Impl::kBlockReread, block, widest, 32, 1, 0}};
    });
  }
}

// Pointers off the 16-byte grid make Launch narrow the pack instead of
// issuing misaligned vector accesses.
TEST_P(KernelGpuTest, MisalignedPointersFallBackToNarrowerPacks) {
  const Shape shape{29, 1024};
  absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op(), dtype(), shape, device_);
  ASSERT_TRUE(heuristic.ok());
  CheckMisalignedNarrowing(shape, Narrowing::kAtMost,
                           [&heuristic](int) { return std::vector{*heuristic}; });
}

// The norms (LayerNorm, RMSNorm) without gamma/beta and without their
// per-row outputs.
TEST_P(KernelGpuTest, NormsWithoutAffineOrStats) {
  if (!TakesOperand(op(), Operand::kGamma)) GTEST_SKIP() << "LayerNorm and RMSNorm only";
  const int64_t limit = SharedMemoryLimitCols();
  for (int64_t cols : {int64_t{33}, int64_t{1024}, int64_t{4096}, limit + 1}) {
    absl::StatusOr<HostProblem> host = MakeProblem(op(), dtype(), {19, cols}, FreshSeed(),
                                                   InputPattern::kNormal, /*with_affine=*/false);
    ASSERT_TRUE(host.ok());
    SweepAllConfigs(*host, /*with_stats=*/false);
  }
}

// An illegal config is refused before anything is launched: the poisoned
// output stays untouched.
TEST_P(KernelGpuTest, IllegalConfigIsNeverLaunched) {
  const int64_t cols = SharedMemoryLimitCols() + 1;
  absl::StatusOr<HostProblem> host =
      MakeProblem(op(), dtype(), {2, cols}, FreshSeed(), InputPattern::kNormal, true);
  ASSERT_TRUE(host.ok());
  absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
  ASSERT_TRUE(problem.ok());
  ASSERT_TRUE(PoisonOutputs(*problem, stream_).ok());
  const LaunchConfig too_big{Impl::kBlockSmem, 1024, 1, 32, 1, 0};
  absl::StatusOr<LaunchConfig> launched =
      Launch(op(), dtype(), host->shape, problem->Args(), too_big, device_, stream_);
  ASSERT_FALSE(launched.ok());
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted)
      << launched.status();
  const LaunchConfig bad_group{Impl::kWarp, 128, 1, 12, 1, 0};
  EXPECT_EQ(Launch(op(), dtype(), {2, 8}, problem->Args(), bad_group, device_, stream_)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  gpu_testing::ExpectOutputUntouched(*problem, stream_);
}

// LayerNorm's check allows float32's rounding of x - mean times inv_std *
// |gamma| (verify.h): a row of two values 2e-4 apart near 3, gamma 2. An
// error of 5e-4 is inside that slack (~9e-4) but outside the fixed 1e-4;
// 5e-3 is outside both, so the slack cannot hide a wrong kernel.
class LayerNormToleranceTest : public gpu_testing::GpuTest {};

TEST_F(LayerNormToleranceTest, SlackFollowsTheRowsConditioning) {
  const float x[2] = {3.0f, 3.0002f};
  const float gamma[2] = {2.f, 2.f};
  const double mean = (static_cast<double>(x[0]) + x[1]) / 2;
  const double variance = ((x[0] - mean) * (x[0] - mean) + (x[1] - mean) * (x[1] - mean)) / 2;
  const float mean_f = static_cast<float>(mean);
  const float inv_std = static_cast<float>(1.0 / std::sqrt(variance + 1e-5));
  const float ref[2] = {static_cast<float>((x[0] - mean) * inv_std * 2),
                        static_cast<float>((x[1] - mean) * inv_std * 2)};
  absl::StatusOr<DeviceBuffer> d = DeviceBuffer::Allocate(12 * sizeof(float));
  ASSERT_TRUE(d.ok()) << d.status();
  float* base = static_cast<float*>(d->data());
  const float host[10] = {x[0], x[1], gamma[0], gamma[1], mean_f, inv_std, ref[0], ref[1]};
  ASSERT_EQ(cudaMemcpy(base, host, sizeof(host), cudaMemcpyHostToDevice), cudaSuccess);
  const LayerNormInputs inputs{base, base + 2, base + 4, base + 5, 2};
  const Tolerance tolerance = OutputTolerance(Op::kLayerNorm, DType::kFloat32);
  for (const auto& [error, within_slack] : {std::pair{5e-4f, true}, std::pair{5e-3f, false}}) {
    const float out[2] = {ref[0] + error, ref[1] - error};
    ASSERT_EQ(cudaMemcpy(base + 10, out, sizeof(out), cudaMemcpyHostToDevice), cudaSuccess);
    absl::StatusOr<DeviceCompareResult> plain =
        CompareOnDevice(DType::kFloat32, base + 10, base + 6, 2, tolerance, stream_);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(plain->bad, 2) << "error " << error;
    absl::StatusOr<DeviceCompareResult> conditioned =
        CompareOnDevice(DType::kFloat32, base + 10, base + 6, 2, tolerance, stream_, &inputs);
    ASSERT_TRUE(conditioned.ok()) << conditioned.status();
    EXPECT_EQ(conditioned->bad, within_slack ? 0 : 2) << "error " << error;
  }
}

// The six basic ops, which every family serves; the fused norms (warp and
// block_regs only, rows up to 16384 columns) have their own sweeps in
// row_ops_gpu_test.cc.
INSTANTIATE_TEST_SUITE_P(AllOpsAndDTypes, KernelGpuTest,
                         ::testing::Combine(::testing::ValuesIn(kBasicOps),
                                            ::testing::ValuesIn(kAllDTypes)),
                         gpu_testing::OpDTypeParamName);

}  // namespace
}  // namespace kt::kernels
