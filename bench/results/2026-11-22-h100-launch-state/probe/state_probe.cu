// Which host-side CUDA work puts a process into the state where every
// graph-launched kernel costs ~0.3 us more? Times three copy layouts
// (L2-flushed graph replays on a non-blocking stream), then does the trigger
// named by argv[1] argv[2] times, then times them again.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <chrono>
#include <thread>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void Copy16(const uint4* __restrict__ x, uint4* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}
__global__ void Tiny(int* p) { if (threadIdx.x == 0) p[0] += 1; }
__global__ void SumKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) { float4 v = p[i]; s += v.x + v.y + v.z + v.w; }
  if (s == 12345.f) *out = s;
}
static float4* g_flush; static size_t g_flush_n; static float* g_sink;

struct Layout { const char* name; int threads; size_t bytes; };
static const Layout kLayouts[] = {{"1x4096h", 512, 8192}, {"64x4096h", 512, 64 * 8192}, {"32768x16f", 128, 32768 * 16 * 4}};

double TimeCopy(const Layout& L, cudaStream_t s, std::vector<void*>& xs, std::vector<void*>& ys) {
  const int n = L.bytes / 16, blocks = (n + L.threads - 1) / L.threads, launches = 20;
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) Copy16<<<blocks, L.threads, 0, s>>>((const uint4*)xs[i], (uint4*)ys[i], n);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  const int reps = 41;
  std::vector<cudaEvent_t> a(reps), b(reps);
  for (int r = 0; r < reps; ++r) { CK(cudaEventCreate(&a[r])); CK(cudaEventCreate(&b[r])); }
  for (int r = 0; r < reps; ++r) {
    SumKernel<<<132 * 8, 512, 0, s>>>(g_flush, g_flush_n, g_sink);
    cudaEventRecord(a[r], s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(b[r], s);
    CK(cudaStreamSynchronize(s));
  }
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) { float ms; cudaEventElapsedTime(&ms, a[r], b[r]); us.push_back(ms * 1e3 / launches); cudaEventDestroy(a[r]); cudaEventDestroy(b[r]); }
  cudaGraphExecDestroy(ge);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int main(int argc, char** argv) {
  const std::string trig = argc > 1 ? argv[1] : "none";
  const int N = argc > 2 ? atoi(argv[2]) : 64;
  const bool new_stream_after = argc > 3 && !strcmp(argv[3], "newstream");
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  g_flush_n = size_t(200) << 20 >> 4;
  CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  CK(cudaMemsetAsync(g_flush, 0, g_flush_n * 16, s));
  std::vector<std::vector<void*>> X(3), Y(3);
  for (int l = 0; l < 3; ++l) for (int i = 0; i < 20; ++i) {
    void *x, *y; CK(cudaMalloc(&x, kLayouts[l].bytes)); CK(cudaMalloc(&y, kLayouts[l].bytes));
    CK(cudaMemsetAsync(x, 0x3c, kLayouts[l].bytes, s)); X[l].push_back(x); Y[l].push_back(y);
  }
  CK(cudaStreamSynchronize(s));
  auto measure = [&](const char* when, cudaStream_t st) {
    printf("%s %d %s %s", trig.c_str(), N, new_stream_after ? "newstream" : "-", when);
    for (int l = 0; l < 3; ++l) printf(" %s %.3f", kLayouts[l].name, TimeCopy(kLayouts[l], st, X[l], Y[l]));
    printf("\n"); fflush(stdout);
  };
  measure("before1", s); measure("before2", s);
  void* small; CK(cudaMalloc(&small, size_t(N) * 8192 + 8192));
  std::vector<char> host(8192, 1);
  cudaStream_t other = nullptr;
  if (trig == "memset_blocking") CK(cudaStreamCreate(&other));
  if (trig == "memset_nonblocking_other") CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  for (int i = 0; i < N; ++i) {
    char* p = (char*)small + size_t(i) * 8192;
    if (trig == "memset_legacy") CK(cudaMemset(p, 0x3c, 8192));
    else if (trig == "memset_legacy_async") CK(cudaMemsetAsync(p, 0x3c, 8192, 0));
    else if (trig == "memset_measuring") CK(cudaMemsetAsync(p, 0x3c, 8192, s));
    else if (trig == "memset_blocking" || trig == "memset_nonblocking_other") CK(cudaMemsetAsync(p, 0x3c, 8192, other));
    else if (trig == "memset_ptds") CK(cudaMemsetAsync(p, 0x3c, 8192, cudaStreamPerThread));
    else if (trig == "memcpy_d2d_legacy") CK(cudaMemcpy(p, (char*)small + size_t(N) * 8192, 8192, cudaMemcpyDeviceToDevice));
    else if (trig == "memcpy_h2d_legacy") CK(cudaMemcpy(p, host.data(), 8192, cudaMemcpyHostToDevice));
    else if (trig == "memcpy_h2d_measuring") CK(cudaMemcpyAsync(p, host.data(), 8192, cudaMemcpyHostToDevice, s));
    else if (trig == "memcpy_d2d_measuring") CK(cudaMemcpyAsync(p, (char*)small + size_t(N) * 8192, 8192, cudaMemcpyDeviceToDevice, s));
    else if (trig == "kernel_legacy") Tiny<<<1, 32>>>((int*)p);
    else if (trig == "kernel_measuring") Tiny<<<1, 32, 0, s>>>((int*)p);
    else if (trig == "malloc_free") { void* q; CK(cudaMalloc(&q, 8192)); CK(cudaFree(q)); }
    else if (trig == "device_sync") CK(cudaDeviceSynchronize());
    else if (trig != "none") { printf("unknown trigger %s\n", trig.c_str()); return 2; }
  }
  CK(cudaDeviceSynchronize());
  if (const char* then = getenv("PROBE_THEN")) {
    // After the trigger: does any of these end the state?
    const std::string t = then;
    if (t == "new_stream_1" || t == "new_stream_8") {
      cudaStream_t n; CK(cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking));
      for (int i = 0; i < (t == "new_stream_1" ? 1 : 8); ++i) Tiny<<<1, 32, 0, n>>>((int*)small);
      CK(cudaStreamSynchronize(n));
    } else if (t == "legacy_1") {
      Tiny<<<1, 32>>>((int*)small);
    } else if (t == "measuring_64") {
      for (int i = 0; i < 64; ++i) Tiny<<<1, 32, 0, s>>>((int*)small);
    } else if (t == "big_free") {
      void* big; CK(cudaMalloc(&big, size_t(1) << 30)); CK(cudaFree(big));
    } else if (t == "other_1") {
      if (!other) { printf("other_1 needs an other-stream trigger\n"); return 2; }
      Tiny<<<1, 32, 0, other>>>((int*)small);
    }
    CK(cudaDeviceSynchronize());
    printf("then %s\n", then);
  }
  cudaStream_t s2 = s;
  if (new_stream_after) CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  if (const char* d = getenv("PROBE_DECAY_MS")) {
    // Time the 1 x 4096 copy again and again after the trigger: does the
    // state wear off, and when?
    const auto t0 = std::chrono::steady_clock::now();
    const double until = atof(d);
    const int gap = getenv("PROBE_GAP_MS") ? atoi(getenv("PROBE_GAP_MS")) : 50;
    for (;;) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (ms > until) break;
      printf("%s %d decay t=%.0fms 1x4096h %.3f\n", trig.c_str(), N, ms, TimeCopy(kLayouts[0], s2, X[0], Y[0]));
      fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(gap));
    }
    return 0;
  }
  measure("after1", s2); measure("after2", s2);
  return 0;
}
