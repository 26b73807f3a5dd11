// The GPU lane pool (lane_pool.h).
#include "server/lane_pool.h"

#include <algorithm>

#include "kernels/launch_config.h"
#include "server/cuda_status.h"

namespace kt::server {

absl::StatusOr<int> RunStreamPriority(RunPriority priority) {
  int lowest = 0, highest = 0;
  if (absl::Status s = CudaError(cudaDeviceGetStreamPriorityRange(&lowest, &highest),
                                 "cudaDeviceGetStreamPriorityRange");
      !s.ok()) {
    return s;
  }
  // Smaller numbers are greater priorities.
  if (priority == RunPriority::kHigh) return highest;
  return std::max(highest, lowest - 1);
}

absl::Status CreateLane(Lane& lane, int priority) {
  absl::Status s = CudaError(
      cudaStreamCreateWithPriority(&lane.stream, cudaStreamNonBlocking, priority),
      "cudaStreamCreateWithPriority");
  lane.timing.resize(kTimingRing);
  for (TimedLaunch& launch : lane.timing) {
    if (s.ok()) s = CudaError(cudaEventCreate(&launch.start), "cudaEventCreate");
    if (s.ok()) s = CudaError(cudaEventCreate(&launch.stop), "cudaEventCreate");
  }
  if (s.ok()) {
    s = CudaError(cudaEventCreateWithFlags(&lane.passed, cudaEventDisableTiming),
                  "cudaEventCreate");
  }
  if (s.ok()) {
    s = CudaError(cudaMalloc(&lane.workspace, kernels::kMaxWorkspaceBytes),
                  "cudaMalloc (lane workspace)");
  }
  lane.last_stop = lane.timing.back().stop;  // never recorded: complete
  return s;
}

void DestroyLane(Lane& lane) {
  if (lane.stream != nullptr) {
    cudaStreamSynchronize(lane.stream);
    cudaStreamDestroy(lane.stream);
  }
  for (const TimedLaunch& launch : lane.timing) {
    if (launch.start != nullptr) cudaEventDestroy(launch.start);
    if (launch.stop != nullptr) cudaEventDestroy(launch.stop);
  }
  if (lane.passed != nullptr) cudaEventDestroy(lane.passed);
  if (lane.workspace != nullptr) cudaFree(lane.workspace);
  lane = Lane();
}

absl::StatusOr<std::unique_ptr<LanePool>> LanePool::Create(int lanes) {
  if (lanes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("lanes=", lanes, " must be >= 1"));
  }
  absl::StatusOr<int> priority = RunStreamPriority(RunPriority::kNormal);
  if (!priority.ok()) return priority.status();
  std::unique_ptr<LanePool> pool(new LanePool());
  pool->lanes_.resize(lanes);  // destroyed by ~LanePool even on error
  for (int i = 0; i < lanes; ++i) {
    if (absl::Status s = CreateLane(pool->lanes_[i], *priority); !s.ok()) return s;
    absl::MutexLock lock(&pool->mu_);
    pool->free_lanes_.push_back(i);
  }
  return pool;
}

LanePool::~LanePool() {
  for (Lane& lane : lanes_) DestroyLane(lane);
}

LanePool::Lease::Lease(LanePool& pool) : pool_(pool) {
  {
    absl::MutexLock lock(&pool_.mu_);
    pool_.mu_.Await(absl::Condition(
        +[](std::vector<int>* free) { return !free->empty(); }, &pool_.free_lanes_));
    index_ = pool_.free_lanes_.back();
    pool_.free_lanes_.pop_back();
  }
  Lane& leased = lane();
  if (leased.pending > 0) pool_.ReadFinishedTimes(leased);
  ReleaseFinished(leased);
}

LanePool::Lease::~Lease() {
  absl::MutexLock lock(&pool_.mu_);
  pool_.free_lanes_.push_back(index_);
}

TimedLaunch& LanePool::NextTiming(Lane& lane) {
  TimedLaunch& launch = lane.timing[lane.next];
  if (launch.pending) {
    launch.pending = false;
    --lane.pending;
  }
  return launch;
}

void LanePool::Recorded(Lane& lane) {
  lane.timing[lane.next].pending = true;
  ++lane.pending;
  lane.next = (lane.next + 1) % kTimingRing;
}

void LanePool::ReleaseFinished(Lane& lane) {
  if (!lane.in_flight.empty() && cudaEventQuery(lane.last_stop) == cudaSuccess) {
    lane.in_flight.clear();
  }
}

double LanePool::ReadFinishedTimes(Lane& lane, const TimedLaunch* want) {
  double wanted_us = -1;
  double read_us = 0;
  int read = 0;
  // Oldest first: a stream finishes its launches in order, so the first
  // one not done ends the scan.
  for (size_t i = 0; i < kTimingRing && lane.pending > 0; ++i) {
    TimedLaunch& launch = lane.timing[(lane.next + i) % kTimingRing];
    if (!launch.pending) continue;
    if (cudaEventQuery(launch.stop) != cudaSuccess) break;
    float ms = 0;
    const cudaError_t got = cudaEventElapsedTime(&ms, launch.start, launch.stop);
    launch.pending = false;
    --lane.pending;
    if (got != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (&launch == want) wanted_us = ms * 1e3;
    read_us += ms * 1e3;
    ++read;
  }
  if (read > 0) {
    absl::MutexLock lock(&stats_mu_);
    stats_.kernels_timed += read;
    stats_.kernel_us += read_us;
  }
  return wanted_us;
}

double LanePool::ReadTime(Lane& lane, TimedLaunch& launch) {
  if (!launch.pending) return -1;
  launch.pending = false;
  --lane.pending;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, launch.start, launch.stop) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  absl::MutexLock lock(&stats_mu_);
  ++stats_.kernels_timed;
  stats_.kernel_us += ms * 1e3;
  return ms * 1e3;
}

void LanePool::Housekeep() {
  // Under the lock, so that no lease takes a lane meanwhile.
  absl::MutexLock lock(&mu_);
  for (int index : free_lanes_) {
    Lane& lane = lanes_[index];
    if (lane.pending > 0) ReadFinishedTimes(lane);
    ReleaseFinished(lane);
  }
}

BackendStats LanePool::stats() {
  {
    absl::MutexLock lock(&mu_);
    for (int index : free_lanes_) {
      if (lanes_[index].pending > 0) ReadFinishedTimes(lanes_[index]);
    }
  }
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

}  // namespace kt::server
