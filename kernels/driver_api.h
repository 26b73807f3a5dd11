// CUDA driver API functions without linking libcuda: the runtime hands out
// the driver's entry points, so the kernels, the daemon and the benchmarks
// depend on the CUDA runtime alone.
#ifndef KERNTUNE_KERNELS_DRIVER_API_H_
#define KERNTUNE_KERNELS_DRIVER_API_H_

namespace kt::kernels {

// The driver function `name` (e.g. "cuLaunchKernel") as of the CUDA 12.0
// API; null when the driver does not give it.
void* DriverEntryPoint(const char* name);

template <typename Function>
Function DriverFunction(const char* name) {
  return reinterpret_cast<Function>(DriverEntryPoint(name));
}

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_DRIVER_API_H_
