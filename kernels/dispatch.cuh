// Runtime knobs -> template parameters, one bridge per knob, and the launch
// itself (grid sizing from the cached occupancy). Included only by the
// per-op/dtype translation units in kernels/instances/.
#ifndef KERNTUNE_KERNELS_DISPATCH_CUH_
#define KERNTUNE_KERNELS_DISPATCH_CUH_

#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/dispatch_launch.h"
#include "kernels/kernel_request.h"
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"

namespace kt::kernels::internal {

// Resident blocks per SM of `kernel` at this block size and dynamic shared
// memory, cached per (device, kernel, block, smem): the occupancy calculator
// is queried once, not per launch. Also raises the kernel's dynamic
// shared-memory limit (once per device) when `smem_bytes` needs more than
// the default 48 KiB. Defined in kernels/occupancy_cache.cu.
cudaError_t CachedActiveBlocks(int device, const void* kernel, int block_size,
                               size_t smem_bytes,
                               int64_t max_smem_per_block_optin,
                               int* active_blocks);

// Calls f(std::integral_constant<int, v>) for the v in `values` equal to
// `value`; false when none is. The only runtime -> template bridge shape.
template <int... values, class F>
bool DispatchInt(int value, F&& f) {
  return ((value == values ? (f(std::integral_constant<int, values>{}), true)
                           : false) ||
          ...);
}
// Calls f(std::integral_constant<int, v>) for the first v in `values`
// (ascending) that is at least `value`; false when none is.
template <int... values, class F>
bool DispatchAtLeast(int value, F&& f) {
  return ((value <= values ? (f(std::integral_constant<int, values>{}), true) : false) || ...);
}

template <class Kernel, class... Args>
cudaError_t LaunchOrQuery(Kernel kernel, const KernelRequest& req, dim3 block,
                          size_t smem_bytes, int64_t blocks_needed,
                          KernelAction action, cudaStream_t stream,
                          int* active_blocks, Args... args) {
  const int threads = static_cast<int>(block.x * block.y);
  int active = 0;
  const bool need_occupancy = action == KernelAction::kQueryOccupancy ||
                              req.config.grid_waves > 0 || smem_bytes > 0;
  if (need_occupancy) {
    const cudaError_t err =
        CachedActiveBlocks(req.device, reinterpret_cast<const void*>(kernel),
                           threads, smem_bytes, req.max_smem_per_block_optin,
                           &active);
    if (err != cudaSuccess) return err;
  }
  if (action == KernelAction::kQueryOccupancy) {
    *active_blocks = active;
    return cudaSuccess;
  }
  if (smem_bytes > 0 && active == 0) return cudaErrorInvalidConfiguration;
  int64_t grid = std::min<int64_t>(blocks_needed, INT_MAX);
  if (req.config.grid_waves > 0) {
    const int64_t resident =
        static_cast<int64_t>(std::max(active, 1)) * req.sm_count;
    grid = std::min<int64_t>(grid, resident * req.config.grid_waves);
  }
  grid = std::max<int64_t>(grid, 1);
  void* params[] = {static_cast<void*>(&args)...};
  return LaunchKernel(req.device, reinterpret_cast<const void*>(kernel),
                      dim3(static_cast<unsigned>(grid)), block, smem_bytes, stream, params);
}

// The warp family with the given functors. `full_packs_only`: the
// instances of 16-byte packs only (the fused norms', grouped rows').
template <Op op, typename T, bool full_packs_only, class Load, class Store>
cudaError_t RunWarpRowOpWith(const KernelRequest& req, const Load load, const Store store,
                             KernelAction action, cudaStream_t stream, int* active_blocks) {
  const LaunchConfig& c = req.config;
  cudaError_t result = cudaErrorInvalidConfiguration;
  // Grouped rows (per-head views) are head_dim long: up to two packs a
  // lane, one row per group step (kMaxGroupedCols).
  constexpr bool kGrouped = full_packs_only && !IsFusedNorm(op);

  // Instantiates one (pack, cols_per_thread, group width, rows per access)
  // kernel and launches it with blockDim = (tgw, block_size / tgw).
  auto launch = [&](auto pack_c, auto cpt_c, auto tgw_c, auto rpa_c) {
    constexpr int kPack = decltype(pack_c)::value;
    constexpr int kCpt = decltype(cpt_c)::value;
    constexpr int kTgw = decltype(tgw_c)::value;
    constexpr int kRpa = decltype(rpa_c)::value;
    const dim3 block(kTgw, c.block_size / kTgw);
    const int64_t rows_per_block = static_cast<int64_t>(block.y) * kRpa;
    const int64_t blocks = (req.shape.rows + rows_per_block - 1) / rows_per_block;
    // One block per block of rows, none partial, every lane's packs in the
    // row: the instance without bounds checks or row loop.
    const bool exact = c.grid_waves == 0 && req.shape.rows % rows_per_block == 0 &&
                       req.shape.cols == int64_t{kCpt} * kTgw;
    auto* kernel = exact ? &WarpRowKernel<op, decltype(load), decltype(store), kPack, kCpt,
                                          kTgw, kRpa, true>
                         : &WarpRowKernel<op, decltype(load), decltype(store), kPack, kCpt,
                                          kTgw, kRpa, false>;
    result = LaunchOrQuery(kernel, req, block, 0, blocks, action, stream,
                           active_blocks, load, store, RowParamsOf(req));
  };
  DispatchInt<1, 2, 4, 8>(c.pack_size, [&](auto pack) {
    constexpr int kPack = decltype(pack)::value;
    // The fused norms' instances are whole warps with 16-byte packs
    // (CheckFusedNormKnobs in launch_config.cc): hidden sizes of LLMs are
    // multiples of 16 bytes, and every other combination would cost
    // compile time for configs their rows never take.
    if constexpr (full_packs_only && kPack * sizeof(T) != 16) {
      return;
    } else if constexpr (kPack * sizeof(T) <= 16) {
      if (c.thread_group_width < kWarpSize) {
        if constexpr (!IsFusedNorm(op)) {
          // One pack per lane, or two for 16-byte packs (WarpColsPerThread);
          // narrow groups may take two rows per step.
          DispatchInt<1, 2, 4, 8, 16>(c.thread_group_width, [&](auto tgw) {
            DispatchInt<1, 2>(c.rows_per_access, [&](auto rpa) {
              if constexpr (!kGrouped || decltype(rpa)::value == 1) {
                if (req.cols_per_thread == kPack) {
                  launch(pack, pack, tgw, rpa);
                } else if constexpr (NarrowGroupPacksPerLane(kPack * sizeof(T)) == 2) {
                  if (req.cols_per_thread == 2 * kPack) {
                    launch(pack, std::integral_constant<int, 2 * kPack>{}, tgw, rpa);
                  }
                }
              }
            });
          });
        }
      } else if (req.cols_per_thread == kPack) {
        if constexpr (!IsFusedNorm(op)) {
          launch(pack, pack, std::integral_constant<int, kWarpSize>{},
                 std::integral_constant<int, 1>{});
        }
      } else {
        // Must list exactly kWarpColsPerThread (launch_config.h).
        DispatchInt<2, 4, 8, 12, 16, 24, 32, 48, 64>(
            req.cols_per_thread, [&](auto cpt) {
              constexpr int kCpt = decltype(cpt)::value;
              if constexpr (kCpt % kPack == 0 && kCpt >= 2 * kPack &&
                            WarpHasColsPerThread(kCpt, kPack * sizeof(T)) &&
                            (!IsFusedNorm(op) || kCpt >= kFusedWarpMinColsPerThread) &&
                            (!kGrouped || kCpt == 2 * kPack)) {
                launch(pack, cpt, std::integral_constant<int, kWarpSize>{},
                       std::integral_constant<int, 1>{});
              }
            });
      }
    }
  });
  return result;
}

template <Op op, DType dtype>
cudaError_t RunWarpRowOp(const KernelRequest& req, KernelAction action,
                         cudaStream_t stream, int* active_blocks) {
  using T = typename StorageOf<dtype>::type;
  if constexpr (op == Op::kRmsNorm) {
    // Grouped rows (QK-norm over per-head views) have instances of their
    // own, 16-byte packs only (ServesRowPlacement).
    if (req.args.params.group_rows > 0) {
      return RunWarpRowOpWith<op, T, true>(req, MakeLoad<op, T, false, true>(req),
                                           MakeStore<op, T, false, true>(req), action, stream,
                                           active_blocks);
    }
  }
  return RunWarpRowOpWith<op, T, IsFusedNorm(op)>(req, MakeLoad<op, T>(req), MakeStore<op, T>(req),
                                                  action, stream, active_blocks);
}

// Calls f(pack, block) with the config's pack size (where a pack of T is at
// most 16 bytes) and block size as integral constants: the block-per-row
// families' bridge.
// `full_packs_only`: 16-byte packs only (the fused norms' instances).
template <typename T, bool full_packs_only = false, class F>
void DispatchBlockKnobs(const LaunchConfig& c, F&& f) {
  DispatchInt<1, 2, 4, 8>(c.pack_size, [&](auto pack) {
    constexpr size_t kBytes = decltype(pack)::value * sizeof(T);
    if constexpr (full_packs_only ? kBytes == 16 : kBytes <= 16) {
      // Must list exactly kBlockImplBlockSizes (launch_config.h).
      DispatchInt<128, 256, 512, 1024>(c.block_size, [&](auto block) { f(pack, block); });
    }
  });
}

template <Op op, DType dtype>
cudaError_t RunBlockRowOp(const KernelRequest& req, KernelAction action,
                          cudaStream_t stream, int* active_blocks) {
  using T = typename StorageOf<dtype>::type;
  const auto load = MakeLoad<op, T>(req);
  const auto store = MakeStore<op, T>(req);
  using Load = decltype(load);
  using Store = decltype(store);
  // The rules let a pack leave a remainder of the row exactly where these
  // kernels move one (their RowEdges).
  static_assert(PackMustDivideLength(op, Impl::kBlockSmem) != kTakesAnyCols<Load, Store> &&
                    PackMustDivideLength(op, Impl::kBlockUncached) != kTakesAnyCols<Load, Store>,
                "PackMustDivideLength and the functors' layouts disagree");
  cudaError_t result = cudaErrorInvalidConfiguration;
  DispatchBlockKnobs<T>(req.config, [&](auto pack, auto block) {
    constexpr int kPack = decltype(pack)::value;
    constexpr int kBlock = decltype(block)::value;
    const auto launch = [&](auto edges) {
      constexpr bool kEdges = decltype(edges)::value;
      if (req.config.impl == Impl::kBlockSmem) {
        // Covers the whole packs of any row (RowEdges).
        const size_t smem =
            static_cast<size_t>(req.shape.cols) * sizeof(typename Load::cache_type);
        result = LaunchOrQuery(&BlockSmemRowKernel<op, Load, Store, kPack, kBlock, kEdges>, req,
                               dim3(kBlock), smem, req.shape.rows, action, stream, active_blocks,
                               load, store, RowParamsOf(req));
      } else {
        result = LaunchOrQuery(&BlockUncachedRowKernel<op, Load, Store, kPack, kBlock, kEdges>,
                               req, dim3(kBlock), 0, req.shape.rows, action, stream,
                               active_blocks, load, store, RowParamsOf(req));
      }
    };
    // Rows on the pack grid keep the instance without edges (fewer
    // registers); pack 1 never leaves the grid.
    if constexpr (kTakesAnyCols<Load, Store> && kPack > 1) {
      if (req.shape.cols % kPack != 0) {
        launch(std::true_type{});
        return;
      }
    }
    launch(std::false_type{});
  });
  return result;
}

template <Op op, DType dtype>
cudaError_t RunBlockRegsRowOp(const KernelRequest& req, KernelAction action,
                              cudaStream_t stream, int* active_blocks) {
  using T = typename StorageOf<dtype>::type;
  // Paired 16-bit conversions: a latency-bound block alone on its SM pays
  // for every instruction (row_common.cuh, Widen).
  const auto load = MakeLoad<op, T, true>(req);
  const auto store = MakeStore<op, T, true>(req);
  cudaError_t result = cudaErrorInvalidConfiguration;
  DispatchBlockKnobs<T, IsFusedNorm(op)>(req.config, [&](auto pack, auto block) {
    constexpr int kPack = decltype(pack)::value;
    constexpr int kBlock = decltype(block)::value;
    result = LaunchOrQuery(&BlockRegsRowKernel<op, decltype(load), decltype(store), kPack,
                                               kBlock, BlockRegsPacksPerThread(kPack)>,
                           req, dim3(kBlock), 0, req.shape.rows, action, stream, active_blocks, load,
                           store, RowParamsOf(req));
  });
  return result;
}

// LayerNorm and RMSNorm only (BlockRereadServes): the CMake instance list
// and SelectFamily name no other op.
template <Op op, DType dtype>
cudaError_t RunBlockRereadRowOp(const KernelRequest& req, KernelAction action,
                                cudaStream_t stream, int* active_blocks) {
  static_assert(BlockRereadServes(op), "block_reread serves the norms only");
  using T = typename StorageOf<dtype>::type;
  const auto load = MakeLoad<op, T, true>(req);
  const auto store = MakeStore<op, T, true>(req);
  // Named here, not by decltype inside the nested lambdas: there nvcc's
  // host side names the instances with reference types (const Load&) that
  // the device side never compiled, so the runtime cannot find them
  // ("invalid resource handle").
  using Load = decltype(load);
  using Store = decltype(store);
  cudaError_t result = cudaErrorInvalidConfiguration;
  DispatchBlockKnobs<T>(req.config, [&](auto pack, auto block) {
    constexpr int kPack = decltype(pack)::value;
    constexpr int kBlock = decltype(block)::value;
    constexpr int kMaxPacks = BlockRereadPacksPerThread(kPack);
    const auto launch = [&](auto packs) {
      constexpr int kPacks = decltype(packs)::value;
      if constexpr (kPacks <= kMaxPacks) {
        result = LaunchOrQuery(&BlockRereadRowKernel<op, Load, Store, kPack, kBlock, kPacks>,
                               req, dim3(kBlock), 0, req.shape.rows, action, stream,
                               active_blocks, load, store, RowParamsOf(req));
      }
    };
    // A thread's registers hold the fewest packs that cover the row, not
    // the longest row's: at 1024 threads the float16 instances for 2
    // packs of 8 take 32 registers where the one for 4 took 53, two blocks
    // per SM instead of one. Packs a pointer's alignment narrowed too:
    // float32 rows of 12288 in packs of 1 at 1024 threads take the 12-pack
    // instance (8 bytes of spill) instead of the 32-pack one (712 bytes).
    const int64_t needed = (req.shape.cols / kPack + kBlock - 1) / kBlock;
    DispatchAtLeast<1, 2, 3, 4, 6, 8, 12, 16, 24, 32>(static_cast<int>(needed), launch);
  });
  return result;
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_DISPATCH_CUH_
