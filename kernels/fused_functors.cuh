// The functors of LLM inference's fused norms (types.h: kAdd*, k*Quant):
// a load that adds the residual and writes it back, and a store that
// quantizes the norm's output to one-byte codes with a static, per-row or
// per-group scale. The register-resident kernels (kWarp, kBlockRegs) take
// them: both read each element of a row exactly once, which the residual's
// write-back needs, and hold the whole row when its scale is computed.
#ifndef KERNTUNE_KERNELS_FUSED_FUNCTORS_CUH_
#define KERNTUNE_KERNELS_FUSED_FUNCTORS_CUH_

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/op_math.cuh"
#include "kernels/row_common.cuh"
#include "kernels/types.h"

namespace kt::kernels::internal {

// r = x + residual in float, rounded to T and written back to the residual;
// the kernel normalizes the rounded r, as PyTorch's unfused x + residual
// followed by the norm does (and vLLM's fused_add_rms_norm).
template <typename T, bool paired = false>
struct ResidualAddLoad {
  using storage_type = T;
  using cache_type = T;
  const T* __restrict__ src;
  int64_t row_stride;
  T* __restrict__ residual;
  int64_t residual_stride;
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row, int64_t col) const {
    const Pack<T, N> x = *reinterpret_cast<const Pack<T, N>*>(src + row * row_stride + col);
    Pack<T, N>* r = reinterpret_cast<Pack<T, N>*>(residual + row * residual_stride + col);
    float a[N];
    float b[N];
    Widen<T, N>(x, a);
    Widen<T, N>(*r, b);
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] += b[i];
    const Pack<T, N> rounded = Narrow<T, N>(a);
    *r = rounded;
    Widen<T, N>(rounded, dst);
  }
};

// One float to a one-byte code: round half to even, saturated to the
// finite range (fp8: __NV_SATFINITE, which keeps NaN a NaN code and turns
// +-inf into +-max; int8: [-128, 127], NaN 0, as cvt.rni.s32 gives 0).
__device__ __forceinline__ uint8_t QuantizeCode(float v, QuantDType dtype) {
  switch (dtype) {
    case QuantDType::kFp8E4M3:
      return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
    case QuantDType::kFp8E5M2:
      return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2));
    case QuantDType::kInt8:
      break;
  }
  const int code = min(max(__float2int_rn(v), -128), 127);
  return static_cast<uint8_t>(static_cast<int8_t>(code));
}

// The norms' output as codes: y = norm * (offset + gamma) (+ beta), then
// code = Q(y / scale) (OpParams::quant_dtype). The scale is the caller's
// static one, or max(min(amax, scale_ub) / qmax, 1 / (qmax * 512)) over the
// row or over each group of group_size columns, written to `scales`.
template <typename T, bool with_beta>
struct QuantStore {
  uint8_t* __restrict__ dst;
  int64_t row_stride;
  const T* __restrict__ gamma;
  const T* __restrict__ beta;  // null unless with_beta
  float weight_offset;
  QuantDType dtype;
  ScaleMode mode;
  int group_size;                          // kPerGroup: 64 or 128
  float qmax;                              // QuantMax(dtype)
  float scale_ub;                          // 0: none
  const float* __restrict__ static_scale;  // kStatic: one float
  float* __restrict__ scales;              // dynamic: rows (x groups) floats
  int64_t scales_per_row;

  // y = normalized * (offset + gamma) + beta, in place.
  template <int N>
  __device__ __forceinline__ void Affine(float* v, int64_t col) const {
    if (gamma != nullptr) {
      float g[N];
      Widen<T, N>(*reinterpret_cast<const Pack<T, N>*>(gamma + col), g);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] *= with_beta ? g[i] : g[i] + weight_offset;
    }
    if (with_beta && beta != nullptr) {
      float b[N];
      Widen<T, N>(*reinterpret_cast<const Pack<T, N>*>(beta + col), b);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += b[i];
    }
  }

  __device__ __forceinline__ float DynamicScale(float amax) const {
    const float bounded = scale_ub > 0.f ? fminf(amax, scale_ub) : amax;
    return fmaxf(bounded / qmax, 1.f / (qmax * 512.f));
  }

  template <int N>
  __device__ __forceinline__ void WriteCodes(const float* v, float inv_scale, int64_t row,
                                             int64_t col) const {
    Pack<uint8_t, N> codes;
#pragma unroll
    for (int i = 0; i < N; ++i) codes.elem[i] = QuantizeCode(v[i] * inv_scale, dtype);
    *reinterpret_cast<Pack<uint8_t, N>*>(dst + row * row_stride + col) = codes;
  }

  // Stores one row: the thread's kPacks packs of `pack` normalized values
  // (v[k * pack + i]), pack k at column col_of(k) when valid(k). Every
  // thread holding part of the row calls it with the same row.
  // row_max(float) is the max over the row's threads (all of them must
  // call it); lanes holding one group of columns are group_size / pack
  // consecutive lanes of a warp, each at the same k (the kernels' layouts
  // and Launch's per-group pack check guarantee it), and `writer` is the one thread
  // that writes a per-row scale.
  template <int kPacks, int pack, class ColOf, class Valid, class RowMax>
  __device__ __forceinline__ void StoreRow(float* v, int64_t row, const ColOf& col_of,
                                           const Valid& valid, const RowMax& row_max,
                                           bool writer) const {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (valid(k)) Affine<pack>(v + k * pack, col_of(k));
    }
    if (mode == ScaleMode::kStatic) {
      const float inv_scale = 1.f / __ldg(static_scale);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (valid(k)) WriteCodes<pack>(v + k * pack, inv_scale, row, col_of(k));
      }
    } else if (mode == ScaleMode::kPerRow) {
      float local = 0.f;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (valid(k)) {
#pragma unroll
          for (int i = 0; i < pack; ++i) local = fmaxf(local, fabsf(v[k * pack + i]));
        }
      }
      const float scale = DynamicScale(row_max(local));
      if (writer) scales[row] = scale;
      const float inv_scale = 1.f / scale;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        if (valid(k)) WriteCodes<pack>(v + k * pack, inv_scale, row, col_of(k));
      }
    } else {
      const int lanes = group_size / pack;  // a power of two <= 32
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        // Every lane shuffles, holding a pack of the row or not.
        float local = 0.f;
        if (valid(k)) {
#pragma unroll
          for (int i = 0; i < pack; ++i) local = fmaxf(local, fabsf(v[k * pack + i]));
        }
        for (int mask = lanes / 2; mask > 0; mask /= 2) {
          local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, mask));
        }
        if (valid(k)) {
          const int64_t col = col_of(k);
          const float scale = DynamicScale(local);
          if (col % group_size == 0) scales[row * scales_per_row + col / group_size] = scale;
          WriteCodes<pack>(v + k * pack, 1.f / scale, row, col);
        }
      }
    }
  }
};

template <class Store>
inline constexpr bool kQuantizes = false;
template <typename T, bool with_beta>
inline constexpr bool kQuantizes<QuantStore<T, with_beta>> = true;
template <class Store>
inline constexpr bool kQuantizes<const Store> = kQuantizes<Store>;

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_FUSED_FUNCTORS_CUH_
