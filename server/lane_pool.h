// The GPU streams of one device executor, lent to one Run at a time: each
// lane is a stream with a ring of timing-event pairs and a workspace, and
// it holds the client memory of Runs answered before their kernel ended
// (done_event) until its stream has passed them. Kernel times are read
// from the ring once their events complete (at the lane's next lease,
// every second, and when stats are asked for) and summed for GetStatus.
#ifndef KERNTUNE_SERVER_LANE_POOL_H_
#define KERNTUNE_SERVER_LANE_POOL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/backend.h"
#include "server/client_memory.h"

namespace kt::server {

// Pairs of timing events per lane: Runs answered early (done_event) may run
// this many launches ahead of the reading of their times.
inline constexpr size_t kTimingRing = 64;

// A start/stop pair of timing events around one launch; `pending` until its
// time has been read.
struct TimedLaunch {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  bool pending = false;
};

struct Lane {
  cudaStream_t stream = nullptr;
  std::vector<TimedLaunch> timing;  // kTimingRing pairs, fixed after Create
  size_t next = 0;                  // the pair the next timed launch uses
  int pending = 0;                  // pairs not yet read
  // Recorded after an untimed launch answered early (no timing pair).
  cudaEvent_t passed = nullptr;
  // After the newest launch answered early: its stop event or `passed`.
  cudaEvent_t last_stop = nullptr;
  // kernels::kMaxWorkspaceBytes of scratch for configs that need it
  // (split_two_pass); only this lane's stream uses it.
  void* workspace = nullptr;
  // Client memory of Runs answered early, released once the stream has
  // passed `last_stop`.
  std::vector<std::shared_ptr<const ClientMemory>> in_flight;
};

// The stream priority (as cudaStreamCreateWithPriority takes it) of the
// lanes of Runs of `priority` on the current device: kHigh the device's
// greatest, kNormal one level above the lowest, which is left to
// background work (the idle tuner's measuring stream, idle_tuner.h), so
// the block scheduler starts any Run's blocks before the tuner's. A
// device with fewer levels gives what it has.
absl::StatusOr<int> RunStreamPriority(RunPriority priority);

// A lane's stream, timing ring, `passed` event and workspace on the current
// device; DestroyLane (device set) frees what CreateLane made, also after
// it failed halfway. The pool's lanes and RunStreams' lanes are made so.
// `priority` as cudaStreamCreateWithPriority takes it (0: the default).
absl::Status CreateLane(Lane& lane, int priority = 0);
void DestroyLane(Lane& lane);

class LanePool {
 public:
  // `lanes` streams with their events and workspaces on the current device
  // (the caller has set it).
  static absl::StatusOr<std::unique_ptr<LanePool>> Create(int lanes);
  ~LanePool();  // waits for every stream and frees everything; device set
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;

  // A lane for one Run, waiting while all are lent. The most recently
  // returned lane comes out first, so a lone client keeps one stream (its
  // Runs stay in order on the GPU). The lane is the holder's alone: no lock
  // guards its bookkeeping.
  class Lease {
   public:
    explicit Lease(LanePool& pool);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lane& lane() const { return pool_.lanes_[index_]; }

   private:
    LanePool& pool_;
    int index_ = 0;
  };

  // The next timing pair of a leased lane for a launch; a pair whose time
  // was never read (more than kTimingRing launches ahead) gives it up.
  static TimedLaunch& NextTiming(Lane& lane);
  // Marks a recorded pair pending and moves the ring on.
  static void Recorded(Lane& lane);
  // Reads the times of the lane's finished launches into the counters;
  // returns the time of `want` (a pair of this lane) in microseconds when
  // it was among them, else -1. Needs the lane.
  double ReadFinishedTimes(Lane& lane, const TimedLaunch* want = nullptr);
  // Reads the time of one finished launch of `lane` into the counters:
  // microseconds, or -1 when its pair was read already. For lanes whose
  // Runs finish out of the pool's sight (RunStreams).
  double ReadTime(Lane& lane, TimedLaunch& launch);
  // Drops the memory of answered Runs once the lane's stream has passed
  // them. Needs the lane.
  static void ReleaseFinished(Lane& lane);

  // Reads the idle lanes' finished times and releases their finished
  // memory (busy lanes do it at their holder's next lease). Device set.
  void Housekeep();
  // Kernels timed and their summed time; idle lanes' times read first.
  // Device set.
  BackendStats stats();

 private:
  LanePool() = default;

  std::vector<Lane> lanes_;  // fixed after Create
  absl::Mutex mu_;
  std::vector<int> free_lanes_ ABSL_GUARDED_BY(mu_);
  absl::Mutex stats_mu_;
  BackendStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_LANE_POOL_H_
