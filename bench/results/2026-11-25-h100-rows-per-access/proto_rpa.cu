// Prototype: the warp kernel's exact instance with more rows per thread
// group (rows_per_access 4 and 8; the library has 1 and 2) at the narrow
// points where torch.compile led. Same process, one stream, L2 flushed before
// each graph replay of 16 launches over 16 rotating input sets. Every
// variant's output is compared with the rpa=1 output (bit-identical expected).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"

using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x)                                                          \
  do {                                                                 \
    cudaError_t e = (x);                                               \
    if (e != cudaSuccess) {                                            \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

__global__ void FlushKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float4 v = p[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 12345.f) *out = s;
}
static cudaStream_t g_s;
static float4* g_flush;
static size_t g_flush_n;
static float* g_sink;
constexpr int kSets = 16;

template <class F>
double TimeGraph(F launch) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  launch(0);
  CK(cudaStreamSynchronize(g_s));
  CK(cudaStreamBeginCapture(g_s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kSets; ++i) launch(i);
  CK(cudaStreamEndCapture(g_s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaGraphDestroy(g);
  CK(cudaGraphLaunch(ge, g_s));
  CK(cudaStreamSynchronize(g_s));
  const int reps = 41;
  std::vector<cudaEvent_t> a(reps), b(reps);
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventCreate(&a[r]));
    CK(cudaEventCreate(&b[r]));
  }
  for (int r = 0; r < reps; ++r) {
    FlushKernel<<<1024, 512, 0, g_s>>>(g_flush, g_flush_n, g_sink);
    cudaEventRecord(a[r], g_s);
    CK(cudaGraphLaunch(ge, g_s));
    cudaEventRecord(b[r], g_s);
  }
  CK(cudaStreamSynchronize(g_s));
  for (int r = 0; r < reps; ++r) {
    float ms;
    cudaEventElapsedTime(&ms, a[r], b[r]);
    us.push_back(ms * 1e3 / kSets);
    cudaEventDestroy(a[r]);
    cudaEventDestroy(b[r]);
  }
  cudaGraphExecDestroy(ge);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

template <typename T>
T FromF(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __float2half(v);
}

template <Op op, typename T>
struct Point {
  int64_t rows, cols, mask_rows = 1;
  std::vector<T*> x, y;
  T *gamma = nullptr, *beta = nullptr, *mask = nullptr, *ref = nullptr;
  double copy_us = 0;
  KernelRequest Req(int i) const {
    KernelRequest r;
    r.rows = rows;
    r.cols = cols;
    r.x = x[i];
    r.y = y[i];
    if (op == Op::kLayerNorm || op == Op::kRmsNorm) r.gamma = gamma;
    if (op == Op::kLayerNorm) r.beta = beta;
    r.epsilon = 1e-5f;
    if (op == Op::kScaledMaskedSoftmax) {
      r.mask = mask;
      r.mask_rows = mask_rows;
      r.scale = 0.125f;
    }
    return r;
  }
  size_t Bytes() const { return rows * cols * sizeof(T); }
  double Moved() const {
    double b = 2.0 * Bytes();
    if (op == Op::kLayerNorm) b += 2.0 * cols * sizeof(T);
    if (op == Op::kRmsNorm) b += 1.0 * cols * sizeof(T);
    if (op == Op::kScaledMaskedSoftmax) b += 1.0 * mask_rows * cols * sizeof(T);
    return b;
  }
};

template <Op op, typename T, int pack, int cpt, int tgw, int rpa>
void Variant(Point<op, T>& P, int block, double* best, char* best_name) {
  const int64_t rows_per_block = int64_t(block / tgw) * rpa;
  if (block % 32 != 0 || block / tgw < 1 || P.rows % rows_per_block != 0 || P.cols != int64_t(cpt) * tgw) return;
  using L = decltype(MakeLoad<op, T>(P.Req(0)));
  using S = decltype(MakeStore<op, T>(P.Req(0)));
  auto kernel = &WarpRowKernel<op, L, S, pack, cpt, tgw, rpa, true>;
  const dim3 bd(tgw, block / tgw);
  const unsigned grid = unsigned(P.rows / rows_per_block);
  const RowParams prm{P.rows, P.cols, 1e-5f, nullptr, nullptr, nullptr};
  int active = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, kernel, block, 0));
  if (active == 0) return;  // too many registers for this block size
  auto run = [&](int i) {
    const KernelRequest r = P.Req(i);
    kernel<<<grid, bd, 0, g_s>>>(MakeLoad<op, T>(r), MakeStore<op, T>(r), prm);
    CK(cudaPeekAtLastError());
  };
  CK(cudaMemset(P.y[0], 0, P.Bytes()));
  run(0);
  CK(cudaStreamSynchronize(g_s));
  bool same = true;
  if (P.ref == nullptr) {
    CK(cudaMalloc(&P.ref, P.Bytes()));
    CK(cudaMemcpy(P.ref, P.y[0], P.Bytes(), cudaMemcpyDeviceToDevice));
  } else {
    std::vector<unsigned char> a(P.Bytes()), b(P.Bytes());
    CK(cudaMemcpy(a.data(), P.ref, P.Bytes(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), P.y[0], P.Bytes(), cudaMemcpyDeviceToHost));
    same = a == b;
  }
  const double us = TimeGraph(run);
  const double gbps = P.Moved() / (us * 1e3);
  const double copy_gbps = 2.0 * P.Bytes() / (P.copy_us * 1e3);
  char name[64];
  snprintf(name, sizeof name, "b%d/p%d/g%d/r%d", block, pack, tgw, rpa);
  printf("  %-16s %7.2f us %7.0f GB/s %5.1f%% copy-same  grid %6u (%.2f waves)  %s\n", name, us, gbps,
         100 * gbps / copy_gbps, grid, double(grid) / (active * 132.0), same ? "same" : "DIFFERENT");
  fflush(stdout);
  const int slot = rpa <= 2 ? 0 : 1;
  if (us < best[slot]) {
    best[slot] = us;
    strcpy(best_name + 64 * slot, name);
  }
}

template <Op op, typename T, int pack, int cpt, int tgw>
void Shapes(Point<op, T>& P, double* best, char* names) {
  if constexpr (tgw >= 1 && tgw <= 32) {
    for (int block : {64, 128, 256, 512}) {
      Variant<op, T, pack, cpt, tgw, 1>(P, block, best, names);
      if constexpr (tgw < 32) {
        Variant<op, T, pack, cpt, tgw, 2>(P, block, best, names);
        Variant<op, T, pack, cpt, tgw, 4>(P, block, best, names);
        Variant<op, T, pack, cpt, tgw, 8>(P, block, best, names);
      }
    }
  }
}

template <Op op, typename T, int kCols>
void Run(const char* opname, int64_t rows) {
  Point<op, T> P;
  P.rows = rows;
  P.cols = kCols;
  if (op == Op::kScaledMaskedSoftmax) P.mask_rows = kCols;
  printf("%s %s %lld x %d\n", opname, sizeof(T) == 4 ? "float32" : "float16", (long long)rows, kCols);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<T> host(P.rows * P.cols);
  for (auto& v : host) v = FromF<T>(2 * nd(rng));
  std::vector<T> hw(P.cols), hm(P.mask_rows * P.cols);
  for (auto& v : hw) v = FromF<T>(nd(rng));
  for (auto& v : hm) v = FromF<T>(rng() % 8 == 0 ? -INFINITY : nd(rng));
  CK(cudaMalloc(&P.gamma, P.cols * sizeof(T)));
  CK(cudaMalloc(&P.beta, P.cols * sizeof(T)));
  CK(cudaMalloc(&P.mask, hm.size() * sizeof(T)));
  CK(cudaMemcpy(P.gamma, hw.data(), P.cols * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(P.beta, hw.data(), P.cols * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(P.mask, hm.data(), hm.size() * sizeof(T), cudaMemcpyHostToDevice));
  P.x.resize(kSets);
  P.y.resize(kSets);
  for (int i = 0; i < kSets; ++i) {
    CK(cudaMalloc(&P.x[i], P.Bytes()));
    CK(cudaMalloc(&P.y[i], P.Bytes()));
    CK(cudaMemcpy(P.x[i], host.data(), P.Bytes(), cudaMemcpyHostToDevice));
  }
  P.copy_us = TimeGraph([&](int i) {
    CK(cudaMemcpyAsync(P.y[i], P.x[i], P.Bytes(), cudaMemcpyDeviceToDevice, g_s));
  });
  printf("  copy-same %.2f us\n", P.copy_us);
  double best[2] = {1e30, 1e30};
  char names[128] = {0};
  constexpr int kPack = 16 / sizeof(T);
  // 16-byte packs: one or two per lane; 8-byte packs: one.
  Shapes<op, T, kPack, kPack, kCols / kPack>(P, best, names);
  Shapes<op, T, kPack, 2 * kPack, kCols / (2 * kPack)>(P, best, names);
  Shapes<op, T, kPack / 2, kPack / 2, kCols / (kPack / 2)>(P, best, names);
  printf("  best rpa<=2: %s %.2f us   best rpa 4/8: %s %.2f us   -> %.3fx\n", names, best[0],
         names + 64, best[1], best[0] / best[1]);
  for (int i = 0; i < kSets; ++i) {
    cudaFree(P.x[i]);
    cudaFree(P.y[i]);
  }
  cudaFree(P.gamma);
  cudaFree(P.beta);
  cudaFree(P.mask);
  cudaFree(P.ref);
}

int main() {
  CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  g_flush_n = size_t(4) * prop.l2CacheSize / 16;
  CK(cudaMalloc(&g_flush, g_flush_n * 16));
  CK(cudaMalloc(&g_sink, 4));
  CK(cudaMemsetAsync(g_flush, 0, g_flush_n * 16, g_s));
  Run<Op::kRmsNorm, __half, 128>("rms_norm", 49152);
  Run<Op::kSoftmax, float, 16>("softmax", 32768);
  Run<Op::kSoftmax, float, 64>("softmax", 131072);
  Run<Op::kScaledMaskedSoftmax, __half, 64>("scaled_masked_softmax", 131072);
  Run<Op::kLayerNorm, __half, 128>("layer_norm", 49152);
  Run<Op::kSoftmax, __half, 64>("softmax", 49152);
  Run<Op::kRmsNorm, float, 64>("rms_norm", 49152);
  Run<Op::kLayerNorm, float, 32>("layer_norm", 49152);
  return 0;
}
