// The tuning sweep: for each grid point, every enumerated config is checked
// against the fp64 reference and timed (clearly slower ones pruned after a
// short probe), and all candidates plus the winner are written to the store
// in one transaction per point, so an interrupted run resumes where it
// stopped.
#ifndef KERNTUNE_TUNER_SWEEP_H_
#define KERNTUNE_TUNER_SWEEP_H_

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "db/tuning_store.h"
#include "tuner/backend.h"
#include "tuner/grid.h"

namespace kt::tuner {

struct SweepOptions {
  // Re-measure points the store already has for this GPU and kernel version.
  bool force = false;
  MeasureOptions timing;
  // A candidate whose probe's fastest run is slower than the best median so
  // far times this factor is pruned (PERF.md: two runs of one variant differ
  // by a few percent, so 25% is "clearly slower", not noise).
  double prune_factor = 1.25;
  // Points whose heuristic runs under this many microseconds are timed
  // entirely under CUDA-graph replay: launch overhead would decide otherwise.
  double graph_below_us = 20.0;
  // Confirmation: the sweep ranks by one median per candidate, and a config
  // with a wide spread can lead by noise (seen on H200: a LayerNorm leader
  // 0.7% ahead in the sweep was 5% slower than the heuristic in the next
  // run). The `confirm_leaders` fastest candidates and the heuristic are
  // re-timed in `confirm_rounds` interleaved rounds; the best of them by
  // the median of its rounds wins, and a leader replaces the heuristic only
  // when it is faster by more than `confirm_margin`. 0 rounds = off.
  int confirm_rounds = 3;
  int confirm_leaders = 3;
  double confirm_margin = 0.01;
  // Recorded with the run.
  std::string command_line;
  std::string host;
  std::string user;
  // Set (e.g. by a SIGINT handler) to stop between candidates: the current
  // point is dropped, the run is marked interrupted.
  const std::atomic<bool>* stop = nullptr;
  // Progress: a line per point, or a live line on a terminal.
  std::ostream* progress = nullptr;
  bool progress_is_terminal = false;
};

struct PointOutcome {
  GridPoint point;
  bool already_complete = false;  // skipped: measured earlier (no --force)
  std::string best_key;
  double best_us = 0;
  bool graph_replay = false;
  std::string heuristic_key;
  double heuristic_us = 0;  // 0 when the heuristic could not be timed
  double gbps = 0;
  double pct_of_copy = 0;
  int candidates = 0;
  int pruned = 0;
  int wrong = 0;    // failed the reference check
  int skipped = 0;  // occupancy 0 or launch error
  // The sweep's leader lost the confirmation (to the heuristic or another
  // leader).
  bool leader_overturned = false;
};

struct SweepSummary {
  int64_t run_id = 0;  // 0 when nothing needed measuring
  double copy_gbps = 0;
  bool interrupted = false;
  double wall_seconds = 0;
  std::vector<PointOutcome> points;
};

absl::StatusOr<SweepSummary> RunSweep(db::TuningStore& store, Backend& backend,
                                      const std::vector<GridPoint>& grid,
                                      const SweepOptions& options);

// The end-of-run table: per point the chosen config, time, GB/s, % of copy
// and speedup over the heuristic; then the geometric-mean and maximum
// speedup and the counts of pruned, wrong and skipped candidates.
std::string FormatSummary(const SweepSummary& summary);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_SWEEP_H_
