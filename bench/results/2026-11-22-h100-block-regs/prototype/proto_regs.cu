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
#include "regs_kernel.cuh"  // this folder; -I<repo> for kernels/

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

template <Op op, typename T, int pack, int bs>
void Case(const char* opname, const char* dt, int64_t R, int64_t C, cudaStream_t st) {
  using L = DirectLoad<T>;
  using S = std::conditional_t<op == Op::kSoftmax || op == Op::kReduceScale, DirectStore<T>, AffineStore<T>>;
  constexpr int kPacks = 16 / pack;
  const int sets = std::clamp(int(2e8 / (2.0 * R * C * sizeof(T))), 2, 64);
  std::vector<T*> x(sets), y(sets), w(sets), bta(sets);
  float* stat; CK(cudaMalloc(&stat, R * 4));
  for (int i = 0; i < sets; ++i) {
    CK(cudaMalloc(&x[i], R * C * sizeof(T))); CK(cudaMalloc(&y[i], R * C * sizeof(T)));
    CK(cudaMalloc(&w[i], C * sizeof(T))); CK(cudaMalloc(&bta[i], C * sizeof(T)));
    CK(cudaMemset(x[i], 0x3c, R * C * sizeof(T))); CK(cudaMemset(w[i], 0x3c, C * sizeof(T))); CK(cudaMemset(bta[i], 0x1c, C * sizeof(T)));
  }
  for (int impl = 0; impl < 3; ++impl) {
    if (impl == 2 && C / pack > int64_t(kPacks) * bs) continue;
    auto kernel = impl == 0 ? &BlockSmemRowKernel<op, const L, const S, pack, bs>
                : impl == 1 ? &BlockUncachedRowKernel<op, const L, const S, pack, bs>
                            : &BlockRegsRowKernel<op, const L, const S, pack, bs, kPacks>;
    const size_t smem = impl == 0 ? C * sizeof(T) : 0;
    if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaFuncAttributes attr; CK(cudaFuncGetAttributes(&attr, kernel));
    int per_sm = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, bs, smem));
    const int64_t grid = std::min<int64_t>(R, int64_t(per_sm) * 132 * 4);
    LaunchFn f = [&](int i, cudaStream_t q) {
      const RowParams prm{R, C, 1e-5f, nullptr, op == Op::kRmsNorm ? stat : nullptr, op == Op::kReduceScale ? stat : nullptr};
      if constexpr (op == Op::kSoftmax || op == Op::kReduceScale) {
        kernel<<<unsigned(grid), bs, smem, q>>>(L{x[i], C}, S{y[i], C}, prm);
      } else {
        kernel<<<unsigned(grid), bs, smem, q>>>(L{x[i], C}, S{y[i], C, w[i], op == Op::kRmsNorm ? nullptr : bta[i]}, prm);
      }
      CK(cudaGetLastError());
    };
    const double steady = Time(f, sets, 0, st);
    const double flushed = R * C * sizeof(T) < (64 << 20) ? Time(f, sets, 1, st) : 0.0;
    static const char* names[] = {"block_smem", "block_uncached", "block_regs"};
    printf("%s,%s,%ld,%ld,%s,b%d,p%d,%d,%d,%.3f,%.3f\n", opname, dt, long(R), long(C), names[impl], bs, pack, attr.numRegs, per_sm, steady, flushed);
    fflush(stdout);
  }
  for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); cudaFree(w[i]); cudaFree(bta[i]); }
  cudaFree(stat);
}

template <Op op>
void OneShape(const char* name, int64_t R, int64_t C, cudaStream_t st) {
  Case<op, float, 4, 128>(name, "float32", R, C, st);
  Case<op, float, 4, 256>(name, "float32", R, C, st);
  Case<op, float, 4, 512>(name, "float32", R, C, st);
  Case<op, float, 4, 1024>(name, "float32", R, C, st);
  Case<op, __half, 8, 128>(name, "float16", R, C, st);
  Case<op, __half, 8, 256>(name, "float16", R, C, st);
  Case<op, __half, 8, 512>(name, "float16", R, C, st);
  Case<op, __half, 8, 1024>(name, "float16", R, C, st);
  Case<op, __half, 4, 256>(name, "float16", R, C, st);
  Case<op, __half, 4, 512>(name, "float16", R, C, st);
}

template <Op op>
void AllShapes(const char* name, cudaStream_t st) {
  for (int64_t R : {1, 8, 64}) OneShape<op>(name, R, 4096, st);
  OneShape<op>(name, 64, 8192, st);
  OneShape<op>(name, 49152, 4096, st);
  OneShape<op>(name, 8192, 16384, st);
}

int main() {
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  printf("op,dtype,rows,cols,impl,block,pack,regs,blocks_per_sm,steady_us,flushed_us\n");
  AllShapes<Op::kLayerNorm>("layer_norm", st);
  AllShapes<Op::kRmsNorm>("rms_norm", st);
  AllShapes<Op::kReduceScale>("reduce_scale", st);
  AllShapes<Op::kSoftmax>("softmax", st);
  return 0;
}
