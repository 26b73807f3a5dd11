// How a kAxis LaunchConfig maps onto the middle-axis kernel
// (axis_kernels.cuh): which register-cached instance it selects and the
// shared memory its block reduction takes. Plain C++, shared by the host rules
// (axis_config.cc) and the dispatch (axis_dispatch.cuh) so the two cannot
// disagree.
//
// Layout: the tensor is (outer, dim, inner), reduced along dim. The kernel
// flattens (outer, inner / pack) into "columns" of pack consecutive inner
// elements; a block is blockDim = (block_size / thread_group_width columns,
// thread_group_width threads along dim), so the lanes of a warp run along
// inner first (contiguous addresses) and along dim after.
#ifndef KERNTUNE_KERNELS_AXIS_PLAN_H_
#define KERNTUNE_KERNELS_AXIS_PLAN_H_

#include <cstdint>

namespace kt::kernels::internal {

// Dim entries per thread the register-cached instances hold (each a pack of
// inner elements). 0 (not listed) is the two-pass instance for longer lines.
inline constexpr int kAxisCachedRows[] = {1, 2, 4, 8, 16};
// Cap on cached floats per thread (rows x pack): keeps the cached instances
// inside the 64 registers a 1024-thread block allows, without spills.
inline constexpr int kAxisMaxCachedValues = 32;

// The cached instance a config selects for lines of `dim`: the fewest rows
// with rows * thread_group_width >= dim, or 0 when no instance covers dim
// (then the kernel reads each line twice: online statistics, then outputs).
constexpr int AxisCachedRows(int64_t dim, int thread_group_width, int pack_size) {
  for (int rows : kAxisCachedRows) {
    if (rows * pack_size <= kAxisMaxCachedValues &&
        static_cast<int64_t>(rows) * thread_group_width >= dim) {
      return rows;
    }
  }
  return 0;
}

// Dim lanes one warp holds: 32 / columns when a block row is narrower than a
// warp, else 1.
constexpr int AxisDimLanesPerWarp(int block_size, int thread_group_width) {
  const int columns = block_size / thread_group_width;
  return columns < 32 ? 32 / columns : 1;
}

// Floats in one buffer of the block reduction: a row of columns x pack
// partials per warp row along dim, after the in-warp shuffles. 0 when
// thread_group_width is 1 (no reduction) or the dim lanes share one warp.
constexpr int64_t AxisReductionFloats(int block_size, int thread_group_width, int pack_size) {
  if (thread_group_width <= 1) return 0;
  const int rows = thread_group_width / AxisDimLanesPerWarp(block_size, thread_group_width);
  if (rows <= 1) return 0;
  return static_cast<int64_t>(rows) * (block_size / thread_group_width) * pack_size;
}

// Dynamic shared memory of one block: two reduction buffers (max, then sum)
// so consecutive reductions need no barrier between them.
constexpr int64_t AxisSharedBytes(int block_size, int thread_group_width, int pack_size) {
  return 2 * AxisReductionFloats(block_size, thread_group_width, pack_size) *
         static_cast<int64_t>(sizeof(float));
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_AXIS_PLAN_H_
