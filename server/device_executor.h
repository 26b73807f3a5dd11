// Everything kerntuned keeps per GPU, and the running of a Run there: the
// device, its lanes (lane_pool.h), the client events it has opened
// (ipc_events.h) and the config cache of its SKU. Execute does, in order:
// the config lookup, the client's wait_event, the staging of operands
// (operand_staging.h), the launch between timing events, the copies back
// and done_event, then one cudaStreamSynchronize unless done_event answers
// at once. Nothing is created or allocated per Run for device tensors.
//
// The GPU backend owns one executor; serving every GPU of a node is one
// executor per device.
#ifndef KERNTUNE_SERVER_DEVICE_EXECUTOR_H_
#define KERNTUNE_SERVER_DEVICE_EXECUTOR_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/device_info.h"
#include "server/backend.h"
#include "server/client_memory.h"
#include "server/config_cache.h"
#include "server/ipc_events.h"
#include "server/lane_pool.h"
#include "server/run_request.h"

namespace kt::server {

class DeviceExecutor {
 public:
  // Sets device `ordinal`'s scheduling flag (yield: gpu_backend.h says
  // why), creates its context and `lanes` lanes. `cache` holds the configs
  // of its SKU. FailedPrecondition when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<DeviceExecutor>> Create(
      int ordinal, int lanes, std::unique_ptr<ConfigCache> cache);
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  // Runs a request that ValidateRunRequest accepted and whose tensors are
  // on this device or in host memory. Thread-safe: each Run leases a lane.
  absl::StatusOr<RunResult> Execute(const RunRequest& request);
  // Opens a client's allocation on this device from its cudaIpcMemHandle_t
  // bytes, with the allocation's real size.
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle);
  // Every second: closes events of exited clients and idle ones, reads
  // finished kernel times and releases memory that answered Runs held.
  void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive);
  // Kernels timed and their summed time.
  BackendStats stats();
  int64_t open_ipc_events() const { return events_.size(); }

  const kernels::DeviceInfo& device() const { return device_; }
  const ConfigCache& config_cache() const { return *cache_; }

 private:
  DeviceExecutor(kernels::DeviceInfo device, std::unique_ptr<LanePool> lanes,
                 std::unique_ptr<ConfigCache> cache)
      : device_(std::move(device)),
        cache_(std::move(cache)),
        events_(device_.ordinal),
        lanes_(std::move(lanes)) {}

  // One Run on a leased lane.
  absl::StatusOr<RunResult> ExecuteOn(Lane& lane, const RunRequest& request,
                                      ExecuteTiming& timing);
  // Orders the lane's stream after the client's wait_event; returns its
  // done_event (null without one).
  absl::StatusOr<std::shared_ptr<IpcEvent>> AttachEvents(cudaStream_t stream,
                                                         const RunRequest& request);
  // The launch, between the two timing events of `timed` when the Run is
  // timed; the config launched (Launch may narrow the pack size).
  absl::StatusOr<kernels::LaunchConfig> Launch(const RunRequest& request,
                                               const kernels::RowOpArgs& args,
                                               const kernels::LaunchConfig& config, Lane& lane,
                                               TimedLaunch* timed, ExecuteTiming& timing);
  // A Run answered once queued: the lane keeps its client memory until the
  // stream has passed the kernel (the timing stop event, else `passed`).
  absl::Status HoldUntilPassed(Lane& lane, const TimedLaunch* timed, const RunRequest& request);

  const kernels::DeviceInfo device_;
  std::unique_ptr<ConfigCache> cache_;
  IpcEventCache events_;
  // Last: destroyed first, its streams finished while the events they may
  // wait on still exist.
  std::unique_ptr<LanePool> lanes_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_DEVICE_EXECUTOR_H_
