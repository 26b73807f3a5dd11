// Prototype: block_regs (row in registers) beside block_smem and block_uncached.
// under graph replay (steady, like kt_kernel_bench; and L2-flushed, like
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>
#include <vector>
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"
using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
#include "regs2.cuh"  // this folder

__global__ void SumKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) { float4 v = p[i]; s += v.x + v.y + v.z + v.w; }
  if (s == 12345.f) *out = s;
}
static float4* g_flush; static size_t g_flush_n; static float* g_sink;
using LaunchFn = std::function<void(int set, cudaStream_t)>;
double Median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

// mode 0: steady (64 launches over rotating sets, back to back); 1: L2 flushed before a graph of 20.
double Time(const LaunchFn& f, int sets, int mode, cudaStream_t s) {
  const int launches = mode == 1 ? 20 : 64;
  f(0, s); CK(cudaStreamSynchronize(s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(i % sets, s);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<double> us;
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  for (int r = 0; r < 25; ++r) {
    if (mode == 1) SumKernel<<<132 * 8, 512, 0, s>>>(g_flush, g_flush_n, g_sink);
    cudaEventRecord(a, s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(b, s); CK(cudaStreamSynchronize(s));
    float ms; cudaEventElapsedTime(&ms, a, b); us.push_back(ms * 1e3 / launches);
  }
  cudaEventDestroy(a); cudaEventDestroy(b); cudaGraphExecDestroy(ge);
  return Median(us);
}

// Random normal-ish data (sum of uniforms), fixed weights; x/y rotate over
// `sets`; mode 1 flushes L2 before each graph replay (like kt_kernel_bench
// and torch_bench for small problems).
template <typename T> void FillRandom(T* d, size_t n, unsigned seed) {
  std::vector<T> h(n); unsigned s = seed;
  for (size_t i = 0; i < n; ++i) { float u = 0; for (int k = 0; k < 4; ++k) { s = s * 1664525u + 1013904223u; u += (s >> 8) * (1.f / 16777216.f); } h[i] = T(u - 2.f); }
  CK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
}

template <Op op, typename T, int pack, int bs>
void Case(const char* opname, const char* dt, int64_t R, int64_t C, cudaStream_t st) {
  using L = DirectLoad<T>;
  using S = std::conditional_t<op == Op::kSoftmax || op == Op::kReduceScale, DirectStore<T>, AffineStore<T>>;
  constexpr int kPacks = 16 / pack;
  if (C / pack > int64_t(kPacks) * bs) return;
  const int sets = std::clamp(int(2e8 / (2.0 * R * C * sizeof(T))), 2, 64);
  std::vector<T*> x(sets), y(sets);
  T *w, *bta; float* stat;
  CK(cudaMalloc(&stat, R * 4)); CK(cudaMalloc(&w, C * sizeof(T))); CK(cudaMalloc(&bta, C * sizeof(T)));
  FillRandom(w, C, 7); FillRandom(bta, C, 9);
  for (int i = 0; i < sets; ++i) {
    CK(cudaMalloc(&x[i], R * C * sizeof(T))); CK(cudaMalloc(&y[i], R * C * sizeof(T)));
    FillRandom(x[i], R * C, 11 + i);
  }
  for (int impl = 0; impl < 3; ++impl) {
    if (impl == 2 && op != Op::kLayerNorm) continue;
    auto kernel = impl == 0 ? &BlockRegsRowKernel<op, const L, const S, pack, bs, kPacks>
                : impl == 1 ? &BlockRegs2<op, const L, const S, pack, bs, kPacks, false>
                            : &BlockRegs2<op, const L, const S, pack, bs, kPacks, true>;
    cudaFuncAttributes attr; CK(cudaFuncGetAttributes(&attr, kernel));
    LaunchFn f = [&](int i, cudaStream_t q) {
      const RowParams prm{R, C, 1e-5f, nullptr, op == Op::kRmsNorm ? stat : nullptr, op == Op::kReduceScale ? stat : nullptr};
      if constexpr (op == Op::kSoftmax || op == Op::kReduceScale) {
        kernel<<<unsigned(R), bs, 0, q>>>(L{x[i], C}, S{y[i], C}, prm);
      } else {
        kernel<<<unsigned(R), bs, 0, q>>>(L{x[i], C}, S{y[i], C, w, op == Op::kRmsNorm ? nullptr : bta}, prm);
      }
      CK(cudaGetLastError());
    };
    const double flushed = Time(f, sets, 1, st);
    static const char* names[] = {"regs", "regs_order", "regs_order_twopass"};
    printf("%s,%s,%ld,%ld,%s,b%d,p%d,%d,%.3f\n", opname, dt, long(R), long(C), names[impl], bs, pack, attr.numRegs, flushed);
    fflush(stdout);
  }
  for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
  cudaFree(w); cudaFree(bta); cudaFree(stat);
}

template <Op op>
void Rows(const char* name, cudaStream_t st) {
  for (int64_t R : {1, 8, 64}) {
    Case<op, float, 4, 256>(name, "float32", R, 4096, st);
    Case<op, float, 4, 512>(name, "float32", R, 4096, st);
    Case<op, __half, 8, 256>(name, "float16", R, 4096, st);
    Case<op, __half, 8, 512>(name, "float16", R, 4096, st);
    Case<op, __half, 4, 256>(name, "float16", R, 4096, st);
  }
}

int main() {
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("op,dtype,rows,cols,variant,block,pack,regs,flushed_us\n");
  for (int rep = 0; rep < 2; ++rep) {
    Rows<Op::kLayerNorm>("layer_norm", st);
    Rows<Op::kRmsNorm>("rms_norm", st);
    Rows<Op::kReduceScale>("reduce_scale", st);
    Rows<Op::kSoftmax>("softmax", st);
  }
  return 0;
}
