// A/B in one binary: the block_smem LayerNorm kernel with the library's
// load/store functors (paired 16-bit conversions, 0c10429) against copies of
// the functors before it (per-element conversions). Large rows, no flush
// needed; outputs must be bit-identical.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"
using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

namespace old {
template <typename T>
struct DirectLoad {
  using storage_type = T;
  using cache_type = T;
  const T* __restrict__ src;
  int64_t row_stride;
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row, int64_t col) const {
    const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N>*>(src + row * row_stride + col);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = ToFloat(pack.elem[i]);
  }
};
template <typename T>
struct DirectStore {
  T* __restrict__ dst;
  int64_t row_stride;
  template <int N>
  __device__ __forceinline__ void store(const float* src, int64_t row, int64_t col) const {
    Pack<T, N> pack;
#pragma unroll
    for (int i = 0; i < N; ++i) pack.elem[i] = FromFloat<T>(src[i]);
    *reinterpret_cast<Pack<T, N>*>(dst + row * row_stride + col) = pack;
  }
};
// LayerNorm's output functor: y = normalized * gamma + beta, each optional
// (a null pointer is a uniform branch, cheaper than 4x the instances).
template <typename T>
struct AffineStore {
  T* __restrict__ dst;
  int64_t row_stride;
  const T* __restrict__ gamma;
  const T* __restrict__ beta;
  template <int N>
  __device__ __forceinline__ void store(const float* normalized, int64_t row,
                                        int64_t col) const {
    float out[N];
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = normalized[i];
    if (gamma != nullptr) {
      const Pack<T, N> g = *reinterpret_cast<const Pack<T, N>*>(gamma + col);
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] *= ToFloat(g.elem[i]);
    }
    if (beta != nullptr) {
      const Pack<T, N> b = *reinterpret_cast<const Pack<T, N>*>(beta + col);
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] += ToFloat(b.elem[i]);
    }
    old::DirectStore<T>{dst, row_stride}.template store<N>(out, row, col);
  }
  // The weights of B packs of N columns (LoadWeights, StoreLoaded).
  template <int B, int N>
  struct Weights {
    Pack<T, N> gamma[B];
    Pack<T, N> beta[B];
  };
  // Loads the weights of `count` (<= B) packs, pack b at column
  // col + b * stride, all in flight together.
  template <int B, int N>
  __device__ __forceinline__ void LoadWeights(Weights<B, N>& w, int64_t col, int64_t stride,
                                              int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) {
        const int64_t at = col + b * stride;
        if (gamma != nullptr) w.gamma[b] = *reinterpret_cast<const Pack<T, N>*>(gamma + at);
        if (beta != nullptr) w.beta[b] = *reinterpret_cast<const Pack<T, N>*>(beta + at);
      }
    }
  }
  // Stores pack b of a batch, at `col` of `row`, with the weights
  // LoadWeights read for it.
  template <int B, int N>
  __device__ __forceinline__ void StoreWith(const float* normalized, const Weights<B, N>& w,
                                            int b, int64_t row, int64_t col) const {
    float out[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      out[i] = normalized[i];
      if (gamma != nullptr) out[i] *= ToFloat(w.gamma[b].elem[i]);
      if (beta != nullptr) out[i] += ToFloat(w.beta[b].elem[i]);
    }
    old::DirectStore<T>{dst, row_stride}.template store<N>(out, row, col);
  }
  // Stores those `count` packs of `row` with the weights LoadWeights read.
  template <int B, int N>
  __device__ __forceinline__ void StoreLoaded(const float (&normalized)[B][N],
                                              const Weights<B, N>& w, int64_t row, int64_t col,
                                              int64_t stride, int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) StoreWith<B, N>(normalized[b], w, b, row, col + b * stride);
    }
  }
  // `count` (<= B) packs of `row`, pack b at column col + b * stride, with
  // every weight of the batch loaded before the first store, so the loads
  // are in flight together (the split-row kernels' store pass).
  template <int B, int N>
  __device__ __forceinline__ void StoreBatch(const float (&normalized)[B][N], int64_t row,
                                             int64_t col, int64_t stride, int64_t count) const {
    Weights<B, N> w;
    LoadWeights(w, col, stride, count);
    StoreLoaded(normalized, w, row, col, stride, count);
  }
};
}  // namespace old
namespace kt::kernels::internal {
template <typename T>
struct WeightsOf<old::AffineStore<T>> {
  static constexpr bool kLoads = true;
  static constexpr int kValueBytes = static_cast<int>(sizeof(T));
  template <int B, int N>
  using type = typename old::AffineStore<T>::template Weights<B, N>;
};
}  // namespace kt::kernels::internal

using LaunchFn = std::function<void(int set, cudaStream_t)>;
double Median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
double Time(const LaunchFn& f, cudaStream_t s) {
  const int launches = 10;
  f(0, s); CK(cudaStreamSynchronize(s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(i % 2, s);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<double> us;
  for (int r = 0; r < 15; ++r) {
    cudaEventRecord(a, s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(b, s); CK(cudaStreamSynchronize(s));
    float ms; cudaEventElapsedTime(&ms, a, b); us.push_back(ms * 1e3 / launches);
  }
  cudaEventDestroy(a); cudaEventDestroy(b); cudaGraphExecDestroy(ge);
  return Median(us);
}
template <typename T> void FillRandom(T* d, size_t n, unsigned seed) {
  std::vector<T> h(n); unsigned s = seed;
  for (size_t i = 0; i < n; ++i) { float u = 0; for (int k = 0; k < 4; ++k) { s = s * 1664525u + 1013904223u; u += (s >> 8) * (1.f / 16777216.f); } h[i] = T(u - 2.f); }
  CK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
}

template <Op op, typename T, int pack, int bs>
void Case(const char* opname, const char* dt, int64_t R, int64_t C, cudaStream_t st) {
  constexpr bool kPlain = op == Op::kSoftmax || op == Op::kReduceScale;
  using L1 = DirectLoad<T>; using L0 = old::DirectLoad<T>;
  using S1 = std::conditional_t<kPlain, DirectStore<T>, AffineStore<T>>;
  using S0 = std::conditional_t<kPlain, old::DirectStore<T>, old::AffineStore<T>>;
  T *x[2], *y[2], *w, *bta; float *mean, *istd;
  for (int i = 0; i < 2; ++i) { CK(cudaMalloc(&x[i], R * C * sizeof(T))); CK(cudaMalloc(&y[i], R * C * sizeof(T))); FillRandom(x[i], R * C, 3 + i); }
  CK(cudaMalloc(&w, C * sizeof(T))); CK(cudaMalloc(&bta, C * sizeof(T))); FillRandom(w, C, 7); FillRandom(bta, C, 9);
  CK(cudaMalloc(&mean, R * 4)); CK(cudaMalloc(&istd, R * 4));
  const size_t smem = C * sizeof(T);
  auto k0 = &BlockSmemRowKernel<op, L0, S0, pack, bs>;
  auto k1 = &BlockSmemRowKernel<op, L1, S1, pack, bs>;
  CK(cudaFuncSetAttribute(k0, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  CK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int act0 = 0, act1 = 0, dev = 0, sms = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&act0, k0, bs, smem));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&act1, k1, bs, smem));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaFuncAttributes a0, a1; CK(cudaFuncGetAttributes(&a0, k0)); CK(cudaFuncGetAttributes(&a1, k1));
  std::vector<std::vector<char>> outs;
  for (int rep = 0; rep < 3; ++rep) for (int v = 0; v < 2; ++v) {
    const unsigned grid = unsigned(std::min<int64_t>(R, int64_t(sms) * (v ? act1 : act0)));
    const RowParams prm{R, C, 1e-5f, op == Op::kLayerNorm ? mean : nullptr, op == Op::kLayerNorm || op == Op::kRmsNorm ? istd : nullptr, op == Op::kReduceScale ? istd : nullptr};
    LaunchFn f = [&](int i, cudaStream_t q) {
      if constexpr (kPlain) {
        if (v == 0) k0<<<grid, bs, smem, q>>>(L0{x[i], C}, S0{y[i], C}, prm); else k1<<<grid, bs, smem, q>>>(L1{x[i], C}, S1{y[i], C}, prm);
      } else {
        T* b2 = op == Op::kRmsNorm ? nullptr : bta;
        if (v == 0) k0<<<grid, bs, smem, q>>>(L0{x[i], C}, S0{y[i], C, w, b2}, prm); else k1<<<grid, bs, smem, q>>>(L1{x[i], C}, S1{y[i], C, w, b2}, prm);
      }
      CK(cudaGetLastError());
    };
    const double us = Time(f, st);
    const double gbps = (2.0 * R * C * sizeof(T) + (kPlain ? 0 : 2.0 * C * sizeof(T))) / (us * 1e3);
    printf("%s,%s,%ld,%ld,b%d,p%d,%s,regs=%d,%.2f,%.0f\n", opname, dt, long(R), long(C), bs, pack, v ? "paired" : "per_element", v ? a1.numRegs : a0.numRegs, us, gbps);
    fflush(stdout);
    if (rep == 0) { std::vector<char> h(R * C * sizeof(T)); CK(cudaMemcpy(h.data(), y[0], h.size(), cudaMemcpyDeviceToHost)); outs.push_back(h); }
  }
  if (outs[0] != outs[1]) printf("MISMATCH %s %s\n", opname, dt);
  for (int i = 0; i < 2; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
  cudaFree(w); cudaFree(bta); cudaFree(mean); cudaFree(istd);
}

int main() {
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("op,dtype,rows,cols,block,pack,variant,regs,us,gbps\n");
  Case<Op::kLayerNorm, __half, 8, 512>("layer_norm", "float16", 49152, 32768, st);
  Case<Op::kLayerNorm, __nv_bfloat16, 8, 512>("layer_norm", "bfloat16", 49152, 32768, st);
  Case<Op::kLayerNorm, __half, 8, 128>("layer_norm", "float16", 49152, 4096, st);
  Case<Op::kRmsNorm, __half, 8, 512>("rms_norm", "float16", 49152, 32768, st);
  Case<Op::kSoftmax, __half, 8, 512>("softmax", "float16", 49152, 32768, st);
  Case<Op::kLayerNorm, float, 4, 512>("layer_norm", "float32", 49152, 16384, st);
  return 0;
}
