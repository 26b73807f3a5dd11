// GPU suite (CTest label "gpu"): every config EnumerateConfigs returns, on
// shapes that straddle every dispatch boundary, for every op and dtype,
// checked against the fp64 CPU reference on fresh random data with the
// outputs poisoned before each launch. Fails (does not skip) without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/verify.h"

namespace kt::kernels {
namespace {

// Totals printed at the end, for the record of what the suite covered.
std::atomic<int64_t> g_cases{0};
std::atomic<int64_t> g_launches{0};

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
constexpr int kMaxFailuresReported = 10;

uint64_t FreshSeed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

class KernelGpuTest : public ::testing::TestWithParam<std::tuple<Op, DType>> {
 protected:
  void SetUp() override {
    ASSERT_GT(CudaDeviceCount(), 0) << "no CUDA device: the gpu-labelled tests need one";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    absl::StatusOr<DeviceInfo> device = GetDeviceInfo(0);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *device;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Op op() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }

  // Largest cols the shared-memory implementation accepts on this device.
  int64_t SharedMemoryLimitCols() const {
    int64_t lo = 1, hi = int64_t{1} << 20;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      const LaunchConfig c{Impl::kBlockSmem, 128, 1, 32, 1, 0};
      if (ValidateConfig(op(), dtype(), {1, mid}, c, device_).ok()) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  // Launches `config` on poisoned outputs and checks them. Returns a failure
  // description, or "" when the launch was right.
  std::string LaunchAndCheck(DeviceProblem& problem, const LaunchConfig& config,
                             const RowOpArgs& args, bool check_stats) {
    if (absl::Status s = PoisonOutputs(problem, stream_); !s.ok()) return s.ToString();
    absl::StatusOr<LaunchConfig> launched =
        Launch(problem.op, problem.dtype, problem.shape, args, config, device_, stream_);
    if (!launched.ok()) return launched.status().ToString();
    if (cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess) {
      return absl::StrCat("kernel failed: ", cudaGetErrorString(err));
    }
    absl::StatusOr<CheckReport> report = CheckOutputs(problem, check_stats, stream_);
    if (!report.ok()) return report.status().ToString();
    ++g_launches;
    return report->passed ? "" : report->detail;
  }

  // Runs every enumerated config on one problem; returns the number run.
  int SweepAllConfigs(const HostProblem& host, bool with_stats) {
    absl::StatusOr<DeviceProblem> problem = Upload(host);
    EXPECT_TRUE(problem.ok()) << problem.status();
    if (!problem.ok()) return 0;
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(host.op, host.dtype, host.shape, device_);
    EXPECT_TRUE(configs.ok()) << configs.status();
    if (!configs.ok()) return 0;
    EXPECT_FALSE(configs->empty());
    ++g_cases;
    int failures = 0;
    for (const LaunchConfig& config : *configs) {
      const std::string failure =
          LaunchAndCheck(*problem, config, problem->Args(with_stats), with_stats);
      if (failure.empty()) continue;
      if (++failures <= kMaxFailuresReported) {
        ADD_FAILURE() << OpName(host.op) << " " << DTypeName(host.dtype) << " rows="
                      << host.shape.rows << " cols=" << host.shape.cols << " "
                      << ConfigKey(config) << ": " << failure;
      }
    }
    return static_cast<int>(configs->size());
  }

  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
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
    ASSERT_TRUE(host.ok());
    absl::StatusOr<DeviceProblem> problem = Upload(*host);
    ASSERT_TRUE(problem.ok());
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(op(), dtype(), host->shape, device_);
    ASSERT_TRUE(configs.ok());
    for (const LaunchConfig& config : *configs) {
      ASSERT_EQ(cudaMemcpy(problem->y.data(), problem->x.data(), problem->x.bytes(),
                           cudaMemcpyDeviceToDevice),
                cudaSuccess);
      RowOpArgs args = problem->Args();
      args.x = args.y;
      absl::StatusOr<LaunchConfig> launched =
          Launch(op(), dtype(), host->shape, args, config, device_, stream_);
      ASSERT_TRUE(launched.ok()) << launched.status();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      absl::StatusOr<CheckReport> report = CheckOutputs(*problem, true, stream_);
      ASSERT_TRUE(report.ok());
      EXPECT_TRUE(report->passed) << "cols=" << cols << " " << ConfigKey(config) << ": "
                                  << report->detail;
      ++g_launches;
    }
  }
}

// Pointers off the 16-byte grid make Launch narrow the pack instead of
// issuing misaligned vector accesses.
TEST_P(KernelGpuTest, MisalignedPointersFallBackToNarrowerPacks) {
  const Shape shape{29, 1024};
  absl::StatusOr<HostProblem> host =
      MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false);
  ASSERT_TRUE(host.ok());
  absl::StatusOr<DeviceProblem> problem = Upload(*host);
  ASSERT_TRUE(problem.ok());
  const size_t element = DTypeSize(dtype());
  const size_t bytes = problem->x.bytes();
  absl::StatusOr<DeviceBuffer> in = DeviceBuffer::Allocate(bytes + 16);
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(bytes + 16);
  ASSERT_TRUE(in.ok() && out.ok());
  for (size_t offset_elements : {size_t{1}, size_t{2}, size_t{4}}) {
    const size_t offset = offset_elements * element;
    auto* x = static_cast<uint8_t*>(in->data()) + offset;
    auto* y = static_cast<uint8_t*>(out->data()) + offset;
    ASSERT_EQ(cudaMemcpy(x, problem->x.data(), bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
    absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op(), dtype(), shape, device_);
    ASSERT_TRUE(heuristic.ok());
    RowOpArgs args = problem->Args();
    args.x = x;
    args.y = y;
    absl::StatusOr<LaunchConfig> launched =
        Launch(op(), dtype(), shape, args, *heuristic, device_, stream_);
    ASSERT_TRUE(launched.ok()) << launched.status();
    EXPECT_LE(launched->pack_size * element, offset % 16 == 0 ? 16 : offset & (~offset + 1))
        << "offset " << offset << " bytes";
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(problem->y.data(), y, bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
    absl::StatusOr<CheckReport> report = CheckOutputs(*problem, true, stream_);
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->passed) << "offset " << offset << ": " << report->detail;
  }
}

// LayerNorm without gamma/beta and without the mean/inv_std outputs.
TEST_P(KernelGpuTest, LayerNormWithoutAffineOrStats) {
  if (op() != Op::kLayerNorm) GTEST_SKIP() << "LayerNorm only";
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
  absl::StatusOr<DeviceProblem> problem = Upload(*host);
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
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  std::vector<uint8_t> y(problem->y.bytes());
  ASSERT_EQ(cudaMemcpy(y.data(), problem->y.data(), y.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](uint8_t b) { return b == 0xff; }));
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<Op, DType>>& info) {
  return absl::StrCat(OpName(std::get<0>(info.param)), "_", DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllOpsAndDTypes, KernelGpuTest,
                         ::testing::Combine(::testing::ValuesIn(kAllOps),
                                            ::testing::ValuesIn(kAllDTypes)),
                         ParamName);

}  // namespace
}  // namespace kt::kernels
