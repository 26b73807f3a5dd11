// The one launch call of the row kernel families (dispatch.cuh).
#ifndef KERNTUNE_KERNELS_DISPATCH_LAUNCH_H_
#define KERNTUNE_KERNELS_DISPATCH_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kt::kernels::internal {

// Launches `kernel` (a __global__ function's address) on the current device
// `device` with `params` as cudaLaunchKernel takes them. It goes through
// the driver's cuLaunchKernel with the kernel's function handle, looked up
// once per thread: on the lent H100 hosts that launch call took 0.3-0.4 us
// less than the runtime's with the row kernels' parameter size, and 0.03-0.66
// us less for an empty kernel, by host (bench/results/2026-11-27-h100-queue-completion-word).
// Without the driver entry point, or when it refuses, the runtime launches
// (and names the error).
cudaError_t LaunchKernel(int device, const void* kernel, dim3 grid, dim3 block,
                         size_t smem_bytes, cudaStream_t stream, void** params);

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_DISPATCH_LAUNCH_H_
