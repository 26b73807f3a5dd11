// How the daemon's request threads wait for the GPU. The CUDA runtime's
// default (cudaDeviceScheduleAuto) spins while the process has fewer
// contexts than cores; blocking sync sleeps on an interrupt and wakes tens of
// microseconds late, which a 10 us kernel cannot afford.
#ifndef KERNTUNE_SERVER_GPU_WAIT_H_
#define KERNTUNE_SERVER_GPU_WAIT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::server {

enum class GpuWait {
  // cudaDeviceScheduleSpin: the waiting thread spins; lowest wake-up
  // latency, a core per waiting request.
  kSpin,
  // cudaDeviceScheduleYield: spins but yields the core between polls.
  kYield,
  // Polls (yielding) for up to a spin budget, then blocks
  // (cudaDeviceScheduleBlockingSync): short kernels are caught by the poll,
  // long ones do not hold a core.
  kHybrid,
  // cudaDeviceScheduleBlockingSync: sleeps until the GPU interrupts.
  kBlock,
};

// "spin", "yield", "hybrid", "block"; InvalidArgument names the flag.
absl::StatusOr<GpuWait> ParseGpuWait(absl::string_view name);
absl::string_view GpuWaitName(GpuWait wait);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_GPU_WAIT_H_
