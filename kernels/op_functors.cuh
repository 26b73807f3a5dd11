// The load and store functors each op's kernels read and write through, for
// every kernel family (dispatch.cuh, split_row_dispatch.cuh): fusions such as
// attention's scale and mask live here, not in the kernels.
#ifndef KERNTUNE_KERNELS_OP_FUNCTORS_CUH_
#define KERNTUNE_KERNELS_OP_FUNCTORS_CUH_

#include "kernels/kernel_request.h"
#include "kernels/row_common.cuh"

namespace kt::kernels::internal {

// ScaledMaskedSoftmax's input: x * scale + mask[q], with columns past the
// query index -inf when causal (top-left aligned, as PyTorch's is_causal),
// where q = row % mask_rows. The shared-memory kernels cache these logits in
// float (`cache_type`): rounding them to 16 bits would change the result.
template <typename T>
struct MaskedScaleLoad {
  using storage_type = T;
  using cache_type = float;
  const T* __restrict__ src;
  int64_t row_stride;
  const T* __restrict__ mask;  // (mask_rows, row_stride) or null
  int64_t mask_rows;           // >= 1
  float scale;
  bool causal;
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row, int64_t col) const {
    const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N>*>(src + row * row_stride + col);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = ToFloat(pack.elem[i]) * scale;
    const int64_t query = row % mask_rows;
    if (mask != nullptr) {
      const Pack<T, N> m =
          *reinterpret_cast<const Pack<T, N>*>(mask + query * row_stride + col);
#pragma unroll
      for (int i = 0; i < N; ++i) dst[i] += ToFloat(m.elem[i]);
    }
    if (causal) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        if (col + i > query) dst[i] = -INFINITY;
      }
    }
  }
};

template <Op op, typename T>
auto MakeLoad(const KernelRequest& req) {
  if constexpr (op == Op::kScaledMaskedSoftmax) {
    return MaskedScaleLoad<T>{static_cast<const T*>(req.x), req.cols,
                              static_cast<const T*>(req.mask), req.mask_rows, req.scale,
                              req.causal};
  } else {
    return DirectLoad<T>{static_cast<const T*>(req.x), req.cols};
  }
}

// LayerNorm's store applies its optional affine transform, RMSNorm's its
// optional weight (gamma, with beta null); the others store plainly.
template <Op op, typename T>
auto MakeStore(const KernelRequest& req) {
  if constexpr (op == Op::kLayerNorm || op == Op::kRmsNorm) {
    return AffineStore<T>{static_cast<T*>(req.y), req.cols, static_cast<const T*>(req.gamma),
                          static_cast<const T*>(req.beta)};
  } else {
    return DirectStore<T>{static_cast<T*>(req.y), req.cols};
  }
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_OP_FUNCTORS_CUH_
