// Occupancy of each compiled kernel instance, asked of the CUDA runtime once
// per (device, kernel, block size, shared memory) and then served from memory,
// so launches never pay for the query.
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "kernels/dispatch.cuh"

namespace kt::kernels::internal {
namespace {

struct OccupancyCache {
  std::mutex mu;
  std::map<std::tuple<int, const void*, int, size_t>, int> active_blocks;
  std::set<std::pair<int, const void*>> smem_limit_raised;
};

// One cache per device (slots by ordinal; the key still names the device,
// so two devices sharing a slot past kSlots stay correct): launches on
// different GPUs take no common lock.
constexpr int kSlots = 16;

OccupancyCache& Cache(int device) {
  static auto* caches = new OccupancyCache[kSlots];  // never destroyed: used at exit
  return caches[static_cast<unsigned>(device) % kSlots];
}

}  // namespace

cudaError_t CachedActiveBlocks(int device, const void* kernel, int block_size,
                               size_t smem_bytes,
                               int64_t max_smem_per_block_optin,
                               int* active_blocks) {
  OccupancyCache& cache = Cache(device);
  const auto key = std::make_tuple(device, kernel, block_size, smem_bytes);
  std::lock_guard<std::mutex> lock(cache.mu);
  if (auto it = cache.active_blocks.find(key); it != cache.active_blocks.end()) {
    *active_blocks = it->second;
    return cudaSuccess;
  }
  constexpr size_t kDefaultDynamicSmemLimit = 48 * 1024;
  if (smem_bytes > kDefaultDynamicSmemLimit &&
      cache.smem_limit_raised.insert({device, kernel}).second) {
    // Opt in to the device's full per-block shared memory, less what the
    // kernel declares statically (the block reduction storage).
    cudaFuncAttributes attributes;
    cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
    if (err != cudaSuccess) return err;
    const int64_t dynamic_limit =
        max_smem_per_block_optin - static_cast<int64_t>(attributes.sharedSizeBytes);
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(dynamic_limit));
    if (err != cudaSuccess) return err;
  }
  int blocks = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, kernel, block_size, smem_bytes);
  if (err != cudaSuccess) {
    // Too much shared memory is "cannot run here", not a failure.
    if (err != cudaErrorInvalidValue) return err;
    cudaGetLastError();
    blocks = 0;
  }
  cache.active_blocks.emplace(key, blocks);
  *active_blocks = blocks;
  return cudaSuccess;
}

}  // namespace kt::kernels::internal
