// Prototype: block_regs float16 with paired conversions (__half22float2 on
// load, __floats2half2_rn on store) against the library's per-element ones.
// Same kernel template (BlockRegsRowKernel), only the load/store functors
// differ; outputs must be bit-identical. L2 flushed before each graph replay.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"
using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

template <int N>
__device__ __forceinline__ void WidenH2(const Pack<__half, N>& p, float* dst) {
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&p.elem[i]));
    dst[i] = f.x; dst[i + 1] = f.y;
  }
}
template <int N>
__device__ __forceinline__ void NarrowStoreH2(__half* dst, const float* v) {
  Pack<__half, N> p;
#pragma unroll
  for (int i = 0; i < N; i += 2) *reinterpret_cast<__half2*>(&p.elem[i]) = __floats2half2_rn(v[i], v[i + 1]);
  *reinterpret_cast<Pack<__half, N>*>(dst) = p;
}

struct H2Load {
  using storage_type = __half;
  using cache_type = __half;
  const __half* __restrict__ src;
  int64_t row_stride;
  template <int N>
  __device__ __forceinline__ void load(float* dst, int64_t row, int64_t col) const {
    const Pack<__half, N> p = *reinterpret_cast<const Pack<__half, N>*>(src + row * row_stride + col);
    WidenH2<N>(p, dst);
  }
};
struct H2Store {
  __half* __restrict__ dst;
  int64_t row_stride;
  template <int N>
  __device__ __forceinline__ void store(const float* v, int64_t row, int64_t col) const {
    NarrowStoreH2<N>(dst + row * row_stride + col, v);
  }
};
struct H2AffineStore {
  __half* __restrict__ dst;
  int64_t row_stride;
  const __half* __restrict__ gamma;
  const __half* __restrict__ beta;
  template <int B, int N>
  struct Weights { Pack<__half, N> gamma[B]; Pack<__half, N> beta[B]; };
  template <int B, int N>
  __device__ __forceinline__ void LoadWeights(Weights<B, N>& w, int64_t col, int64_t stride, int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) {
        const int64_t at = col + b * stride;
        if (gamma != nullptr) w.gamma[b] = *reinterpret_cast<const Pack<__half, N>*>(gamma + at);
        if (beta != nullptr) w.beta[b] = *reinterpret_cast<const Pack<__half, N>*>(beta + at);
      }
    }
  }
  template <int B, int N>
  __device__ __forceinline__ void StoreLoaded(const float (&v)[B][N], const Weights<B, N>& w, int64_t row,
                                              int64_t col, int64_t stride, int64_t count) const {
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b < count) {
        float out[N], g[N], bb[N];
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = v[b][i];
        if (gamma != nullptr) { WidenH2<N>(w.gamma[b], g); for (int i = 0; i < N; ++i) out[i] *= g[i]; }
        if (beta != nullptr) { WidenH2<N>(w.beta[b], bb); for (int i = 0; i < N; ++i) out[i] += bb[i]; }
        NarrowStoreH2<N>(dst + row * row_stride + col + b * stride, out);
      }
    }
  }
};
namespace kt::kernels::internal {
template <>
struct WeightsOf<H2AffineStore> {
  static constexpr bool kLoads = true;
  static constexpr int kValueBytes = 2;
  template <int B, int N>
  using type = H2AffineStore::Weights<B, N>;
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
double Time(const LaunchFn& f, int sets, cudaStream_t s) {
  const int launches = 20;
  f(0, s); CK(cudaStreamSynchronize(s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(i % sets, s);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<double> us;
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  for (int r = 0; r < 31; ++r) {
    SumKernel<<<132 * 8, 512, 0, s>>>(g_flush, g_flush_n, g_sink);
    cudaEventRecord(a, s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(b, s); CK(cudaStreamSynchronize(s));
    float ms; cudaEventElapsedTime(&ms, a, b); us.push_back(ms * 1e3 / launches);
  }
  cudaEventDestroy(a); cudaEventDestroy(b); cudaGraphExecDestroy(ge);
  return Median(us);
}
void FillRandom(__half* d, size_t n, unsigned seed) {
  std::vector<__half> h(n); unsigned s = seed;
  for (size_t i = 0; i < n; ++i) { float u = 0; for (int k = 0; k < 4; ++k) { s = s * 1664525u + 1013904223u; u += (s >> 8) * (1.f / 16777216.f); } h[i] = __float2half(u - 2.f); }
  CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
}

template <Op op, int pack, int bs>
void Case(const char* opname, int64_t R, int64_t C, cudaStream_t st) {
  constexpr bool kPlain = op == Op::kSoftmax || op == Op::kReduceScale;
  using L0 = DirectLoad<__half>;
  using S0 = std::conditional_t<kPlain, DirectStore<__half>, AffineStore<__half>>;
  using S1 = std::conditional_t<kPlain, H2Store, H2AffineStore>;
  constexpr int kPacks = 16 / pack;
  const int sets = 64;
  std::vector<__half*> x(sets), y(sets);
  __half *w, *bta; float* stat;
  CK(cudaMalloc(&stat, R * 4)); CK(cudaMalloc(&w, C * 2)); CK(cudaMalloc(&bta, C * 2));
  FillRandom(w, C, 7); FillRandom(bta, C, 9);
  for (int i = 0; i < sets; ++i) { CK(cudaMalloc(&x[i], R * C * 2)); CK(cudaMalloc(&y[i], R * C * 2)); FillRandom(x[i], R * C, 11 + i); }
  std::vector<char> out[2];
  for (int v = 0; v < 2; ++v) {
    LaunchFn f = [&](int i, cudaStream_t q) {
      const RowParams prm{R, C, 1e-5f, nullptr, op == Op::kRmsNorm ? stat : nullptr, op == Op::kReduceScale ? stat : nullptr};
      if constexpr (kPlain) {
        if (v == 0) BlockRegsRowKernel<op, const L0, const S0, pack, bs, kPacks><<<unsigned(R), bs, 0, q>>>(L0{x[i], C}, S0{y[i], C}, prm);
        else BlockRegsRowKernel<op, const H2Load, const S1, pack, bs, kPacks><<<unsigned(R), bs, 0, q>>>(H2Load{x[i], C}, S1{y[i], C}, prm);
      } else {
        __half* b2 = op == Op::kRmsNorm ? nullptr : bta;
        if (v == 0) BlockRegsRowKernel<op, const L0, const S0, pack, bs, kPacks><<<unsigned(R), bs, 0, q>>>(L0{x[i], C}, S0{y[i], C, w, b2}, prm);
        else BlockRegsRowKernel<op, const H2Load, const S1, pack, bs, kPacks><<<unsigned(R), bs, 0, q>>>(H2Load{x[i], C}, S1{y[i], C, w, b2}, prm);
      }
      CK(cudaGetLastError());
    };
    const double us = Time(f, sets, st);
    out[v].resize(R * C * 2);
    CK(cudaMemcpy(out[v].data(), y[0], R * C * 2, cudaMemcpyDeviceToHost));
    printf("%s,float16,%ld,%ld,%s,b%d,p%d,%.3f\n", opname, long(R), long(C), v == 0 ? "per_element" : "paired_h2", bs, pack, us);
    fflush(stdout);
  }
  if (out[0] != out[1]) printf("MISMATCH %s %ld\n", opname, long(R));
  for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
  cudaFree(w); cudaFree(bta); cudaFree(stat);
}

template <Op op>
void Rows(const char* name, cudaStream_t st) {
  for (int64_t R : {1, 8, 64}) {
    Case<op, 8, 256>(name, R, 4096, st);
    Case<op, 8, 512>(name, R, 4096, st);
  }
}

int main() {
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("op,dtype,rows,cols,variant,block,pack,flushed_us\n");
  for (int rep = 0; rep < 3; ++rep) {
    Rows<Op::kLayerNorm>("layer_norm", st);
    Rows<Op::kRmsNorm>("rms_norm", st);
    Rows<Op::kReduceScale>("reduce_scale", st);
    Rows<Op::kSoftmax>("softmax", st);
  }
  return 0;
}
