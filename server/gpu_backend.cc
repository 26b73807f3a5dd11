// GPU backend (see gpu_backend.h).
#include "server/gpu_backend.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/device_identity.h"

namespace kt::server {

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(
    int ordinal, int lanes, std::unique_ptr<ConfigCache> cache) {
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor =
      DeviceExecutor::Create(ordinal, lanes, std::move(cache));
  if (!executor.ok()) return executor.status();
  return std::unique_ptr<GpuBackend>(new GpuBackend(*std::move(executor)));
}

absl::StatusOr<RunResult> GpuBackend::Execute(const RunRequest& request) {
  return executor_->Execute(request);
}

std::vector<BackendDevice> GpuBackend::devices() const {
  std::vector<BackendDevice> devices;
  for (int ordinal = 0; ordinal < kernels::CudaDeviceCount(); ++ordinal) {
    absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
    if (!device.ok()) continue;
    BackendDevice out{*std::move(device), {}};
    // Unknown identity stays empty: GetStatus still lists the device.
    absl::StatusOr<kernels::DeviceIdentity> identity = kernels::GetDeviceIdentity(ordinal);
    if (identity.ok()) out.identity = *std::move(identity);
    devices.push_back(std::move(out));
  }
  return devices;
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> GpuBackend::OpenCudaIpcMemory(
    const std::string& handle, int device_ordinal) {
  const int served = executor_->device().ordinal;
  if (device_ordinal != served) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_ordinal=", device_ordinal, ": this daemon serves CUDA device ", served));
  }
  return executor_->OpenCudaIpcMemory(handle);
}

}  // namespace kt::server
