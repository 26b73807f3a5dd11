// Harness check: the same kernel instances timed under the graph-replay
// methods of kt_kernel_bench/tuner (steady: back-to-back replays after a
// spin kernel), the narrow-row prototype (sync after each replay) and
// torch_bench (L2 flushed by a 4 x L2 read before each replay of 20
// launches), over one pooled allocation or one allocation per set.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"
using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void Spin(long long ns) { long long t0 = clock64(); while (clock64() - t0 < ns) {} }
__global__ void SumKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) { float4 v = p[i]; s += v.x + v.y + v.z + v.w; }
  if (s == 12345.f) *out = s;
}
static float4* g_flush; static size_t g_flush_n; static float* g_sink;
static void Flush(cudaStream_t s) { SumKernel<<<132 * 8, 512, 0, s>>>(g_flush, g_flush_n, g_sink); }

using LaunchFn = std::function<void(int set, cudaStream_t)>;

double Median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

cudaGraphExec_t Capture(const LaunchFn& f, int launches, int sets, cudaStream_t s) {
  f(0, s); CK(cudaStreamSynchronize(s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(i % sets, s);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  return ge;
}

// mode 0 steady, 1 sync-per-replay, 2 flushed (graph of 20)
double Time(const LaunchFn& f, int sets, int mode, cudaStream_t s) {
  const int launches = mode == 2 ? 20 : std::max(sets, 20);
  cudaGraphExec_t ge = Capture(f, launches, sets, s);
  const int reps = 30;
  std::vector<cudaEvent_t> ev(2 * reps + 1);
  for (auto& e : ev) cudaEventCreate(&e);
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  std::vector<double> us;
  if (mode == 0) {
    Spin<<<1, 1, 0, s>>>(2000000);
    cudaEventRecord(ev[0], s);
    for (int r = 0; r < reps; ++r) { CK(cudaGraphLaunch(ge, s)); cudaEventRecord(ev[r + 1], s); }
    CK(cudaStreamSynchronize(s));
    for (int r = 0; r < reps; ++r) { float ms; cudaEventElapsedTime(&ms, ev[r], ev[r + 1]); us.push_back(ms * 1e3 / launches); }
  } else {
    for (int r = 0; r < reps; ++r) {
      if (mode == 2) Flush(s);
      cudaEventRecord(ev[2 * r], s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(ev[2 * r + 1], s);
      CK(cudaStreamSynchronize(s));
      float ms; cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]); us.push_back(ms * 1e3 / launches);
    }
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cudaGraphExecDestroy(ge);
  return Median(us);
}

struct Sets { std::vector<char*> x, y; char* pool_x = nullptr; char* pool_y = nullptr; };
Sets MakeSets(size_t bytes, int n, bool pooled) {
  Sets s;
  if (pooled) {
    CK(cudaMalloc(&s.pool_x, bytes * n)); CK(cudaMalloc(&s.pool_y, bytes * n));
    for (int i = 0; i < n; ++i) { s.x.push_back(s.pool_x + i * bytes); s.y.push_back(s.pool_y + i * bytes); }
  } else {
    for (int i = 0; i < n; ++i) { char *a, *b; CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes)); s.x.push_back(a); s.y.push_back(b); }
  }
  for (auto* p : s.x) CK(cudaMemset(p, 0x3c, bytes));
  return s;
}
void FreeSets(Sets& s) {
  if (s.pool_x) { cudaFree(s.pool_x); cudaFree(s.pool_y); }
  else { for (auto* p : s.x) cudaFree(p); for (auto* p : s.y) cudaFree(p); }
}

template <class K, class MakeArgs>
void Case(const char* name, size_t x_bytes, int64_t grid, dim3 block, K kernel, MakeArgs make, cudaStream_t st) {
  const int wanted = int((4 * 50e6 + 2 * x_bytes - 1) / (2 * x_bytes));
  const int sets = std::clamp(wanted, 1, 64);
  for (int pooled : {1, 0}) {
    Sets s = MakeSets(x_bytes, std::max(sets, 20), pooled);
    LaunchFn f = [&](int i, cudaStream_t q) { auto a = make(s.x[i], s.y[i]); kernel<<<unsigned(grid), block, 0, q>>>(a.l, a.s, a.p); };
    LaunchFn c = [&](int i, cudaStream_t q) { CK(cudaMemcpyAsync(s.y[i], s.x[i], x_bytes, cudaMemcpyDeviceToDevice, q)); };
    double k0 = Time(f, sets, 0, st), k1 = Time(f, sets, 1, st), k2 = Time(f, std::max(sets, 20), 2, st);
    double c0 = Time(c, sets, 0, st), c1 = Time(c, sets, 1, st), c2 = Time(c, std::max(sets, 20), 2, st);
    printf("%-34s %s sets %2d | kernel us: steady %6.2f sync %6.2f flushed %6.2f | copy us: steady %6.2f sync %6.2f flushed %6.2f\n",
           name, pooled ? "pooled  " : "separate", sets, k0, k1, k2, c0, c1, c2);
    fflush(stdout);
    FreeSets(s);
  }
}

template <class L, class S> struct Args { L l; S s; RowParams p; };

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("GPU %s, L2 %d bytes\n", prop.name, prop.l2CacheSize);
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  float* w; CK(cudaMalloc(&w, 4096 * 4)); CK(cudaMemset(w, 0, 4096 * 4));
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  {  // softmax float32 32768 x 16, warp/b128/p4/g4/r2
    using L = DirectLoad<float>; using S = DirectStore<float>;
    const int64_t R = 32768, C = 16;
    auto make = [&](char* x, char* y) { return Args<L, S>{L{(const float*)x, C}, S{(float*)y, C}, RowParams{R, C, 1e-6f, nullptr, nullptr, nullptr}}; };
    Case("softmax f32 32768x16 b128/g4/r2", R * C * 4, R / (32 * 2), dim3(4, 32), &WarpRowKernel<Op::kSoftmax, L, S, 4, 4, 4, 2>, make, st);
    Case("softmax f32 32768x16 b256/g4/r1", R * C * 4, R / 64, dim3(4, 64), &WarpRowKernel<Op::kSoftmax, L, S, 4, 4, 4, 1>, make, st);
  }
  {  // rms_norm float32 49152 x 32, warp/b128/p4/g8/r2
    using L = DirectLoad<float>; using S = AffineStore<float>;
    const int64_t R = 49152, C = 32;
    auto make = [&](char* x, char* y) { return Args<L, S>{L{(const float*)x, C}, S{(float*)y, C, w, nullptr}, RowParams{R, C, 1e-6f, nullptr, nullptr, nullptr}}; };
    Case("rms f32 49152x32 b128/g8/r2", R * C * 4, R / (16 * 2), dim3(8, 16), &WarpRowKernel<Op::kRmsNorm, L, S, 4, 4, 8, 2>, make, st);
  }
  {  // rms_norm float16 49152 x 128, warp/b128/p8/g16/r2
    using L = DirectLoad<__half>; using S = AffineStore<__half>;
    const int64_t R = 49152, C = 128;
    auto make = [&](char* x, char* y) { return Args<L, S>{L{(const __half*)x, C}, S{(__half*)y, C, (const __half*)w, nullptr}, RowParams{R, C, 1e-6f, nullptr, nullptr, nullptr}}; };
    Case("rms f16 49152x128 b128/g16/r2", R * C * 2, R / (8 * 2), dim3(16, 8), &WarpRowKernel<Op::kRmsNorm, L, S, 8, 8, 16, 2>, make, st);
  }
  {  // layer_norm float32 64 x 4096 and 1 x 4096, block_uncached/b256/p4
    using L = DirectLoad<float>; using S = AffineStore<float>;
    for (int64_t R : {64, 8, 1}) {
      const int64_t C = 4096;
      auto make = [&, R](char* x, char* y) { return Args<L, S>{L{(const float*)x, C}, S{(float*)y, C, w, w}, RowParams{R, C, 1e-5f, nullptr, nullptr, nullptr}}; };
      char name[64]; snprintf(name, sizeof name, "ln f32 %ldx4096 uncached b256", long(R));
      Case(name, R * C * 4, R, dim3(256), &BlockUncachedRowKernel<Op::kLayerNorm, L, S, 4, 256>, make, st);
    }
  }
  return 0;
}
