// The Backend on a real CUDA device: problems with fp64 references and
// L2-defeating rotation sets (and an L2 flush for problems that fit in it),
// checked launches, event or graph timing.
// Shared by the tuner and bench/kernel_bench.
#ifndef KERNTUNE_TUNER_GPU_BACKEND_H_
#define KERNTUNE_TUNER_GPU_BACKEND_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/verify.h"
#include "tuner/backend.h"
#include "tuner/measure.h"

namespace kt::tuner {

// The scaled-masked softmax inputs a grid point asks for, as
// kernels::MakeProblem takes them.
kernels::AttentionOptions AttentionOf(const GridPoint& point);

// For a backend that shares its GPU with serving (kerntuned's idle tuner).
struct GpuBackendOptions {
  // The measuring stream at the device's lowest priority, so the block
  // scheduler starts other streams' blocks first.
  bool low_priority = false;
  // At most this many bytes of device memory (the L2 flush buffer, the
  // copy roofline's buffers, a problem and its rotation sets); 0: no
  // limit (rotation sets then take up to half of the free memory).
  // Prepare refuses a problem that does not fit with ResourceExhausted,
  // before allocating it; fewer rotation sets are made when they do not
  // all fit (the L2 flush then covers for them).
  int64_t memory_limit_bytes = 0;
};

class GpuBackend final : public Backend {
 public:
  // Makes `ordinal` the calling thread's current device and creates a stream.
  // FailedPrecondition when there is no CUDA device; ResourceExhausted when
  // the L2 flush buffer alone is over the memory limit.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create(int ordinal,
                                                            const GpuBackendOptions& options = {});
  ~GpuBackend() override;

  const kernels::DeviceInfo& device() const override { return device_; }
  db::Environment environment() const override { return environment_; }
  absl::StatusOr<double> MeasureCopyGbps() override;
  absl::StatusOr<std::unique_ptr<PointMeasurer>> Prepare(const GridPoint& point) override;

 private:
  GpuBackend(kernels::DeviceInfo device, db::Environment environment, cudaStream_t stream,
             std::unique_ptr<L2Flusher> l2_flusher, int64_t memory_limit_bytes)
      : device_(std::move(device)),
        environment_(std::move(environment)),
        stream_(stream),
        l2_flusher_(std::move(l2_flusher)),
        memory_limit_bytes_(memory_limit_bytes) {}
  // Bytes the copy roofline or a problem may take beside the L2 flush
  // buffer; unlimited without a limit.
  int64_t MemoryLeft() const;

  kernels::DeviceInfo device_;
  db::Environment environment_;
  cudaStream_t stream_;
  std::unique_ptr<L2Flusher> l2_flusher_;  // for problems that fit in L2
  const int64_t memory_limit_bytes_;       // 0: none
};

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_GPU_BACKEND_H_
