// The tuning sweep (sweep.h).
#include "tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/launch_config.h"

namespace kt::tuner {
namespace {

using Clock = std::chrono::steady_clock;

double Gbps(const GridPoint& p, double us) {
  return static_cast<double>(PointBytes(p)) / (us * 1e3);
}

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  return s >= 60 ? absl::StrFormat("%dm%02ds", s / 60, s % 60) : absl::StrFormat("%ds", s);
}

// The points one GPU SKU still needs, shared by the devices of that SKU:
// each device takes the next point nobody has taken, so every point is
// measured on exactly one of them and a faster device takes more.
struct Pool {
  int index = 0;  // in the sweep's pools
  db::GpuSku sku;
  int64_t gpu_id = 0;
  db::Environment env;
  std::string grid;                       // DescribeGrid, for the run row
  std::vector<std::string> device_names;  // the devices sharing it
  std::vector<std::pair<GridPoint, db::PointKey>> todo;
  std::vector<PointOutcome> complete;  // in the store already (resume)
  std::atomic<size_t> next{0};         // the next untaken index into todo
  // Started by the first device that needs it: the copy roofline, measured
  // on that device, and the run row every device of the pool writes under.
  std::mutex start_mu;
  bool started = false;
  int64_t run_id = 0;
  double copy_gbps = 0;
};

// Progress lines, thread-safe: a line per point, or a live line on a
// terminal, with ETAs per pool from the average time per candidate so far.
// With several devices each line names its device; with one it reads as it
// always has.
class Progress {
 public:
  Progress(const SweepOptions& o, std::vector<std::string> device_names,
           const std::vector<const Pool*>& pools)
      : options_(o), names_(std::move(device_names)), devices_(names_.size()),
        pools_(pools.size()) {
    for (const std::string& name : names_) {
      name_width_ = std::max(name_width_, static_cast<int>(name.size()));
    }
    for (const Pool* pool : pools) total_points_ += static_cast<int>(pool->todo.size());
  }

  void PoolStarted(const Pool& pool) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_[pool.index].start = Clock::now();
  }

  void Candidate(int device, const Pool& pool, const GridPoint& p, int done, int total) {
    std::lock_guard<std::mutex> lock(mu_);
    PoolState& state = pools_[pool.index];
    ++state.candidates;
    devices_[device] = {&pool, PointName(p), done, total};
    if (options_.progress == nullptr || !options_.progress_is_terminal) return;
    if (names_.size() == 1) {
      *options_.progress << absl::StrFormat("\r\033[K[%*d/%d] %-40s %3d/%-3d candidates  ETA %s",
                                            Width(pool), state.done + 1, pool.todo.size(),
                                            devices_[device].point, done, total,
                                            FormatDuration(EtaSeconds(pool)))
                         << std::flush;
      return;
    }
    // Several devices: one line for all of them, "-" between points.
    int done_points = 0;
    double eta = 0;
    for (const PoolState& s : pools_) done_points += s.done;
    for (const DeviceState& d : devices_) {
      if (d.pool != nullptr) eta = std::max(eta, EtaSeconds(*d.pool));
    }
    std::string line = absl::StrFormat("\r\033[K[%d/%d]", done_points, total_points_);
    for (size_t i = 0; i < devices_.size(); ++i) {
      const DeviceState& d = devices_[i];
      absl::StrAppend(&line, "  ", names_[i], " ",
                      d.pool == nullptr ? std::string("-")
                                        : absl::StrCat(d.done, "/", d.total));
    }
    absl::StrAppend(&line, " candidates  ETA ", FormatDuration(eta));
    *options_.progress << line << std::flush;
  }

  void PointDone(int device, const Pool& pool, const PointOutcome& o) {
    std::lock_guard<std::mutex> lock(mu_);
    PoolState& state = pools_[pool.index];
    ++state.done;
    devices_[device] = {};
    if (options_.progress == nullptr) return;
    if (options_.progress_is_terminal) *options_.progress << "\r\033[K";
    const int remaining = static_cast<int>(pool.todo.size()) - state.done;
    const double eta = Elapsed(state) / state.done * remaining;
    const std::string who =
        names_.size() > 1 ? absl::StrFormat("%-*s ", name_width_, names_[device]) : "";
    *options_.progress << absl::StrFormat(
                              "[%*d/%d] %s%-40s %-30s %8.2f us %6.0f GB/s %5.1f%%  x%.2f  "
                              "(%d candidates, %d pruned)  ETA %s\n",
                              Width(pool), state.done, pool.todo.size(), who,
                              PointName(o.point), o.best_key, o.best_us, o.gbps, o.pct_of_copy,
                              o.heuristic_us > 0 ? o.heuristic_us / o.best_us : 0.0,
                              o.candidates, o.pruned, FormatDuration(eta))
                       << std::flush;
  }

  // A device stopped: it no longer counts in the live line's ETA.
  void DeviceDone(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    devices_[device] = {};
  }

  // What each device did, when there were several.
  void Finished(const std::vector<DeviceOutcome>& devices) {
    std::lock_guard<std::mutex> lock(mu_);
    if (options_.progress == nullptr || devices.size() < 2) return;
    if (options_.progress_is_terminal) *options_.progress << "\r\033[K";
    for (const DeviceOutcome& d : devices) {
      *options_.progress << DescribeDeviceOutcome(d) << "\n";
    }
    *options_.progress << std::flush;
  }

 private:
  struct PoolState {
    Clock::time_point start = Clock::now();
    int done = 0;  // points finished
    int64_t candidates = 0;
  };
  struct DeviceState {
    const Pool* pool = nullptr;  // null: between points
    std::string point;
    int done = 0;
    int total = 0;
  };

  static double Elapsed(const PoolState& state) {
    return std::chrono::duration<double>(Clock::now() - state.start).count();
  }

  static int Width(const Pool& pool) {
    return static_cast<int>(std::to_string(pool.todo.size()).size());
  }

  // The pool's candidates left (those of the points in flight, and the
  // average point's for every point not started) at its time per candidate.
  double EtaSeconds(const Pool& pool) const {
    const PoolState& state = pools_[pool.index];
    if (state.candidates == 0) return 0;
    double remaining = 0;
    int in_flight = 0, in_flight_total = 0;
    for (const DeviceState& d : devices_) {
      if (d.pool != &pool) continue;
      ++in_flight;
      in_flight_total = d.total;
      remaining += d.total - d.done;
    }
    const double per_point = state.done > 0 ? static_cast<double>(state.candidates) / state.done
                                            : static_cast<double>(in_flight_total);
    const int not_started = static_cast<int>(pool.todo.size()) - state.done - in_flight;
    remaining += per_point * std::max(not_started, 0);
    return remaining * Elapsed(state) / static_cast<double>(state.candidates);
  }

  const SweepOptions& options_;
  const std::vector<std::string> names_;
  int name_width_ = 0;
  int total_points_ = 0;  // of every pool
  std::mutex mu_;
  std::vector<DeviceState> devices_;
  std::vector<PoolState> pools_;
};

bool Stopping(const SweepOptions& o) {
  return o.stop != nullptr && o.stop->load(std::memory_order_relaxed);
}

// `measure`'s result once SweepOptions::yield says nobody else used the
// device while it ran (taken again until then); nullopt when stopped while
// waiting for the device.
template <typename T>
absl::StatusOr<std::optional<T>> Undisturbed(const SweepOptions& options,
                                             absl::FunctionRef<absl::StatusOr<T>()> measure) {
  while (true) {
    absl::StatusOr<T> result = measure();
    if (!result.ok()) return result.status();
    if (!options.yield || !options.yield()) return std::optional<T>(*std::move(result));
    if (Stopping(options)) return std::optional<T>();
  }
}

db::Candidate MakeCandidate(int64_t run_id, const db::PointKey& key,
                            const kernels::LaunchConfig& config, const CandidateMeasurement& m,
                            const GridPoint& point, double copy_gbps) {
  db::Candidate c;
  c.run_id = run_id;
  c.point = key;
  c.config = ConfigRecordOf(config);
  c.status = m.status;
  c.message = m.message;
  c.occupancy = m.occupancy;
  c.correct = m.correct;
  c.graph_replay = m.graph_replay;
  if (m.timing) {
    c.median_us = m.timing->median_us;
    c.spread_low_us = m.timing->p10_us;
    c.spread_high_us = m.timing->p90_us;
    c.repetitions = m.timing->repetitions;
    c.gbps = Gbps(point, m.timing->median_us);
    c.pct_of_copy = *c.gbps / copy_gbps * 100.0;
  }
  return c;
}

bool IsTimedAndCorrect(const CandidateMeasurement& m) {
  return m.status == db::CandidateStatus::kMeasured && m.correct && m.timing.has_value();
}

struct Confirmation {
  std::optional<size_t> winner;  // index into candidates; empty = no confirmation ran
  double winner_us = 0;
  double heuristic_us = 0;
  bool stopped = false;  // SweepOptions::stop was set between two re-timings
};

double MedianOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// SweepOptions::confirm_*: candidates[0] is the heuristic.
absl::StatusOr<Confirmation> Confirm(PointMeasurer& measurer,
                                     const std::vector<db::Candidate>& candidates,
                                     const std::vector<kernels::LaunchConfig>& configs,
                                     MeasureOptions timing, const SweepOptions& options) {
  Confirmation confirmation;
  const auto timed = [&](size_t i) {
    return candidates[i].status == db::CandidateStatus::kMeasured && candidates[i].correct &&
           candidates[i].median_us.has_value();
  };
  std::vector<size_t> leaders;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (timed(i)) leaders.push_back(i);
  }
  std::sort(leaders.begin(), leaders.end(), [&](size_t a, size_t b) {
    return *candidates[a].median_us < *candidates[b].median_us;
  });
  if (leaders.size() > static_cast<size_t>(std::max(options.confirm_leaders, 0))) {
    leaders.resize(static_cast<size_t>(options.confirm_leaders));
  }
  // Only when a leader could displace a correct heuristic.
  if (options.confirm_rounds <= 0 || leaders.empty() || !timed(0) ||
      *candidates[leaders[0]].median_us >= *candidates[0].median_us) {
    return confirmation;
  }
  std::vector<size_t> contenders = {0};
  contenders.insert(contenders.end(), leaders.begin(), leaders.end());
  std::vector<std::vector<double>> rounds(contenders.size());
  timing.prune_above_us.reset();
  timing.graph_replay = true;  // the benchmark's method (SweepOptions::confirm_rounds)
  for (int round = 0; round < options.confirm_rounds; ++round) {
    for (size_t c = 0; c < contenders.size(); ++c) {
      // The re-timings are candidates too: a stop lands between them.
      if (Stopping(options)) {
        confirmation.stopped = true;
        return confirmation;
      }
      MeasureOptions contender_timing = timing;
      contender_timing.repetitions =
          GraphRepetitions(timing.repetitions, *candidates[contenders[c]].median_us);
      absl::StatusOr<std::optional<CandidateMeasurement>> m = Undisturbed<CandidateMeasurement>(
          options, [&] { return measurer.Measure(configs[contenders[c]], contender_timing); });
      if (!m.ok()) return m.status();
      if (!m->has_value()) {
        confirmation.stopped = true;
        return confirmation;
      }
      if ((*m)->correct && (*m)->timing) rounds[c].push_back((*m)->timing->median_us);
    }
  }
  if (rounds[0].size() != static_cast<size_t>(options.confirm_rounds)) {
    return confirmation;  // the heuristic failed a re-check: keep the sweep's ranking
  }
  confirmation.heuristic_us = MedianOf(rounds[0]);
  confirmation.winner = 0;
  confirmation.winner_us = confirmation.heuristic_us;
  double best_leader_us = 0;
  size_t best_leader = 0;
  for (size_t c = 1; c < contenders.size(); ++c) {
    // A contender that failed any re-check is out.
    if (rounds[c].size() != static_cast<size_t>(options.confirm_rounds)) continue;
    const double us = MedianOf(rounds[c]);
    if (best_leader == 0 || us < best_leader_us) {
      best_leader = c;
      best_leader_us = us;
    }
  }
  if (best_leader != 0 &&
      best_leader_us < confirmation.heuristic_us * (1.0 - options.confirm_margin)) {
    confirmation.winner = contenders[best_leader];
    confirmation.winner_us = best_leader_us;
  }
  return confirmation;
}

// Tunes one point. Returns nullopt when stopped (nothing written). Errors
// do not name the point: the caller does.
absl::StatusOr<std::optional<PointOutcome>> TunePoint(
    db::TuningStore& store, Backend& backend, const GridPoint& point, const db::PointKey& key,
    int64_t run_id, double copy_gbps, const SweepOptions& options,
    absl::FunctionRef<void(int done, int total)> on_candidate) {
  const kernels::DeviceInfo& device = backend.device();
  // A point on strided or grouped rows (a per-head view) is tuned among
  // the configs that serve them, which Launch keeps as they are.
  const kernels::RowPlacement rows = kernels::PlacementOf(ParamsOf(point), point.shape);
  absl::StatusOr<std::vector<kernels::LaunchConfig>> configs =
      kernels::EnumerateConfigs(point.op, point.dtype, point.shape, device, rows);
  if (!configs.ok()) return configs.status();
  absl::StatusOr<kernels::LaunchConfig> heuristic = kernels::HeuristicConfig(
      point.op, point.dtype, point.shape, device, /*alignment_bytes=*/16, rows);
  if (!heuristic.ok()) return heuristic.status();
  absl::StatusOr<std::unique_ptr<PointMeasurer>> measurer = backend.Prepare(point);
  if (!measurer.ok()) return measurer.status();

  // Each measurement as the device's own (SweepOptions::yield); nullopt
  // when stopped meanwhile.
  const auto measure = [&](const kernels::LaunchConfig& config, const MeasureOptions& timing) {
    return Undisturbed<CandidateMeasurement>(
        options, [&] { return (*measurer)->Measure(config, timing); });
  };

  // The heuristic first, fully timed: the baseline for pruning and speedup.
  MeasureOptions timing = options.timing;
  timing.prune_above_us.reset();
  absl::StatusOr<std::optional<CandidateMeasurement>> baseline = measure(*heuristic, timing);
  if (!baseline.ok()) return baseline.status();
  if (!baseline->has_value()) return std::optional<PointOutcome>();
  if (IsTimedAndCorrect(**baseline) && (*baseline)->timing->median_us < options.graph_below_us) {
    timing.graph_replay = true;  // launch-bound: rank every candidate by graph replay
    baseline = measure(*heuristic, timing);
    if (!baseline.ok()) return baseline.status();
    if (!baseline->has_value()) return std::optional<PointOutcome>();
  }

  PointOutcome outcome;
  outcome.point = point;
  outcome.heuristic_key = kernels::ConfigKey(*heuristic);
  outcome.graph_replay = timing.graph_replay;
  std::vector<db::Candidate> candidates;
  std::vector<kernels::LaunchConfig> candidate_configs;  // parallel to candidates
  std::optional<size_t> best;  // index into candidates
  const auto consider = [&](const kernels::LaunchConfig& config, const CandidateMeasurement& m) {
    candidates.push_back(MakeCandidate(run_id, key, config, m, point, copy_gbps));
    candidate_configs.push_back(config);
    ++outcome.candidates;
    if (m.status == db::CandidateStatus::kPruned) ++outcome.pruned;
    if (m.status == db::CandidateStatus::kFailedCheck) ++outcome.wrong;
    if (m.status == db::CandidateStatus::kSkippedOccupancy ||
        m.status == db::CandidateStatus::kLaunchError) {
      ++outcome.skipped;
    }
    if (IsTimedAndCorrect(m) &&
        (!best || m.timing->median_us < *candidates[*best].median_us)) {
      best = candidates.size() - 1;
    }
  };
  consider(*heuristic, **baseline);
  if (IsTimedAndCorrect(**baseline)) outcome.heuristic_us = (*baseline)->timing->median_us;
  on_candidate(1, static_cast<int>(configs->size()));

  int done = 1;
  for (const kernels::LaunchConfig& config : *configs) {
    if (config == *heuristic) continue;
    if (Stopping(options)) return std::optional<PointOutcome>();
    MeasureOptions candidate_timing = timing;
    if (best) candidate_timing.prune_above_us = *candidates[*best].median_us * options.prune_factor;
    absl::StatusOr<std::optional<CandidateMeasurement>> m = measure(config, candidate_timing);
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat(kernels::ConfigKey(config), ": ", m.status().message()));
    }
    if (!m->has_value()) return std::optional<PointOutcome>();
    consider(config, **m);
    on_candidate(++done, static_cast<int>(configs->size()));
  }
  if (!best) {
    return absl::InternalError("no config passed the reference check; not recording it");
  }

  const size_t leader = *best;
  absl::StatusOr<Confirmation> confirmed =
      Confirm(**measurer, candidates, candidate_configs, timing, options);
  if (!confirmed.ok()) return confirmed.status();
  if (confirmed->stopped) return std::optional<PointOutcome>();
  if (confirmed->winner) best = confirmed->winner;
  outcome.leader_overturned = *best != leader;
  if (confirmed->heuristic_us > 0) outcome.heuristic_us = confirmed->heuristic_us;

  const db::Candidate& winner = candidates[*best];
  // Figures from the confirmation when there was one (the heuristic's and
  // the winner's then come from the same interleaved rounds).
  const double winner_us = confirmed->winner ? confirmed->winner_us : *winner.median_us;
  const double rescale = *winner.median_us / winner_us;
  db::BestConfig row;
  row.point = key;
  row.config = winner.config;
  row.median_us = winner_us;
  row.spread_low_us = winner.spread_low_us;
  row.spread_high_us = winner.spread_high_us;
  row.gbps = *winner.gbps * rescale;
  row.pct_of_copy = *winner.pct_of_copy * rescale;
  row.graph_replay = confirmed->winner.has_value() || winner.graph_replay;
  row.heuristic_key = outcome.heuristic_key;
  if (outcome.heuristic_us > 0) row.heuristic_us = outcome.heuristic_us;
  row.run_id = run_id;
  row.env = backend.environment();
  row.updated_at = static_cast<int64_t>(std::time(nullptr));
  if (absl::Status s = store.WritePoint(row, candidates); !s.ok()) return s;

  outcome.best_key = winner.config.key;
  outcome.best_us = row.median_us;
  outcome.graph_replay = row.graph_replay;
  outcome.gbps = row.gbps;
  outcome.pct_of_copy = row.pct_of_copy;
  return std::optional<PointOutcome>(std::move(outcome));
}

// Which of the grid's points the pool's SKU still needs (all with --force).
absl::Status PlanPool(db::TuningStore& store, const std::vector<GridPoint>& grid,
                      const SweepOptions& options, Pool& pool) {
  absl::StatusOr<int64_t> gpu_id = store.UpsertGpu(pool.sku);
  if (!gpu_id.ok()) return gpu_id.status();
  pool.gpu_id = *gpu_id;
  pool.grid = DescribeGrid(grid);
  // Resume: points this SKU already has for this kernel version are done.
  for (const GridPoint& p : grid) {
    const db::PointKey key{*gpu_id,       std::string(kernels::OpName(p.op)),
                           std::string(kernels::DTypeName(p.dtype)),
                           p.shape.rows,  p.shape.cols,
                           p.shape.inner};
    absl::StatusOr<bool> complete = store.IsPointComplete(key, pool.env.kernel_version);
    if (!complete.ok()) return complete.status();
    if (*complete && !options.force) {
      PointOutcome skipped;
      skipped.point = p;
      skipped.already_complete = true;
      pool.complete.push_back(skipped);
    } else {
      pool.todo.emplace_back(p, key);
    }
  }
  if (options.progress != nullptr) {
    // "NVIDIA H100 80GB HBM3 on GPU 0, GPU 1: ..."; unnamed devices (RunSweep)
    // are not listed.
    std::string who = pool.sku.name;
    if (pool.device_names.size() > 1 || !pool.device_names.front().empty()) {
      absl::StrAppend(&who, " on ", absl::StrJoin(pool.device_names, ", "));
    }
    *options.progress << absl::StrFormat("%s: %d points to tune, %d already in the store%s\n",
                                         who, pool.todo.size(), pool.complete.size(),
                                         options.force ? "" : " (use --force to redo them)");
  }
  return absl::OkStatus();
}

// Measures the copy roofline on `backend` and creates the pool's run, once:
// the first device of the pool to get here does it, the others wait. False
// when stopped before the roofline could be measured.
absl::StatusOr<bool> StartPool(db::TuningStore& store, Backend& backend, Pool& pool,
                       const SweepOptions& options, Progress& progress) {
  std::lock_guard<std::mutex> lock(pool.start_mu);
  if (pool.started) return true;
  absl::StatusOr<std::optional<double>> copy_gbps =
      Undisturbed<double>(options, [&] { return backend.MeasureCopyGbps(); });
  if (!copy_gbps.ok()) return copy_gbps.status();
  if (!copy_gbps->has_value()) return false;
  db::TuningRun run;
  run.gpu_id = pool.gpu_id;
  run.started_at = static_cast<int64_t>(std::time(nullptr));
  run.host = options.host;
  run.user = options.user;
  run.command_line = options.command_line;
  run.grid = pool.grid;
  run.points_total = static_cast<int64_t>(pool.todo.size());
  run.copy_gbps = **copy_gbps;
  run.env = pool.env;
  absl::StatusOr<int64_t> run_id = store.CreateRun(run);
  if (!run_id.ok()) return run_id.status();
  pool.run_id = *run_id;
  pool.copy_gbps = **copy_gbps;
  pool.started = true;
  progress.PoolStarted(pool);
  return true;
}

// What one device did; `tuned` holds its points by index into the pool's todo.
struct WorkResult {
  DeviceOutcome outcome;
  std::vector<std::pair<size_t, PointOutcome>> tuned;
};

// One device's share of a pool: points until none is left, the stop flag is
// set, or an error (which stops this device only; its point is dropped).
WorkResult Work(db::TuningStore& store, Backend& backend, Pool& pool, int device,
                const std::string& name, const SweepOptions& options, Progress& progress) {
  WorkResult result;
  result.outcome.name = name;
  result.outcome.gpu = pool.sku.name;
  while (pool.next.load() < pool.todo.size()) {
    if (Stopping(options)) {
      result.outcome.interrupted = true;
      break;
    }
    absl::StatusOr<bool> started = StartPool(store, backend, pool, options, progress);
    if (!started.ok()) {
      result.outcome.status = started.status();
      break;
    }
    if (!*started) {  // stopped while waiting to measure the roofline
      result.outcome.interrupted = true;
      break;
    }
    const size_t i = pool.next.fetch_add(1);
    if (i >= pool.todo.size()) break;
    const GridPoint& point = pool.todo[i].first;
    absl::StatusOr<std::optional<PointOutcome>> outcome = TunePoint(
        store, backend, point, pool.todo[i].second, pool.run_id, pool.copy_gbps, options,
        [&](int done, int total) { progress.Candidate(device, pool, point, done, total); });
    if (!outcome.ok()) {
      result.outcome.status =
          absl::Status(outcome.status().code(),
                       absl::StrCat(PointName(point), ": ", outcome.status().message()));
      break;
    }
    if (!outcome->has_value()) {
      result.outcome.interrupted = true;
      break;
    }
    PointOutcome& tuned = **outcome;
    tuned.device = name;
    progress.PointDone(device, pool, tuned);
    ++result.outcome.points;
    result.outcome.candidates += tuned.candidates;
    result.tuned.emplace_back(i, std::move(tuned));
  }
  progress.DeviceDone(device);
  return result;
}

// Marks the pool's run finished when every point it set out to do was
// stored, interrupted otherwise; fills its summary.
absl::Status FinishPool(db::TuningStore& store, const Pool& pool,
                        std::vector<std::pair<size_t, PointOutcome>> tuned, bool interrupted,
                        SweepSummary& summary) {
  summary.gpu = pool.sku.name;
  summary.devices = pool.device_names;
  summary.interrupted = interrupted;
  summary.points = pool.complete;
  std::sort(tuned.begin(), tuned.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [index, outcome] : tuned) summary.points.push_back(std::move(outcome));
  if (!pool.started) return absl::OkStatus();
  summary.run_id = pool.run_id;
  summary.copy_gbps = pool.copy_gbps;
  const db::RunStatus status =
      tuned.size() == pool.todo.size() ? db::RunStatus::kFinished : db::RunStatus::kInterrupted;
  return store.FinishRun(pool.run_id, status, static_cast<int64_t>(std::time(nullptr)));
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<SweepSummary> RunSweep(db::TuningStore& store, Backend& backend,
                                      const std::vector<GridPoint>& grid,
                                      const SweepOptions& options) {
  const Clock::time_point start = Clock::now();
  Pool pool;
  pool.sku = SkuOf(backend.device());
  pool.env = backend.environment();
  pool.device_names = {""};
  if (absl::Status s = PlanPool(store, grid, options, pool); !s.ok()) return s;
  SweepSummary summary;
  if (pool.todo.empty()) {
    summary.gpu = pool.sku.name;
    summary.points = pool.complete;
    return summary;
  }
  Progress progress(options, pool.device_names, {&pool});
  WorkResult result = Work(store, backend, pool, 0, "", options, progress);
  const absl::Status finished = FinishPool(store, pool, std::move(result.tuned),
                                           result.outcome.interrupted, summary);
  if (!result.outcome.status.ok()) return result.outcome.status;
  if (!finished.ok()) return finished;
  summary.devices.clear();
  summary.wall_seconds = SecondsSince(start);
  return summary;
}

bool NodeSweepSummary::failed() const {
  return std::any_of(devices.begin(), devices.end(),
                     [](const DeviceOutcome& d) { return !d.status.ok(); });
}

absl::StatusOr<NodeSweepSummary> RunNodeSweep(db::TuningStore& store,
                                              const std::vector<SweepDevice>& devices,
                                              const std::vector<GridPoint>& grid,
                                              const SweepOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("no device to tune on");
  const Clock::time_point start = Clock::now();

  // Each device is opened on its own thread (a GPU backend binds that
  // thread to its GPU); the plan needs every device's SKU, so the workers
  // wait for it before they take any point.
  struct Worker {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<db::TuningStore> store;
    absl::Status open_status;
    std::promise<void> opened;
    Pool* pool = nullptr;  // set by the plan; null: nothing to do
    WorkResult result;
  };
  std::vector<Worker> workers(devices.size());
  std::vector<std::future<void>> opened;
  for (Worker& w : workers) opened.push_back(w.opened.get_future());
  std::promise<void> planned;
  const std::shared_future<void> plan = planned.get_future().share();
  std::unique_ptr<Progress> progress;  // made by the plan

  std::vector<std::thread> threads;
  for (size_t i = 0; i < devices.size(); ++i) {
    threads.emplace_back([&, i] {
      Worker& w = workers[i];
      absl::StatusOr<std::unique_ptr<Backend>> backend = devices[i].open();
      if (backend.ok()) {
        w.backend = *std::move(backend);
        db::OpenOptions open;
        open.check_integrity = false;  // the caller's open checked the file
        absl::StatusOr<std::unique_ptr<db::TuningStore>> connection =
            db::TuningStore::Open(store.path(), open);
        if (connection.ok()) {
          w.store = *std::move(connection);
        } else {
          w.open_status = connection.status();
        }
      } else {
        w.open_status = backend.status();
      }
      w.opened.set_value();
      plan.wait();
      if (w.pool != nullptr) {
        w.result = Work(*w.store, *w.backend, *w.pool, static_cast<int>(i), devices[i].name,
                        options, *progress);
      }
      // Released on the thread that used them.
      w.store.reset();
      w.backend.reset();
    });
  }
  for (std::future<void>& f : opened) f.wait();

  // The plan: a pool per SKU, in the order of each SKU's first device.
  std::vector<std::unique_ptr<Pool>> pools;
  std::vector<Pool*> pool_of(devices.size(), nullptr);
  for (size_t i = 0; i < devices.size(); ++i) {
    Worker& w = workers[i];
    if (!w.open_status.ok()) continue;
    const db::GpuSku sku = SkuOf(w.backend->device());
    auto same = std::find_if(pools.begin(), pools.end(),
                             [&](const std::unique_ptr<Pool>& p) { return p->sku == sku; });
    if (same == pools.end()) {
      pools.push_back(std::make_unique<Pool>());
      pools.back()->index = static_cast<int>(pools.size()) - 1;
      pools.back()->sku = sku;
      pools.back()->env = w.backend->environment();
      same = pools.end() - 1;
    }
    (*same)->device_names.push_back(devices[i].name);
    pool_of[i] = same->get();
  }
  absl::Status planning = absl::OkStatus();
  for (const std::unique_ptr<Pool>& pool : pools) {
    planning = PlanPool(store, grid, options, *pool);
    if (!planning.ok()) break;
  }
  if (planning.ok()) {
    std::vector<std::string> names;
    for (const SweepDevice& d : devices) names.push_back(d.name);
    std::vector<const Pool*> all;
    for (const std::unique_ptr<Pool>& pool : pools) all.push_back(pool.get());
    progress = std::make_unique<Progress>(options, std::move(names), all);
    for (size_t i = 0; i < devices.size(); ++i) workers[i].pool = pool_of[i];
  }
  planned.set_value();
  for (std::thread& t : threads) t.join();
  if (!planning.ok()) return planning;

  NodeSweepSummary summary;
  absl::Status finishing = absl::OkStatus();
  for (const std::unique_ptr<Pool>& pool : pools) {
    std::vector<std::pair<size_t, PointOutcome>> tuned;
    bool interrupted = false;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (pool_of[i] != pool.get()) continue;
      interrupted = interrupted || workers[i].result.outcome.interrupted;
      for (auto& t : workers[i].result.tuned) tuned.push_back(std::move(t));
    }
    summary.skus.emplace_back();
    const absl::Status finished =
        FinishPool(store, *pool, std::move(tuned), interrupted, summary.skus.back());
    if (finishing.ok()) finishing = finished;
    summary.interrupted = summary.interrupted || interrupted;
  }
  const double wall_seconds = SecondsSince(start);
  for (SweepSummary& sku : summary.skus) sku.wall_seconds = wall_seconds;
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceOutcome outcome = workers[i].result.outcome;
    outcome.name = devices[i].name;
    if (!workers[i].open_status.ok()) outcome.status = workers[i].open_status;
    if (pool_of[i] != nullptr) outcome.gpu = pool_of[i]->sku.name;
    summary.devices.push_back(std::move(outcome));
  }
  progress->Finished(summary.devices);
  if (!finishing.ok()) return finishing;
  return summary;
}

std::string FormatSummary(const SweepSummary& summary) {
  // Which device measured each point, when several shared the grid.
  int device_width = 0;
  if (summary.devices.size() > 1) {
    device_width = 3;  // "gpu"
    for (const std::string& name : summary.devices) {
      device_width = std::max(device_width, static_cast<int>(name.size()));
    }
  }
  const auto device_cell = [&](absl::string_view text) {
    return device_width > 0 ? absl::StrFormat("%-*s  ", device_width, text) : std::string();
  };
  std::string out = absl::StrFormat(
      "%s%-21s %-8s %8s %7s %6s  %-30s %10s %7s %6s  %-30s %8s\n", device_cell("gpu"), "op",
      "dtype", "rows", "cols", "inner", "tuned config", "time us", "GB/s", "%copy", "heuristic",
      "speedup");
  double log_sum = 0, max_speedup = 0;
  int timed = 0, reused = 0, pruned = 0, wrong = 0, skipped = 0, candidates = 0;
  for (const PointOutcome& o : summary.points) {
    if (o.already_complete) {
      ++reused;
      continue;
    }
    const double speedup = o.heuristic_us > 0 ? o.heuristic_us / o.best_us : 0;
    absl::StrAppendFormat(&out,
                          "%s%-21s %-8s %8d %7d %6d  %-30s %10.2f %7.0f %5.1f%%  %-30s %7.2fx%s\n",
                          device_cell(o.device), kernels::OpName(o.point.op), kernels::DTypeName(o.point.dtype),
                          o.point.shape.rows, o.point.shape.cols, o.point.shape.inner,
                          o.best_key, o.best_us, o.gbps,
                          o.pct_of_copy, o.heuristic_key, speedup, o.graph_replay ? " (graph)" : "");
    if (speedup > 0) {
      log_sum += std::log(speedup);
      max_speedup = std::max(max_speedup, speedup);
      ++timed;
    }
    pruned += o.pruned;
    wrong += o.wrong;
    skipped += o.skipped;
    candidates += o.candidates;
  }
  absl::StrAppendFormat(&out,
                        "\n%d points tuned (%d candidates: %d pruned, %d failed the reference "
                        "check, %d could not launch), %d already in the store%s\n",
                        static_cast<int>(summary.points.size()) - reused, candidates, pruned, wrong,
                        skipped, reused, summary.interrupted ? "; INTERRUPTED" : "");
  if (timed > 0) {
    absl::StrAppendFormat(&out,
                          "speedup over the heuristic: geometric mean %.3fx, max %.2fx; copy "
                          "roofline %.0f GB/s; wall time %s\n",
                          std::exp(log_sum / timed), max_speedup, summary.copy_gbps,
                          FormatDuration(summary.wall_seconds));
  }
  return out;
}

std::string DescribeDeviceOutcome(const DeviceOutcome& d) {
  std::string out = d.name;
  if (!d.gpu.empty()) absl::StrAppend(&out, " (", d.gpu, ")");
  absl::StrAppend(&out, ": ", d.points, " points tuned, ", d.candidates, " candidates");
  if (!d.status.ok()) {
    absl::StrAppend(&out, "; STOPPED: ", d.status.message());
  } else if (d.interrupted) {
    absl::StrAppend(&out, "; interrupted");
  }
  return out;
}

std::string FormatNodeSummary(const NodeSweepSummary& summary) {
  std::string out;
  for (const SweepSummary& sku : summary.skus) {
    if (summary.skus.size() > 1) {
      absl::StrAppend(&out, out.empty() ? "" : "\n", "== ", sku.gpu, " on ",
                      absl::StrJoin(sku.devices, ", "), "\n");
    }
    absl::StrAppend(&out, FormatSummary(sku));
  }
  if (summary.devices.size() > 1) {
    absl::StrAppend(&out, "\n");
    for (const DeviceOutcome& d : summary.devices) {
      absl::StrAppend(&out, DescribeDeviceOutcome(d), "\n");
    }
  }
  return out;
}

}  // namespace kt::tuner
