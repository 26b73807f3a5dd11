// `kerntune demo` (demo.h).
#include "client/demo.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/device_info.h"
#include "kernels/host_dtype.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/reference.h"
#include "kernels/verify.h"
#include "tuner/measure.h"

namespace kt::client {
namespace {

absl::Status RunOnGpu(const DemoOptions& o) {
  if (cudaSetDevice(0) != cudaSuccess) return absl::UnavailableError("cudaSetDevice(0) failed");
  absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(0);
  if (!device.ok()) return device.status();
  absl::StatusOr<kernels::LaunchConfig> config =
      kernels::HeuristicConfig(o.op, o.dtype, o.shape, *device);
  if (!config.ok()) return config.status();
  absl::StatusOr<kernels::HostProblem> host = kernels::MakeProblem(
      o.op, o.dtype, o.shape, /*seed=*/42, kernels::InputPattern::kNormal, true);
  if (!host.ok()) return host.status();
  cudaStream_t stream = nullptr;  // the default stream: a one-shot demo
  absl::StatusOr<kernels::DeviceProblem> problem = kernels::Upload(*host, stream);
  if (!problem.ok()) return problem.status();
  auto launch = [&](int) {
    return kernels::Launch(o.op, o.dtype, o.shape, problem->Args(), *config, *device, stream)
        .status();
  };
  if (absl::Status s = kernels::PoisonOutputs(*problem, stream); !s.ok()) return s;
  if (absl::Status s = launch(0); !s.ok()) return s;
  absl::StatusOr<kernels::CheckReport> report = kernels::CheckOutputs(*problem, true, stream);
  if (!report.ok()) return report.status();
  absl::StatusOr<tuner::TimingStats> timing = tuner::TimeLaunches(launch, 3, 20, stream);
  if (!timing.ok()) return timing.status();
  const int64_t bytes = kernels::MinimumBytesMoved(o.op, o.dtype, o.shape, true, true, true);
  std::printf("backend   gpu: %s (%d SMs)\nconfig    %s (heuristic)\ncheck     %s\n"
              "time      %.1f us median of 20, %.0f GB/s\n",
              device->name.c_str(), device->sm_count, kernels::ConfigKey(*config).c_str(),
              report->passed ? "matches the fp64 reference" : report->detail.c_str(),
              timing->median_us, static_cast<double>(bytes) / (timing->median_us * 1e3));
  return report->passed ? absl::OkStatus()
                        : absl::InternalError("output does not match the reference");
}

absl::Status RunOnCpu(const DemoOptions& o) {
  absl::StatusOr<kernels::HostProblem> host = kernels::MakeProblem(
      o.op, o.dtype, o.shape, /*seed=*/42, kernels::InputPattern::kNormal, true);
  if (!host.ok()) return host.status();
  const auto start = std::chrono::steady_clock::now();
  // The CPU backend's output: the reference in the storage dtype (codes for
  // the quantizing ops, the residual written back for the add ops).
  absl::StatusOr<kernels::HostOutputs> out = kernels::RunReferenceOnHost(*host);
  if (!out.ok()) return out.status();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const kernels::CheckReport check = kernels::CheckHostOutputs(*host, *out);
  std::printf("backend   cpu reference (no CUDA device found)\ncheck     %s\n"
              "time      %.0f us for %lld elements\n",
              check.passed ? "matches the fp64 reference" : check.detail.c_str(), us,
              static_cast<long long>(o.shape.elements()));
  return check.passed ? absl::OkStatus() : absl::InternalError("CPU backend mismatch");
}

}  // namespace

absl::Status RunDemo(const DemoOptions& o) {
  std::printf("kerntune demo: %s %s rows=%lld cols=%lld\n", kernels::OpName(o.op).data(),
              kernels::DTypeName(o.dtype).data(), static_cast<long long>(o.shape.rows),
              static_cast<long long>(o.shape.cols));
  if (!o.force_cpu && kernels::CudaDeviceCount() > 0) return RunOnGpu(o);
  return RunOnCpu(o);
}

}  // namespace kt::client
