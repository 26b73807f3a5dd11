// How kerntune times kernels (PERF.md): CUDA events around each launch,
// warm-up first, median and spread of many repetitions, host launch gaps
// hidden behind a queued spin kernel, CUDA-graph replay for tiny launches,
// and the device-to-device copy roofline. Used by the tuner and bench/.
#ifndef KERNTUNE_TUNER_MEASURE_H_
#define KERNTUNE_TUNER_MEASURE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace kt::tuner {

// One stream per process. Once a process has done device work on a second
// stream (8 kernels, memsets or device-to-device copies did it; 1 to 6 did
// not; host-to-device copies, synchronizations and allocations do not
// count), every kernel it launches afterwards takes about 0.35 us longer on
// an H100 with CUDA 13, on any stream, at any size (a 1 x 4096 float16 copy
// 1.49 -> 1.85 us; measured for seconds afterwards). So the tuner and bench/
// do all their device work on the measuring stream, and torch_bench.py
// launches everything on PyTorch's current stream: both tools time in the
// same, faster state (bench/results/2026-11-22-h100-launch-state/).

struct TimingStats {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  int repetitions = 0;
};

// Enqueues one launch for repetition `rep` (callers rotate buffers by it).
using LaunchFn = std::function<absl::Status(int rep)>;

// Empties the L2 cache by reading a buffer several times its size, so the
// next launch reads its inputs from DRAM (PERF.md: never time the L2). The
// timers flush before each timed launch or replay when given one: for
// problems whose rotation sets together fit in L2, where rotating alone
// would time L2-resident inputs (torch_bench.py flushes the same way).
class L2Flusher {
 public:
  // A buffer of `multiple` x `l2_bytes`, zeroed on `stream`.
  static absl::StatusOr<std::unique_ptr<L2Flusher>> Create(int64_t l2_bytes, int multiple,
                                                           cudaStream_t stream);
  ~L2Flusher();
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;

  // Enqueues the flush on `stream`.
  absl::Status Flush(cudaStream_t stream) const;

 private:
  L2Flusher(void* buffer, size_t bytes, float* sink)
      : buffer_(buffer), bytes_(bytes), sink_(sink) {}
  void* buffer_;
  size_t bytes_;
  float* sink_;  // written only if the sum hits a sentinel: keeps the reads
};

// Times `reps` launches after `warmup` untimed ones, each between its own
// pair of events. A spin kernel is queued first, so every launch is already
// queued when the GPU reaches it and host overhead never shows as GPU time.
// With `flush`, L2 is flushed before each timed launch (outside its events).
// Both timers first wait for the stream and return L2 lines left at
// evict_last priority to normal, so earlier work's cache hints cannot
// speed up or slow down what is timed.
absl::StatusOr<TimingStats> TimeLaunches(const LaunchFn& launch, int warmup, int reps,
                                         cudaStream_t stream,
                                         const L2Flusher* flush = nullptr);

// Captures `launches_per_graph` launches into one CUDA graph and times
// `reps` replays; figures are per launch. For launches of a few
// microseconds, where queueing overhead would otherwise dominate. With
// `flush`, L2 is flushed before each replay (outside its events).
absl::StatusOr<TimingStats> TimeGraphReplay(const LaunchFn& launch, int launches_per_graph,
                                            int reps, cudaStream_t stream,
                                            const L2Flusher* flush = nullptr);

// Launches per graph of a replay measurement (at least; more where more
// rotation sets are cycled).
inline constexpr int kLaunchesPerGraph = 20;
// Graph replays for one TimeGraphReplay measurement of launches of about
// `launch_us`: `reps`, fewer for long launches (about 0.2 s of replays of
// kLaunchesPerGraph launches), never under 10 (torch_bench.py's graph_reps).
int GraphRepetitions(int reps, double launch_us);

// Device-to-device copy of `bytes` (cudaMemcpyAsync): GB/s counting bytes
// read plus bytes written, from the median of `reps` copies. The roofline
// every kernel figure is compared with.
absl::StatusOr<double> MeasureCopyGbps(size_t bytes, int reps, cudaStream_t stream);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_MEASURE_H_
