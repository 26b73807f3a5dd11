// FlashInfer's norm kernels (include/flashinfer/norm.cuh, header-only) as a
// C ABI for bench/llm_norm_peers.py, which builds this file on the GPU
// machine with torch.utils.cpp_extension.load against a fetched FlashInfer
// tree (never vendored into kerntune) and calls it through ctypes with
// tensor pointers and PyTorch's current stream, so the launches land in the
// peers' CUDA graphs like any other. Torch-free on purpose: it also compiles
// with plain nvcc (`nvcc -c -std=c++17 -DENABLE_FP8 -I<flashinfer>/include`).
//
// dtype codes: 0 float16, 1 bfloat16 (FlashInfer's norms take no float32);
// quant codes: 0 fp8 e4m3, 1 fp8 e5m2, 2 int8 (LayerNorm only). Every entry
// returns a cudaError_t value: 0 on success; cudaErrorInvalidValue for a
// code it does not serve or an exception FlashInfer raised.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "flashinfer/norm.cuh"

namespace {

using flashinfer::norm::FusedAddRMSNorm;
using flashinfer::norm::FusedAddRMSNormQuant;
using flashinfer::norm::GemmaFusedAddRMSNorm;
using flashinfer::norm::GemmaRMSNorm;
using flashinfer::norm::QKRMSNorm;
using flashinfer::norm::RMSNorm;
using flashinfer::norm::RMSNormQuant;

// Calls fn with a null pointer of the storage type the code names.
template <typename Fn>
int WithDType(int dtype, Fn&& fn) {
  try {
    if (dtype == 0) return static_cast<int>(fn(static_cast<half*>(nullptr)));
    if (dtype == 1) return static_cast<int>(fn(static_cast<__nv_bfloat16*>(nullptr)));
  } catch (...) {
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

// Likewise for the code type of a quantized output (int8 only where the
// kernel has int8 stores: FlashInfer's RMSNorm quant kernels do not).
template <bool kInt8, typename Fn>
int WithQuant(int quant, Fn&& fn) {
  try {
    if (quant == 0) return static_cast<int>(fn(static_cast<__nv_fp8_e4m3*>(nullptr)));
    if (quant == 1) return static_cast<int>(fn(static_cast<__nv_fp8_e5m2*>(nullptr)));
    if constexpr (kInt8) {
      if (quant == 2) return static_cast<int>(fn(static_cast<int8_t*>(nullptr)));
    }
  } catch (...) {
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename T>
T* As(void* p) {
  return static_cast<T*>(p);
}

}  // namespace

extern "C" {

// y = x * rsqrt(mean(x^2) + eps) * (w, or 1 + w when gemma); rows strided.
int kt_fi_rms_norm(int dtype, int gemma, void* x, void* w, void* y, uint32_t rows, uint32_t d,
                   uint32_t x_stride, uint32_t y_stride, float eps, void* stream) {
  return WithDType(dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    auto s = static_cast<cudaStream_t>(stream);
    return gemma ? GemmaRMSNorm<T>(As<T>(x), As<T>(w), As<T>(y), rows, d, x_stride, y_stride, eps,
                                   false, s)
                 : RMSNorm<T>(As<T>(x), As<T>(w), As<T>(y), rows, d, x_stride, y_stride, eps,
                              false, s);
  });
}

// In place: residual = x + residual, then x = norm(residual).
int kt_fi_fused_add_rms_norm(int dtype, int gemma, void* x, void* residual, void* w, uint32_t rows,
                             uint32_t d, uint32_t x_stride, uint32_t residual_stride, float eps,
                             void* stream) {
  return WithDType(dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    auto s = static_cast<cudaStream_t>(stream);
    return gemma ? GemmaFusedAddRMSNorm<T>(As<T>(x), As<T>(residual), As<T>(w), rows, d, x_stride,
                                           residual_stride, eps, false, s)
                 : FusedAddRMSNorm<T>(As<T>(x), As<T>(residual), As<T>(w), rows, d, x_stride,
                                      residual_stride, eps, false, s);
  });
}

// Per-head RMSNorm of x viewed as [tokens, heads, d] with element strides
// (x_token, x_head), into y likewise.
int kt_fi_qk_rms_norm(int dtype, void* x, void* w, void* y, uint32_t tokens, uint32_t heads,
                      uint32_t d, uint32_t x_token_stride, uint32_t x_head_stride,
                      uint32_t y_token_stride, uint32_t y_head_stride, float eps, void* stream) {
  return WithDType(dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    return QKRMSNorm<T>(As<T>(x), As<T>(w), As<T>(y), tokens, heads, d, x_token_stride,
                        x_head_stride, y_token_stride, y_head_stride, eps, false,
                        static_cast<cudaStream_t>(stream));
  });
}

// Codes of norm(x) / scale[0] (a static scale), saturated; fp8 only.
int kt_fi_rms_norm_quant(int dtype, int quant, void* x, void* w, void* y, uint32_t rows,
                         uint32_t d, uint32_t x_stride, uint32_t y_stride, float* scale, float eps,
                         void* stream) {
  return WithDType(dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    return WithQuant<false>(quant, [&](auto* q) {
      using O = std::remove_pointer_t<decltype(q)>;
      return RMSNormQuant<T, O>(As<T>(x), As<T>(w), As<O>(y), rows, d, x_stride, y_stride, scale,
                                eps, false, static_cast<cudaStream_t>(stream));
    });
  });
}

// residual = x + residual, then codes of norm(residual) / scale[0]; fp8 only.
int kt_fi_fused_add_rms_norm_quant(int dtype, int quant, void* x, void* residual, void* w, void* y,
                                   uint32_t rows, uint32_t d, uint32_t x_stride,
                                   uint32_t residual_stride, uint32_t y_stride, float* scale,
                                   float eps, void* stream) {
  return WithDType(dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    return WithQuant<false>(quant, [&](auto* q) {
      using O = std::remove_pointer_t<decltype(q)>;
      return FusedAddRMSNormQuant<T, O>(As<T>(x), As<T>(residual), As<T>(w), As<O>(y), rows, d,
                                        x_stride, residual_stride, y_stride, scale, eps, false,
                                        static_cast<cudaStream_t>(stream));
    });
  });
}

// LayerNorm (gamma, beta in the storage dtype) into codes, contiguous rows:
// with static_scale, codes of y / static_scale[0] (FlashInfer's
// LayerNormQuant); otherwise per-row dynamic scales written to row_scale,
// max(amax / qmax, 1 / (qmax * 512)) (the TensorRT-LLM kernel under it, with
// its fp8 minimum scale, as vLLM's dynamic per-token rule).
int kt_fi_layer_norm_quant(int dtype, int quant, void* x, void* gamma, void* beta, void* y,
                           float* static_scale, float* row_scale, uint32_t rows, uint32_t d,
                           float eps, void* stream) {
  return WithDType(dtype, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    return WithQuant<true>(quant, [&](auto* q) -> cudaError_t {
      using O = std::remove_pointer_t<decltype(q)>;
      auto s = static_cast<cudaStream_t>(stream);
      if (static_scale != nullptr) {
        return flashinfer::norm::LayerNormQuant<T, T, O>(As<T>(x), As<T>(gamma), As<T>(beta),
                                                         As<O>(y), static_scale, rows, d, eps, s);
      }
      // LayerNormQuant's setup with the per-token scale instead of the
      // per-tensor one.
      dim3 grid(rows);
      dim3 block(32 * ((std::min<uint32_t>(d, 1024) + 31) / 32));
      const size_t shmem_bytes = d * sizeof(T);
      const bool fp8 = !std::is_same_v<O, int8_t>;
      if (d % 2 == 0) {
        using Tp = typename tensorrt_llm::common::packed_as<T, 2>::type;
        flashinfer::norm::dispatch_layernorm_type(
            reinterpret_cast<const Tp*>(x), reinterpret_cast<const Tp*>(gamma),
            reinterpret_cast<const Tp*>(beta), static_cast<Tp*>(nullptr), eps, rows, d, nullptr,
            nullptr, row_scale, nullptr, As<O>(y), fp8, grid, block, shmem_bytes, s, false);
      } else {
        flashinfer::norm::dispatch_layernorm_type(
            As<const T>(x), As<const T>(gamma), As<const T>(beta), static_cast<T*>(nullptr), eps,
            rows, d, nullptr, nullptr, row_scale, nullptr, As<O>(y), fp8, grid, block, shmem_bytes,
            s, false);
      }
      return cudaGetLastError();
    });
  });
}

}  // extern "C"
