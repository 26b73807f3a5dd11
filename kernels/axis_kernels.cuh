// Softmax and log-softmax along a middle axis (Impl::kAxis): a tensor
// (outer, dim, inner), element (o, d, i) at (o * dim + d) * inner + i,
// reduced along dim. The layout is described in axis_plan.h: columns of pack
// consecutive inner elements (outer and inner flattened, so an inner shorter
// than a block row, like 48, leaves no lane idle), blockDim = (columns per
// block, thread_group_width lanes along dim). Lanes along inner read
// contiguous packs; lanes along dim read addresses `inner` elements apart.
#ifndef KERNTUNE_KERNELS_AXIS_KERNELS_CUH_
#define KERNTUNE_KERNELS_AXIS_KERNELS_CUH_

#include <cstdint>
#include <cstring>

#include "kernels/op_math.cuh"
#include "kernels/row_common.cuh"

namespace kt::kernels::internal {

struct AxisParams {
  int64_t dim;
  int64_t inner;
  int64_t inner_packs;  // inner / pack
  int64_t columns;      // outer * inner_packs
  int64_t tiles;        // ceil(columns / blockDim.x): a block's unit of work
  int64_t reduce_floats;  // one reduction buffer (AxisReductionFloats)
};

// One pack of `pack` inner elements, widened to float. `last_use` marks the
// final read of a line (evict first: it will not be read again).
template <bool last_use, typename T, int pack>
__device__ __forceinline__ void LoadAxisPack(const T* src, float* dst) {
  Pack<T, pack> p;
  if constexpr (last_use) {
    using Raw = typename RawVector<sizeof(Pack<T, pack>)>::type;
    const Raw raw = __ldcs(reinterpret_cast<const Raw*>(src));
    memcpy(&p, &raw, sizeof(p));
  } else {
    p = *reinterpret_cast<const Pack<T, pack>*>(src);
  }
#pragma unroll
  for (int i = 0; i < pack; ++i) dst[i] = ToFloat(p.elem[i]);
}

// Narrows and writes one pack. `streaming` stores evict first, so outputs
// do not push out of L2 the inputs that the two-pass kernel reads again.
template <bool streaming, typename T, int pack>
__device__ __forceinline__ void StoreAxisPack(T* dst, const float* src) {
  Pack<T, pack> p;
#pragma unroll
  for (int i = 0; i < pack; ++i) p.elem[i] = FromFloat<T>(src[i]);
  if constexpr (streaming) {
    using Raw = typename RawVector<sizeof(Pack<T, pack>)>::type;
    Raw raw;
    memcpy(&raw, &p, sizeof(p));
    __stcs(reinterpret_cast<Raw*>(dst), raw);
  } else {
    *reinterpret_cast<Pack<T, pack>*>(dst) = p;
  }
}

// All-reduces `pack` values per column across the thread_group_width =
// blockDim.y lanes along dim: xor shuffles among the dim lanes a warp holds
// (lane bits above the column bits), then, between warps, `buffer`
// (AxisReductionFloats floats, laid out [warp row][pack][column]) reduced by
// groups of `group` consecutive lanes per element (each merging rows j,
// j + group, ... then shuffling), the result left in row 0 and read back by
// every lane. Every thread of the block must call it. Ends with a barrier
// after which `buffer` is still being read: alternate two buffers.
template <int pack, typename Combine>
__device__ __forceinline__ void AllReduceAlongDim(float (&v)[pack], Combine combine,
                                                  float* buffer) {
  const int columns = blockDim.x;
  const int lanes_along_dim = blockDim.y;
  if (lanes_along_dim == 1) return;
  const int warp_dim_lanes = columns < kWarpSize ? kWarpSize / columns : 1;
  for (int mask = columns; mask < kWarpSize; mask *= 2) {
#pragma unroll
    for (int k = 0; k < pack; ++k) {
      v[k] = combine(v[k], __shfl_xor_sync(0xffffffffu, v[k], mask));
    }
  }
  const int rows = lanes_along_dim / warp_dim_lanes;
  if (rows <= 1) return;
  const int elements = columns * pack;
  const int x = threadIdx.x;
  const int y = threadIdx.y;
  if (y % warp_dim_lanes == 0) {
#pragma unroll
    for (int k = 0; k < pack; ++k) buffer[(y / warp_dim_lanes) * elements + k * columns + x] = v[k];
  }
  __syncthreads();
  // Powers of two throughout, so `elements` is a multiple of the elements a
  // warp covers per step and every lane of a warp agrees on the loop.
  const int threads = columns * lanes_along_dim;
  const int t = y * columns + x;
  const int group = min(kWarpSize, max(1, threads / elements));
  const int j = t % group;
  for (int e = t / group; e < elements; e += threads / group) {
    float acc = Combine::kIdentity;
    for (int r = j; r < rows; r += group) acc = combine(acc, buffer[r * elements + e]);
    for (int mask = group / 2; mask > 0; mask /= 2) {
      acc = combine(acc, __shfl_xor_sync(0xffffffffu, acc, mask));
    }
    // Row 0 of element e is read only by this group's lane 0, above.
    if (j == 0) buffer[e] = acc;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < pack; ++k) v[k] = buffer[k * columns + x];
}

// The kernel, over the softmax's OpMath (op_math.cuh), one line per pack
// element. `cached_rows` > 0: each thread keeps its dim entries d = y,
// y + tgw, ... (cached_rows of them, the line split over the tgw lanes) in
// registers, so the input is read once and the statistic is exact in two
// passes (max, then sum of exp(x - max), kept in place) before the outputs.
// cached_rows == 0: any dim, each line read twice: an online (max, sum)
// accumulated on the first read, merged along dim, and the second read
// (evict-first, usually from L2) writes outputs. Blocks take tiles of
// blockDim.x columns, grid-stride. Preconditions (launch side): inner % pack
// == 0, x/y aligned to the pack, blockDim.x * blockDim.y a power of two >=
// 32, cached_rows * blockDim.y >= dim when cached_rows > 0, dynamic shared
// memory 2 * reduce_floats floats.
template <Op op, typename T, int pack, int cached_rows>
__global__ void __launch_bounds__(1024)
    AxisSoftmaxKernel(const T* x, T* y, AxisParams p) {
  static_assert(op == Op::kSoftmax || op == Op::kLogSoftmax,
                "the axis kernel serves softmax and log-softmax");
  using Math = OpMath<op, (sizeof(T) < 4)>;
  extern __shared__ float axis_smem[];
  // Two buffers, alternated: consecutive reductions need no barrier between.
  float* const buffers[2] = {axis_smem, axis_smem + p.reduce_floats};
  const auto all_reduce = [&](float (&values)[pack], auto combine, int buffer) {
    AllReduceAlongDim<pack>(values, combine, buffers[buffer]);
  };
  const int lanes_along_dim = blockDim.y;
  const int64_t dim_lane = threadIdx.y;
  // The statistic's parameters: a line of dim elements.
  RowParams line_params{};
  line_params.cols = p.dim;
  line_params.inv_cols = 1.f / static_cast<float>(p.dim);

  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const int64_t column = tile * blockDim.x + threadIdx.x;
    const bool active = column < p.columns;
    int64_t base = 0;  // element (o, 0, i) of the column's first inner index
    if (active) {
      const int64_t o = column / p.inner_packs;
      base = o * p.dim * p.inner + (column - o * p.inner_packs) * pack;
    }
    typename Math::Row line[pack];

    if constexpr (cached_rows > 0) {
      // One count and one stride instead of a predicate and an address
      // per row: they stay live across both reductions.
      const int valid_rows =
          active && dim_lane < p.dim
              ? static_cast<int>(
                    min(static_cast<int64_t>(cached_rows),
                        (p.dim - dim_lane + lanes_along_dim - 1) / lanes_along_dim))
              : 0;
      const int64_t first = base + dim_lane * p.inner;
      const int64_t stride = lanes_along_dim * p.inner;
      float v[cached_rows][pack];
#pragma unroll
      for (int r = 0; r < cached_rows; ++r) {
        if (r < valid_rows) {
          LoadAxisPack<false, T, pack>(x + first + r * stride, v[r]);
        } else {
#pragma unroll
          for (int k = 0; k < pack; ++k) v[r][k] = Math::First::kIdentity;
        }
      }
      // The statistic's two passes over this thread's entries of each line
      // (the second keeping what it computes, as ResidentRow does). Rows
      // past the line's end hold the first pass's identity, -inf, which
      // changes neither pass of the softmaxes: no bounds checks in the loops.
      using First = typename Math::First;
      float first_total[pack];
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        first_total[k] = First::kIdentity;
#pragma unroll
        for (int r = 0; r < cached_rows; ++r) first_total[k] = First{}.Add(first_total[k], v[r][k]);
      }
      all_reduce(first_total, typename First::Combine(), 0);
      using Second = decltype(Math::Second(0.f, line_params));
      float second_total[pack];
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        const Second pass = Math::Second(first_total[k], line_params);
        second_total[k] = Second::kIdentity;
#pragma unroll
        for (int r = 0; r < cached_rows; ++r) {
          v[r][k] = pass.Keep(v[r][k]);
          second_total[k] = pass.AddKept(second_total[k], v[r][k]);
        }
      }
      all_reduce(second_total, typename Second::Combine(), 1);
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        line[k] = Math::FromPasses(first_total[k], second_total[k], line_params);
#pragma unroll
        for (int r = 0; r < cached_rows; ++r) line[k].template ApplyKept<1>(&v[r][k]);
      }
#pragma unroll
      for (int r = 0; r < cached_rows; ++r) {
        if (r < valid_rows) StoreAxisPack<false, T, pack>(y + first + r * stride, v[r]);
      }
    } else {
      // Packs in flight per thread per step: 16 floats (8 for pack 1),
      // within the 64 registers a thread of a 1024-thread block may use.
      constexpr int kUnroll = pack <= 2 ? 8 : 16 / pack;
      const int64_t step = static_cast<int64_t>(lanes_along_dim);
      typename Math::Accumulator accumulators[pack];
      if (active) {
        for (int64_t d0 = dim_lane; d0 < p.dim; d0 += kUnroll * step) {
          float v[kUnroll][pack];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t d = d0 + u * step;
            if (d < p.dim) {
              LoadAxisPack<false, T, pack>(x + base + d * p.inner, v[u]);
            } else {
#pragma unroll
              for (int k = 0; k < pack; ++k) v[u][k] = -INFINITY;  // adds nothing
            }
          }
#pragma unroll
          for (int k = 0; k < pack; ++k) {
            float line_step[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) line_step[u] = v[u][k];
            accumulators[k].template Add<kUnroll>(line_step);
          }
        }
      }
      typename Math::Partial partials[pack];
#pragma unroll
      for (int k = 0; k < pack; ++k) partials[k] = accumulators[k].Get();
      int buffer = 0;
      Math::AllMerge(partials, [&](float (&values)[pack], auto combine) {
        all_reduce(values, combine, buffer);
        buffer ^= 1;
      });
#pragma unroll
      for (int k = 0; k < pack; ++k) line[k] = Math::Finish(partials[k], line_params);
      if (active) {
        for (int64_t d0 = dim_lane; d0 < p.dim; d0 += kUnroll * step) {
          float v[kUnroll][pack];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t d = d0 + u * step;
            if (d < p.dim) LoadAxisPack<true, T, pack>(x + base + d * p.inner, v[u]);
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int64_t d = d0 + u * step;
            if (d >= p.dim) continue;
#pragma unroll
            for (int k = 0; k < pack; ++k) line[k].template Apply<1>(&v[u][k]);
            StoreAxisPack<true, T, pack>(y + base + d * p.inner, v[u]);
          }
        }
      }
    }
  }
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_AXIS_KERNELS_CUH_
