// Runtime knobs -> template parameters for the middle-axis family (kAxis):
// pack size and the register-cached rows its (dim, thread_group_width, pack)
// select (axis_plan.h); block shape, grid and shared memory at launch.
// Included only by the generated instances/*_RunAxisOp.cu.
#ifndef KERNTUNE_KERNELS_AXIS_DISPATCH_CUH_
#define KERNTUNE_KERNELS_AXIS_DISPATCH_CUH_

#include <type_traits>

#include "kernels/axis_kernels.cuh"
#include "kernels/axis_plan.h"
#include "kernels/dispatch.cuh"
#include "kernels/kernel_request.h"

namespace kt::kernels::internal {

template <Op op, DType dtype>
cudaError_t RunAxisOp(const KernelRequest& req, KernelAction action, cudaStream_t stream,
                      int* active_blocks) {
  if constexpr (op != Op::kSoftmax && op != Op::kLogSoftmax) {
    return cudaErrorInvalidConfiguration;
  } else {
    using T = typename StorageOf<dtype>::type;
    const LaunchConfig& c = req.config;
    const int tgw = c.thread_group_width;
    if (c.impl != Impl::kAxis || tgw < 1 || c.block_size < kWarpSize || c.block_size > 1024 ||
        c.block_size % tgw != 0 || c.pack_size < 1 || req.shape.inner % c.pack_size != 0 ||
        req.shape.rows < 1 || req.shape.cols < 1) {
      return cudaErrorInvalidConfiguration;
    }
    const int columns_per_block = c.block_size / tgw;
    AxisParams params;
    params.dim = req.shape.cols;
    params.inner = req.shape.inner;
    params.inner_packs = req.shape.inner / c.pack_size;
    params.columns = req.shape.rows * params.inner_packs;
    params.tiles = (params.columns + columns_per_block - 1) / columns_per_block;
    params.reduce_floats = AxisReductionFloats(c.block_size, tgw, c.pack_size);
    const size_t smem = static_cast<size_t>(AxisSharedBytes(c.block_size, tgw, c.pack_size));
    const dim3 block(columns_per_block, tgw);
    const T* x = static_cast<const T*>(req.args.x);
    T* y = static_cast<T*>(req.args.y);
    const int cached_rows = AxisCachedRows(req.shape.cols, tgw, c.pack_size);

    cudaError_t result = cudaErrorInvalidConfiguration;
    DispatchInt<1, 2, 4, 8>(c.pack_size, [&](auto pack_c) {
      constexpr int kPack = decltype(pack_c)::value;
      if constexpr (kPack * sizeof(T) <= 16) {
        // Must list 0 and exactly kAxisCachedRows (axis_plan.h).
        DispatchInt<0, 1, 2, 4, 8, 16>(cached_rows, [&](auto rows_c) {
          constexpr int kRows = decltype(rows_c)::value;
          if constexpr (kRows * kPack <= kAxisMaxCachedValues) {
            result = LaunchOrQuery(&AxisSoftmaxKernel<op, T, kPack, kRows>, req, block, smem,
                                   params.tiles, action, stream, active_blocks, x, y, params);
          }
        });
      }
    });
    return result;
  }
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_AXIS_DISPATCH_CUH_
