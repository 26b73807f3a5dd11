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

// Variants of the LayerNorm functors: widening (loads, weights) and
// narrowing (the output) each per element or paired.
template <typename T, int N, bool paired>
__device__ __forceinline__ void WidenV(const Pack<T, N>& p, float* dst) {
  if constexpr (paired) { Widen<T, N>(p, dst); } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = ToFloat(p.elem[i]);
  }
}
template <typename T, int N, bool paired>
__device__ __forceinline__ Pack<T, N> NarrowV(const float* src) {
  if constexpr (paired) { return Narrow<T, N>(src); } else {
    Pack<T, N> p;
#pragma unroll
    for (int i = 0; i < N; ++i) p.elem[i] = FromFloat<T>(src[i]);
    return p;
  }
}
template <typename T, bool pw>
struct LoadV {
  using storage_type = T;
  using cache_type = T;
  const T* __restrict__ src;
  int64_t row_stride;
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row, int64_t col) const {
    WidenV<T, N, pw>(*reinterpret_cast<const Pack<T, N>*>(src + row * row_stride + col), dst);
  }
};
template <typename T, bool pw, bool pn>
struct StoreV {
  T* __restrict__ dst;
  int64_t row_stride;
  const T* __restrict__ gamma;
  const T* __restrict__ beta;
  template <int N>
  __device__ __forceinline__ void Put(const float* out, int64_t row, int64_t col) const {
    *reinterpret_cast<Pack<T, N>*>(dst + row * row_stride + col) = NarrowV<T, N, pn>(out);
  }
  template <int N>
  __device__ __forceinline__ void store(const float* normalized, int64_t row, int64_t col) const {
    float out[N], weight[N];
    for (int i = 0; i < N; ++i) out[i] = normalized[i];
    if (gamma != nullptr) { WidenV<T, N, pw>(*reinterpret_cast<const Pack<T, N>*>(gamma + col), weight); for (int i = 0; i < N; ++i) out[i] *= weight[i]; }
    if (beta != nullptr) { WidenV<T, N, pw>(*reinterpret_cast<const Pack<T, N>*>(beta + col), weight); for (int i = 0; i < N; ++i) out[i] += weight[i]; }
    Put<N>(out, row, col);
  }
  template <int B, int N>
  struct Weights { Pack<T, N> gamma[B]; Pack<T, N> beta[B]; };
  template <int B, int N>
  __device__ __forceinline__ void LoadWeights(Weights<B, N>& w, int64_t col, int64_t stride, int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) {
        const int64_t at = col + b * stride;
        if (gamma != nullptr) w.gamma[b] = *reinterpret_cast<const Pack<T, N>*>(gamma + at);
        if (beta != nullptr) w.beta[b] = *reinterpret_cast<const Pack<T, N>*>(beta + at);
      }
    }
  }
  template <int B, int N>
  __device__ __forceinline__ void StoreWith(const float* normalized, const Weights<B, N>& w, int b, int64_t row, int64_t col) const {
    float out[N], weight[N];
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = normalized[i];
    if (gamma != nullptr) { WidenV<T, N, pw>(w.gamma[b], weight); for (int i = 0; i < N; ++i) out[i] *= weight[i]; }
    if (beta != nullptr) { WidenV<T, N, pw>(w.beta[b], weight); for (int i = 0; i < N; ++i) out[i] += weight[i]; }
    Put<N>(out, row, col);
  }
  template <int B, int N>
  __device__ __forceinline__ void StoreLoaded(const float (&normalized)[B][N], const Weights<B, N>& w, int64_t row, int64_t col, int64_t stride, int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) if (b < count) StoreWith<B, N>(normalized[b], w, b, row, col + b * stride);
  }
  template <int B, int N>
  __device__ __forceinline__ void StoreBatch(const float (&normalized)[B][N], int64_t row, int64_t col, int64_t stride, int64_t count) const {
    Weights<B, N> w;
    LoadWeights(w, col, stride, count);
    StoreLoaded(normalized, w, row, col, stride, count);
  }
};
namespace kt::kernels::internal {
template <typename T, bool pw, bool pn>
struct WeightsOf<StoreV<T, pw, pn>> {
  static constexpr bool kLoads = true;
  static constexpr int kValueBytes = static_cast<int>(sizeof(T));
  template <int B, int N>
  using type = typename StoreV<T, pw, pn>::template Weights<B, N>;
};
}  // namespace kt::kernels::internal

__global__ void SumKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) { float4 v = p[i]; s += v.x + v.y + v.z + v.w; }
  if (s == 12345.f) *out = s;
}
static float4* g_flush; static size_t g_flush_n; static float* g_sink;
using LaunchFn = std::function<void(int set, cudaStream_t)>;
double Median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
double Time(const LaunchFn& f, cudaStream_t s, bool flush) {
  const int launches = flush ? 20 : 10;
  f(0, s); CK(cudaStreamSynchronize(s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(i % 2, s);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<double> us;
  for (int r = 0; r < 15; ++r) {
    if (flush) SumKernel<<<132 * 8, 512, 0, s>>>(g_flush, g_flush_n, g_sink);
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


static const char* kNames[4] = {"per_element", "paired", "narrow_only", "widen_only"};
template <typename T, int pack, int bs, bool regs>
void Case(const char* dt, int64_t R, int64_t C, cudaStream_t st) {
  constexpr Op op = Op::kLayerNorm;
  T *x[2], *y[2], *w, *bta; float *mean, *istd;
  for (int i = 0; i < 2; ++i) { CK(cudaMalloc(&x[i], R * C * sizeof(T))); CK(cudaMalloc(&y[i], R * C * sizeof(T))); FillRandom(x[i], R * C, 3 + i); }
  CK(cudaMalloc(&w, C * sizeof(T))); CK(cudaMalloc(&bta, C * sizeof(T))); FillRandom(w, C, 7); FillRandom(bta, C, 9);
  CK(cudaMalloc(&mean, R * 4)); CK(cudaMalloc(&istd, R * 4));
  const size_t smem = regs ? 0 : C * sizeof(T);
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  std::vector<std::vector<char>> outs;
  auto run = [&](auto pw_c, auto pn_c, int v) {
    constexpr bool pw = decltype(pw_c)::value, pn = decltype(pn_c)::value;
    using L = LoadV<T, pw>; using S = StoreV<T, pw, pn>;
    auto k = regs ? &BlockRegsRowKernel<op, const L, const S, pack, bs, 16 / pack> : &BlockSmemRowKernel<op, L, S, pack, bs>;
    if (!regs) CK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k), cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    int act = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&act, k, bs, smem));
    cudaFuncAttributes a; CK(cudaFuncGetAttributes(&a, k));
    const unsigned grid = unsigned(std::min<int64_t>(R, int64_t(sms) * act));
    const RowParams prm{R, C, 1e-5f, mean, istd, nullptr};
    LaunchFn f = [&](int i, cudaStream_t q) { k<<<grid, bs, smem, q>>>(L{x[i], C}, S{y[i], C, w, bta}, prm); CK(cudaGetLastError()); };
    const double us = Time(f, st, regs);
    printf("layer_norm,%s,%ld,%ld,%s,b%d,p%d,%s,regs=%d,%.3f\n", dt, long(R), long(C), regs ? "block_regs" : "block_smem", bs, pack, kNames[v], a.numRegs, us);
    fflush(stdout);
    std::vector<char> h(R * C * sizeof(T)); CK(cudaMemcpy(h.data(), y[0], h.size(), cudaMemcpyDeviceToHost)); outs.push_back(h);
  };
  using F = std::false_type; using Tr = std::true_type;
  for (int rep = 0; rep < 3; ++rep) { run(F{}, F{}, 0); run(Tr{}, Tr{}, 1); run(F{}, Tr{}, 2); run(Tr{}, F{}, 3); }
  for (auto& o : outs) if (o != outs[0]) { printf("MISMATCH %s %ld x %ld\n", dt, long(R), long(C)); break; }
  for (int i = 0; i < 2; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
  cudaFree(w); cudaFree(bta); cudaFree(mean); cudaFree(istd);
}

int main() {
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("op,dtype,rows,cols,impl,block,pack,variant,regs,us\n");
  Case<__half, 8, 512, false>("float16", 16384, 32768, st);
  Case<__half, 8, 128, false>("float16", 49152, 4096, st);
  Case<__nv_bfloat16, 8, 512, false>("bfloat16", 16384, 32768, st);
  Case<__half, 8, 256, true>("float16", 1, 4096, st);
  Case<__half, 8, 256, true>("float16", 64, 4096, st);
  return 0;
}
