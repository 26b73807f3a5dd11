// Prototype: narrow rows (16..128 columns) on the library's WarpRowKernel,
// sweeping rows per access beyond today's {1, 2} and lanes holding two packs
// (half the group width), to see what closes the gap to torch.compile at
// rms_norm/reduce_scale/softmax 49152 x 32..128 and attention s = 16..64.
// Timed under graph replay over rotating buffers (> 4 x L2), like
// kt_kernel_bench; every variant's output is checked against an fp64 CPU
// reference.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"

using namespace kt::kernels;
using namespace kt::kernels::internal;

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));              \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

constexpr size_t kPool = size_t(256) << 20;
static char *g_x, *g_y;
static void *g_w, *g_mask;
static int g_sms;

double HostTo(float v) { return v; }
double HostTo(__half v) { return __half2float(v); }

template <typename T>
struct Problem {
  const char* op;
  Op kind;
  int64_t rows, cols;
  int64_t sets;
  size_t set_bytes;
  std::vector<double> ref;  // set 0's reference output
};

template <Op op, typename T>
void Reference(Problem<T>& p) {
  std::vector<T> hx(p.rows * p.cols), hw(p.cols), hm(p.cols * p.cols);
  CK(cudaMemcpy(hx.data(), g_x, hx.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hw.data(), g_w, hw.size() * sizeof(T), cudaMemcpyDeviceToHost));
  if (op == Op::kScaledMaskedSoftmax)
    CK(cudaMemcpy(hm.data(), g_mask, hm.size() * sizeof(T), cudaMemcpyDeviceToHost));
  p.ref.assign(p.rows * p.cols, 0);
  const double scale = 1.0 / std::sqrt(double(p.cols));
  for (int64_t r = 0; r < p.rows; ++r) {
    std::vector<double> v(p.cols);
    for (int64_t c = 0; c < p.cols; ++c) {
      v[c] = HostTo(hx[r * p.cols + c]);
      if (op == Op::kScaledMaskedSoftmax) v[c] = v[c] * double(float(scale)) + HostTo(hm[(r % p.cols) * p.cols + c]);
    }
    double* out = &p.ref[r * p.cols];
    if (op == Op::kSoftmax || op == Op::kScaledMaskedSoftmax) {
      double m = -INFINITY, s = 0;
      for (double x : v) m = std::max(m, x);
      for (double x : v) s += std::exp(x - m);
      for (int64_t c = 0; c < p.cols; ++c) out[c] = std::exp(v[c] - m) / s;
    } else if (op == Op::kRmsNorm) {
      double sq = 0;
      for (double x : v) sq += x * x;
      const double inv = 1.0 / std::sqrt(sq / p.cols + 1e-6);
      for (int64_t c = 0; c < p.cols; ++c) out[c] = v[c] * inv * HostTo(hw[c]);
    } else if (op == Op::kReduceScale) {
      double m = 0;
      for (double x : v) m = std::max(m, std::fabs(x));
      for (int64_t c = 0; c < p.cols; ++c) out[c] = m > 0 ? v[c] / m : 0;
    }
  }
}

template <typename T>
double MaxErr(const Problem<T>& p) {
  std::vector<T> hy(p.rows * p.cols);
  CK(cudaMemcpy(hy.data(), g_y, hy.size() * sizeof(T), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < hy.size(); ++i) {
    const double got = HostTo(hy[i]), ref = p.ref[i];
    const double err = std::fabs(got - ref) / std::max(1.0, std::fabs(ref));
    if (!(err <= worst)) worst = std::isnan(err) ? 1e30 : std::max(worst, err);
  }
  return worst;
}

template <typename F>
double GraphUs(F launch, cudaStream_t s) {
  const int per_graph = 50;
  launch(0);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) launch(i + 1);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  CK(cudaGraphLaunch(ge, s));
  for (int rep = 0; rep < 9; ++rep) {
    cudaEventRecord(a, s);
    CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b));
    float t;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[4] * 1000.0 / per_graph;
}

struct Result {
  std::string name;
  double us, err;
};

template <Op op, typename T>
auto Functors(const Problem<T>& p, int set) {
  const T* x = reinterpret_cast<const T*>(g_x + set * p.set_bytes);
  T* y = reinterpret_cast<T*>(g_y + set * p.set_bytes);
  KernelRequest req;
  req.rows = p.rows;
  req.cols = p.cols;
  req.x = x;
  req.y = y;
  if (op == Op::kRmsNorm) req.gamma = g_w;
  if (op == Op::kScaledMaskedSoftmax) {
    req.mask = g_mask;
    req.mask_rows = p.cols;
    req.scale = 1.f / std::sqrt(float(p.cols));
  }
  return std::make_pair(MakeLoad<op, T>(req), MakeStore<op, T>(req));
}

// One WarpRowKernel instance; grid: every block (waves 0) or `waves` x resident.
template <Op op, typename T, int pack, int cpt, int tgw, int rpa>
void RunOne(Problem<T>& p, int block, int waves, cudaStream_t s, std::vector<Result>& out) {
  using LS = decltype(Functors<op, T>(p, 0));
  using Load = typename LS::first_type;
  using Store = typename LS::second_type;
  auto* kernel = &WarpRowKernel<op, Load, Store, pack, cpt, tgw, rpa>;
  const dim3 dims(tgw, block / tgw);
  const int64_t rows_per_block = int64_t(dims.y) * rpa;
  int64_t grid = (p.rows + rows_per_block - 1) / rows_per_block;
  int active = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, kernel, block, 0));
  if (waves > 0) {
    const int64_t cap = int64_t(active) * g_sms * waves;
    if (cap >= grid) return;  // same as waves 0
    grid = cap;
  }
  const RowParams params{p.rows, p.cols, 1e-6f, nullptr, nullptr, nullptr};
  auto launch = [&](int i) {
    auto ls = Functors<op, T>(p, i % p.sets);
    kernel<<<unsigned(grid), dims, 0, s>>>(ls.first, ls.second, params);
  };
  launch(0);
  CK(cudaDeviceSynchronize());
  const double err = MaxErr(p);
  const double us = GraphUs(launch, s);
  char name[96];
  snprintf(name, sizeof name, "b%d/p%d/cpt%d/g%d/r%d/w%d(occ%d,grid%ld)", block, pack, cpt, tgw, rpa,
           waves, active, long(grid));
  out.push_back({name, us, err});
}

template <Op op, typename T>
void Sweep(const char* opname, int64_t rows, int64_t cols, cudaStream_t s) {
  Problem<T> p{opname, op, rows, cols};
  p.set_bytes = size_t(rows * cols) * sizeof(T);
  p.sets = std::min<int64_t>(kPool / p.set_bytes, 64);
  Reference<op, T>(p);
  constexpr int pack = 16 / sizeof(T);
  std::vector<Result> results;
  auto sweep_rpa = [&](auto cpt_c, auto tgw_c) {
    constexpr int cpt = decltype(cpt_c)::value;
    constexpr int tgw = decltype(tgw_c)::value;
    if constexpr (tgw >= 1 && tgw <= 32) {
      if (int64_t(cpt) * tgw != cols) return;
      for (int block : {64, 128, 256, 512}) {
        if (block < tgw) continue;
        for (int waves : {0, 1, 2, 4}) {
          RunOne<op, T, pack, cpt, tgw, 1>(p, block, waves, s, results);
          RunOne<op, T, pack, cpt, tgw, 2>(p, block, waves, s, results);
          RunOne<op, T, pack, cpt, tgw, 4>(p, block, waves, s, results);
          RunOne<op, T, pack, cpt, tgw, 8>(p, block, waves, s, results);
        }
      }
    }
  };
  auto by_cols = [&](auto cols_c) {
    constexpr int C = decltype(cols_c)::value;
    sweep_rpa(std::integral_constant<int, pack>(), std::integral_constant<int, C / pack>());
    sweep_rpa(std::integral_constant<int, 2 * pack>(), std::integral_constant<int, C / (2 * pack)>());
  };
  if (cols == 16) by_cols(std::integral_constant<int, 16>());
  if (cols == 32) by_cols(std::integral_constant<int, 32>());
  if (cols == 64) by_cols(std::integral_constant<int, 64>());
  if (cols == 128) by_cols(std::integral_constant<int, 128>());
  const double bytes = 2.0 * p.set_bytes;
  std::sort(results.begin(), results.end(), [](const Result& a, const Result& b) { return a.us < b.us; });
  double worst = 0;
  for (auto& r : results) worst = std::max(worst, r.err);
  const char* dt = sizeof(T) == 4 ? "float32" : "float16";
  for (size_t i = 0; i < results.size() && i < 6; ++i) {
    printf("%s %s %ldx%ld #%zu %-40s %7.2f us %7.0f GB/s err %.1e\n", opname, dt, long(rows),
           long(cols), i + 1, results[i].name.c_str(), results[i].us, bytes / results[i].us / 1e3,
           results[i].err);
  }
  // Best per rows-per-access and per lane layout, to read the trend.
  for (int rpa : {1, 2, 4, 8}) {
    for (int two : {0, 1}) {
      char key[32], key2[32];
      snprintf(key, sizeof key, "/r%d/", rpa);
      snprintf(key2, sizeof key2, "/cpt%d/", two ? 2 * pack : pack);
      for (auto& r : results) {
        if (r.name.find(key) != std::string::npos && r.name.find(key2) != std::string::npos) {
          printf("%s %s %ldx%ld best r%d %s %-40s %7.2f us %7.0f GB/s\n", opname, dt, long(rows),
                 long(cols), rpa, two ? "two-packs" : "one-pack", r.name.c_str(), r.us,
                 bytes / r.us / 1e3);
          break;
        }
      }
    }
  }
  printf("%s %s %ldx%ld: %zu variants, worst err %.1e\n", opname, dt, long(rows), long(cols),
         results.size(), worst);
  fflush(stdout);
}

__global__ void Fill(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995;
    h ^= h >> 15;
    p[i] = (h & 0xffffff) / float(0xffffff) * 4.f - 2.f;
  }
}
__global__ void FillH(__half* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995;
    h ^= h >> 15;
    p[i] = __float2half((h & 0xffffff) / float(0xffffff) * 4.f - 2.f);
  }
}

template <typename T>
void All(cudaStream_t s) {
  if constexpr (sizeof(T) == 4) {
    Fill<<<1024, 256>>>((float*)g_x, kPool / 4, 1);
    Fill<<<16, 256>>>((float*)g_w, 4096, 2);
    Fill<<<16, 256>>>((float*)g_mask, 4096, 3);
  } else {
    FillH<<<1024, 256>>>((__half*)g_x, kPool / 2, 1);
    FillH<<<16, 256>>>((__half*)g_w, 4096, 2);
    FillH<<<16, 256>>>((__half*)g_mask, 4096, 3);
  }
  CK(cudaDeviceSynchronize());
  for (int64_t cols : {32, 64, 128}) {
    Sweep<Op::kRmsNorm, T>("rms_norm", 49152, cols, s);
    Sweep<Op::kReduceScale, T>("reduce_scale", 49152, cols, s);
  }
  Sweep<Op::kSoftmax, T>("softmax", 49152, 32, s);
  for (int64_t sq : {16, 32, 64}) {
    Sweep<Op::kScaledMaskedSoftmax, T>("scaled_masked_softmax", 32 * 64 * sq, sq, s);
    Sweep<Op::kSoftmax, T>("softmax", 32 * 64 * sq, sq, s);
  }
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  printf("GPU %s, %d SMs\n", prop.name, g_sms);
  CK(cudaMalloc(&g_x, kPool));
  CK(cudaMalloc(&g_y, kPool));
  CK(cudaMalloc(&g_w, 4096 * 4));
  CK(cudaMalloc(&g_mask, 4096 * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  All<float>(s);
  All<__half>(s);
  return 0;
}
