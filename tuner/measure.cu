// Kernel timing with CUDA events and graphs (measure.h).
#include "tuner/measure.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::tuner {
namespace {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Keeps the GPU busy for about `nanoseconds` so the host can queue work
// behind it.
__global__ void SpinKernel(long long nanoseconds) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  long long now = start;
  while (now - start < nanoseconds) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

// The events around `reps` timed pieces of work on one stream. Without an
// L2 flush the reps run back to back, rep i between events i and i + 1;
// with one, L2 is flushed before each rep, outside the rep's own pair of
// events (2i, 2i + 1).
class RepEvents {
 public:
  explicit RepEvents(const L2Flusher* flush) : flush_(flush) {}
  RepEvents(const RepEvents&) = delete;
  RepEvents& operator=(const RepEvents&) = delete;
  ~RepEvents() {
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }

  absl::Status Create(int reps) {
    events_.resize(flush_ != nullptr ? 2 * reps : reps + 1, nullptr);
    for (cudaEvent_t& e : events_) {
      if (absl::Status s = CudaStatus(cudaEventCreate(&e), "cudaEventCreate"); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // Enqueues what comes before rep i: the flush, and the rep's start event
  // (shared with the previous rep's end when there is no flush).
  absl::Status Begin(int i, cudaStream_t stream) {
    if (flush_ != nullptr) {
      if (absl::Status s = flush_->Flush(stream); !s.ok()) return s;
    } else if (i > 0) {
      return absl::OkStatus();
    }
    return Record(Start(i), stream);
  }
  absl::Status End(int i, cudaStream_t stream) { return Record(Start(i) + 1, stream); }
  // Each rep's elapsed microseconds times `scale`, once the stream is idle.
  absl::StatusOr<std::vector<double>> Microseconds(int reps, double scale) const {
    std::vector<double> us;
    us.reserve(reps);
    for (int i = 0; i < reps; ++i) {
      float ms = 0;
      if (absl::Status s =
              CudaStatus(cudaEventElapsedTime(&ms, events_[Start(i)], events_[Start(i) + 1]),
                         "cudaEventElapsedTime");
          !s.ok()) {
        return s;
      }
      us.push_back(static_cast<double>(ms) * 1000.0 * scale);
    }
    return us;
  }
  // Host work per rep to queue beyond the rep itself, for the spin kernel.
  long long QueueNanosecondsPerRep() const { return flush_ != nullptr ? 10000LL : 0LL; }

 private:
  int Start(int i) const { return flush_ != nullptr ? 2 * i : i; }
  absl::Status Record(int index, cudaStream_t stream) {
    return CudaStatus(cudaEventRecord(events_[index], stream), "cudaEventRecord");
  }

  const L2Flusher* flush_;
  std::vector<cudaEvent_t> events_;
};

TimingStats Summarize(std::vector<double> samples_us) {
  std::sort(samples_us.begin(), samples_us.end());
  const auto at = [&](double q) {
    const double index = q * static_cast<double>(samples_us.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(index));
    const size_t hi = std::min(lo + 1, samples_us.size() - 1);
    return samples_us[lo] + (samples_us[hi] - samples_us[lo]) * (index - static_cast<double>(lo));
  };
  TimingStats stats;
  stats.median_us = at(0.5);
  stats.p10_us = at(0.1);
  stats.p90_us = at(0.9);
  stats.min_us = samples_us.front();
  stats.repetitions = static_cast<int>(samples_us.size());
  return stats;
}

// Reads `n` float4 and writes only if their sum is a sentinel, so the
// reads cannot be dropped.
__global__ void ReadAllKernel(const float4* data, size_t n, float* sink) {
  float sum = 0.f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = data[i];
    sum += v.x + v.y + v.z + v.w;
  }
  if (sum == 1234567.f) *sink = sum;
}

// Returns L2 lines that earlier work left at evict_last priority to
// normal. A kernel's evict_last reads keep that priority past the kernel,
// and such lines outlast any amount of normal traffic: on the H100, lines
// a norm kernel left behind made a later block_smem config on the same
// buffers 3% faster and a block_uncached one 15% slower
// (bench/results/2026-11-27-h100-reread-l2-leak/). After what ran before
// has finished, so no other measurement's leftovers time this one.
absl::Status ResetPersistingL2(cudaStream_t stream) {
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "work before a measurement");
      !s.ok()) {
    return s;
  }
  return CudaStatus(cudaCtxResetPersistingL2Cache(), "reset persisting L2 lines");
}

}  // namespace

absl::StatusOr<std::unique_ptr<L2Flusher>> L2Flusher::Create(int64_t l2_bytes, int multiple,
                                                             cudaStream_t stream) {
  if (l2_bytes <= 0 || multiple < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("L2 flush of ", multiple, " x ", l2_bytes, " bytes"));
  }
  const size_t bytes = static_cast<size_t>(l2_bytes) * multiple / 16 * 16;
  void* buffer = nullptr;
  float* sink = nullptr;
  absl::Status s = CudaStatus(cudaMalloc(&buffer, bytes), "cudaMalloc L2 flush buffer");
  if (s.ok()) s = CudaStatus(cudaMalloc(&sink, sizeof(float)), "cudaMalloc L2 flush sink");
  if (s.ok()) s = CudaStatus(cudaMemsetAsync(buffer, 0, bytes, stream), "memset L2 flush buffer");
  if (s.ok()) s = CudaStatus(cudaStreamSynchronize(stream), "memset L2 flush buffer");
  if (!s.ok()) {
    if (buffer != nullptr) cudaFree(buffer);
    if (sink != nullptr) cudaFree(sink);
    return s;
  }
  return std::unique_ptr<L2Flusher>(new L2Flusher(buffer, bytes, sink));
}

L2Flusher::~L2Flusher() {
  cudaFree(buffer_);
  cudaFree(sink_);
}

absl::Status L2Flusher::Flush(cudaStream_t stream) const {
  ReadAllKernel<<<1024, 512, 0, stream>>>(static_cast<const float4*>(buffer_), bytes_ / 16,
                                          sink_);
  return CudaStatus(cudaPeekAtLastError(), "L2 flush");
}

absl::StatusOr<TimingStats> TimeLaunches(const LaunchFn& launch, int warmup, int reps,
                                         cudaStream_t stream, const L2Flusher* flush) {
  if (reps < 1) return absl::InvalidArgumentError(absl::StrCat("reps=", reps, " must be >= 1"));
  if (absl::Status s = ResetPersistingL2(stream); !s.ok()) return s;
  for (int i = 0; i < warmup; ++i) {
    if (absl::Status s = launch(i); !s.ok()) return s;
  }
  RepEvents events(flush);
  if (absl::Status s = events.Create(reps); !s.ok()) return s;
  // ~10 us of host work per launch (and per flush), plus a margin.
  SpinKernel<<<1, 1, 0, stream>>>(1000000LL + (10000LL + events.QueueNanosecondsPerRep()) * reps);
  if (absl::Status s = CudaStatus(cudaPeekAtLastError(), "spin kernel"); !s.ok()) return s;
  for (int i = 0; i < reps; ++i) {
    absl::Status s = events.Begin(i, stream);
    if (s.ok()) s = launch(warmup + i);
    if (s.ok()) s = events.End(i, stream);
    if (!s.ok()) return s;
  }
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "timed launches"); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<double>> us = events.Microseconds(reps, 1.0);
  if (!us.ok()) return us.status();
  return Summarize(*std::move(us));
}

int GraphRepetitions(int reps, double launch_us) {
  constexpr double kBudgetUs = 200000;
  constexpr int kMinReps = 10;
  const double affordable = kBudgetUs / std::max(kLaunchesPerGraph * launch_us, 1e-3);
  return std::max(kMinReps, std::min(reps, static_cast<int>(affordable)));
}

absl::StatusOr<TimingStats> TimeGraphReplay(const LaunchFn& launch, int launches_per_graph,
                                            int reps, cudaStream_t stream,
                                            const L2Flusher* flush) {
  if (launches_per_graph < 1 || reps < 1) {
    return absl::InvalidArgumentError("launches_per_graph and reps must be >= 1");
  }
  if (absl::Status s = ResetPersistingL2(stream); !s.ok()) return s;
  // Warm once outside capture so lazy initialisation stays out of the graph.
  if (absl::Status s = launch(0); !s.ok()) return s;
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "warm-up"); !s.ok()) return s;
  cudaGraph_t graph = nullptr;
  if (absl::Status s = CudaStatus(
          cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
      !s.ok()) {
    return s;
  }
  absl::Status captured = absl::OkStatus();
  for (int i = 0; i < launches_per_graph && captured.ok(); ++i) captured = launch(i);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!captured.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return captured;
  }
  if (absl::Status s = CudaStatus(end, "end capture"); !s.ok()) return s;
  cudaGraphExec_t exec = nullptr;
  absl::Status s = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "instantiate graph");
  cudaGraphDestroy(graph);
  if (!s.ok()) return s;
  RepEvents events(flush);
  s = events.Create(reps);
  if (s.ok()) s = CudaStatus(cudaGraphLaunch(exec, stream), "graph warm-up");
  // ~5 us of host work per replay (plus the flush's), and a margin.
  if (s.ok()) {
    SpinKernel<<<1, 1, 0, stream>>>(1000000LL +
                                     (5000LL + events.QueueNanosecondsPerRep()) * reps);
  }
  for (int i = 0; s.ok() && i < reps; ++i) {
    s = events.Begin(i, stream);
    if (s.ok()) s = CudaStatus(cudaGraphLaunch(exec, stream), "graph launch");
    if (s.ok()) s = events.End(i, stream);
  }
  if (s.ok()) s = CudaStatus(cudaStreamSynchronize(stream), "graph replays");
  cudaGraphExecDestroy(exec);
  if (!s.ok()) return s;
  absl::StatusOr<std::vector<double>> us =
      events.Microseconds(reps, 1.0 / static_cast<double>(launches_per_graph));
  if (!us.ok()) return us.status();
  return Summarize(*std::move(us));
}

absl::StatusOr<double> MeasureCopyGbps(size_t bytes, int reps, cudaStream_t stream) {
  void* src = nullptr;
  void* dst = nullptr;
  absl::Status s = CudaStatus(cudaMalloc(&src, bytes), "cudaMalloc copy source");
  if (s.ok()) s = CudaStatus(cudaMalloc(&dst, bytes), "cudaMalloc copy target");
  if (s.ok()) s = CudaStatus(cudaMemsetAsync(src, 0x3c, bytes, stream), "memset");
  absl::StatusOr<TimingStats> stats = absl::InternalError("not run");
  if (s.ok()) {
    stats = TimeLaunches(
        [&](int) {
          return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
                            "copy");
        },
        /*warmup=*/3, reps, stream);
  }
  if (src != nullptr) cudaFree(src);
  if (dst != nullptr) cudaFree(dst);
  if (!s.ok()) return s;
  if (!stats.ok()) return stats.status();
  return 2.0 * static_cast<double>(bytes) / (stats->median_us * 1e3);
}

}  // namespace kt::tuner
