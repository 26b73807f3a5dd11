// GPU suite for the middle-axis softmax (Impl::kAxis; CTest label "gpu"):
// every config EnumerateConfigs returns, for softmax and log-softmax in every
// dtype, on (outer, dim, inner) shapes that straddle the kernel's boundaries,
// checked against the fp64 CPU reference on fresh random data with the
// outputs poisoned before each launch. Fails (does not skip) without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/axis_plan.h"
#include "kernels/device_info.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/verify.h"
#include "tests/kernels/gpu_sweep.h"

namespace kt::kernels {
namespace {

std::atomic<int64_t> g_cases{0};
std::atomic<int64_t> g_launches{0};
// Which kernel instances the sweep reached: (pack, cached rows), 0 rows being
// the two-pass kernel.
std::set<std::pair<int, int>>* const g_instances = new std::set<std::pair<int, int>>();

class CoverageReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("[coverage] %lld axis (op, dtype, shape) cases, %lld checked launches, %zu "
                "(pack, cached rows) instances:",
                static_cast<long long>(g_cases.load()), static_cast<long long>(g_launches.load()),
                g_instances->size());
    for (const auto& [pack, rows] : *g_instances) std::printf(" p%d/r%d", pack, rows);
    std::printf("\n");
  }
};
const auto* const g_report = ::testing::AddGlobalTestEnvironment(new CoverageReport);

using gpu_testing::FreshSeed;
using gpu_testing::kMaxFailuresReported;

std::string ShapeName(Shape s) {
  return absl::StrCat("(outer=", s.rows, ", dim=", s.cols, ", inner=", s.inner, ")");
}

// Seed 001's two shapes, then the boundaries: outer 1 and many; dim 1, 2,
// odd, past every cached instance (4099 with narrow groups, 20000 past all);
// inner 2, 3 (odd: pack 1), 48 (shorter than a block row: columns span
// outer slices), 32768.
const std::vector<Shape>& SweepShapes() {
  static const auto* shapes = new std::vector<Shape>{
      {1, 128, 32768},  // [128,128,16,16] axis 0
      {512, 896, 48},   // [512,896,4,12] axis 1
      {3, 1, 48},      {1, 1, 2},      {5, 2, 3},     {1, 2, 32768}, {7, 33, 2},
      {300, 127, 3},   {1, 255, 48},   {2, 4099, 2},  {1, 4099, 48}, {4, 4099, 3},
      {2, 17, 32768},  {64, 1000, 48}, {1, 20000, 2}, {3, 16, 4096},
  };
  return *shapes;
}

class AxisGpuTest : public gpu_testing::GpuTest,
                    public ::testing::WithParamInterface<std::tuple<Op, DType>> {
 protected:

  Op op() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }

  // Launches `config` on poisoned outputs and checks them. Returns a failure
  // description, or "" when the launch was right.
  std::string LaunchAndCheck(DeviceProblem& problem, const LaunchConfig& config,
                             const RowOpArgs& args) {
    if (absl::Status s = PoisonOutputs(problem, stream_); !s.ok()) return s.ToString();
    absl::StatusOr<LaunchConfig> launched =
        Launch(problem.op, problem.dtype, problem.shape, args, config, device_, stream_);
    if (!launched.ok()) return launched.status().ToString();
    if (cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess) {
      return absl::StrCat("kernel failed: ", cudaGetErrorString(err));
    }
    absl::StatusOr<CheckReport> report = CheckOutputs(problem, false, stream_);
    if (!report.ok()) return report.status().ToString();
    ++g_launches;
    g_instances->insert({launched->pack_size,
                         internal::AxisCachedRows(problem.shape.cols,
                                                  launched->thread_group_width,
                                                  launched->pack_size)});
    return report->passed ? "" : report->detail;
  }

  // Runs every enumerated config on one problem; returns the number run.
  int SweepAllConfigs(const HostProblem& host) {
    absl::StatusOr<DeviceProblem> problem = Upload(host, /*stream=*/nullptr);
    EXPECT_TRUE(problem.ok()) << problem.status();
    if (!problem.ok()) return 0;
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(host.op, host.dtype, host.shape, device_);
    EXPECT_TRUE(configs.ok()) << configs.status();
    if (!configs.ok()) return 0;
    EXPECT_FALSE(configs->empty()) << ShapeName(host.shape);
    ++g_cases;
    int failures = 0;
    for (const LaunchConfig& config : *configs) {
      EXPECT_EQ(config.impl, Impl::kAxis) << ConfigKey(config);
      const std::string failure = LaunchAndCheck(*problem, config, problem->Args(false));
      if (failure.empty()) continue;
      if (++failures <= kMaxFailuresReported) {
        ADD_FAILURE() << OpName(host.op) << " " << DTypeName(host.dtype) << " "
                      << ShapeName(host.shape) << " " << ConfigKey(config) << ": " << failure;
      }
    }
    return static_cast<int>(configs->size());
  }

};

TEST_P(AxisGpuTest, EveryEnumeratedConfigMatchesTheReference) {
  int64_t launches = 0;
  for (const Shape& shape : SweepShapes()) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
    ASSERT_TRUE(host.ok()) << host.status();
    launches += SweepAllConfigs(*host);
  }
  std::printf("[sweep] axis %s %s: %lld launches\n", OpName(op()).data(),
              DTypeName(dtype()).data(), static_cast<long long>(launches));
}

// Lines (along dim) cycling through -inf but one value, constant, huge
// magnitudes, a NaN, all -inf and a large offset: cached and two-pass
// kernels, lines split over one lane or many, inner odd and even.
TEST_P(AxisGpuTest, SpecialValuesMatchTheReference) {
  for (const Shape& shape : std::vector<Shape>{
           {4, 33, 3}, {2, 130, 48}, {1, 128, 4096}, {3, 4099, 2}, {1, 20000, 2}, {6, 1, 8}}) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kSpecialValues, false);
    ASSERT_TRUE(host.ok()) << host.status();
    SweepAllConfigs(*host);
  }
}

// y == x: each thread rewrites only the elements it read.
TEST_P(AxisGpuTest, InPlace) {
  for (const Shape& shape : std::vector<Shape>{{37, 130, 48}, {2, 4099, 2}, {1, 20000, 2}}) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
    ASSERT_TRUE(host.ok());
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok());
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(op(), dtype(), shape, device_);
    ASSERT_TRUE(configs.ok());
    for (const LaunchConfig& config : *configs) {
      ASSERT_EQ(cudaMemcpy(problem->y.data(), problem->x.data(), problem->x.bytes(),
                           cudaMemcpyDeviceToDevice),
                cudaSuccess);
      RowOpArgs args = problem->Args(false);
      args.x = args.y;
      absl::StatusOr<LaunchConfig> launched =
          Launch(op(), dtype(), shape, args, config, device_, stream_);
      ASSERT_TRUE(launched.ok()) << launched.status();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      absl::StatusOr<CheckReport> report = CheckOutputs(*problem, false, stream_);
      ASSERT_TRUE(report.ok());
      EXPECT_TRUE(report->passed) << ShapeName(shape) << " " << ConfigKey(config) << ": "
                                  << report->detail;
      ++g_launches;
    }
  }
}

// Pointers off the 16-byte grid make Launch narrow the pack (to what the
// offset allows, also along inner) instead of issuing misaligned accesses.
TEST_P(AxisGpuTest, MisalignedPointersFallBackToNarrowerPacks) {
  for (const Shape& shape : std::vector<Shape>{{29, 130, 48}, {1, 128, 4096}}) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
    ASSERT_TRUE(host.ok());
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok());
    const size_t element = DTypeSize(dtype());
    const size_t bytes = problem->x.bytes();
    absl::StatusOr<DeviceBuffer> in = DeviceBuffer::Allocate(bytes + 16);
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(bytes + 16);
    ASSERT_TRUE(in.ok() && out.ok());
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(op(), dtype(), shape, device_);
    ASSERT_TRUE(configs.ok());
    for (size_t offset_elements : {size_t{1}, size_t{2}, size_t{4}}) {
      const size_t offset = offset_elements * element;
      const size_t allowed = offset % 16 == 0 ? 16 : (offset & (~offset + 1));
      auto* x = static_cast<uint8_t*>(in->data()) + offset;
      auto* y = static_cast<uint8_t*>(out->data()) + offset;
      ASSERT_EQ(cudaMemcpy(x, problem->x.data(), bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
      for (const LaunchConfig& config : *configs) {
        ASSERT_EQ(cudaMemset(y, 0xff, bytes), cudaSuccess);
        RowOpArgs args = problem->Args(false);
        args.x = x;
        args.y = y;
        absl::StatusOr<LaunchConfig> launched =
            Launch(op(), dtype(), shape, args, config, device_, stream_);
        ASSERT_TRUE(launched.ok()) << ConfigKey(config) << ": " << launched.status();
        EXPECT_LE(launched->pack_size * element, allowed)
            << "offset " << offset << " bytes, " << ConfigKey(config);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(problem->y.data(), y, bytes, cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        absl::StatusOr<CheckReport> report = CheckOutputs(*problem, false, stream_);
        ASSERT_TRUE(report.ok());
        EXPECT_TRUE(report->passed) << ShapeName(shape) << " offset " << offset << " "
                                    << ConfigKey(config) << ": " << report->detail;
        ++g_launches;
      }
    }
  }
}

// The heuristic default runs and is right on the seed shapes.
TEST_P(AxisGpuTest, HeuristicMatchesTheReference) {
  for (const Shape& shape : std::vector<Shape>{{1, 128, 32768}, {512, 896, 48}}) {
    absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op(), dtype(), shape, device_);
    ASSERT_TRUE(heuristic.ok()) << heuristic.status();
    EXPECT_EQ(heuristic->impl, Impl::kAxis);
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
    ASSERT_TRUE(host.ok());
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok());
    EXPECT_EQ(LaunchAndCheck(*problem, *heuristic, problem->Args(false)), "")
        << ShapeName(shape) << " " << ConfigKey(*heuristic);
  }
}

// Illegal configs are refused before anything is launched: the poisoned
// output stays untouched. (A pack that does not divide inner is not among
// them: Launch narrows it, like a misaligned pointer.)
TEST_P(AxisGpuTest, IllegalConfigIsNeverLaunched) {
  const Shape shape{3, 40, 6};
  absl::StatusOr<HostProblem> host =
      MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
  ASSERT_TRUE(host.ok());
  absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
  ASSERT_TRUE(problem.ok());
  ASSERT_TRUE(PoisonOutputs(*problem, stream_).ok());
  for (const LaunchConfig& bad : {
           LaunchConfig{Impl::kWarp, 128, 1, 32, 1, 0},       // row impl, inner > 1
           LaunchConfig{Impl::kAxis, 128, 1, 3, 1, 0},        // group width not a power of 2
           LaunchConfig{Impl::kAxis, 128, 1, 256, 1, 0},      // group wider than the block
           LaunchConfig{Impl::kAxis, 96, 1, 32, 1, 0},        // block size
           LaunchConfig{Impl::kAxis, 128, 1, 32, 2, 0},       // rows_per_access
       }) {
    absl::StatusOr<LaunchConfig> launched =
        Launch(op(), dtype(), shape, problem->Args(false), bad, device_, stream_);
    EXPECT_EQ(launched.status().code(), absl::StatusCode::kInvalidArgument)
        << ConfigKey(bad) << ": " << launched.status();
  }
  gpu_testing::ExpectOutputUntouched(*problem, stream_);
}


INSTANTIATE_TEST_SUITE_P(SoftmaxOpsAndDTypes, AxisGpuTest,
                         ::testing::Combine(::testing::Values(Op::kSoftmax, Op::kLogSoftmax),
                                            ::testing::ValuesIn(kAllDTypes)),
                         gpu_testing::OpDTypeParamName);

}  // namespace
}  // namespace kt::kernels
