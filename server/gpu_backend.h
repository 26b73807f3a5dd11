// The GPU backend: every GPU the daemon serves, each a Device (a
// DeviceExecutor: its own context, lanes, IPC mappings, events and config
// cache), and the routing of Runs to them. A Run on device tensors runs on
// their device; one without names a device or goes to the least-loaded
// one. Devices share nothing on the Run path but this class's immutable
// list, so a long kernel on one GPU never delays a Run on another, and a
// device that fails (a sticky CUDA error) is refused while the others serve.
//
// Waiting: each device's scheduling flag is cudaDeviceScheduleYield, so a
// waiting request thread polls the GPU and gives its core up between polls.
// Blocking sync wakes tens of microseconds late, which a 10 us kernel cannot
// afford; spinning measured no better than yield in small-Run latency and
// served fewer Runs/s on an H100 (bench/results/2026-11-21-h200-daemon-latency).
#ifndef KERNTUNE_SERVER_GPU_BACKEND_H_
#define KERNTUNE_SERVER_GPU_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "kernels/device_identity.h"
#include "server/device.h"

namespace kt::server {

class GpuBackend final : public Backend {
 public:
  struct Unusable {
    int ordinal = 0;
    std::string reason;
  };
  // Serves CUDA devices `ordinals` with `lanes` streams each. A device that
  // cannot be used is left out and reported in `unusable`;
  // FailedPrecondition when none can.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(const std::vector<int>& ordinals,
                                                            int lanes,
                                                            const ConfigCacheFactory& make_cache,
                                                            std::vector<Unusable>* unusable);
  // Serves `devices` (at least one; tests pass fakes).
  explicit GpuBackend(std::vector<std::unique_ptr<Device>> devices);

  std::string name() const override { return "gpu"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  absl::StatusOr<int> Route(const RunRequest& request) override;
  std::string device_label(int device_index) const override;
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override;
  absl::StatusOr<const ConfigCache*> ConfigCacheFor(absl::string_view device) const override;
  std::vector<BackendDevice> devices() const override;
  std::vector<int> failed_devices() const override;
  BackendStats stats() override;

  bool supports_cuda_ipc() const override { return true; }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) override;
  void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) override;
  int64_t open_ipc_events() const override;
  std::unique_ptr<RunStream> OpenRunStream(int device_index, RunPriority priority) override;

 private:
  class RoutedStream;
  // Per device, beside it: counters the router reads without a lock.
  struct Load {
    std::atomic<int64_t> in_flight{0};
    std::atomic<int64_t> runs{0};
  };

  // The index of the device with CUDA ordinal `ordinal`, or -1.
  int IndexOf(int ordinal) const;
  // The one device `selector` names (a UUID, a UUID prefix or an ordinal).
  absl::StatusOr<int> Find(absl::string_view selector, absl::string_view field) const;
  // The available device with the fewest Runs in flight (ties taken in
  // turn); Unavailable when every device failed.
  absl::StatusOr<int> LeastLoaded();
  // "CUDA device 1 (GPU-...)".
  std::string Describe(int index) const;
  absl::Status Unavailable(int index) const;

  const std::vector<std::unique_ptr<Device>> devices_;
  // The devices as a RunRequest.device selector sees them.
  const std::vector<kernels::VisibleDevice> selectable_;
  const std::unique_ptr<Load[]> load_;
  std::atomic<uint32_t> next_tie_{0};
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_GPU_BACKEND_H_
