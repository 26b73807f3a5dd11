// What kerntune needs to know about a GPU, queried once per device and cached
// (never per launch), plus a described H100 for code paths without a GPU.
#ifndef KERNTUNE_KERNELS_DEVICE_INFO_H_
#define KERNTUNE_KERNELS_DEVICE_INFO_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kt::kernels {

struct DeviceInfo {
  // CUDA ordinal, or -1 for a described device with no GPU behind it (tests,
  // CPU-only planning). With -1, occupancy is estimated from the thread and
  // shared-memory limits alone instead of asking the CUDA runtime.
  int ordinal = -1;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int64_t total_memory_bytes = 0;
  int64_t l2_bytes = 0;
  int max_threads_per_block = 0;
  int max_threads_per_sm = 0;
  int max_blocks_per_sm = 0;
  // Largest dynamic shared memory one block may opt in to, and the SM total.
  int64_t max_smem_per_block_optin = 0;
  int64_t max_smem_per_sm = 0;
  int regs_per_sm = 0;
  bool has_gpu() const { return ordinal >= 0; }
};

// Properties of CUDA device `ordinal`, read from the runtime on first use and
// cached for the life of the process. Thread-safe.
absl::StatusOr<DeviceInfo> GetDeviceInfo(int ordinal);

// Number of CUDA devices visible, 0 when there is no driver or no GPU.
int CudaDeviceCount();

// H100 SXM5 80GB limits (compute capability 9.0, 132 SMs, 227 KiB opt-in
// shared memory per block, 228 KiB per SM, 2048 threads and 32 blocks per
// SM), with ordinal -1: lets CPU tests and planning run without a GPU.
DeviceInfo DescribedH100();

// A described device (ordinal -1) for a GPU SKU that may not be present:
// the per-architecture limits (shared memory, threads and blocks per SM) of
// compute capability major.minor, with the SKU's name, SM count and memory.
// Lets offline tools validate configs tuned on another machine. NotFound for
// an architecture this table does not know.
absl::StatusOr<DeviceInfo> DescribeSku(const std::string& name, int cc_major, int cc_minor,
                                       int sm_count, int64_t total_memory_bytes);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_DEVICE_INFO_H_
