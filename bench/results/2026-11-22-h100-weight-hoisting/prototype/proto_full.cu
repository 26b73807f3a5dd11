// Prototype: where ReduceScale float16 loses time at 64 rows x 4096 (all
// L2-flushed graph replays). v0/v1: the library's block_regs at 256 and 512
// threads; v2/v3: a minimal one-row-per-block kernel (int32 indexing, no
// predicates) at 512 x 1 and 256 x 2 packs; v4/v5: a copy of the same
// layout without the reduction (the floor).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <chrono>
#include "kernels/op_functors.cuh"
#include "kernels/row_kernels.cuh"
#include "kernels/launch.h"
#include "tuner/measure.h"
#ifdef WITH_BACKEND
#include "tuner/gpu_backend.h"
#endif
#include "kernels/device_info.h"
using namespace kt::kernels;
using namespace kt::kernels::internal;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

struct alignas(16) H8 { __half2 h[4]; };

template <int kThreads, int kPacks, bool kReduce>
__global__ void __launch_bounds__(kThreads) MinimalRS(const H8* __restrict__ x, H8* __restrict__ y, float* __restrict__ scale, int packs_per_row) {
  const H8* row_x = x + blockIdx.x * packs_per_row;
  H8* row_y = y + blockIdx.x * packs_per_row;
  H8 v[kPacks];
#pragma unroll
  for (int b = 0; b < kPacks; ++b) v[b] = row_x[threadIdx.x + b * kThreads];
  if constexpr (!kReduce) {
#pragma unroll
    for (int b = 0; b < kPacks; ++b) row_y[threadIdx.x + b * kThreads] = v[b];
    return;
  } else {
    float f[kPacks][8];
    float m = 0.f;
#pragma unroll
    for (int b = 0; b < kPacks; ++b)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 p = __half22float2(v[b].h[i]);
        f[b][2 * i] = p.x; f[b][2 * i + 1] = p.y;
        m = fmaxf(m, fmaxf(fabsf(p.x), fabsf(p.y)));
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    constexpr int kWarps = kThreads / 32;
    __shared__ float partial[kWarps];
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = m;
    __syncthreads();
    m = partial[threadIdx.x & (kWarps - 1)];
#pragma unroll
    for (int o = kWarps / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) scale[blockIdx.x] = m;
    const float inv = 1.f / m;
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      H8 o;
#pragma unroll
      for (int i = 0; i < 4; ++i) o.h[i] = __floats2half2_rn(f[b][2 * i] * inv, f[b][2 * i + 1] * inv);
      row_y[threadIdx.x + b * kThreads] = o;
    }
  }
}

namespace kt::kernels::internal {
template <Op op, class Load, class Store, int pack, int block_size, int kPacks, bool kFull>
__global__ void __launch_bounds__(block_size)
    FullRowsKernel(Load load, Store store, RowParams p) {
  const int64_t num_packs = p.cols / pack;
  // This thread's packs; threads past the row's end hold none but still
  // take part in the reductions.
  const int count = kFull ? kPacks :
      threadIdx.x < num_packs
          ? static_cast<int>((num_packs - threadIdx.x + block_size - 1) / block_size)
          : 0;
  const int64_t first_col = static_cast<int64_t>(threadIdx.x) * pack;
  constexpr int64_t kStride = static_cast<int64_t>(block_size) * pack;
  constexpr bool kFast = kFastMathFor<Load>;
  using Weights = WeightsOf<std::remove_cv_t<Store>>;
  float v[kPacks][pack];
  const auto load_row = [&](int64_t row) {
    const auto row_load = BindRow(load, row);
#pragma unroll
    for (int b = 0; b < kPacks; ++b) {
      if (b < count) row_load.template load<pack>(v[b], first_col + b * kStride);
    }
  };
  // Float weights go in flight after the first row's loads, 16-bit ones
  // before them: each order was the faster one for its width at 1 to 64
  // rows x 4096 (float32 LayerNorm and RMSNorm 1.00-1.04x with the row
  // first, 16-bit 1.01-1.03x with the weights first; same-run H100
  // prototype, bench/results/2026-11-22-h100-weight-hoisting/).
  constexpr bool kFirstRowBeforeWeights = Weights::kLoads && Weights::kValueBytes == 4;
  if constexpr (kFirstRowBeforeWeights) {
    if (blockIdx.x < p.rows) load_row(blockIdx.x);
  }
  typename Weights::template type<kPacks, pack> weights;
  if constexpr (Weights::kLoads) {
    store.template LoadWeights<kPacks, pack>(weights, first_col, kStride, count);
  }
  using Reducer = BlockAllReducer<block_size, float>;
  __shared__ typename Reducer::Storage storage;
  Reducer reducer(storage);

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    if (!kFirstRowBeforeWeights || row != blockIdx.x) load_row(row);
    // 16-bit weights widen in the loop, after the row's loads are issued
    // (float ones need no widening, and their code stays as it was).
    if constexpr (Weights::kLoads && Weights::kValueBytes < 4) HideFromHoisting(weights);
    if constexpr (op == Op::kLayerNorm) {
      const float n = static_cast<float>(p.cols);
      float sum = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) sum += v[b][i];
        }
      }
      const float mean = reducer.Run(sum, SumOp()) / n;
      float squares = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) {
            const float d = v[b][i] - mean;
            squares = fmaf(d, d, squares);
          }
        }
      }
      const float inv_std = rsqrtf(reducer.Run(squares, SumOp()) / n + p.epsilon);
      if (threadIdx.x == 0) {
        if (p.mean != nullptr) p.mean[row] = mean;
        if (p.inv_std != nullptr) p.inv_std[row] = inv_std;
      }
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) Normalize<pack>(v[b], mean, inv_std);
      }
    } else if constexpr (kScalesByStat<op>) {
      using Stat = ScaleByStat<op>;
      float stat = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) stat = Stat::Accumulate(stat, v[b][i]);
        }
      }
      stat = reducer.Run(stat, typename Stat::Combine());
      const RowFactor factor = Stat::Factor(stat, p.cols, p.epsilon);
      if (threadIdx.x == 0) StoreRowStat<op>(p, row, stat, factor);
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) Stat::template Apply<pack>(v[b], factor);
      }
    } else {
      float thread_max = -INFINITY;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) thread_max = fmaxf(thread_max, v[b][i]);
        }
      }
      const float row_max = reducer.Run(thread_max, MaxOp());
      float thread_sum = 0.f;
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
#pragma unroll
        for (int i = 0; i < pack; ++i) {
          if (b < count) thread_sum += Exp<kFast>(v[b][i] - row_max);
        }
      }
      const float row_sum = reducer.Run(thread_sum, SumOp());
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) FinishSoftmax<op, kFast, pack>(v[b], row_max, row_sum);
      }
    }
    if constexpr (Weights::kLoads) {
      store.template StoreLoaded<kPacks, pack>(v, weights, row, first_col, kStride, count);
    } else {
#pragma unroll
      for (int b = 0; b < kPacks; ++b) {
        if (b < count) store.template store<pack>(v[b], row, first_col + b * kStride);
      }
    }
  }
}

}  // namespace kt::kernels::internal

__global__ void SumKernel(const float4* p, size_t n, float* out) {
  float s = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) { float4 v = p[i]; s += v.x + v.y + v.z + v.w; }
  if (s == 12345.f) *out = s;
}
static float4* g_flush; static size_t g_flush_n; static float* g_sink;
using LaunchFn = std::function<void(int set, cudaStream_t)>;
double Median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
__global__ void SpinKernel(long long ns) { long long t0 = clock64(); while (clock64() - t0 < ns * 2) {} }
// mode 0: 20 launches per graph, host sync after each replay (the prototypes);
// 1: 64 launches, sync; 2: 20 launches, replays queued behind a spin kernel
// (torch_bench-like, no sync); 3: 64 launches, queued (kt_kernel_bench-like).
static std::unique_ptr<kt::tuner::L2Flusher> g_kt_flush;
double Time(const LaunchFn& f, int sets, cudaStream_t s, int mode = 0) {
  if (mode >= 4) {
    auto t = kt::tuner::TimeGraphReplay([&](int rep) { f(rep % sets, s); return absl::OkStatus(); },
                                       mode == 4 ? 64 : 20, 31, s, g_kt_flush.get());
    if (!t.ok()) { printf("TimeGraphReplay: %s\n", std::string(t.status().message()).c_str()); exit(1); }
    return t->median_us;
  }
  const int launches = (mode & 1) ? 64 : 20;
  f(0, s); CK(cudaStreamSynchronize(s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(i % sets, s);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0)); cudaGraphDestroy(g);
  const int reps = 31;
  std::vector<cudaEvent_t> a(reps), b(reps);
  for (int r = 0; r < reps; ++r) { cudaEventCreate(&a[r]); cudaEventCreate(&b[r]); }
  std::vector<double> us;
  CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
  const bool queued = mode >= 2;
  if (queued) SpinKernel<<<1, 1, 0, s>>>(2000000LL);
  for (int r = 0; r < reps; ++r) {
    SumKernel<<<132 * 8, 512, 0, s>>>(g_flush, g_flush_n, g_sink);
    cudaEventRecord(a[r], s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(b[r], s);
    if (!queued) CK(cudaStreamSynchronize(s));
  }
  CK(cudaStreamSynchronize(s));
  for (int r = 0; r < reps; ++r) { float ms; cudaEventElapsedTime(&ms, a[r], b[r]); us.push_back(ms * 1e3 / launches); cudaEventDestroy(a[r]); cudaEventDestroy(b[r]); }
  cudaGraphExecDestroy(ge);
  return Median(us);
}

static void Quick(const char* tag, cudaStream_t st) {
  const int C = 4096, sets = 64;
  for (int R : {1, 64}) {
    std::vector<__half*> x(sets), y(sets);
    float* stat; CK(cudaMalloc(&stat, R * 4));
    for (int i = 0; i < sets; ++i) { CK(cudaMalloc(&x[i], size_t(R) * C * 2)); CK(cudaMalloc(&y[i], size_t(R) * C * 2)); CK(cudaMemset(x[i], 0x3c, size_t(R) * C * 2)); }
    for (int v : {0, 4}) {
      LaunchFn f = [&](int i, cudaStream_t q) {
        const RowParams prm{R, C, 1e-5f, nullptr, nullptr, stat};
        using L = DirectLoad<__half, true>; using S = DirectStore<__half, true>;
        if (v == 0) BlockRegsRowKernel<Op::kReduceScale, const L, const S, 8, 256, 2><<<R, 256, 0, q>>>(L{x[i], C}, S{y[i], C}, prm);
        else MinimalRS<512, 1, false><<<R, 512, 0, q>>>(reinterpret_cast<const H8*>(x[i]), reinterpret_cast<H8*>(y[i]), stat, C / 8);
      };
      const double us = Time(f, sets, st, 4);
      const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      fprintf(stderr, "quick %s t=%lld rows %d %s %.3f us\n", tag, (long long)now, R, v == 0 ? "lib" : "copy", us);
    }
    for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
    cudaFree(stat);
  }
}

int main() {
  const kt::kernels::DeviceInfo dev = *kt::kernels::GetDeviceInfo(0);
  kt::kernels::LaunchConfig cfg; cfg.impl = kt::kernels::Impl::kBlockRegs; cfg.block_size = 256; cfg.pack_size = 8;
  g_kt_flush = *kt::tuner::L2Flusher::Create(dev.l2_bytes, 4);
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaStream_t qs = st;
  if (!getenv("PROTO_SAME_STREAM")) CK(cudaStreamCreateWithFlags(&qs, cudaStreamNonBlocking));
  if (getenv("PROTO_SMALL_MEMSET")) { void* b; CK(cudaMalloc(&b, 16384)); CK(cudaMemset(b, 0x3c, 16384)); CK(cudaDeviceSynchronize()); CK(cudaFree(b)); }
  if (getenv("PROTO_SMALL_MEMSET_ZERO")) { void* b; CK(cudaMalloc(&b, 16384)); CK(cudaMemset(b, 0, 16384)); CK(cudaDeviceSynchronize()); CK(cudaFree(b)); }
  if (getenv("PROTO_SMALL_MEMSET_ASYNC")) { void* b; CK(cudaMalloc(&b, 16384)); CK(cudaMemsetAsync(b, 0x3c, 16384, st)); CK(cudaStreamSynchronize(st)); CK(cudaFree(b)); }
  if (const char* m = getenv("PROTO_FIRST_MODE")) {
    const int mode = atoi(m), sets = 64, C = 4096;
    std::vector<__half*> x(sets), y(sets);
    for (int i = 0; i < sets; ++i) { CK(cudaMalloc(&x[i], C * 2)); CK(cudaMalloc(&y[i], C * 2)); }
    if (getenv("PROTO_FIRST_MEMSET")) for (int i = 0; i < sets; ++i) CK(cudaMemset(x[i], 0x3c, C * 2));
    if (getenv("PROTO_FIRST_MEMSET_ST")) for (int i = 0; i < sets; ++i) CK(cudaMemsetAsync(x[i], 0x3c, C * 2, st));
    if (getenv("PROTO_FIRST_SYNC")) CK(cudaDeviceSynchronize());
    float* stat1; CK(cudaMalloc(&stat1, 4));
    const bool rs = getenv("PROTO_FIRST_RS") != nullptr;
    LaunchFn f = [&](int i, cudaStream_t q) {
      using L = DirectLoad<__half, true>; using S = DirectStore<__half, true>;
      const RowParams prm{1, C, 1e-5f, nullptr, nullptr, stat1};
      if (rs) BlockRegsRowKernel<Op::kReduceScale, const L, const S, 8, 256, 2><<<1, 256, 0, q>>>(L{x[i], C}, S{y[i], C}, prm);
      else MinimalRS<512, 1, false><<<1, 512, 0, q>>>(reinterpret_cast<const H8*>(x[i]), reinterpret_cast<H8*>(y[i]), g_sink, C / 8);
    };
    fprintf(stderr, "first mode %d: copy %.3f us\n", mode, Time(f, sets, st, mode));
    for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
  }
  if (getenv("PROTO_TOUCH_SECOND_STREAM")) { SpinKernel<<<1, 1, 0, qs>>>(1000LL); CK(cudaStreamSynchronize(qs)); }
  g_flush_n = size_t(240) << 20 >> 4; CK(cudaMalloc(&g_flush, g_flush_n * 16)); CK(cudaMemset(g_flush, 0, g_flush_n * 16)); CK(cudaMalloc(&g_sink, 4));
  if (!getenv("PROTO_NO_QUICK")) {
  Quick("start", qs);
  Quick("start2", qs);
#ifdef WITH_BACKEND
  auto backend = kt::tuner::GpuBackend::Create(0);
  if (!backend.ok()) { printf("backend: %s\n", std::string(backend.status().message()).c_str()); return 1; }
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t R : {1, 8, 64}) {
      kt::tuner::GridPoint point; point.group = "few_rows"; point.op = kt::kernels::Op::kReduceScale;
      point.dtype = kt::kernels::DType::kFloat16; point.shape = kt::kernels::Shape{R, 4096};
      auto m = (*backend)->Prepare(point);
      if (!m.ok()) { printf("prepare: %s\n", std::string(m.status().message()).c_str()); return 1; }
      kt::tuner::MeasureOptions o; o.graph_replay = true; o.repetitions = 31;
      auto r = (*m)->Measure(cfg, o);
      if (!r.ok() || !r->timing) { printf("measure failed\n"); return 1; }
      fprintf(stderr, "backend pass %d rows %ld: %.3f us\n", pass, long(R), r->timing->median_us);
    }
  }
#endif
  Quick("after_backend", qs);
#ifdef WITH_BACKEND
  backend->reset();
#endif
  Quick("backend_freed", qs);
  SpinKernel<<<132, 32, 0, qs>>>(20000000LL); CK(cudaStreamSynchronize(qs));
  Quick("after_spin", qs);
  }
  if (getenv("PROTO_QUICK_ONLY")) return 0;
  printf("rows,cols,variant,flushed_us\n");
  const int C = 4096, sets = 64;
  for (int rep = 0; rep < 3; ++rep) {
    for (int R : {1, 8, 64, 128}) {
      std::vector<__half*> x(sets), y(sets);
      float* stat; CK(cudaMalloc(&stat, R * 4));
      std::vector<__half> h(size_t(R) * C);
      const bool normal = getenv("PROTO_NORMAL") != nullptr;
      unsigned long long lcg = 0x9e3779b97f4a7c15ull + R;
      auto uni = [&]() { lcg = lcg * 6364136223846793005ull + 1442695040888963407ull; return ((lcg >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
      for (size_t i = 0; i < h.size(); ++i) {
        h[i] = normal ? __float2half(float(sqrt(-2.0 * log(uni())) * cos(6.283185307179586 * uni())))
                      : __float2half(float((i * 2654435761u) % 1000) / 250.f - 2.f);
      }
      for (int i = 0; i < sets; ++i) { CK(cudaMalloc(&x[i], size_t(R) * C * 2)); CK(cudaMalloc(&y[i], size_t(R) * C * 2)); CK(cudaMemcpy(x[i], h.data(), h.size() * 2, cudaMemcpyHostToDevice)); }
      std::vector<std::vector<__half>> outs;
      for (int v = 0; v < 7; ++v) {
        LaunchFn f = [&](int i, cudaStream_t q) {
          const RowParams prm{R, C, 1e-5f, nullptr, nullptr, stat};
          using L = DirectLoad<__half, true>; using S = DirectStore<__half, true>;
          const H8* xp = reinterpret_cast<const H8*>(x[i]); H8* yp = reinterpret_cast<H8*>(y[i]);
          switch (v) {
            case 0: BlockRegsRowKernel<Op::kReduceScale, const L, const S, 8, 256, 2><<<R, 256, 0, q>>>(L{x[i], C}, S{y[i], C}, prm); break;
            case 1: FullRowsKernel<Op::kReduceScale, const L, const S, 8, 256, 2, true><<<R, 256, 0, q>>>(L{x[i], C}, S{y[i], C}, prm); break;
            case 2: MinimalRS<512, 1, true><<<R, 512, 0, q>>>(xp, yp, stat, C / 8); break;
            case 3: MinimalRS<256, 2, true><<<R, 256, 0, q>>>(xp, yp, stat, C / 8); break;
            case 4: MinimalRS<512, 1, false><<<R, 512, 0, q>>>(xp, yp, stat, C / 8); break;
            case 5: MinimalRS<256, 2, false><<<R, 256, 0, q>>>(xp, yp, stat, C / 8); break;
            case 6: {
              kt::kernels::RowOpArgs args; args.x = x[i]; args.y = y[i]; args.row_scale = stat;
              auto r = kt::kernels::Launch(kt::kernels::Op::kReduceScale, kt::kernels::DType::kFloat16, kt::kernels::Shape{R, C}, args, cfg, dev, q);
              if (!r.ok()) { printf("launch: %s\n", std::string(r.status().message()).c_str()); exit(1); }
              break;
            }
          }
          CK(cudaGetLastError());
        };
        const double us = Time(f, sets, st);
        printf("%d,%d,v%d,%.3f\n", R, C, v, us); fflush(stdout);
        if (v == 0 || v == 4 || v == 6) {
          for (int mode = 1; mode < 6; ++mode) {
            printf("%d,%d,v%dm%d,%.3f\n", R, C, v, mode, Time(f, sets, st, mode)); fflush(stdout);
          }
        }
        if (v < 4) { std::vector<__half> o(h.size()); CK(cudaMemcpy(o.data(), y[0], o.size() * 2, cudaMemcpyDeviceToHost)); outs.push_back(o); }
      }
      for (int v = 1; v < 4; ++v) {
        int bad = 0;
        for (size_t i = 0; i < h.size(); ++i) if (fabsf(__half2float(outs[v][i]) - __half2float(outs[0][i])) > 1e-3f) ++bad;
        if (bad) printf("DIFF v%d rows %d: %d elements\n", v, R, bad);
      }
      for (int i = 0; i < sets; ++i) { cudaFree(x[i]); cudaFree(y[i]); }
      cudaFree(stat);
    }
  }
  return 0;
}
