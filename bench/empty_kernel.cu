// An empty kernel for kt_launch_overhead_bench: the CUDA launch call and the
// launch-to-completion latency with no kernel work and no checks of ours,
// the floor under kernels::Launch and under a small Run's GPU wait.
#include <cuda_runtime_api.h>

namespace {
__global__ void EmptyKernel() {}
}  // namespace

cudaError_t LaunchEmptyKernel(cudaStream_t stream) {
  EmptyKernel<<<1, 32, 0, stream>>>();
  return cudaPeekAtLastError();
}
