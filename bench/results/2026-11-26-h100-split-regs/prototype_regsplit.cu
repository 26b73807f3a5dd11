// Prototype: cluster softmax with the row slice resident in registers,
// refilled through a one-buffer bulk copy in shared memory (the next row's
// copy issued as soon as this row has moved into registers).
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e = (x);                                                        \
    if (e != cudaSuccess) {                                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

template <typename T> __device__ __forceinline__ float ToF(T v);
template <> __device__ __forceinline__ float ToF(float v) { return v; }
template <> __device__ __forceinline__ float ToF(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T FromF(float v);
template <> __device__ __forceinline__ float FromF(float v) { return v; }
template <> __device__ __forceinline__ __half FromF(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 FromF(float v) { return __float2bfloat16_rn(v); }

template <typename T, int N> struct alignas(16) Pack { T e[N]; };

// Pack -> floats and back, two at a time for 16-bit types.
template <int N>
__device__ __forceinline__ void Widen(const Pack<float, N>& p, float* v) {
  for (int i = 0; i < N; ++i) v[i] = p.e[i];
}
template <int N>
__device__ __forceinline__ void Widen(const Pack<__half, N>& p, float* v) {
  for (int i = 0; i < N; i += 2) {
    float2 f = __half22float2(*reinterpret_cast<const __half2*>(&p.e[i]));
    v[i] = f.x; v[i + 1] = f.y;
  }
}
template <int N>
__device__ __forceinline__ void Widen(const Pack<__nv_bfloat16, N>& p, float* v) {
  for (int i = 0; i < N; i += 2) {
    float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&p.e[i]));
    v[i] = f.x; v[i + 1] = f.y;
  }
}
template <int N>
__device__ __forceinline__ void Narrow(const float* v, Pack<float, N>& p) {
  for (int i = 0; i < N; ++i) p.e[i] = v[i];
}
template <int N>
__device__ __forceinline__ void Narrow(const float* v, Pack<__half, N>& p) {
  for (int i = 0; i < N; i += 2) *reinterpret_cast<__half2*>(&p.e[i]) = __floats2half2_rn(v[i], v[i + 1]);
}
template <int N>
__device__ __forceinline__ void Narrow(const float* v, Pack<__nv_bfloat16, N>& p) {
  for (int i = 0; i < N; i += 2) *reinterpret_cast<__nv_bfloat162*>(&p.e[i]) = __floats2bfloat162_rn(v[i], v[i + 1]);
}

struct MaxC {
  float identity = -INFINITY;
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumC {
  float identity = 0.f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
__device__ __forceinline__ uint32_t Smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <typename T, int pack, int block, int kPacks, int mode, int kMinBlocks>
__global__ void __launch_bounds__(block, kMinBlocks)
    RegSplit(const T* __restrict__ x, T* __restrict__ y, long long rows, long long cols,
             int slice, int buffers) {
  using P = Pack<T, pack>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t bars[2][kPacks];
  __shared__ float warp_part[block / 32];
  __shared__ float slots[2][16];
  constexpr int W = block / 32;
  __shared__ float2 rslots[2][16 * W];
  __shared__ uint64_t rbar[2];
  cg::cluster_group cluster = cg::this_cluster();
  const int split = cluster.num_blocks();
  const int rank = cluster.block_rank();
  const int t = threadIdx.x;
  const long long clusters = gridDim.x / split;
  const long long first_row = blockIdx.x / split;
  const long long first_pack = (long long)rank * slice;
  int chunks = (slice + block - 1) / block;
  auto issue = [&](long long row, int buf) {
    const P* src = reinterpret_cast<const P*>(x + row * cols) + first_pack;
    P* cache = reinterpret_cast<P*>(smem) + (long long)buf * slice;
    uint64_t* bars_b = bars[buf];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int b = 0; b < chunks; ++b) {
      int n = min(block, slice - b * block);
      uint32_t bytes = n * sizeof(P);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(Smem(&bars_b[b])), "r"(bytes) : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
              Smem(cache + b * block)),
          "l"(src + b * block), "r"(bytes), "r"(Smem(&bars_b[b]))
          : "memory");
    }
  };
  if (t == 0) {
    for (int b = 0; b < 2 * kPacks; ++b)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Smem(&bars[0][0] + b)) : "memory");
    for (int j = 0; j < 2; ++j)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Smem(&rbar[j])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr ((mode & 32) != 0) cluster.sync();
  if (t == 0) {
    for (int j = 0; j < buffers; ++j)
      if (first_row + j * clusters < rows) issue(first_row + j * clusters, j);
  }
  int reduction = 0;
  auto all_reduce = [&](float v, auto combine) {
#pragma unroll
    for (int m = 16; m > 0; m /= 2) v = combine(v, __shfl_xor_sync(0xffffffffu, v, m));
    if (t % 32 == 0) warp_part[t / 32] = v;
    __syncthreads();
    const int par = reduction & 1;
    if (t < 32) {
      float w = t < block / 32 ? warp_part[t] : combine.identity;
#pragma unroll
      for (int m = 16; m > 0; m /= 2) w = combine(w, __shfl_xor_sync(0xffffffffu, w, m));
      if (t < split) *cluster.map_shared_rank(&slots[par][rank], t) = w;
    }
    cluster.sync();
    float total = slots[par][0];
    for (int r = 1; r < split; ++r) total = combine(total, slots[par][r]);
    ++reduction;
    return total;
  };
  const int lane = t % 32, w = t / 32;
  int red_k = 0;
  auto merge2 = [](float2 a, float2 b) -> float2 {
    const float m = fmaxf(a.x, b.x);
    const float sa = a.y == 0.f ? 0.f : a.y * __expf(a.x - m);
    const float sb = b.y == 0.f ? 0.f : b.y * __expf(b.x - m);
    return make_float2(m, sa + sb);
  };
  auto warp_merge = [&](float2 p) {
    float m = p.x;
#pragma unroll
    for (int k = 16; k > 0; k /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
    float sum = p.y == 0.f ? 0.f : p.y * __expf(p.x - m);
#pragma unroll
    for (int k = 16; k > 0; k /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, k);
    return make_float2(m, sum);
  };
  auto cluster_merge = [&](float2 p) {
    p = warp_merge(p);
    const int par = red_k & 1;
    if constexpr ((mode & 32) != 0) {
      const uint32_t ph = (red_k >> 1) & 1;
      if (t == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(Smem(&rbar[par])),
                     "r"((uint32_t)(split * W * 8)) : "memory");
      if (lane < split) {
        uint32_t raddr, rb;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(raddr) : "r"(Smem(&rslots[par][rank * W + w])), "r"(lane));
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(Smem(&rbar[par])), "r"(lane));
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(raddr),
                     "f"(p.x), "f"(p.y), "r"(rb) : "memory");
      }
      uint32_t done = 0;
      do {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(Smem(&rbar[par])), "r"(ph)
            : "memory");
      } while (!done);
    } else {
      if (lane < split) *cluster.map_shared_rank(&rslots[par][rank * W + w], lane) = p;
      cluster.sync();
    }
    float2 acc = make_float2(-INFINITY, 0.f);
    for (int i = lane; i < split * W; i += 32) acc = i == lane ? rslots[par][i] : merge2(acc, rslots[par][i]);
    ++red_k;
    return warp_merge(acc);
  };
  long long it = 0;
  for (long long row = first_row; row < rows; row += clusters, ++it) {
    const int buf = buffers == 2 ? (int)(it & 1) : 0;
    const uint32_t phase = (uint32_t)((buffers == 2 ? it >> 1 : it) & 1);
    const P* cache = reinterpret_cast<const P*>(smem) + (long long)buf * slice;
    float v[kPacks][pack];
    float mx = -INFINITY;
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b * block + t < slice) {
        uint32_t done = 0;
        do {
          asm volatile(
              "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
              : "=r"(done)
              : "r"(Smem(&bars[buf][b])), "r"(phase)
              : "memory");
        } while (!done);
        const P pk = cache[b * block + t];
        Widen(pk, v[b]);
#pragma unroll
        for (int i = 0; i < pack; ++i) mx = fmaxf(mx, v[b][i]);
      }
    }
    __syncthreads();
    if (t == 0 && row + buffers * clusters < rows) issue(row + buffers * clusters, buf);
    if constexpr ((mode & 48) != 0) {
      const float shift = mx == -INFINITY ? 0.f : mx;
      float sum = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b * block + t < slice) {
#pragma unroll
          for (int i = 0; i < pack; ++i) {
            if constexpr ((mode & 3) == 0) {
              v[b][i] = sizeof(T) == 4 ? expf(v[b][i] - shift) : __expf(v[b][i] - shift);
            } else {
              const float l2e = 1.4426950408889634f;
              float a = fmaf(v[b][i], l2e, -shift * l2e), r;
              asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
              v[b][i] = r;
            }
            sum += v[b][i];
          }
        }
      }
      const float2 tot = cluster_merge(make_float2(mx, sum));
      const float c = (sizeof(T) == 4 ? expf(shift - tot.x) : __expf(shift - tot.x)) / tot.y;
      P* dst = reinterpret_cast<P*>(y + row * cols) + first_pack;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b * block + t < slice) {
          P o;
#pragma unroll
          for (int i = 0; i < pack; ++i) v[b][i] *= c;
          Narrow(v[b], o);
          dst[b * block + t] = o;
        }
      }
      continue;
    }
    if constexpr ((mode & 8) == 0) mx = all_reduce(mx, MaxC());
    float s = 0.f;
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b * block + t < slice) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if constexpr ((mode & 4) != 0) {
            v[b][i] = v[b][i] - mx;
          } else if constexpr ((mode & 3) == 0) {
            v[b][i] = sizeof(T) == 4 ? expf(v[b][i] - mx) : __expf(v[b][i] - mx);
          } else {
            // FFMA form
            const float l2e = 1.4426950408889634f;
            float a = fmaf(v[b][i], l2e, -mx * l2e), r;
            asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
            v[b][i] = r;
          }
          s += v[b][i];
        }
      }
    }
    if constexpr ((mode & 8) == 0) s = all_reduce(s, SumC());
    const float inv = 1.f / s;
    P* dst = reinterpret_cast<P*>(y + row * cols) + first_pack;
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b * block + t < slice) {
        P o;
#pragma unroll
        for (int i = 0; i < pack; ++i) v[b][i] *= inv;
        Narrow(v[b], o);
        dst[b * block + t] = o;
      }
    }
  }
}

template <typename T, int pack>
__global__ void CopyKernel(const T* __restrict__ x, T* __restrict__ y, long long n_packs) {
  using P = Pack<T, pack>;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n_packs;
       i += (long long)gridDim.x * blockDim.x)
    reinterpret_cast<P*>(y)[i] = reinterpret_cast<const P*>(x)[i];
}

template <typename T> float HostF(T v);
template <> float HostF(float v) { return v; }
template <> float HostF(__half v) { return __half2float(v); }
template <> float HostF(__nv_bfloat16 v) { return __bfloat162float(v); }

struct Result { std::string name; double gbps; double err; };

template <typename T>
struct Bench {
  long long rows, cols;
  int sets;
  std::vector<T*> xs, ys;
  std::vector<T> hx;
  const char* dname;
  cudaEvent_t e0, e1;
  Bench(long long r, long long c, const char* dn) : rows(r), cols(c), dname(dn) {
    size_t bytes = rows * cols * sizeof(T);
    sets = 2;
    std::mt19937 g(42);
    std::normal_distribution<float> d(0.f, 3.f);
    hx.resize(rows * cols);
    for (auto& v : hx) v = T(d(g));
    for (int s = 0; s < sets; ++s) {
      T *a, *b;
      CK(cudaMalloc(&a, bytes));
      CK(cudaMalloc(&b, bytes));
      CK(cudaMemcpy(a, hx.data(), bytes, cudaMemcpyHostToDevice));
      xs.push_back(a);
      ys.push_back(b);
    }
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  ~Bench() {
    for (auto p : xs) cudaFree(p);
    for (auto p : ys) cudaFree(p);
  }
  template <class F>
  double Time(F launch, int reps = 20) {
    for (int i = 0; i < 3; ++i) launch(xs[i % sets], ys[i % sets]);
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) launch(xs[i % sets], ys[i % sets]);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    double sec = ms / 1e3 / reps;
    return 2.0 * rows * cols * sizeof(T) / sec / 1e9;
  }
  double Check() {
    // rows 0, 1, mid, last against double reference
    std::vector<T> out(cols);
    double worst = 0;
    for (long long r : {0LL, 1LL, rows / 2 + 3, rows - 1}) {
      CK(cudaMemcpy(out.data(), ys[0] + r * cols, cols * sizeof(T), cudaMemcpyDeviceToHost));
      double mx = -1e300, s = 0;
      for (long long c = 0; c < cols; ++c) mx = std::max(mx, (double)HostF(hx[r * cols + c]));
      for (long long c = 0; c < cols; ++c) s += std::exp((double)HostF(hx[r * cols + c]) - mx);
      for (long long c = 0; c < cols; ++c) {
        double ref = std::exp((double)HostF(hx[r * cols + c]) - mx) / s;
        double got = HostF(out[c]);
        double e = std::fabs(got - ref) / std::max(std::fabs(ref), 1e-4);
        worst = std::max(worst, e);
        if (std::isnan(got)) worst = 1e9;
      }
    }
    return worst;
  }
  template <int pack, int block, int kPacks, int mode, int kMinBlocks = 1>
  void Run(int split, std::vector<Result>& out) {
    if constexpr (kPacks * pack > (block * kMinBlocks >= 1024 ? 40 : 96)) {
      return;
    } else {
    long long packs = cols / pack;
    if (packs % split) return;
    int slice = packs / split;
    if (slice > kPacks * block || slice <= (kPacks - 1) * block) return;
    auto kern = &RegSplit<T, pack, block, kPacks, mode, kMinBlocks>;
    for (int buffers : {1, 2}) {
    size_t smem = buffers * slice * sizeof(Pack<T, pack>);
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) { cudaGetLastError(); continue; }
    if (split > 8) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = split;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cfg.blockDim = dim3(block);
    cfg.gridDim = dim3(split);
    cfg.dynamicSmemBytes = smem;
    int nclusters = 0;
    if (cudaOccupancyMaxActiveClusters(&nclusters, kern, &cfg) != cudaSuccess || nclusters == 0) {
      cudaGetLastError();
      continue;
    }
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kern));
    for (int waves : {1}) {
      long long grid_clusters = std::min<long long>(rows, (long long)nclusters * waves);
      cfg.gridDim = dim3(grid_clusters * split);
      auto launch = [&](T* a, T* b) {
        CK(cudaLaunchKernelEx(&cfg, kern, (const T*)a, b, rows, cols, slice, buffers));
      };
      double g1 = Time(launch);
      double g2 = Time(launch);
      double err = Check();
      char name[200];
      snprintf(name, sizeof name, "regs/s%d/b%d/p%d/k%d/m%d/o%d/B%d regs=%d spill=%d cl=%d", split, block, pack, kPacks, mode, kMinBlocks, buffers,
               fa.numRegs, (int)fa.localSizeBytes, nclusters);
      out.push_back({name, std::max(g1, g2), err});
    }
    }
    }
  }
  template <int pack>
  void RunCopy(std::vector<Result>& out) {
    long long n = rows * cols / pack;
    auto launch = [&](T* a, T* b) { CopyKernel<T, pack><<<132 * 8, 256>>>(a, b, n); };
    out.push_back({"copy_kernel", std::max(Time(launch), Time(launch)), 0});
    auto mc = [&](T* a, T* b) { CK(cudaMemcpyAsync(b, a, rows * cols * sizeof(T), cudaMemcpyDeviceToDevice)); };
    out.push_back({"memcpy", std::max(Time(mc), Time(mc)), 0});
  }
};

template <typename T, int pack>
void Sweep(long long rows, long long cols, const char* dname) {
  Bench<T> bench(rows, cols, dname);
  std::vector<Result> res;
  bench.template RunCopy<pack>(res);
  if (getenv("FOCUS")) {
    constexpr int K = sizeof(T) == 2 ? 4 : 8;
    constexpr int m = sizeof(T) == 2 ? 1 : 0;
    bench.template Run<pack, 1024, K, m, 1>(4, res);
    bench.template Run<pack, 1024, K, m | 16, 1>(4, res);
    bench.template Run<pack, 1024, K, m | 32, 1>(4, res);
    bench.template Run<pack, 512, K, m, 2>(8, res);
    bench.template Run<pack, 512, K, m | 32, 2>(8, res);
    bench.template Run<pack, 1024, K + 1, m, 1>(4, res);
    bench.template Run<pack, 1024, K + 1, m | 32, 1>(4, res);
    bench.template Run<pack, 512, K + 1, m | 32, 2>(8, res);
    bench.template Run<pack, 512, 2 * K + 2, m | 32, 1>(4, res);
    double copy = res[0].gbps;
    for (auto& r : res)
      printf("%s,%lld,%lld,%s,%.1f,%.3f,%.2e\n", dname, rows, cols, r.name.c_str(), r.gbps, r.gbps / copy, r.err);
    fflush(stdout);
    return;
  }
  for (int split : {2, 4, 8, 16}) {
#define ONE(B, K, O)                                          \
  bench.template Run<pack, B, K, (sizeof(T) == 2 ? 1 : 0), O>(split, res);
#define KS(B, O) ONE(B, 2, O) ONE(B, 3, O) ONE(B, 4, O) ONE(B, 5, O) ONE(B, 6, O) ONE(B, 8, O) ONE(B, 10, O) ONE(B, 12, O)
    KS(512, 1) KS(1024, 1) KS(512, 2) KS(256, 4)
  }
  double copy = res[0].gbps;
  for (auto& r : res)
    printf("%s,%lld,%lld,%s,%.1f,%.3f,%.2e\n", dname, rows, cols, r.name.c_str(), r.gbps, r.gbps / copy, r.err);
  fflush(stdout);
}

int main(int argc, char** argv) {
  long long rows = 2048;
  printf("dtype,rows,cols,config,gbps,of_copy,max_rel_err\n");
  for (long long cols : {128256LL, 151936LL}) {

    Sweep<__half, 8>(rows, cols, "float16");
    Sweep<__nv_bfloat16, 8>(rows, cols, "bfloat16");
    Sweep<float, 4>(rows, cols, "float32");
  }
  return 0;
}
