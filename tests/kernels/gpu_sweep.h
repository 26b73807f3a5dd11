// Shared fixtures of the GPU suites: device setup, parameter names and the
// untouched-output check for all of them (GpuTest); for kernels_gpu_test.cc
// and row_ops_gpu_test.cc also (GpuSweepTest) launching a config on poisoned
// outputs and checking it against the fp64 reference, sweeps over every
// enumerated config, and host problems with hand-made inputs. Header-only;
// test code.
#ifndef KERNTUNE_TESTS_KERNELS_GPU_SWEEP_H_
#define KERNTUNE_TESTS_KERNELS_GPU_SWEEP_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/host_dtype.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/reference.h"
#include "kernels/verify.h"

namespace kt::kernels::gpu_testing {

// Totals printed at the end (kernels_gpu_test.cc), for the record of what
// the suites covered.
inline std::atomic<int64_t> g_cases{0};
inline std::atomic<int64_t> g_launches{0};

inline constexpr int kMaxFailuresReported = 10;

inline uint64_t FreshSeed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

// Reads a device buffer of `n` storage-dtype elements back as doubles.
inline std::vector<double> ReadBack(DType dtype, const void* device_data, int64_t n) {
  std::vector<uint8_t> bytes(n * DTypeSize(dtype));
  EXPECT_EQ(cudaMemcpy(bytes.data(), device_data, bytes.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = LoadAsDouble(dtype, bytes.data(), i);
  return values;
}

// Device 0 and a stream of it. Fails (does not skip) without a GPU: the
// gpu-labelled suites run only where one is expected.
class GpuTest : public ::testing::Test {
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

  // What a launch on misaligned operands must do with the config's pack.
  enum class Narrowing {
    kExactly,  // keep the impl, take the widest pack the offset allows
    kAtMost,   // take a pack no wider than the offset allows
  };
  // Launches configs(widest pack) on copies of `problem`'s x and y placed 1,
  // 2 and 4 elements off the 16-byte grid (x and y share the offset): each
  // launch must narrow its pack as `narrowing` says and match the
  // reference.
  void CheckMisalignedOperandsNarrowThePack(
      Op op, DType dtype, Shape shape, DeviceProblem& problem, Narrowing narrowing,
      const std::function<std::vector<LaunchConfig>(int widest)>& configs) {
    const size_t element = DTypeSize(dtype);
    const size_t bytes = problem.x.bytes();
    absl::StatusOr<DeviceBuffer> in = DeviceBuffer::Allocate(bytes + 16);
    absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Allocate(bytes + 16);
    ASSERT_TRUE(in.ok() && out.ok());
    const int widest = 16 / static_cast<int>(element);
    for (size_t offset_elements : {size_t{1}, size_t{2}, size_t{4}}) {
      const size_t offset = offset_elements * element;
      auto* x = static_cast<uint8_t*>(in->data()) + offset;
      auto* y = static_cast<uint8_t*>(out->data()) + offset;
      ASSERT_EQ(cudaMemcpy(x, problem.x.data(), bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
      for (const LaunchConfig& config : configs(widest)) {
        RowOpArgs args = problem.Args();
        args.x = x;
        args.y = y;
        absl::StatusOr<LaunchConfig> launched =
            Launch(op, dtype, shape, args, config, device_, stream_);
        ASSERT_TRUE(launched.ok()) << launched.status();
        const size_t allowed = offset % 16 == 0 ? 16 : offset & (~offset + 1);
        if (narrowing == Narrowing::kExactly) {
          EXPECT_EQ(launched->impl, config.impl);
          EXPECT_EQ(launched->pack_size * element, allowed) << "offset " << offset << " bytes";
        } else {
          EXPECT_LE(launched->pack_size * element, allowed) << "offset " << offset << " bytes";
        }
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(problem.y.data(), y, bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
        absl::StatusOr<CheckReport> report = CheckOutputs(problem, true, stream_);
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_TRUE(report->passed) << "offset " << offset << " " << ConfigKey(config) << ": "
                                    << report->detail;
        ++g_launches;
      }
    }
  }

  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
};

// gtest's name for an (op, dtype) parameter: "softmax_float16".
inline std::string OpDTypeParamName(
    const ::testing::TestParamInfo<std::tuple<Op, DType>>& info) {
  return absl::StrCat(OpName(std::get<0>(info.param)), "_", DTypeName(std::get<1>(info.param)));
}

// Expects every byte of the problem's poisoned output still 0xff, once the
// stream is idle: what a refused launch must leave.
inline void ExpectOutputUntouched(const DeviceProblem& problem, cudaStream_t stream) {
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<uint8_t> y(problem.y.bytes());
  ASSERT_EQ(cudaMemcpy(y.data(), problem.y.data(), y.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](uint8_t b) { return b == 0xff; }));
}

class GpuSweepTest : public GpuTest {
 protected:

  // Largest cols the shared-memory implementation accepts on this device
  // for the op (the masked softmax caches float logits, the others the
  // storage dtype).
  int64_t SharedMemoryLimitCols(Op op, DType dtype) const {
    int64_t lo = 1, hi = int64_t{1} << 20;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      const LaunchConfig c{Impl::kBlockSmem, 128, 1, 32, 1, 0};
      if (ValidateConfig(op, dtype, {1, mid}, c, device_).ok()) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  // Launches `config` on poisoned outputs and checks them. Returns a failure
  // description, or "" when the launch was right. `prepare` runs after the
  // poisoning (an in-place test copies x into y there).
  std::string LaunchAndCheck(DeviceProblem& problem, const LaunchConfig& config,
                             const RowOpArgs& args, bool check_stats,
                             const std::function<absl::Status()>& prepare = nullptr) {
    if (absl::Status s = PoisonOutputs(problem, stream_); !s.ok()) return s.ToString();
    if (prepare) {
      if (cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess) {
        return cudaGetErrorString(err);
      }
      if (absl::Status s = prepare(); !s.ok()) return s.ToString();
    }
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

  // Runs every enumerated config (that `keep` keeps, when given) on an
  // uploaded problem, with the launch arguments `args`
  // (problem.Args(with_stats) by default); returns the number of configs
  // run. `what` prefixes failure messages.
  int SweepUploaded(DeviceProblem& problem, const RowOpArgs& args, bool with_stats,
                    const std::string& what,
                    const std::function<absl::Status()>& prepare = nullptr,
                    const std::function<bool(const LaunchConfig&)>& keep = nullptr) {
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(problem.op, problem.dtype, problem.shape, device_);
    EXPECT_TRUE(configs.ok()) << configs.status();
    if (!configs.ok()) return 0;
    if (keep) {
      configs->erase(std::remove_if(configs->begin(), configs->end(),
                                    [&](const LaunchConfig& c) { return !keep(c); }),
                     configs->end());
    }
    EXPECT_FALSE(configs->empty()) << what;
    ++g_cases;
    int failures = 0;
    for (const LaunchConfig& config : *configs) {
      const std::string failure = LaunchAndCheck(problem, config, args, with_stats, prepare);
      if (failure.empty()) continue;
      if (++failures <= kMaxFailuresReported) {
        ADD_FAILURE() << OpName(problem.op) << " " << DTypeName(problem.dtype)
                      << " rows=" << problem.shape.rows << " cols=" << problem.shape.cols
                      << " " << what << " " << ConfigKey(config) << ": " << failure;
      }
    }
    return static_cast<int>(configs->size());
  }

  int SweepAllConfigs(const HostProblem& host, bool with_stats, const std::string& what = "") {
    absl::StatusOr<DeviceProblem> problem = Upload(host, /*stream=*/nullptr);
    EXPECT_TRUE(problem.ok()) << problem.status();
    if (!problem.ok()) return 0;
    return SweepUploaded(*problem, problem->Args(with_stats), with_stats, what);
  }

};

}  // namespace kt::kernels::gpu_testing

#endif  // KERNTUNE_TESTS_KERNELS_GPU_SWEEP_H_
