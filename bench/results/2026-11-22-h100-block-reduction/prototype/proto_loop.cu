// Prototype: LayerNorm / RMSNorm block kernels at few rows x 4096, timed
// under graph replay (steady, like kt_kernel_bench; and L2-flushed, like
// torch_bench). One binary per variant of the kernel headers:
//   base        the kernels at b38028d (weights loaded per pack by the store)
//   base_noweights  the same without gamma/beta (the weights' share)
//   prefetchN   weights of the first batch loaded before the block reduction,
//               N bytes of weights per thread in flight per batch
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
#ifndef VARIANT
#define VARIANT "base"
#endif
#ifndef NO_WEIGHTS
#define NO_WEIGHTS 0
#endif

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

template <class L, class S> struct Args { L l; S s; RowParams p; };

template <Op op, typename T, int pack, int bs>
void Case(const char* opname, const char* dt, int64_t R, int64_t C, cudaStream_t st) {
  using L = DirectLoad<T>; using S = std::conditional_t<op == Op::kSoftmax, DirectStore<T>, AffineStore<T>>;
  const int sets = std::clamp(int(2e8 / (2.0 * R * C * sizeof(T))), 2, 64);
  std::vector<T*> x(sets), y(sets), w(sets), bta(sets);
  for (int i = 0; i < sets; ++i) {
    CK(cudaMalloc(&x[i], R * C * sizeof(T))); CK(cudaMalloc(&y[i], R * C * sizeof(T)));
    CK(cudaMalloc(&w[i], C * sizeof(T))); CK(cudaMalloc(&bta[i], C * sizeof(T)));
    CK(cudaMemset(x[i], 0x3c, R * C * sizeof(T))); CK(cudaMemset(w[i], 0x3c, C * sizeof(T))); CK(cudaMemset(bta[i], 0x1c, C * sizeof(T)));
  }
  for (int impl = 0; impl < 2; ++impl) {
    auto kernel = impl == 0 ? &BlockSmemRowKernel<op, const L, const S, pack, bs> : &BlockUncachedRowKernel<op, const L, const S, pack, bs>;
    const size_t smem = impl == 0 ? C * sizeof(T) : 0;
    if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaFuncAttributes attr; CK(cudaFuncGetAttributes(&attr, kernel));
    int per_sm = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, bs, smem));
    const unsigned grid = unsigned(std::min<int64_t>(R, int64_t(132) * per_sm));
    LaunchFn f = [&](int i, cudaStream_t q) {
      const T* g = NO_WEIGHTS ? nullptr : w[i];
      const T* b = (NO_WEIGHTS || op == Op::kRmsNorm) ? nullptr : bta[i];
      if constexpr (op == Op::kSoftmax) {
        kernel<<<grid, bs, smem, q>>>(L{x[i], C}, S{y[i], C}, RowParams{R, C, 1e-5f, nullptr, nullptr, nullptr});
      } else {
        kernel<<<grid, bs, smem, q>>>(L{x[i], C}, S{y[i], C, g, b}, RowParams{R, C, 1e-5f, nullptr, nullptr, nullptr});
      }
      CK(cudaGetLastError());
    };
    const double steady = Time(f, sets, 0, st), flushed = Time(f, sets, 1, st);
    printf("%s,%s,%s,%ld,%ld,%s,b%d,p%d,%d,%.3f,%.3f\n", VARIANT, opname, dt, long(R), long(C), impl == 0 ? "block_smem" : "block_uncached", bs, pack, attr.numRegs, steady, flushed);
    fflush(stdout);
  }
  for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); cudaFree(w[i]); cudaFree(bta[i]); }
}

template <Op op>
void Op4096(const char* name, cudaStream_t st) {
  for (int64_t R : {1, 8, 64}) {
    Case<op, float, 4, 128>(name, "float32", R, 4096, st);
    Case<op, float, 4, 256>(name, "float32", R, 4096, st);
    Case<op, float, 4, 512>(name, "float32", R, 4096, st);
    Case<op, float, 4, 1024>(name, "float32", R, 4096, st);
    Case<op, __half, 8, 128>(name, "float16", R, 4096, st);
    Case<op, __half, 8, 256>(name, "float16", R, 4096, st);
    Case<op, __half, 8, 512>(name, "float16", R, 4096, st);
    Case<op, __half, 4, 256>(name, "float16", R, 4096, st);
  }
}

int main() {
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("variant,op,dtype,rows,cols,impl,block,pack,regs,steady_us,flushed_us\n");
  Case<Op::kLayerNorm, __half, 8, 256>("layer_norm", "float16", 49152, 16384, st);
  Case<Op::kLayerNorm, __half, 8, 128>("layer_norm", "float16", 49152, 8192, st);
  Case<Op::kLayerNorm, __half, 8, 128>("layer_norm", "float16", 49152, 4096, st);
  Case<Op::kLayerNorm, __half, 8, 512>("layer_norm", "float16", 4096, 32768, st);
  Case<Op::kLayerNorm, float, 4, 256>("layer_norm", "float32", 49152, 16384, st);
  Case<Op::kSoftmax, __half, 8, 256>("softmax", "float16", 49152, 16384, st);
  Case<Op::kRmsNorm, __half, 8, 256>("rms_norm", "float16", 49152, 16384, st);
  Case<Op::kLayerNorm, __half, 8, 512>("layer_norm", "float16", 64, 4096, st);
  Case<Op::kLayerNorm, float, 4, 512>("layer_norm", "float32", 64, 4096, st);
  return 0;
}
