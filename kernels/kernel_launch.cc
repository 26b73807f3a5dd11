// The driver API through the runtime (driver_api.h), and the row families'
// launches through it (dispatch_launch.h).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "kernels/dispatch_launch.h"
#include "kernels/driver_api.h"

namespace kt::kernels {

void* DriverEntryPoint(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return function;
}

}  // namespace kt::kernels

namespace kt::kernels::internal {
namespace {

using CuLaunchKernel = CUresult(CUDAAPI*)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                           unsigned, unsigned, unsigned, CUstream, void**, void**);

// The thread's function handles by (kernel, device): a direct-mapped cache,
// where a collision only costs the lookup again.
struct Handle {
  const void* kernel = nullptr;
  int device = -1;
  cudaFunction_t function = nullptr;
};
constexpr size_t kHandleSlots = 64;

Handle& HandleSlot(const void* kernel, int device) {
  thread_local std::array<Handle, kHandleSlots> handles;
  const auto key = (reinterpret_cast<uintptr_t>(kernel) >> 4) ^ static_cast<uintptr_t>(device);
  return handles[key % kHandleSlots];
}

}  // namespace

cudaError_t LaunchKernel(int device, const void* kernel, dim3 grid, dim3 block,
                         size_t smem_bytes, cudaStream_t stream, void** params) {
  static const auto launch = DriverFunction<CuLaunchKernel>("cuLaunchKernel");
  if (launch != nullptr) {
    Handle& handle = HandleSlot(kernel, device);
    if (handle.kernel != kernel || handle.device != device) {
      cudaFunction_t function = nullptr;
      if (cudaGetFuncBySymbol(&function, kernel) == cudaSuccess) {
        handle = Handle{kernel, device, function};
      } else {
        cudaGetLastError();
        handle = Handle{};
      }
    }
    if (handle.function != nullptr &&
        launch(reinterpret_cast<CUfunction>(handle.function), grid.x, grid.y, grid.z, block.x,
               block.y, block.z, static_cast<unsigned>(smem_bytes),
               reinterpret_cast<CUstream>(stream), params, nullptr) == CUDA_SUCCESS) {
      return cudaSuccess;
    }
    // Nothing was launched. The runtime tries again and names the error in
    // its own terms; a stale handle (a reset device) is looked up anew.
    handle = Handle{};
  }
  return cudaLaunchKernel(kernel, grid, block, params, smem_bytes, stream);
}

}  // namespace kt::kernels::internal
