// How kerntune times kernels (PERF.md): CUDA events around each launch,
// warm-up first, median and spread of many repetitions, host launch gaps
// hidden behind a queued spin kernel, CUDA-graph replay for tiny launches,
// and the device-to-device copy roofline. Used by the tuner and bench/.
#ifndef KERNTUNE_TUNER_MEASURE_H_
#define KERNTUNE_TUNER_MEASURE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

#include "absl/status/statusor.h"

namespace kt::tuner {

struct TimingStats {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  int repetitions = 0;
};

// Enqueues one launch for repetition `rep` (callers rotate buffers by it).
using LaunchFn = std::function<absl::Status(int rep)>;

// Times `reps` launches after `warmup` untimed ones, each between its own
// pair of events. A spin kernel is queued first, so every launch is already
// queued when the GPU reaches it and host overhead never shows as GPU time.
absl::StatusOr<TimingStats> TimeLaunches(const LaunchFn& launch, int warmup, int reps,
                                         cudaStream_t stream);

// Captures `launches_per_graph` launches into one CUDA graph and times
// `reps` replays; figures are per launch. For launches of a few
// microseconds, where queueing overhead would otherwise dominate.
absl::StatusOr<TimingStats> TimeGraphReplay(const LaunchFn& launch, int launches_per_graph,
                                            int reps, cudaStream_t stream);

// Device-to-device copy of `bytes` (cudaMemcpyAsync): GB/s counting bytes
// read plus bytes written, from the median of `reps` copies. The roofline
// every kernel figure is compared with.
absl::StatusOr<double> MeasureCopyGbps(size_t bytes, int reps, cudaStream_t stream);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_MEASURE_H_
