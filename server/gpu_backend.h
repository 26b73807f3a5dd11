// The GPU backend: inline tensors copied to the device, the tuned kernel
// launched with kernels::Launch, results copied back. One CUDA device (the
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

 private:
  // A stream with its timing events.
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
  };
  class LaneLease;

  GpuBackend(kernels::DeviceInfo device, std::unique_ptr<ConfigCache> cache)
      : device_(std::move(device)), cache_(std::move(cache)) {}
  absl::StatusOr<RunResult> ExecuteOn(const Lane& lane, const RunRequest& request);

  const kernels::DeviceInfo device_;
  std::unique_ptr<ConfigCache> cache_;
  std::vector<Lane> lanes_;  // fixed after Create
  absl::Mutex mu_;
  std::vector<int> free_lanes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_GPU_BACKEND_H_
