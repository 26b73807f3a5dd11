// Device properties, read once per device (device_info.h).
#include "kernels/device_info.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::kernels {
namespace {

absl::StatusOr<DeviceInfo> QueryDevice(int ordinal) {
  cudaDeviceProp prop;
  const cudaError_t err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("cudaGetDeviceProperties(",
                                               ordinal, "): ",
                                               cudaGetErrorString(err)));
  }
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.l2_bytes = prop.l2CacheSize;
  info.max_threads_per_block = prop.maxThreadsPerBlock;
  info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
  info.max_blocks_per_sm = prop.maxBlocksPerMultiProcessor;
  info.max_smem_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info.max_smem_per_sm = static_cast<int64_t>(prop.sharedMemPerMultiprocessor);
  info.regs_per_sm = prop.regsPerMultiprocessor;
  return info;
}

}  // namespace

absl::StatusOr<DeviceInfo> GetDeviceInfo(int ordinal) {
  static std::mutex mu;
  static auto* cache = new std::map<int, DeviceInfo>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(ordinal); it != cache->end()) return it->second;
  if (ordinal < 0 || ordinal >= CudaDeviceCount()) {
    return absl::NotFoundError(absl::StrCat("CUDA device ", ordinal,
                                            " does not exist (", CudaDeviceCount(),
                                            " visible)"));
  }
  absl::StatusOr<DeviceInfo> info = QueryDevice(ordinal);
  if (info.ok()) cache->emplace(ordinal, *info);
  return info;
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: not an error to keep
    return 0;
  }
  return count;
}

DeviceInfo DescribedH100() {
  DeviceInfo info;
  info.ordinal = -1;
  info.name = "NVIDIA H100 80GB HBM3 (described)";
  info.cc_major = 9;
  info.cc_minor = 0;
  info.sm_count = 132;
  info.total_memory_bytes = 85520809984;  // 79.6 GiB as the driver reports
  info.l2_bytes = 50 * 1024 * 1024;
  info.max_threads_per_block = 1024;
  info.max_threads_per_sm = 2048;
  info.max_blocks_per_sm = 32;
  info.max_smem_per_block_optin = 227 * 1024;
  info.max_smem_per_sm = 228 * 1024;
  info.regs_per_sm = 65536;
  return info;
}

absl::StatusOr<DeviceInfo> DescribeSku(const std::string& name, int cc_major, int cc_minor,
                                       int sm_count, int64_t total_memory_bytes) {
  // Per-architecture limits from the CUDA C++ Programming Guide's table of
  // compute capabilities (shared memory in KiB: opt-in per block, per SM).
  struct ArchLimits {
    int major, minor;
    int smem_block_kib, smem_sm_kib, threads_per_sm, blocks_per_sm;
  };
  constexpr ArchLimits kArchs[] = {
      {7, 0, 96, 96, 2048, 32},   {7, 5, 64, 64, 1024, 16},   {8, 0, 163, 164, 2048, 32},
      {8, 6, 99, 100, 1536, 16},  {8, 7, 163, 164, 2048, 16}, {8, 9, 99, 100, 1536, 24},
      {9, 0, 227, 228, 2048, 32}, {10, 0, 227, 228, 2048, 32}, {12, 0, 99, 100, 1536, 32},
  };
  for (const ArchLimits& a : kArchs) {
    if (a.major != cc_major || a.minor != cc_minor) continue;
    if (sm_count < 1) {
      return absl::InvalidArgumentError(absl::StrCat("sm_count=", sm_count, " must be >= 1"));
    }
    DeviceInfo info;
    info.ordinal = -1;
    info.name = name;
    info.cc_major = cc_major;
    info.cc_minor = cc_minor;
    info.sm_count = sm_count;
    info.total_memory_bytes = total_memory_bytes;
    info.max_threads_per_block = 1024;
    info.max_threads_per_sm = a.threads_per_sm;
    info.max_blocks_per_sm = a.blocks_per_sm;
    info.max_smem_per_block_optin = int64_t{a.smem_block_kib} * 1024;
    info.max_smem_per_sm = int64_t{a.smem_sm_kib} * 1024;
    info.regs_per_sm = 65536;
    return info;
  }
  return absl::NotFoundError(absl::StrCat("compute capability ", cc_major, ".", cc_minor,
                                          " of \"", name, "\" is not in kerntune's table"));
}

}  // namespace kt::kernels
