// The tuning sweep (sweep.h).
#include "tuner/sweep.h"

#include <algorithm>

#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// Progress with an ETA from the average time per candidate so far.
class Progress {
 public:
  Progress(const SweepOptions& o, int points) : options_(o), points_(points) {}

  void Candidate(int point_index, const GridPoint& p, int done, int total) {
    ++candidates_done_;
    if (options_.progress == nullptr || !options_.progress_is_terminal) return;
    const double elapsed = Elapsed();
    const double per_candidate = elapsed / candidates_done_;
    const double per_point = point_index > 0 ? candidates_done_ / static_cast<double>(point_index)
                                             : static_cast<double>(total);
    const double remaining =
        (total - done) + per_point * (points_ - point_index - 1);
    *options_.progress << absl::StrFormat("\r\033[K[%*d/%d] %-40s %3d/%-3d candidates  ETA %s",
                                          Width(), point_index + 1, points_, PointName(p), done,
                                          total, FormatDuration(remaining * per_candidate))
                       << std::flush;
  }

  void PointDone(int point_index, const PointOutcome& o) {
    if (options_.progress == nullptr) return;
    if (options_.progress_is_terminal) *options_.progress << "\r\033[K";
    const double elapsed = Elapsed();
    const double eta = elapsed / (point_index + 1) * (points_ - point_index - 1);
    *options_.progress << absl::StrFormat(
                              "[%*d/%d] %-40s %-30s %8.2f us %6.0f GB/s %5.1f%%  x%.2f  "
                              "(%d candidates, %d pruned)  ETA %s\n",
                              Width(), point_index + 1, points_, PointName(o.point), o.best_key,
                              o.best_us, o.gbps, o.pct_of_copy,
                              o.heuristic_us > 0 ? o.heuristic_us / o.best_us : 0.0,
                              o.candidates, o.pruned, FormatDuration(eta))
                       << std::flush;
  }

  double Elapsed() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  int Width() const { return static_cast<int>(std::to_string(points_).size()); }

  const SweepOptions& options_;
  const int points_;
  const Clock::time_point start_ = Clock::now();
  int64_t candidates_done_ = 0;
};

bool Stopping(const SweepOptions& o) {
  return o.stop != nullptr && o.stop->load(std::memory_order_relaxed);
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

// Tunes one point. Returns nullopt when interrupted (nothing written).
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
  for (int round = 0; round < options.confirm_rounds; ++round) {
    for (size_t c = 0; c < contenders.size(); ++c) {
      // The re-timings are candidates too: a stop lands between them.
      if (Stopping(options)) {
        confirmation.stopped = true;
        return confirmation;
      }
      absl::StatusOr<CandidateMeasurement> m = measurer.Measure(configs[contenders[c]], timing);
      if (!m.ok()) return m.status();
      if (m->correct && m->timing) rounds[c].push_back(m->timing->median_us);
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

absl::StatusOr<std::optional<PointOutcome>> TunePoint(db::TuningStore& store, Backend& backend,
                                                      const GridPoint& point,
                                                      const db::PointKey& key, int64_t run_id,
                                                      double copy_gbps,
                                                      const SweepOptions& options,
                                                      Progress& progress, int point_index) {
  const kernels::DeviceInfo& device = backend.device();
  absl::StatusOr<std::vector<kernels::LaunchConfig>> configs =
      kernels::EnumerateConfigs(point.op, point.dtype, point.shape, device);
  if (!configs.ok()) return configs.status();
  absl::StatusOr<kernels::LaunchConfig> heuristic =
      kernels::HeuristicConfig(point.op, point.dtype, point.shape, device);
  if (!heuristic.ok()) return heuristic.status();
  absl::StatusOr<std::unique_ptr<PointMeasurer>> measurer = backend.Prepare(point);
  if (!measurer.ok()) return measurer.status();

  // The heuristic first, fully timed: the baseline for pruning and speedup.
  MeasureOptions timing = options.timing;
  timing.prune_above_us.reset();
  absl::StatusOr<CandidateMeasurement> baseline = (*measurer)->Measure(*heuristic, timing);
  if (!baseline.ok()) return baseline.status();
  if (IsTimedAndCorrect(*baseline) && baseline->timing->median_us < options.graph_below_us) {
    timing.graph_replay = true;  // launch-bound: rank every candidate by graph replay
    baseline = (*measurer)->Measure(*heuristic, timing);
    if (!baseline.ok()) return baseline.status();
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
  consider(*heuristic, *baseline);
  if (IsTimedAndCorrect(*baseline)) outcome.heuristic_us = baseline->timing->median_us;
  progress.Candidate(point_index, point, 1, static_cast<int>(configs->size()));

  int done = 1;
  for (const kernels::LaunchConfig& config : *configs) {
    if (config == *heuristic) continue;
    if (Stopping(options)) return std::optional<PointOutcome>();
    MeasureOptions candidate_timing = timing;
    if (best) candidate_timing.prune_above_us = *candidates[*best].median_us * options.prune_factor;
    absl::StatusOr<CandidateMeasurement> m = (*measurer)->Measure(config, candidate_timing);
    if (!m.ok()) {
      return absl::Status(m.status().code(), absl::StrCat(PointName(point), " ",
                                                          kernels::ConfigKey(config), ": ",
                                                          m.status().message()));
    }
    consider(config, *m);
    progress.Candidate(point_index, point, ++done, static_cast<int>(configs->size()));
  }
  if (!best) {
    return absl::InternalError(absl::StrCat("no config of ", PointName(point),
                                            " passed the reference check; not recording it"));
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
  row.graph_replay = winner.graph_replay;
  row.heuristic_key = outcome.heuristic_key;
  if (outcome.heuristic_us > 0) row.heuristic_us = outcome.heuristic_us;
  row.run_id = run_id;
  row.env = backend.environment();
  row.updated_at = static_cast<int64_t>(std::time(nullptr));
  if (absl::Status s = store.WritePoint(row, candidates); !s.ok()) return s;

  outcome.best_key = winner.config.key;
  outcome.best_us = row.median_us;
  outcome.gbps = row.gbps;
  outcome.pct_of_copy = row.pct_of_copy;
  return std::optional<PointOutcome>(std::move(outcome));
}

}  // namespace

absl::StatusOr<SweepSummary> RunSweep(db::TuningStore& store, Backend& backend,
                                      const std::vector<GridPoint>& grid,
                                      const SweepOptions& options) {
  const Clock::time_point start = Clock::now();
  SweepSummary summary;
  absl::StatusOr<int64_t> gpu_id = store.UpsertGpu(SkuOf(backend.device()));
  if (!gpu_id.ok()) return gpu_id.status();
  const db::Environment env = backend.environment();

  // Resume: points this GPU already has for this kernel version are done.
  std::vector<std::pair<GridPoint, db::PointKey>> todo;
  for (const GridPoint& p : grid) {
    const db::PointKey key{*gpu_id,       std::string(kernels::OpName(p.op)),
                           std::string(kernels::DTypeName(p.dtype)),
                           p.shape.rows,  p.shape.cols,
                           p.shape.inner};
    absl::StatusOr<bool> complete = store.IsPointComplete(key, env.kernel_version);
    if (!complete.ok()) return complete.status();
    if (*complete && !options.force) {
      PointOutcome skipped;
      skipped.point = p;
      skipped.already_complete = true;
      summary.points.push_back(skipped);
    } else {
      todo.emplace_back(p, key);
    }
  }
  if (options.progress != nullptr) {
    *options.progress << absl::StrFormat("%s: %d points to tune, %d already in the store%s\n",
                                         backend.device().name, todo.size(),
                                         grid.size() - todo.size(),
                                         options.force ? "" : " (use --force to redo them)");
  }
  if (todo.empty()) return summary;

  absl::StatusOr<double> copy_gbps = backend.MeasureCopyGbps();
  if (!copy_gbps.ok()) return copy_gbps.status();
  summary.copy_gbps = *copy_gbps;

  db::TuningRun run;
  run.gpu_id = *gpu_id;
  run.started_at = static_cast<int64_t>(std::time(nullptr));
  run.host = options.host;
  run.user = options.user;
  run.command_line = options.command_line;
  run.grid = DescribeGrid(grid);
  run.points_total = static_cast<int64_t>(todo.size());
  run.copy_gbps = *copy_gbps;
  run.env = env;
  absl::StatusOr<int64_t> run_id = store.CreateRun(run);
  if (!run_id.ok()) return run_id.status();
  summary.run_id = *run_id;

  Progress progress(options, static_cast<int>(todo.size()));
  absl::Status failure = absl::OkStatus();
  for (size_t i = 0; i < todo.size(); ++i) {
    if (Stopping(options)) {
      summary.interrupted = true;
      break;
    }
    absl::StatusOr<std::optional<PointOutcome>> outcome =
        TunePoint(store, backend, todo[i].first, todo[i].second, *run_id, *copy_gbps, options,
                  progress, static_cast<int>(i));
    if (!outcome.ok()) {
      failure = outcome.status();
      break;
    }
    if (!outcome->has_value()) {
      summary.interrupted = true;
      break;
    }
    progress.PointDone(static_cast<int>(i), **outcome);
    summary.points.push_back(**std::move(outcome));
  }
  const db::RunStatus status = failure.ok() && !summary.interrupted ? db::RunStatus::kFinished
                                                                    : db::RunStatus::kInterrupted;
  const absl::Status finished =
      store.FinishRun(*run_id, status, static_cast<int64_t>(std::time(nullptr)));
  if (!failure.ok()) return failure;
  if (!finished.ok()) return finished;
  summary.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return summary;
}

std::string FormatSummary(const SweepSummary& summary) {
  std::string out = absl::StrFormat(
      "%-21s %-8s %8s %7s %6s  %-30s %10s %7s %6s  %-30s %8s\n", "op", "dtype", "rows", "cols",
      "inner", "tuned config", "time us", "GB/s", "%copy", "heuristic", "speedup");
  double log_sum = 0, max_speedup = 0;
  int timed = 0, reused = 0, pruned = 0, wrong = 0, skipped = 0, candidates = 0;
  for (const PointOutcome& o : summary.points) {
    if (o.already_complete) {
      ++reused;
      continue;
    }
    const double speedup = o.heuristic_us > 0 ? o.heuristic_us / o.best_us : 0;
    absl::StrAppendFormat(&out,
                          "%-21s %-8s %8d %7d %6d  %-30s %10.2f %7.0f %5.1f%%  %-30s %7.2fx%s\n",
                          kernels::OpName(o.point.op), kernels::DTypeName(o.point.dtype),
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

}  // namespace kt::tuner
