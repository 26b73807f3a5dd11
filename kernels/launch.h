// Public entry point of the kernel library: launch one row-wise op with an
// explicit LaunchConfig on a CUDA stream. Framework-free: pointers, sizes,
// config, stream in; absl::Status out.
#ifndef KERNTUNE_KERNELS_LAUNCH_H_
#define KERNTUNE_KERNELS_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"

namespace kt::kernels {

// Device pointers of one launch. x and y are (rows, cols) row-major and
// contiguous in the storage dtype; y may equal x (in place) but must not
// otherwise overlap it.
struct RowOpArgs {
  const void* x = nullptr;
  void* y = nullptr;
  // LayerNorm only; each may be null. gamma/beta: cols elements of the
  // storage dtype. mean/inv_std: rows floats.
  const void* gamma = nullptr;
  const void* beta = nullptr;
  float* mean = nullptr;
  float* inv_std = nullptr;
  double epsilon = 1e-5;
};

// Validates `config` for the problem (ValidateConfig), narrows the pack size
// if a pointer is not aligned to it, and launches on `stream` (which must
// belong to `device`'s ordinal, the current device). Returns the config that
// was actually launched. Launch errors (cudaPeekAtLastError) are returned,
// never swallowed. An invalid config is never launched.
absl::StatusOr<LaunchConfig> Launch(Op op, DType dtype, Shape shape,
                                    const RowOpArgs& args,
                                    const LaunchConfig& config,
                                    const DeviceInfo& device,
                                    cudaStream_t stream);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_LAUNCH_H_
