// The GPU backend: the tuned kernel launched with kernels::Launch on client
// device memory opened by CUDA IPC (in place, no copies), or on staged
// copies of inline and shared-memory tensors. One CUDA device (the
// runtime's primary context, created at start and kept), a small pool of
// streams; every request sets its device on the thread that executes it.
#ifndef KERNTUNE_SERVER_GPU_BACKEND_H_
#define KERNTUNE_SERVER_GPU_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "server/ipc_cache.h"

namespace kt::server {

class GpuBackend final : public Backend {
 public:
  // Creates the context of device `ordinal` and `streams` streams on it.
  // FailedPrecondition when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(int ordinal, int streams,
                                                            std::unique_ptr<ConfigCache> cache);
  ~GpuBackend() override;

  std::string name() const override { return "gpu"; }
  absl::StatusOr<RunResult> Execute(const RunRequest& request) override;
  const ConfigCache* config_cache() const override { return cache_.get(); }
  // Every visible CUDA device (requests run on the first).
  std::vector<kernels::DeviceInfo> devices() const override;

  bool supports_cuda_ipc() const override { return true; }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) override;
  void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) override;
  int64_t open_ipc_events() const override { return static_cast<int64_t>(events_.size()); }

 private:
  // A stream with its timing events, and the client memory that Runs
  // answered before finishing (done_event) still use: released once the
  // stream has passed `stop`.
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    std::vector<std::shared_ptr<const ClientMemory>> in_flight;
  };
  class LaneLease;
  class IpcEvent;

  GpuBackend(kernels::DeviceInfo device, std::unique_ptr<ConfigCache> cache)
      : device_(std::move(device)), cache_(std::move(cache)) {}
  absl::StatusOr<RunResult> ExecuteOn(Lane& lane, const RunRequest& request);
  absl::StatusOr<std::shared_ptr<IpcEvent>> OpenEvent(const std::string& handle,
                                                      const RunRequest& request);

  const kernels::DeviceInfo device_;
  std::unique_ptr<ConfigCache> cache_;
  std::vector<Lane> lanes_;  // fixed after Create; a lane is used by its lease holder only
  absl::Mutex mu_;
  std::vector<int> free_lanes_ ABSL_GUARDED_BY(mu_);
  IpcCache<IpcEvent> events_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_GPU_BACKEND_H_
