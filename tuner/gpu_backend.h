// The Backend on a real CUDA device: problems with fp64 references and
// L2-defeating rotation sets (and an L2 flush for problems that fit in it),
// checked launches, event or graph timing.
// Shared by the tuner and bench/kernel_bench.
#ifndef KERNTUNE_TUNER_GPU_BACKEND_H_
#define KERNTUNE_TUNER_GPU_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/verify.h"
#include "tuner/backend.h"
#include "tuner/measure.h"

namespace kt::tuner {

// The scaled-masked softmax inputs a grid point asks for, as
// kernels::MakeProblem takes them.
kernels::AttentionOptions AttentionOf(const GridPoint& point);

class GpuBackend final : public Backend {
 public:
  // Makes `ordinal` the calling thread's current device and creates a stream.
  // FailedPrecondition when there is no CUDA device.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(int ordinal);
  ~GpuBackend() override;

  const kernels::DeviceInfo& device() const override { return device_; }
  db::Environment environment() const override { return environment_; }
  absl::StatusOr<double> MeasureCopyGbps() override;
  absl::StatusOr<std::unique_ptr<PointMeasurer>> Prepare(const GridPoint& point) override;

 private:
  GpuBackend(kernels::DeviceInfo device, db::Environment environment, cudaStream_t stream,
             std::unique_ptr<L2Flusher> l2_flusher)
      : device_(std::move(device)),
        environment_(std::move(environment)),
        stream_(stream),
        l2_flusher_(std::move(l2_flusher)) {}

  kernels::DeviceInfo device_;
  db::Environment environment_;
  cudaStream_t stream_;
  std::unique_ptr<L2Flusher> l2_flusher_;  // for problems that fit in L2
};

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_GPU_BACKEND_H_
