// The GPU backend: the tuned kernel launched with kernels::Launch on client
// device memory opened by CUDA IPC (in place, no copies), or on staged
// copies of inline and shared-memory tensors. Its per-GPU state and the
// running of a Run live in a DeviceExecutor (device_executor.h); this class
// is what the service sees of it.
//
// Waiting: the device's scheduling flag is cudaDeviceScheduleYield, so a
// waiting request thread polls the GPU and gives its core up between polls.
// Blocking sync wakes tens of microseconds late, which a 10 us kernel cannot
// afford; spinning measured no better than yield in small-Run latency and
// served fewer Runs/s on an H100 (bench/results/2026-11-21-h200-daemon-latency).
#ifndef KERNTUNE_SERVER_GPU_BACKEND_H_
#define KERNTUNE_SERVER_GPU_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "server/device_executor.h"

namespace kt::server {

class GpuBackend final : public Backend {
 public:
  // Serves CUDA device `ordinal` with `lanes` streams and the configs of
  // `cache`. FailedPrecondition when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(int ordinal, int lanes,
                                                            std::unique_ptr<ConfigCache> cache);

  std::string name() const override { return "gpu"; }
  absl::StatusOr<RunResult> Execute(const RunRequest& request) override;
  const ConfigCache* config_cache() const override { return &executor_->config_cache(); }
  // Every visible CUDA device (requests run on the executor's).
  std::vector<BackendDevice> devices() const override;
  BackendStats stats() override { return executor_->stats(); }

  bool supports_cuda_ipc() const override { return true; }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) override;
  void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) override {
    executor_->Housekeep(now, is_alive);
  }
  int64_t open_ipc_events() const override { return executor_->open_ipc_events(); }

 private:
  explicit GpuBackend(std::unique_ptr<DeviceExecutor> executor)
      : executor_(std::move(executor)) {}

  // The one GPU served. Serving every GPU of a node makes this one executor
  // per device, Runs going to the one that holds their memory.
  std::unique_ptr<DeviceExecutor> executor_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_GPU_BACKEND_H_
