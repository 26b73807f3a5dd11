// The GPU backend: the tuned kernel launched with kernels::Launch on client
// device memory opened by CUDA IPC (in place, no copies), or on staged
// copies of inline and shared-memory tensors. One CUDA device (the
// runtime's primary context, created at start and kept), a small pool of
// streams; every request sets its device on the thread that executes it.
//
// Per Run on the GPU path: one lane lease, two timing-event records around
// the launch (when asked), one cudaStreamSynchronize unless done_event
// answers at once, and one cudaEventElapsedTime (when timed). Nothing is
// created or allocated per Run for device tensors; kernel times of Runs
// answered early are read later from a ring of event pairs per lane.
//
// Waiting: the device's scheduling flag is cudaDeviceScheduleYield, so a
// waiting request thread polls the GPU and gives its core up between polls.
// Blocking sync wakes tens of microseconds late, which a 10 us kernel cannot
// afford; spinning measured no better than yield in small-Run latency and
// served fewer Runs/s on an H100 (bench/results/2026-11-21-h200-daemon-latency).
#ifndef KERNTUNE_SERVER_GPU_BACKEND_H_
#define KERNTUNE_SERVER_GPU_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/backend.h"
#include "server/config_cache.h"
#include "server/ipc_cache.h"

namespace kt::server {

struct GpuBackendOptions {
  int streams = 4;
};

class GpuBackend final : public Backend {
 public:
  // Sets the device's scheduling flag (yield), creates the context of
  // device `ordinal` and `options.streams` streams on it.
  // FailedPrecondition when the device cannot be used.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(int ordinal,
                                                            const GpuBackendOptions& options,
                                                            std::unique_ptr<ConfigCache> cache);
  ~GpuBackend() override;

  std::string name() const override { return "gpu"; }
  absl::StatusOr<RunResult> Execute(const RunRequest& request) override;
  const ConfigCache* config_cache() const override { return cache_.get(); }
  // Every visible CUDA device (requests run on the first).
  std::vector<BackendDevice> devices() const override;
  BackendStats stats() override;

  bool supports_cuda_ipc() const override { return true; }
  absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) override;
  void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) override;
  int64_t open_ipc_events() const override { return static_cast<int64_t>(events_.size()); }

 private:
  // A start/stop pair of timing events around one launch; `pending` until
  // its time has been read.
  struct TimedLaunch {
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    bool pending = false;
  };
  // A stream with a ring of timing events, and the client memory that Runs
  // answered before finishing (done_event) still use: released once the
  // stream has passed the newest launch.
  struct Lane {
    cudaStream_t stream = nullptr;
    std::vector<TimedLaunch> timing;  // kTimingRing pairs, fixed after Create
    size_t next = 0;                  // the pair the next launch uses
    int pending = 0;                  // pairs not yet read
    // Recorded after an untimed launch answered early (no timing pair).
    cudaEvent_t passed = nullptr;
    // After the newest launch answered early: its stop event or `passed`.
    cudaEvent_t last_stop = nullptr;
    // kernels::kMaxWorkspaceBytes of scratch for configs that need it
    // (split_two_pass); only this lane's stream uses it.
    void* workspace = nullptr;
    std::vector<std::shared_ptr<const ClientMemory>> in_flight;
  };
  class LaneLease;
  class IpcEvent;

  GpuBackend(kernels::DeviceInfo device, const GpuBackendOptions& options,
             std::unique_ptr<ConfigCache> cache)
      : device_(std::move(device)), options_(options), cache_(std::move(cache)) {}
  absl::StatusOr<RunResult> ExecuteOn(Lane& lane, const RunRequest& request,
                                      ExecuteTiming& timing);
  absl::StatusOr<std::shared_ptr<IpcEvent>> OpenEvent(const std::string& handle,
                                                      const RunRequest& request);
  // Reads the times of the lane's finished launches into stats_; returns the
  // time of `want` (a pair of this lane) when it was among them, else -1.
  // Needs the lane (a lease, or mu_ for a free lane).
  double ReadFinishedTimes(Lane& lane, const TimedLaunch* want = nullptr);
  // Drops the memory of answered Runs once the lane's stream has passed
  // them. Needs the lane.
  static void ReleaseFinished(Lane& lane);

  const kernels::DeviceInfo device_;
  const GpuBackendOptions options_;
  std::unique_ptr<ConfigCache> cache_;
  std::vector<Lane> lanes_;  // fixed after Create; a lane is used by its lease holder only
  absl::Mutex mu_;
  std::vector<int> free_lanes_ ABSL_GUARDED_BY(mu_);
  IpcCache<IpcEvent> events_;
  absl::Mutex stats_mu_;
  BackendStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_GPU_BACKEND_H_
