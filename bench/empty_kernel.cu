// An empty kernel for kt_launch_overhead_bench: the CUDA launch call and the
// launch-to-completion latency with no kernel work and no checks of ours,
// the floor under kernels::Launch and under a small Run's GPU wait.
#include <cuda_runtime_api.h>

#include "kernels/dispatch_launch.h"

namespace {
__global__ void EmptyKernel() {}
}  // namespace

// As kernels::Launch launches (the driver's cuLaunchKernel).
cudaError_t LaunchEmptyKernel(int device, cudaStream_t stream) {
  return kt::kernels::internal::LaunchKernel(device, reinterpret_cast<const void*>(&EmptyKernel),
                                             dim3(1), dim3(32), 0, stream, nullptr);
}

// The runtime's launch, for comparison.
cudaError_t LaunchEmptyKernelWithRuntime(cudaStream_t stream) {
  EmptyKernel<<<1, 32, 0, stream>>>();
  return cudaPeekAtLastError();
}
