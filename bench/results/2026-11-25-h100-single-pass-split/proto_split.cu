// Prototype: single-kernel split rows against the library's two kernels.
// Same process, one stream, L2 flushed before each graph replay of 64
// launches over 64 rotating input sets, as kt_kernel_bench times few rows.
//  copy     cudaMemcpyAsync of x's bytes (kt_kernel_bench's "copy-same")
//  2pass    SplitPartialKernel + SplitFinishKernel (programmatic launch), the
//           library's default split 32 / 256 threads
//  cl<s>b<b>  one kernel, a cluster of s blocks per row, the slice in
//           registers, one partial per block exchanged through distributed
//           shared memory (cluster barrier)
//  gr<s>b<b>  one kernel, s blocks per row (all resident), the partials in
//           global memory behind a per-row arrive/wait flag (no cooperative
//           grid barrier)
// Outputs are compared with 2pass's.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/op_functors.cuh"
#include "kernels/split_row_kernels.cuh"

using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e = (x);                                                         \
    if (e != cudaSuccess) {                                                      \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e));           \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

namespace sr = kt::kernels::internal::split_row;
namespace proto {

template <int pack, int block_size, int kPacks, class Load>
__device__ __forceinline__ void LoadPacks(const Load& load, int64_t row, const sr::Slice& slice,
                                          float (&v)[kPacks][pack]) {
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    const int64_t k = threadIdx.x + static_cast<int64_t>(b) * block_size;
    if (k < slice.count) load.template load<pack>(v[b], row, (slice.first + k) * pack);
  }
}

template <Op op, class Load, class Store, int pack, int block_size, int kPacks>
struct Body {
  using Stat = typename sr::StatFor<op, kFastMathFor<Load>>::type;
  using Partial = typename Stat::Partial;
  using StoreWeights = WeightsOf<std::remove_cv_t<Store>>;
  static constexpr int64_t kStride = static_cast<int64_t>(block_size) * pack;
};

// One cluster of `split` blocks per row.
template <Op op, class Load, class Store, int pack, int block_size, int kPacks, int mode = 0>
__global__ void __launch_bounds__(block_size)
    ClusterRegsKernel(Load load, Store store, sr::Params p, long long* stamps) {
  const long long t0 = clock64();
  namespace cg = cooperative_groups;
  using B = Body<op, Load, Store, pack, block_size, kPacks>;
  using Stat = typename B::Stat;
  using Partial = typename B::Partial;
  __shared__ Partial warp_partials[block_size / kWarpSize];
  __shared__ Partial published;
  const cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.x / split;
  const sr::Slice slice = sr::SliceOf(p.slicing, rank);
  const int lane = threadIdx.x % kWarpSize;
  float v[kPacks][pack];
  LoadPacks<pack, block_size, kPacks>(load, row, slice, v);
  const int64_t held = (slice.count - threadIdx.x + block_size - 1) / block_size;
  const int64_t first_col = (slice.first + threadIdx.x) * pack;
  if constexpr (mode == 3) {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < held) store.template store<pack>(v[b], row, first_col + b * B::kStride);
    }
    return;
  }
  [[maybe_unused]] typename B::StoreWeights::template type<kPacks, pack> weights;
  if constexpr (B::StoreWeights::kLoads) store.LoadWeights(weights, first_col, B::kStride, held);
  Stat stat;
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < held) stat.template Add<pack>(v[b]);
  }
  const Partial partial = sr::BlockMerge<Stat, block_size>(stat.Get(), warp_partials);
  if (threadIdx.x == 0) published = partial;
  const long long t1 = clock64();
  cluster.sync();
  const long long t2 = clock64();
  const Partial mine = lane < split ? *cluster.map_shared_rank(&published, lane) : Stat::Identity();
  const Partial total = Stat::WarpMerge(mine);
  cluster.barrier_arrive();
  const typename Stat::Row finish = Stat::Finish(total, p);
  if (rank == 0 && threadIdx.x == 0) finish.WriteStats(p, row);
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < held) finish.template Apply<pack>(v[b]);
  }
  if constexpr (B::StoreWeights::kLoads) {
    store.StoreLoaded(v, weights, row, first_col, B::kStride, held);
  } else {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < held) store.template store<pack>(v[b], row, first_col + b * B::kStride);
    }
  }
  const long long t3 = clock64();
  cluster.barrier_wait();
  if (stamps != nullptr && threadIdx.x == 0) {
    long long* s = stamps + 4 * blockIdx.x;
    s[0] = t1 - t0;
    s[1] = t2 - t1;
    s[2] = t3 - t2;
    s[3] = clock64() - t3;
  }
}

// A row's arrive/wait barrier: `count` arrivals so far (back to 0 once all
// arrive), `generation` bumped by the last to arrive.
struct RowBarrier {
  unsigned count;
  unsigned generation;
  unsigned pad[2];
};

__device__ __forceinline__ unsigned LoadAcquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned LoadRelaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void StoreRelease(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void StoreRelaxed(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned AddAcqRel(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}

template <class Partial>
struct alignas(16) Slot {
  Partial partial;
};

template <class Partial>
__device__ __forceinline__ Partial ReadSlotRelaxed(const Slot<Partial>* s) {
  static_assert(sizeof(Slot<Partial>) == 16, "16-byte slots");
  unsigned w[4];
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "l"(s)
               : "memory");
  Partial out;
  memcpy(&out, w, sizeof(Partial));
  return out;
}

// rows * split blocks (all resident), `split` per row.
template <Op op, class Load, class Store, int pack, int block_size, int kPacks, int mode = 0>
__global__ void __launch_bounds__(block_size)
    GridFlagKernel(Load load, Store store, sr::Params p, void* workspace, int split,
                   long long* stamps) {
  long long t0 = clock64();
  using B = Body<op, Load, Store, pack, block_size, kPacks>;
  using Stat = typename B::Stat;
  using Partial = typename B::Partial;
  constexpr int kMaxSplit = 128;
  __shared__ Partial warp_partials[block_size / kWarpSize];
  const int64_t row = blockIdx.x / static_cast<unsigned>(split);
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(split));
  const sr::Slice slice = sr::SliceOf(p.slicing, rank);
  const int lane = threadIdx.x % kWarpSize;
  float v[kPacks][pack];
  if constexpr (mode == 2) {
#pragma unroll
    for (int b = 0; b < kPacks; ++b)
#pragma unroll
      for (int i = 0; i < pack; ++i) v[b][i] = 0.f;
  } else {
    LoadPacks<pack, block_size, kPacks>(load, row, slice, v);
  }
  const int64_t held = (slice.count - threadIdx.x + block_size - 1) / block_size;
  const int64_t first_col = (slice.first + threadIdx.x) * pack;
  if constexpr (mode == 3) {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < held) store.template store<pack>(v[b], row, first_col + b * B::kStride);
    }
    return;
  }
  [[maybe_unused]] typename B::StoreWeights::template type<kPacks, pack> weights;
  if constexpr (B::StoreWeights::kLoads) store.LoadWeights(weights, first_col, B::kStride, held);
  Stat stat;
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < held) stat.template Add<pack>(v[b]);
  }
  const Partial partial = sr::BlockMerge<Stat, block_size>(stat.Get(), warp_partials);
  const long long t1 = clock64();
  RowBarrier* barrier = static_cast<RowBarrier*>(workspace) + row;
  Slot<Partial>* slots =
      reinterpret_cast<Slot<Partial>*>(static_cast<RowBarrier*>(workspace) + p.rows) +
      row * split;
  if (mode != 1 && threadIdx.x == 0) {
    slots[rank].partial = partial;
    const unsigned generation = LoadRelaxed(&barrier->generation);
    const unsigned arrived = AddAcqRel(&barrier->count, 1);
    if (arrived == static_cast<unsigned>(split) - 1) {
      StoreRelaxed(&barrier->count, 0);
      StoreRelease(&barrier->generation, generation + 1);
    } else {
      while (LoadAcquire(&barrier->generation) == generation) {
      }
    }
  }
  __syncthreads();
  const long long t2 = clock64();
  Partial got[kMaxSplit / kWarpSize];
#pragma unroll
  for (int i = 0; i < kMaxSplit / kWarpSize; ++i) {
    const int r = lane + i * kWarpSize;
    got[i] = r < split ? (mode == 1 ? partial : ReadSlotRelaxed(&slots[r])) : Stat::Identity();
  }
  Partial mine = got[0];
#pragma unroll
  for (int i = 1; i < kMaxSplit / kWarpSize; ++i) {
    if (lane + i * kWarpSize < split) mine = Stat::Merge(mine, got[i]);
  }
  const Partial total = Stat::WarpMerge(mine);
  const typename Stat::Row finish = Stat::Finish(total, p);
  if (rank == 0 && threadIdx.x == 0) finish.WriteStats(p, row);
#pragma unroll
  for (int b = 0; b < kPacks; ++b) {
    if (b < held) finish.template Apply<pack>(v[b]);
  }
  if constexpr (B::StoreWeights::kLoads) {
    store.StoreLoaded(v, weights, row, first_col, B::kStride, held);
  } else {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < held) store.template store<pack>(v[b], row, first_col + b * B::kStride);
    }
  }
  if (stamps != nullptr && threadIdx.x == 0) {
    const long long t3 = clock64();
    long long* s = stamps + 4 * blockIdx.x;
    s[0] = t1 - t0;
    s[1] = t2 - t1;
    s[2] = t3 - t2;
    s[3] = t0;
  }
}
}  // namespace proto

__global__ void FlushKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float4 v = p[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 12345.f) *out = s;
}

static cudaStream_t g_s;
static float4* g_flush;
static size_t g_flush_n;
static float* g_sink;
static int g_sms;
static bool g_diag = false;
constexpr int kSets = 64;

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
  const int reps = 31;
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
template <typename T>
float ToF(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __half2float(v);
}

template <Op op, typename T>
struct Problem {
  static constexpr int kPack = 16 / sizeof(T);
  int64_t rows, cols;
  std::vector<T*> x, y;
  T *gamma = nullptr, *beta = nullptr, *ref = nullptr;
  void* ws = nullptr;      // two-pass slots
  void* flags = nullptr;   // grid-flag barriers + slots
  double copy_us = 0, base_us = 0;
  KernelRequest Req(int i) const {
    KernelRequest r;
    r.rows = rows;
    r.cols = cols;
    r.x = x[i];
    r.y = y[i];
    if (op == Op::kLayerNorm || op == Op::kRmsNorm) r.gamma = gamma;
    if (op == Op::kLayerNorm) r.beta = beta;
    r.epsilon = 1e-5f;
    return r;
  }
  sr::Params MakeParams(int split) const {
    sr::Params p{};
    p.rows = rows;
    p.cols = cols;
    p.slicing = sr::Slicing::Of(cols / kPack, split);
    p.epsilon = 1e-5f;
    return p;
  }
  size_t Bytes() const { return rows * cols * sizeof(T); }
  // kt_kernel_bench's bytes: x, y and the weights.
  double Moved() const {
    double b = 2.0 * Bytes();
    if (op == Op::kLayerNorm) b += 2.0 * cols * sizeof(T);
    if (op == Op::kRmsNorm) b += 1.0 * cols * sizeof(T);
    return b;
  }
};

template <Op op, typename T>
double Check(Problem<op, T>& P, int set) {
  std::vector<T> a(P.rows * P.cols), b(P.rows * P.cols);
  CK(cudaMemcpy(a.data(), P.ref, P.Bytes(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), P.y[set], P.Bytes(), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(ToF(a[i])) - double(ToF(b[i])));
    const double rel = d / std::max(1e-6, std::fabs(double(ToF(a[i]))));
    worst = std::max(worst, std::min(d * 1e3, rel));
  }
  return worst;
}

template <Op op, typename T>
void Report(Problem<op, T>& P, const char* name, double us, double err) {
  const double gbps = P.Moved() / (us * 1e3);
  const double copy_gbps = 2.0 * P.Bytes() / (P.copy_us * 1e3);
  printf("  %-12s %7.2f us  %7.0f GB/s  %5.1f%% of copy-same  %5.2fx 2pass  err %.1e\n", name,
         us, gbps, 100 * gbps / copy_gbps, P.base_us / us, err);
  fflush(stdout);
}

template <Op op, typename T, int block, int kPacks, int mode = 0>
void Cluster(Problem<op, T>& P, int split) {
  constexpr int pack = Problem<op, T>::kPack;
  const int64_t packs = P.cols / pack;
  if (packs % split != 0 || (packs / split) != int64_t(block) * kPacks) return;
  auto load = MakeLoad<op, T>(P.Req(0));
  auto store = MakeStore<op, T>(P.Req(0));
  using L = decltype(load);
  using S = decltype(store);
  auto kernel = &proto::ClusterRegsKernel<op, L, S, pack, block, kPacks, mode>;
  if (split > 8) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {unsigned(split), 1, 1};
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(P.rows * split));
  cfg.blockDim = dim3(block);
  cfg.stream = g_s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess || clusters == 0) {
    cudaGetLastError();
    printf("  cl%db%d: no cluster fits\n", split, block);
    return;
  }
  const sr::Params prm = P.MakeParams(split);
  auto run = [&](int i) {
    const KernelRequest r = P.Req(i);
    CK(cudaLaunchKernelEx(&cfg, kernel, MakeLoad<op, T>(r), MakeStore<op, T>(r), prm,
                          (long long*)nullptr));
  };
  if (mode == 0) {
    static long long* stamps = nullptr;
    if (stamps == nullptr) CK(cudaMalloc(&stamps, 4 * 8 * 4096));
    FlushKernel<<<1024, 512, 0, g_s>>>(g_flush, g_flush_n, g_sink);
    const KernelRequest r = P.Req(1);
    CK(cudaLaunchKernelEx(&cfg, kernel, MakeLoad<op, T>(r), MakeStore<op, T>(r), prm, stamps));
    CK(cudaStreamSynchronize(g_s));
    const int n = int(P.rows * split);
    std::vector<long long> h(4 * n);
    CK(cudaMemcpy(h.data(), stamps, 8 * h.size(), cudaMemcpyDeviceToHost));
    long long m[4][2];
    for (int k = 0; k < 4; ++k) {
      std::vector<long long> a;
      for (int i = 0; i < n; ++i) a.push_back(h[4 * i + k]);
      std::sort(a.begin(), a.end());
      m[k][0] = a[n / 2];
      m[k][1] = a[n - 1];
    }
    printf("    cycles (median/max): load+reduce %lld/%lld  cluster.sync %lld/%lld  finish %lld/%lld  exit wait %lld/%lld\n",
           m[0][0], m[0][1], m[1][0], m[1][1], m[2][0], m[2][1], m[3][0], m[3][1]);
  }
  CK(cudaMemset(P.y[0], 0, P.Bytes()));
  run(0);
  CK(cudaStreamSynchronize(g_s));
  const double err = Check(P, 0);
  const double us = TimeGraph(run);
  char name[32];
  snprintf(name, sizeof name, "cl%db%d(%d)%s", split, block, clusters, mode == 3 ? "-copy" : "");
  Report(P, name, us, err);
}

template <Op op, typename T, int block, int kPacks, int mode = 0>
void Grid(Problem<op, T>& P, int split) {
  constexpr int pack = Problem<op, T>::kPack;
  const int64_t packs = P.cols / pack;
  if (split > 128 || packs % split != 0 || (packs / split) != int64_t(block) * kPacks) return;
  auto load = MakeLoad<op, T>(P.Req(0));
  auto store = MakeStore<op, T>(P.Req(0));
  using L = decltype(load);
  using S = decltype(store);
  auto kernel = &proto::GridFlagKernel<op, L, S, pack, block, kPacks, mode>;
  int active = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, kernel, block, 0));
  if (P.rows * split > int64_t(active) * g_sms) {
    printf("  gr%db%d: not resident\n", split, block);
    return;
  }
  const sr::Params prm = P.MakeParams(split);
  auto run = [&](int i) {
    const KernelRequest r = P.Req(i);
    proto::GridFlagKernel<op, L, S, pack, block, kPacks, mode>
        <<<unsigned(P.rows * split), block, 0, g_s>>>(MakeLoad<op, T>(r), MakeStore<op, T>(r),
                                                      prm, P.flags, split, nullptr);
    CK(cudaPeekAtLastError());
  };
  // One flushed launch with clock stamps: the median block's load+reduce,
  // barrier and finish cycles, and the spread of block start times.
  {
    static long long* stamps = nullptr;
    if (stamps == nullptr) CK(cudaMalloc(&stamps, 4 * 8 * 4096));
    FlushKernel<<<1024, 512, 0, g_s>>>(g_flush, g_flush_n, g_sink);
    const KernelRequest r = P.Req(1);
    proto::GridFlagKernel<op, L, S, pack, block, kPacks, mode>
        <<<unsigned(P.rows * split), block, 0, g_s>>>(MakeLoad<op, T>(r), MakeStore<op, T>(r),
                                                      prm, P.flags, split, stamps);
    CK(cudaStreamSynchronize(g_s));
    const int n = int(P.rows * split);
    std::vector<long long> h(4 * n);
    CK(cudaMemcpy(h.data(), stamps, 8 * h.size(), cudaMemcpyDeviceToHost));
    std::vector<long long> a, b, c;
    for (int i = 0; i < n; ++i) { a.push_back(h[4 * i]); b.push_back(h[4 * i + 1]); c.push_back(h[4 * i + 2]); }
    std::sort(a.begin(), a.end()); std::sort(b.begin(), b.end()); std::sort(c.begin(), c.end());
    printf("    cycles (median/max): load+reduce %lld/%lld  barrier %lld/%lld  finish %lld/%lld\n",
           a[n / 2], a[n - 1], b[n / 2], b[n - 1], c[n / 2], c[n - 1]);
  }
  CK(cudaMemset(P.y[0], 0, P.Bytes()));
  run(0);
  CK(cudaStreamSynchronize(g_s));
  const double err = Check(P, 0);
  const double us = TimeGraph(run);
  char name[32];
  snprintf(name, sizeof name, "gr%db%d%s", split, block,
           mode == 0 ? "" : mode == 1 ? "-nobar" : mode == 2 ? "-noload" : "-copy");
  Report(P, name, us, err);
}

template <Op op, typename T>
void Case(const char* opname, int64_t rows) {
  constexpr int pack = Problem<op, T>::kPack;
  Problem<op, T> P;
  P.rows = rows;
  P.cols = 131072;
  printf("%s %s %lld x %lld\n", opname, sizeof(T) == 4 ? "float32" : "float16", (long long)rows,
         (long long)P.cols);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<T> host(P.rows * P.cols);
  for (auto& v : host) v = FromF<T>(2 * nd(rng));
  std::vector<T> hw(P.cols), hb(P.cols);
  for (auto& v : hw) v = FromF<T>(nd(rng));
  for (auto& v : hb) v = FromF<T>(nd(rng));
  CK(cudaMalloc(&P.gamma, P.cols * sizeof(T)));
  CK(cudaMalloc(&P.beta, P.cols * sizeof(T)));
  CK(cudaMemcpy(P.gamma, hw.data(), P.cols * sizeof(T), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(P.beta, hb.data(), P.cols * sizeof(T), cudaMemcpyHostToDevice));
  P.x.resize(kSets);
  P.y.resize(kSets);
  for (int i = 0; i < kSets; ++i) {
    CK(cudaMalloc(&P.x[i], P.Bytes()));
    CK(cudaMalloc(&P.y[i], P.Bytes()));
    CK(cudaMemcpy(P.x[i], host.data(), P.Bytes(), cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&P.ref, P.Bytes()));
  CK(cudaMalloc(&P.ws, 65536));
  CK(cudaMalloc(&P.flags, 1 << 20));
  CK(cudaMemset(P.flags, 0, 1 << 20));

  // Copy of x's bytes.
  P.copy_us = TimeGraph([&](int i) {
    CK(cudaMemcpyAsync(P.y[i], P.x[i], P.Bytes(), cudaMemcpyDeviceToDevice, g_s));
  });
  // The library's two kernels at its default (split 32, 256 threads).
  {
    auto load = MakeLoad<op, T>(P.Req(0));
    auto store = MakeStore<op, T>(P.Req(0));
    using L = decltype(load);
    using S = decltype(store);
    constexpr int kBlock = 256;
    const int split = 32;
    const sr::Params prm = P.MakeParams(split);
    const sr::TwoPassWorkspace ws{P.ws, split};
    auto run = [&](int i) {
      const KernelRequest r = P.Req(i);
      const unsigned blocks = unsigned(P.rows * split);
      SplitPartialKernel<op, L, pack, kBlock><<<blocks, kBlock, 0, g_s>>>(MakeLoad<op, T>(r), prm, ws);
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(kBlock);
      cfg.stream = g_s;
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      CK(cudaLaunchKernelEx(&cfg, &SplitFinishKernel<op, L, S, pack, kBlock>, MakeLoad<op, T>(r),
                            MakeStore<op, T>(r), prm, ws));
    };
    run(0);
    CK(cudaStreamSynchronize(g_s));
    CK(cudaMemcpy(P.ref, P.y[0], P.Bytes(), cudaMemcpyDeviceToDevice));
    P.base_us = TimeGraph(run);
  }
  Report(P, "copy", P.copy_us, 0);
  Report(P, "2pass", P.base_us, 0);

  if (g_diag) {
    for (int split : {16, 8}) {
      Cluster<op, T, 1024, 1, 0>(P, split); Cluster<op, T, 1024, 1, 3>(P, split);
      Cluster<op, T, 1024, 2, 0>(P, split); Cluster<op, T, 1024, 2, 3>(P, split);
      Cluster<op, T, 512, 2, 0>(P, split); Cluster<op, T, 512, 2, 3>(P, split);
      Cluster<op, T, 256, 4, 0>(P, split); Cluster<op, T, 256, 4, 3>(P, split);
      Cluster<op, T, 512, 4, 0>(P, split); Cluster<op, T, 512, 4, 3>(P, split);
    }
    return;
  }
  if (g_diag) {
    for (int split : {32, 64}) {
      Grid<op, T, 256, 1, 0>(P, split); Grid<op, T, 256, 1, 1>(P, split);
      Grid<op, T, 256, 1, 2>(P, split); Grid<op, T, 256, 1, 3>(P, split);
      Grid<op, T, 256, 2, 0>(P, split); Grid<op, T, 256, 2, 1>(P, split);
      Grid<op, T, 256, 2, 2>(P, split); Grid<op, T, 256, 2, 3>(P, split);
      Grid<op, T, 256, 4, 0>(P, split); Grid<op, T, 256, 4, 1>(P, split);
      Grid<op, T, 256, 4, 2>(P, split); Grid<op, T, 256, 4, 3>(P, split);
      Grid<op, T, 128, 2, 0>(P, split); Grid<op, T, 128, 2, 3>(P, split);
      Grid<op, T, 512, 1, 0>(P, split); Grid<op, T, 512, 1, 3>(P, split);
    }
    return;
  }
  // Clusters: packs / split = block * kPacks.
  for (int split : {16, 8}) {
    Cluster<op, T, 1024, 1>(P, split);
    Cluster<op, T, 1024, 2>(P, split);
    Cluster<op, T, 1024, 4>(P, split);
    Cluster<op, T, 512, 2>(P, split);
    Cluster<op, T, 512, 4>(P, split);
    Cluster<op, T, 512, 8>(P, split);
    Cluster<op, T, 256, 4>(P, split);
    Cluster<op, T, 256, 8>(P, split);
  }
  // Grid flags.
  for (int split : {128, 64, 32, 16}) {
    Grid<op, T, 128, 1>(P, split);
    Grid<op, T, 128, 2>(P, split);
    Grid<op, T, 256, 1>(P, split);
    Grid<op, T, 256, 2>(P, split);
    Grid<op, T, 256, 4>(P, split);
    Grid<op, T, 512, 1>(P, split);
    Grid<op, T, 512, 2>(P, split);
    Grid<op, T, 512, 4>(P, split);
    Grid<op, T, 1024, 2>(P, split);
  }
  for (int i = 0; i < kSets; ++i) {
    cudaFree(P.x[i]);
    cudaFree(P.y[i]);
  }
  cudaFree(P.gamma);
  cudaFree(P.beta);
  cudaFree(P.ref);
  cudaFree(P.ws);
  cudaFree(P.flags);
}

int main(int argc, char** argv) {
  CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
  CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MB\n", prop.name, g_sms, prop.l2CacheSize >> 20);
  g_flush_n = size_t(4) * prop.l2CacheSize / 16;
  CK(cudaMalloc(&g_flush, g_flush_n * 16));
  CK(cudaMalloc(&g_sink, 4));
  CK(cudaMemsetAsync(g_flush, 0, g_flush_n * 16, g_s));
  const std::string which = argc > 1 ? argv[1] : "all";
  g_diag = argc > 2 && std::string(argv[2]) == "diag";
  for (int64_t rows : {1, 8}) {
    if (which == "all" || which == "softmax") {
      Case<Op::kSoftmax, float>("softmax", rows);
      Case<Op::kSoftmax, __half>("softmax", rows);
    }
    if (which == "all" || which == "norms") {
      Case<Op::kLayerNorm, float>("layer_norm", rows);
      Case<Op::kLayerNorm, __half>("layer_norm", rows);
      Case<Op::kRmsNorm, __half>("rms_norm", rows);
    }
  }
  return 0;
}
