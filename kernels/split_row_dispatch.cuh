// The split-row family (kSplitRow, kSplitGrid, kSplitRegs, kSplitTwoPass):
// runtime knobs -> SplitRowKernel / SplitGridKernel / SplitRegsKernel /
// SplitPartialKernel + SplitFinishKernel instances, their launches (a cluster dimension, a
// cooperative launch, or two launches, the second a programmatic dependent
// one) and the occupancy of each. Included only by the per-op/dtype
// translation units in kernels/instances/.
#ifndef KERNTUNE_KERNELS_SPLIT_ROW_DISPATCH_CUH_
#define KERNTUNE_KERNELS_SPLIT_ROW_DISPATCH_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/config_rules.h"  // SplitRowCacheOf
#include "kernels/dispatch.cuh"      // CachedActiveBlocks, DispatchInt
#include "kernels/kernel_request.h"
#include "kernels/op_functors.cuh"
#include "kernels/split_row_kernels.cuh"

namespace kt::kernels::internal {

// Portable clusters go up to 8 blocks; 16 needs a per-kernel opt-in.
constexpr int kMaxPortableClusterSize = 8;

// A launch of `blocks` blocks of `block_size` threads in clusters of
// `split`; `attribute` is the storage the returned config points to.
inline cudaLaunchConfig_t ClusterLaunchConfig(unsigned blocks, int block_size, size_t smem_bytes,
                                              int split, cudaStream_t stream,
                                              cudaLaunchAttribute& attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(static_cast<unsigned>(block_size));
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(split);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

// Resident blocks per SM of a SplitRowKernel instance launched in clusters
// of `split`: the per-block occupancy (CachedActiveBlocks, which also raises
// the dynamic shared-memory limit), or 0 when not even one cluster of that
// size fits on the device (cudaOccupancyMaxActiveClusters, which knows that
// a cluster must sit in one GPC). Opts the kernel in to non-portable cluster
// sizes once per device. Cached per (device, kernel, block, smem, split).
// `active_clusters` (optional): how many such clusters the whole device
// holds at once, the size of a persistent grid.
inline cudaError_t CachedSplitRowOccupancy(const KernelRequest& req, const void* kernel,
                                           int block_size, size_t smem_bytes, int split,
                                           int* active_blocks, int* active_clusters = nullptr) {
  int blocks = 0;
  cudaError_t err = CachedActiveBlocks(req.device, kernel, block_size, smem_bytes,
                                       req.max_smem_per_block_optin, &blocks);
  if (err != cudaSuccess) return err;
  if (active_clusters != nullptr) *active_clusters = 0;
  if (blocks == 0) {
    *active_blocks = 0;
    return cudaSuccess;
  }
  struct Cache {
    std::mutex mu;
    std::map<std::tuple<int, const void*, int, size_t, int>, int> clusters;
    std::set<std::pair<int, const void*>> non_portable_allowed;
  };
  static auto* cache = new Cache();  // never destroyed: used at exit
  const auto key = std::make_tuple(req.device, kernel, block_size, smem_bytes, split);
  std::lock_guard<std::mutex> lock(cache->mu);
  auto it = cache->clusters.find(key);
  if (it == cache->clusters.end()) {
    if (split > kMaxPortableClusterSize &&
        cache->non_portable_allowed.insert({req.device, kernel}).second) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (err != cudaSuccess) {
        cache->non_portable_allowed.erase({req.device, kernel});
        return err;
      }
    }
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = ClusterLaunchConfig(
        static_cast<unsigned>(split), block_size, smem_bytes, split, nullptr, attribute);
    int clusters = 0;
    err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (err != cudaSuccess) {
      // A cluster the device cannot hold is "cannot run here", not a failure.
      if (err != cudaErrorInvalidValue && err != cudaErrorInvalidClusterSize) return err;
      cudaGetLastError();
      clusters = 0;
    }
    it = cache->clusters.emplace(key, clusters).first;
  }
  *active_blocks = it->second > 0 ? blocks : 0;
  if (active_clusters != nullptr) *active_clusters = it->second;
  return cudaSuccess;
}

// The split kernels' per-launch scalars: rows of num_packs packs sliced
// over req.config.split blocks, each caching `cache_buffers` slices.
inline split_row::Params SplitParams(const KernelRequest& req, int64_t num_packs,
                                     int cache_buffers = 1) {
  split_row::Params params;
  static_cast<RowParams&>(params) = RowParamsOf(req);
  params.slicing = split_row::Slicing::Of(num_packs, req.config.split);
  params.cache_buffers = cache_buffers;
  return params;
}

// Launches (or sizes) a cluster-launched SplitRowKernel instance: one
// cluster of c.split blocks per row, or, when `persistent` (the bulk copy,
// which overlaps a block's rows), as many clusters as the device holds at
// once, each looping over rows.
template <class Kernel, class Load, class Store>
cudaError_t RunSplitRowClusters(const KernelRequest& req, KernelAction action,
                                cudaStream_t stream, int* active_blocks, Kernel kernel,
                                int block_size, size_t smem, bool persistent, const Load& load,
                                const Store& store, const split_row::Params& params) {
  const int split = req.config.split;
  int active = 0;
  int device_clusters = 0;
  cudaError_t err = CachedSplitRowOccupancy(req, reinterpret_cast<const void*>(kernel),
                                            block_size, smem, split, &active, &device_clusters);
  if (err != cudaSuccess) return err;
  if (action == KernelAction::kQueryOccupancy) {
    *active_blocks = active;
    return cudaSuccess;
  }
  if (active == 0) return cudaErrorInvalidConfiguration;
  // Rows beyond the grid loop in the kernel.
  const int64_t clusters = std::min<int64_t>(
      req.shape.rows, persistent ? std::max(device_clusters, 1) : INT_MAX / split);
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = ClusterLaunchConfig(
      static_cast<unsigned>(clusters * split), block_size, smem, split, stream, attribute);
  err = cudaLaunchKernelEx(&config, kernel, load, store, params);
  return err == cudaSuccess ? cudaPeekAtLastError() : err;
}

// Launches (or sizes) a SplitGridKernel instance: rows * c.split blocks, all
// resident at once (a cooperative launch, whose grid barriers need that).
// The occupancy reported is 0 when the grid cannot be resident, so the
// rules refuse the config instead of the launch failing.
template <class Kernel, class Load, class Store>
cudaError_t RunSplitRowGrid(const KernelRequest& req, KernelAction action, cudaStream_t stream,
                            int* active_blocks, Kernel kernel, int block_size, size_t smem,
                            const Load& load, const Store& store,
                            const split_row::Params& params) {
  int active = 0;
  cudaError_t err = CachedActiveBlocks(req.device, reinterpret_cast<const void*>(kernel),
                                       block_size, smem, req.max_smem_per_block_optin, &active);
  if (err != cudaSuccess) return err;
  const int64_t blocks = req.shape.rows * req.config.split;
  const bool resident = blocks <= static_cast<int64_t>(active) * req.sm_count;
  if (action == KernelAction::kQueryOccupancy) {
    *active_blocks = resident ? active : 0;
    return cudaSuccess;
  }
  if (!resident) return cudaErrorCooperativeLaunchTooLarge;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(block_size));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  split_row::GridSlots slots;
  slots.y = req.args.y;
  slots.split = req.config.split;
  err = cudaLaunchKernelEx(&config, kernel, load, store, params, slots);
  return err == cudaSuccess ? cudaPeekAtLastError() : err;
}

template <Op op, DType dtype>
cudaError_t RunSplitRowOp(const KernelRequest& req, KernelAction action, cudaStream_t stream,
                          int* active_blocks) {
  using T = typename StorageOf<dtype>::type;
  const auto load = MakeLoad<op, T>(req);
  const auto store = MakeStore<op, T>(req);
  using Load = decltype(load);
  using Store = decltype(store);
  // The rules let a cluster's pack leave a remainder of the row exactly
  // where its kernel can move one (SplitRowKernel's row edges).
  static_assert(
      PackMustDivideLength(op, Impl::kSplitRow) != kTakesAnyCols<Load, Store>,
      "PackMustDivideLength and the functors' layouts disagree");
  const LaunchConfig& c = req.config;
  const bool clusters = c.impl == Impl::kSplitRow;
  // Must list exactly kSplitRowSplits (split_row_config.cc); the grid
  // variant takes any split the rules allow. One row per cluster or per
  // `split` blocks, so no grid_waves policy.
  if ((clusters && c.split != 2 && c.split != 4 && c.split != 8 && c.split != 16) ||
      (!clusters && (c.impl != Impl::kSplitGrid || c.split < 2)) || c.grid_waves != 0) {
    return cudaErrorInvalidConfiguration;
  }
  cudaError_t result = cudaErrorInvalidConfiguration;

  // The host's and the kernel's cache layouts must agree (SplitRowCacheOf,
  // SplitRowKernel): the same element type, and the bulk copy for the same
  // (op, pack).
  static_assert(
      sizeof(typename Load::cache_type) == (op == Op::kScaledMaskedSoftmax ? 4 : sizeof(T)),
      "SplitRowCacheOf's cache element size");
  static_assert(ReadsRowUnchanged(op) == kLoadsRowUnchanged<Load>,
                "ReadsRowUnchanged and the load functor disagree");
  DispatchInt<1, 2, 4, 8>(c.pack_size, [&](auto pack_c) {
    constexpr int kPack = decltype(pack_c)::value;
    static_assert(SplitRowBulkCopies(op, kPack * sizeof(T)) ==
                  split_row::kBulkCopies<Load, kPack>);
    if constexpr (kPack * sizeof(T) <= 16) {
      // Must list exactly kBlockImplBlockSizes (launch_config.h).
      DispatchInt<128, 256, 512, 1024>(c.block_size, [&](auto block_c) {
        constexpr int kBlock = decltype(block_c)::value;
        const int64_t num_packs = req.shape.cols / kPack;
        if (num_packs < c.split) return;  // a block without a slice: refused by the rules
        // The rules' sizes, which ValidateConfig checked.
        const SplitRowCache cache = SplitRowCacheOf(op, dtype, req.shape, c);
        const auto smem = static_cast<size_t>(cache.bytes());
        const split_row::Params params = SplitParams(req, num_packs, cache.buffers);
        if (clusters) {
          result = RunSplitRowClusters(req, action, stream, active_blocks,
                                       &SplitRowKernel<op, Load, Store, kPack, kBlock>, kBlock,
                                       smem, cache.bulk_copy, load, store, params);
        } else {
          result = RunSplitRowGrid(req, action, stream, active_blocks,
                                   &SplitGridKernel<op, Load, Store, kPack, kBlock>, kBlock, smem,
                                   load, store, params);
        }
      });
    }
  });
  return result;
}

// kSplitRegs (softmax and log-softmax only): a persistent grid of clusters
// of SplitRegsKernel, its 16-byte pack and block size chosen from the
// config; each block's slice takes the kernel instance's register capacity
// (SplitRegsPacksPerThread), which the rules checked.
template <Op op, DType dtype>
cudaError_t RunSplitRegsOp(const KernelRequest& req, KernelAction action, cudaStream_t stream,
                           int* active_blocks) {
  static_assert(op == Op::kSoftmax || op == Op::kLogSoftmax, "instances for softmax only");
  using T = typename StorageOf<dtype>::type;
  // Paired 16-bit conversions: half the conversion instructions.
  const auto load = MakeLoad<op, T, /*paired=*/true>(req);
  const auto store = MakeStore<op, T, /*paired=*/true>(req);
  using Load = decltype(load);
  using Store = decltype(store);
  const LaunchConfig& c = req.config;
  constexpr int kPack = static_cast<int>(16 / sizeof(T));
  if (c.impl != Impl::kSplitRegs || c.pack_size != kPack || c.grid_waves != 0 ||
      c.split < 2 || c.split > split_row::kMaxClusterBlocks) {
    return cudaErrorInvalidConfiguration;
  }
  cudaError_t result = cudaErrorInvalidConfiguration;
  // Must list exactly kSplitRegsBlockSizes (launch_config.h).
  DispatchInt<512, 1024>(c.block_size, [&](auto block_c) {
    constexpr int kBlock = decltype(block_c)::value;
    constexpr int kPacks = SplitRegsPacksPerThread(kBlock, kPack);
    const int64_t num_packs = req.shape.cols / kPack;
    // Refused by the rules: a block without a slice, or one past its registers.
    if (num_packs < c.split ||
        (num_packs + c.split - 1) / c.split > static_cast<int64_t>(kPacks) * kBlock) {
      return;
    }
    const auto smem = static_cast<size_t>(SplitRegsSharedMemoryBytes(dtype, req.shape, c));
    // Rows on the pack grid keep the instance without edges.
    auto* kernel = req.shape.cols % kPack != 0
                       ? &SplitRegsKernel<op, Load, Store, kPack, kBlock, kPacks, true>
                       : &SplitRegsKernel<op, Load, Store, kPack, kBlock, kPacks, false>;
    result = RunSplitRowClusters(req, action, stream, active_blocks, kernel, kBlock, smem,
                                 /*persistent=*/true, load, store, SplitParams(req, num_packs));
  });
  return result;
}

// kSplitTwoPass: rows * c.split blocks of SplitPartialKernel, then as many
// of SplitFinishKernel. On Hopper (sm_90+) the second is a programmatic
// dependent launch, so its blocks start (and load their slices) while the
// first kernel finishes. The workspace must hold rows * split slots and be
// used by no other launch in flight (the caller's, one per stream). The
// occupancy reported is the smaller of the two kernels'.
template <Op op, DType dtype>
cudaError_t RunSplitTwoPassOp(const KernelRequest& req, KernelAction action, cudaStream_t stream,
                              int* active_blocks) {
  using T = typename StorageOf<dtype>::type;
  const auto load = MakeLoad<op, T>(req);
  const auto store = MakeStore<op, T>(req);
  using Load = decltype(load);
  using Store = decltype(store);
  const LaunchConfig& c = req.config;
  if (c.impl != Impl::kSplitTwoPass || c.split < 2 || c.grid_waves != 0) {
    return cudaErrorInvalidConfiguration;
  }
  cudaError_t result = cudaErrorInvalidConfiguration;
  DispatchInt<1, 2, 4, 8>(c.pack_size, [&](auto pack_c) {
    constexpr int kPack = decltype(pack_c)::value;
    if constexpr (kPack * sizeof(T) <= 16) {
      // Must list exactly kTwoPassBlockSizes (launch_config.h).
      DispatchInt<128, 256, 512>(c.block_size, [&](auto block_c) {
        constexpr int kBlock = decltype(block_c)::value;
        const auto partial_kernel = &SplitPartialKernel<op, Load, kPack, kBlock>;
        const auto finish_kernel = &SplitFinishKernel<op, Load, Store, kPack, kBlock>;
        if (action == KernelAction::kQueryOccupancy) {
          int partial_active = 0;
          int finish_active = 0;
          result = CachedActiveBlocks(req.device, reinterpret_cast<const void*>(partial_kernel),
                                      kBlock, 0, req.max_smem_per_block_optin, &partial_active);
          if (result != cudaSuccess) return;
          result = CachedActiveBlocks(req.device, reinterpret_cast<const void*>(finish_kernel),
                                      kBlock, 0, req.max_smem_per_block_optin, &finish_active);
          *active_blocks = std::min(partial_active, finish_active);
          return;
        }
        const int64_t num_packs = req.shape.cols / kPack;
        // Refused before: too few packs by the rules, no workspace by Launch.
        if (num_packs < c.split || req.args.workspace == nullptr) return;
        const split_row::Params params = SplitParams(req, num_packs);
        const split_row::TwoPassWorkspace workspace{req.args.workspace, c.split};
        const auto blocks = static_cast<unsigned>(req.shape.rows * c.split);
        partial_kernel<<<blocks, kBlock, 0, stream>>>(load, params, workspace);
        result = cudaPeekAtLastError();
        if (result != cudaSuccess) return;
        cudaLaunchConfig_t config = {};
        config.gridDim = dim3(blocks);
        config.blockDim = dim3(static_cast<unsigned>(kBlock));
        config.stream = stream;
        cudaLaunchAttribute attribute;
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        config.attrs = &attribute;
        config.numAttrs = req.programmatic_launch ? 1 : 0;
        result = cudaLaunchKernelEx(&config, finish_kernel, load, store, params, workspace);
        if (result == cudaSuccess) result = cudaPeekAtLastError();
      });
    }
  });
  return result;
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_SPLIT_ROW_DISPATCH_CUH_
