// Everything kerntuned keeps per GPU, and the running of a Run there: the
// device, its lanes (lane_pool.h), the client events it has opened
// (ipc_events.h) and the config cache of its SKU. Execute does, in order:
// the config lookup, the client's wait_event, the staging of operands
// (operand_staging.h), the launch between timing events, the copies back
// and done_event, then one cudaStreamSynchronize unless done_event answers
// at once. OpenRunStream gives the submission queues the same steps without
// the wait (run_stream.h). Nothing is created or allocated per Run for
// device tensors.
//
// The GPU backend (gpu_backend.h) owns one executor per GPU it serves and
// routes each Run to one. An executor shares nothing with another's: its
// context, lanes, events and config cache are its own. A sticky CUDA error
// (the context is lost) marks it failed; it then refuses everything.
#ifndef KERNTUNE_SERVER_DEVICE_EXECUTOR_H_
#define KERNTUNE_SERVER_DEVICE_EXECUTOR_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/device_info.h"
#include "server/backend.h"
#include "server/client_memory.h"
#include "server/config_cache.h"
#include "server/device.h"
#include "server/ipc_events.h"
#include "server/lane_pool.h"
#include "server/operand_staging.h"
#include "server/run_request.h"
#include "server/run_stream.h"

namespace kt::server {

class DeviceExecutor final : public Device {
 public:
  // Sets device `ordinal`'s scheduling flag (yield: gpu_backend.h says
  // why), creates its context, `lanes` lanes and, with `make_cache`, the
  // config cache of its SKU. FailedPrecondition when the device cannot be
  // used.
  static absl::StatusOr<std::unique_ptr<DeviceExecutor>> Create(
      int ordinal, int lanes, const ConfigCacheFactory& make_cache);
  ~DeviceExecutor() override;
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  const kernels::DeviceInfo& info() const override { return device_; }
  const kernels::DeviceIdentity& identity() const override { return identity_; }
  const ConfigCache& config_cache() const override { return *cache_; }
  // Each Run leases a lane.
  absl::StatusOr<RunResult> Execute(const RunRequest& request) override;
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle) override;
  void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) override;
  BackendStats stats() override;
  int64_t open_ipc_events() const override { return events_.size(); }
  std::string failure() const override;
  // A stream on a lane of its own; null when the device failed or the lane
  // could not be made.
  std::unique_ptr<RunStream> OpenRunStream(RunPriority priority) override;

 private:
  class Stream;
  // A Run launched on a lane's stream, not yet finished.
  struct Started {
    RunResult result;
    std::unique_ptr<OperandStaging> staging;
    TimedLaunch* timed = nullptr;
    bool answer_early = false;  // done_event and nothing to copy back
  };

  DeviceExecutor(kernels::DeviceInfo device, kernels::DeviceIdentity identity,
                 std::unique_ptr<LanePool> lanes, std::unique_ptr<ConfigCache> cache)
      : device_(std::move(device)),
        identity_(std::move(identity)),
        cache_(std::move(cache)),
        events_(device_.ordinal),
        lanes_(std::move(lanes)) {}

  // One Run on a leased lane: Start, then the wait for the GPU.
  absl::StatusOr<RunResult> ExecuteOn(Lane& lane, const RunRequest& request,
                                      ExecuteTiming& timing);
  // Everything before the GPU's end: the config lookup, the client's
  // events, the staging of operands, the launch, the copies back.
  absl::StatusOr<Started> Start(Lane& lane, const RunRequest& request, ExecuteTiming& timing);
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

  // After a CUDA error: when it is sticky (the context is lost), marks the
  // device failed, logs it once and returns the Run's error as Unavailable;
  // otherwise returns `status`.
  absl::Status CheckSticky(cudaError_t state, absl::Status status);

  const kernels::DeviceInfo device_;
  const kernels::DeviceIdentity identity_;
  std::unique_ptr<ConfigCache> cache_;
  // Set once, never cleared; the flag spares the Run path the lock.
  std::atomic<bool> failed_{false};
  mutable absl::Mutex failure_mu_;
  std::string failure_ ABSL_GUARDED_BY(failure_mu_);
  IpcEventCache events_;
  // Last: destroyed first, its streams finished while the events they may
  // wait on still exist.
  std::unique_ptr<LanePool> lanes_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_DEVICE_EXECUTOR_H_
