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

// The unsigned vector type of a pack's size, for the cache-hinted
// __ldcs/__stcs, which take built-in vector types only.
template <int bytes>
struct RawVector;
template <>
struct RawVector<2> {
  using type = unsigned short;
};
template <>
struct RawVector<4> {
  using type = unsigned int;
};
template <>
struct RawVector<8> {
  using type = uint2;
};
template <>
struct RawVector<16> {
  using type = uint4;
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

// Folds `n` more elements of one line into a thread's online (max, sum of
// exp(x - max)): one rescale per step, not per element, and no divergent
// branch but the rare all -inf step. -inf adds nothing, even to an empty
// state (where exp(-inf - -inf) would be a NaN); a NaN poisons the sum; a
// +inf makes it NaN like the reference (exp(inf - inf)). The max itself is
// never NaN (fmaxf skips NaN).
template <bool fast, int n>
__device__ __forceinline__ void OnlineUpdate(float& max, float& sum, const float (&x)[n]) {
  float step_max = max;
#pragma unroll
  for (int i = 0; i < n; ++i) step_max = fmaxf(step_max, x[i]);
  if (step_max == -INFINITY) {
#pragma unroll
    for (int i = 0; i < n; ++i) {
      if (isnan(x[i])) sum = NAN;
    }
    return;
  }
  float step_sum = 0.f;
#pragma unroll
  for (int i = 0; i < n; ++i) step_sum += Exp<fast>(x[i] - step_max);
  sum = (sum == 0.f ? 0.f : sum * Exp<fast>(max - step_max)) + step_sum;
  max = step_max;
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
                                                  float identity, float* buffer) {
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
    float acc = identity;
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

// The kernel. `cached_rows` > 0: each thread keeps its dim entries d = y,
// y + tgw, ... (cached_rows of them, the line split over the tgw lanes) in
// registers, so the input is read once: max, then sum of exp(x - max)
// (softmax keeps the exps), then outputs. cached_rows == 0: any dim, each
// line read twice, an online (max, sum) per element on the first read, the
// second read (evict-first, usually from L2) to write outputs. Blocks take
// tiles of blockDim.x columns, grid-stride. Preconditions (launch side):
// inner % pack == 0, x/y aligned to the pack, blockDim.x * blockDim.y a power
// of two >= 32, cached_rows * blockDim.y >= dim when cached_rows > 0, dynamic
// shared memory 2 * reduce_floats floats.
template <Op op, typename T, int pack, int cached_rows>
__global__ void __launch_bounds__(1024)
    AxisSoftmaxKernel(const T* x, T* y, AxisParams p) {
  static_assert(op == Op::kSoftmax || op == Op::kLogSoftmax,
                "the axis kernel serves softmax and log-softmax");
  constexpr bool kFast = sizeof(T) < 4;
  extern __shared__ float axis_smem[];
  float* const max_buffer = axis_smem;
  float* const sum_buffer = axis_smem + p.reduce_floats;
  const int lanes_along_dim = blockDim.y;
  const int64_t dim_lane = threadIdx.y;

  for (int64_t tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const int64_t column = tile * blockDim.x + threadIdx.x;
    const bool active = column < p.columns;
    int64_t base = 0;  // element (o, 0, i) of the column's first inner index
    if (active) {
      const int64_t o = column / p.inner_packs;
      base = o * p.dim * p.inner + (column - o * p.inner_packs) * pack;
    }
    float line_max[pack];
    float line_sum[pack];

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
          for (int k = 0; k < pack; ++k) v[r][k] = -INFINITY;
        }
      }
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        line_max[k] = -INFINITY;
#pragma unroll
        for (int r = 0; r < cached_rows; ++r) line_max[k] = fmaxf(line_max[k], v[r][k]);
      }
      AllReduceAlongDim<pack>(line_max, MaxOp(), -INFINITY, max_buffer);
      // An all -inf line has max -inf and exps NaN: NaN outputs, as the
      // reference; a NaN anywhere makes the sum NaN. Masked slots are -inf.
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        line_sum[k] = 0.f;
#pragma unroll
        for (int r = 0; r < cached_rows; ++r) {
          const float e = Exp<kFast>(v[r][k] - line_max[k]);
          line_sum[k] += e;
          if constexpr (op == Op::kSoftmax) v[r][k] = e;
        }
      }
      AllReduceAlongDim<pack>(line_sum, SumOp(), 0.f, sum_buffer);
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        if constexpr (op == Op::kSoftmax) {
          const float inv_sum = 1.f / line_sum[k];
#pragma unroll
          for (int r = 0; r < cached_rows; ++r) v[r][k] *= inv_sum;
        } else {
          // (x - max) - log(sum), in that order (see FinishSoftmax).
          const float log_sum = Log<kFast>(line_sum[k]);
#pragma unroll
          for (int r = 0; r < cached_rows; ++r) v[r][k] = (v[r][k] - line_max[k]) - log_sum;
        }
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
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        line_max[k] = -INFINITY;
        line_sum[k] = 0.f;
      }
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
              for (int k = 0; k < pack; ++k) v[u][k] = -INFINITY;
            }
          }
#pragma unroll
          for (int k = 0; k < pack; ++k) {
            float line_step[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) line_step[u] = v[u][k];
            OnlineUpdate<kFast>(line_max[k], line_sum[k], line_step);
          }
        }
      }
      float thread_max[pack];
#pragma unroll
      for (int k = 0; k < pack; ++k) thread_max[k] = line_max[k];
      AllReduceAlongDim<pack>(line_max, MaxOp(), -INFINITY, max_buffer);
      // Rescale to the line's max; an empty state (sum 0) stays 0 even when
      // both maxima are -inf.
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        line_sum[k] =
            line_sum[k] == 0.f ? 0.f : line_sum[k] * Exp<kFast>(thread_max[k] - line_max[k]);
      }
      AllReduceAlongDim<pack>(line_sum, SumOp(), 0.f, sum_buffer);
      float scale[pack];  // softmax: 1 / sum; log-softmax: log(sum)
#pragma unroll
      for (int k = 0; k < pack; ++k) {
        scale[k] = op == Op::kSoftmax ? 1.f / line_sum[k] : Log<kFast>(line_sum[k]);
      }
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
            for (int k = 0; k < pack; ++k) {
              v[u][k] = op == Op::kSoftmax ? Exp<kFast>(v[u][k] - line_max[k]) * scale[k]
                                           : (v[u][k] - line_max[k]) - scale[k];
            }
            StoreAxisPack<true, T, pack>(y + base + d * p.inner, v[u]);
          }
        }
      }
    }
  }
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_AXIS_KERNELS_CUH_
