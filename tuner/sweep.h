// The tuning sweep: for each grid point, every enumerated config is checked
// against the fp64 reference and timed (clearly slower ones pruned after a
// short probe), and all candidates plus the winner are written to the store
// in one transaction per point, so an interrupted run resumes where it
// stopped. RunNodeSweep does it on several GPUs at once.
#ifndef KERNTUNE_TUNER_SWEEP_H_
#define KERNTUNE_TUNER_SWEEP_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
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
  // The re-timings are graph replays at every point, as kt_kernel_bench
  // times kerntune beside its peers: per-launch events add 2-3 us a
  // launch at 8192-row norms, not the same for every config. Confirming
  // by graph replay moved LayerNorm 16-bit x 5120 to block_reread,
  // 1.022-1.027x faster (bench/results/2026-11-27-h100-norms-block-reread-retune/;
  // the block_smem events that study saw closest to graph replay were
  // sped up by block_reread's leftover L2 lines, since fixed:
  // bench/results/2026-11-27-h100-reread-l2-leak/).
  int confirm_rounds = 3;
  int confirm_leaders = 3;
  double confirm_margin = 0.01;
  // Recorded with the run.
  std::string command_line;
  std::string host;
  std::string user;
  // Set (e.g. by a SIGINT handler) to stop between candidates, on every
  // device: the current points are dropped, the runs marked interrupted.
  const std::atomic<bool>* stop = nullptr;
  // For a device the sweep shares (kerntuned's idle tuner): called on the
  // measuring thread after each measurement (a candidate, a confirmation
  // round, the copy roofline). True means others used the device meanwhile:
  // the callback has already waited until it is free again (or `stop` was
  // set), and the measurement is dropped and taken again, so no timing
  // disturbed by other work is ever kept. Empty: the device is the sweep's
  // own.
  std::function<bool()> yield;
  // Progress: a line per point, or a live line on a terminal.
  std::ostream* progress = nullptr;
  bool progress_is_terminal = false;
};

struct PointOutcome {
  GridPoint point;
  bool already_complete = false;  // skipped: measured earlier (no --force)
  std::string device;  // the SweepDevice that measured it; empty for RunSweep
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

// One GPU SKU's sweep.
struct SweepSummary {
  std::string gpu;     // the SKU's device name
  int64_t run_id = 0;  // 0 when nothing needed measuring
  double copy_gbps = 0;
  bool interrupted = false;
  double wall_seconds = 0;
  // Points in the store already first, then those tuned, in grid order.
  std::vector<PointOutcome> points;
  // The SweepDevices that shared the SKU's grid (RunNodeSweep).
  std::vector<std::string> devices;
};

// Tunes `grid` on one device, on the calling thread. An error stops the run
// (the current point is dropped) and is returned.
absl::StatusOr<SweepSummary> RunSweep(db::TuningStore& store, Backend& backend,
                                      const std::vector<GridPoint>& grid,
                                      const SweepOptions& options);

// One GPU of a node sweep.
struct SweepDevice {
  std::string name;  // how progress and summaries name it, e.g. "GPU 1"
  // Makes its backend. Called once, on the device's own worker thread,
  // which then does all of its work (a GpuBackend makes its device current
  // on the calling thread).
  std::function<absl::StatusOr<std::unique_ptr<Backend>>()> open;
};

// What one device did in a node sweep.
struct DeviceOutcome {
  std::string name;    // SweepDevice::name
  std::string gpu;     // its SKU's device name; empty when it could not be opened
  int points = 0;      // points it tuned and stored
  int candidates = 0;  // candidates of those points
  bool interrupted = false;  // stopped by SweepOptions::stop
  // Why it stopped before the grid was done: it could not be opened, or
  // measuring failed ("<point>: <error>"). OK otherwise.
  absl::Status status;
};

struct NodeSweepSummary {
  // One per GPU SKU, in the order of each SKU's first device.
  std::vector<SweepSummary> skus;
  std::vector<DeviceOutcome> devices;  // in the order given
  bool interrupted = false;
  bool failed() const;  // some device's status is not OK
};

// Tunes `grid` on every device at once, each on its own thread with its own
// connection to `store`'s file (store itself is used on the calling thread
// only). Devices of one SKU share the SKU's points: each device takes the
// next point nobody has taken, so every point is measured on exactly one
// device, and they share one run row (copy roofline measured on the first
// of them to start). Each SKU gets the whole grid. Resume and --force work
// per SKU as in RunSweep.
//
// A device that fails (cannot be opened, or a measurement returns an error)
// stops there and drops its current point, which is not handed to another
// device (a point that fails on one GPU of a SKU would likely fail on all):
// the next run tunes it. The other devices go on with the rest of the grid;
// the failure is in NodeSweepSummary::devices. Errors returned: the store
// (planning, finishing runs), or no device given.
absl::StatusOr<NodeSweepSummary> RunNodeSweep(db::TuningStore& store,
                                              const std::vector<SweepDevice>& devices,
                                              const std::vector<GridPoint>& grid,
                                              const SweepOptions& options);

// The end-of-run table: per point the chosen config, time, GB/s, % of copy
// and speedup over the heuristic (and the device that measured it, when
// several shared the grid); then the geometric-mean and maximum speedup and
// the counts of pruned, wrong and skipped candidates.
std::string FormatSummary(const SweepSummary& summary);

// "GPU 1 (NVIDIA H100 80GB HBM3): 171 points tuned, 20431 candidates", and
// why it stopped early, if it did.
std::string DescribeDeviceOutcome(const DeviceOutcome& device);

// FormatSummary of each SKU (under a "== <gpu> on <devices>" heading when
// there are several), then one DescribeDeviceOutcome line per device when
// there were several.
std::string FormatNodeSummary(const NodeSweepSummary& summary);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_SWEEP_H_
