// The load and store functors each op's kernels read and write through, for
// every kernel family (dispatch.cuh, split_row_dispatch.cuh): fusions such as
// attention's scale and mask live here, not in the kernels.
#ifndef KERNTUNE_KERNELS_OP_FUNCTORS_CUH_
#define KERNTUNE_KERNELS_OP_FUNCTORS_CUH_

#include "kernels/fused_functors.cuh"
#include "kernels/kernel_request.h"
#include "kernels/op_math.cuh"
#include "kernels/row_common.cuh"

namespace kt::kernels::internal {

// ScaledMaskedSoftmax's input: x * scale + mask[q], with columns past the
// query index -inf when causal (top-left aligned, as PyTorch's is_causal),
// where q = row % mask_rows. The shared-memory kernels cache these logits in
// float (`cache_type`): rounding them to 16 bits would change the result.
//
// Row(row) binds a row once (row_common.cuh's BindRow): the query index (a
// modulo: a software division routine on the GPU) and the row pointers are
// worked out per row, not per pack. load(dst, row, col) stays for callers
// that do not bind.
template <typename T>
struct MaskedScaleLoad {
  using storage_type = T;
  using cache_type = float;
  const T* __restrict__ src;
  int64_t row_stride;          // the mask's, and x's when it has no layout below
  const T* __restrict__ mask;  // (mask_rows, row_stride) or null
  int64_t mask_rows;           // >= 1
  float scale;
  bool causal;
  int64_t x_stride;  // x's rows: a strided view of a larger tensor

  struct RowView {
    const T* __restrict__ src;   // the row
    const T* __restrict__ mask;  // its query's mask row, or null
    int64_t query;
    float scale;
    bool causal;
    template <int N>
    __device__ __forceinline__ void load(float* dst, int64_t col) const {
      // A pack wholly past the causal diagonal is -inf whatever x and the
      // mask hold (a NaN there too, as in the reference): skip its reads,
      // about half of a causal problem's input bytes.
      if (causal && col > query) {
#pragma unroll
        for (int i = 0; i < N; ++i) dst[i] = -INFINITY;
        return;
      }
      const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N>*>(src + col);
      if (mask != nullptr) {
        const Pack<T, N> m = *reinterpret_cast<const Pack<T, N>*>(mask + col);
#pragma unroll
        for (int i = 0; i < N; ++i) dst[i] = fmaf(ToFloat(pack.elem[i]), scale, ToFloat(m.elem[i]));
      } else {
#pragma unroll
        for (int i = 0; i < N; ++i) dst[i] = ToFloat(pack.elem[i]) * scale;
      }
      if (causal) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
          if (col + i > query) dst[i] = -INFINITY;
        }
      }
    }
  };

  __device__ __forceinline__ RowView Row(int64_t row) const {
    // 32-bit remainder when both fit (always, in practice): a few
    // instructions instead of the 64-bit division routine.
    const int64_t query =
        ((static_cast<uint64_t>(row) | static_cast<uint64_t>(mask_rows)) >> 32) == 0
            ? static_cast<int64_t>(static_cast<uint32_t>(row) % static_cast<uint32_t>(mask_rows))
            : row % mask_rows;
    return {src + row * x_stride, mask != nullptr ? mask + query * row_stride : nullptr, query,
            scale, causal};
  }

  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row, int64_t col) const {
    Row(row).template load<N>(dst, col);
  }
};

// The layout of an operand's rows in the request (op_args.h's RowLayout).
inline RowLayout LayoutOf(const KernelRequest& req, Operand operand) {
  return RowLayoutOf(operand, req.args.params, req.shape);
}

// `paired`: 16-bit conversions two elements at a time (Widen, Narrow).
// `grouped`: rows placed by groups (RowLayout::group_rows > 0; RMSNorm
// over per-head views only, GroupedRowsServed).
template <Op op, typename T, bool paired = false, bool grouped = false>
auto MakeLoad(const KernelRequest& req) {
  const RowOpArgs& a = req.args;
  const RowLayout x = LayoutOf(req, Operand::kInput);
  if constexpr (op == Op::kScaledMaskedSoftmax) {
    // mask_rows >= 1 always, so the kernels may take row % mask_rows.
    return MaskedScaleLoad<T>{static_cast<const T*>(a.x),
                              req.shape.cols,
                              static_cast<const T*>(a.mask),
                              a.params.mask_rows > 1 ? a.params.mask_rows : 1,
                              static_cast<float>(a.params.scale),
                              a.params.causal,
                              x.stride};
  } else if constexpr (AddsResidual(op)) {
    return ResidualAddLoad<T, paired>{static_cast<const T*>(a.x), x.stride,
                                      static_cast<T*>(a.residual),
                                      LayoutOf(req, Operand::kResidual).stride};
  } else {
    return DirectLoad<T, paired, grouped>{static_cast<const T*>(a.x), x.stride, x.group_rows,
                                          x.group_stride};
  }
}

// LayerNorm's store applies its optional affine transform, RMSNorm's its
// optional weight (gamma, with beta null, plus the weight offset); the
// quantizing ops' store writes codes and scales; the others store plainly.
template <Op op, typename T, bool paired = false, bool grouped = false>
auto MakeStore(const KernelRequest& req) {
  const RowOpArgs& a = req.args;
  const RowLayout y = LayoutOf(req, Operand::kOutput);
  constexpr bool kLayerNormFamily = BaseNormOp(op) == Op::kLayerNorm;
  if constexpr (QuantizesOutput(op)) {
    const OpParams& q = a.params;
    return QuantStore<T, kLayerNormFamily>{
        static_cast<uint8_t*>(a.y),
        y.stride,
        static_cast<const T*>(a.gamma),
        kLayerNormFamily ? static_cast<const T*>(a.beta) : nullptr,
        static_cast<float>(q.weight_offset),
        q.quant_dtype,
        q.scale_mode,
        static_cast<int>(q.group_size),
        static_cast<float>(QuantMax(q.quant_dtype)),
        static_cast<float>(q.scale_ub),
        a.quant_scale,
        a.row_scale,
        q.scale_mode == ScaleMode::kPerGroup && q.group_size > 0 ? req.shape.cols / q.group_size
                                                                : 1};
  } else if constexpr (kLayerNormFamily) {
    return AffineStore<T, paired, true, grouped>{static_cast<T*>(a.y),
                                                 y.stride,
                                                 static_cast<const T*>(a.gamma),
                                                 static_cast<const T*>(a.beta),
                                                 y.group_rows,
                                                 y.group_stride};
  } else if constexpr (BaseNormOp(op) == Op::kRmsNorm) {
    return AffineStore<T, paired, /*with_beta=*/false, grouped>{
        static_cast<T*>(a.y), y.stride,       static_cast<const T*>(a.gamma), nullptr,
        y.group_rows,         y.group_stride, static_cast<float>(a.params.weight_offset)};
  } else {
    return DirectStore<T, paired, grouped>{static_cast<T*>(a.y), y.stride, y.group_rows,
                                           y.group_stride};
  }
}

// The row ops' per-launch scalars, from the request.
inline RowParams RowParamsOf(const KernelRequest& req) {
  const RowOpArgs& a = req.args;
  return RowParams{req.shape.rows, req.shape.cols,
                   static_cast<float>(1.0 / static_cast<double>(req.shape.cols)),
                   static_cast<float>(a.params.epsilon),
                   a.mean, a.inv_std, a.row_scale};
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_OP_FUNCTORS_CUH_
