// Public entry point of the kernel library: launch one row-wise op with an
// explicit LaunchConfig on a CUDA stream. Framework-free: pointers, sizes,
// config, stream in; absl::Status out.
#ifndef KERNTUNE_KERNELS_LAUNCH_H_
#define KERNTUNE_KERNELS_LAUNCH_H_

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::kernels {

// Validates the operands (op_args.h: which ones the op takes, the mask's
// query length, epsilon; each aligned to its element) and `config` for the
// problem (ValidateConfig), adapts the config to the operands' alignment
// (ConfigForAlignment: a narrower pack, or the heuristic), and launches on
// `stream` (which must belong to `device`'s ordinal, the current device).
// Returns the config that was actually launched. Launch errors (cudaPeekAtLastError) are returned,
// never swallowed. An invalid config is never launched.
absl::StatusOr<LaunchConfig> Launch(Op op, DType dtype, Shape shape,
                                    const RowOpArgs& args,
                                    const LaunchConfig& config,
                                    const DeviceInfo& device,
                                    cudaStream_t stream);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_LAUNCH_H_
