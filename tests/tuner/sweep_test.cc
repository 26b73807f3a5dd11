// The sweep on a fake backend: what it records, what may win, pruning,
// graph replay for launch-bound points, resume and --force, failures.
#include "tuner/sweep.h"

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/launch_config.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::tuner {
namespace {

using kernels::DType;
using kernels::LaunchConfig;
using kernels::Op;

// Times are a fixed function of the config key; the fastest config of every
// point fails the reference check, so the sweep must never pick it.
struct FakeDevice {
  std::map<std::string, int> measures;  // per config key, across points
  std::vector<MeasureOptions> options_seen;
  int total_measures = 0;
  std::function<void(int)> on_measure;  // called with total_measures
  double scale_us = 100.0;              // makes points launch-bound when small
  bool fail_with_error = false;
  // A config that looks fastest on its first timing and slow ever after.
  std::string lucky_key;
};

double ModelTime(const std::string& key, double scale) {
  return scale * (1.0 + static_cast<double>(std::hash<std::string>()(key) % 997) / 997.0);
}

class FakeMeasurer final : public PointMeasurer {
 public:
  FakeMeasurer(FakeDevice& device, std::string wrong_key)
      : device_(device), wrong_key_(std::move(wrong_key)) {}

  absl::StatusOr<CandidateMeasurement> Measure(const LaunchConfig& config,
                                               const MeasureOptions& options) override {
    const std::string key = kernels::ConfigKey(config);
    ++device_.measures[key];
    device_.options_seen.push_back(options);
    ++device_.total_measures;
    if (device_.on_measure) device_.on_measure(device_.total_measures);
    if (device_.fail_with_error) return absl::InternalError("kernel fault (simulated)");
    CandidateMeasurement m;
    m.occupancy = 4;
    if (key == wrong_key_) {
      m.status = db::CandidateStatus::kFailedCheck;
      m.message = "1 bad y elements (simulated)";
      return m;
    }
    m.correct = true;
    m.graph_replay = options.graph_replay;
    TimingStats t;
    t.median_us = ModelTime(key, device_.scale_us);
    if (key == device_.lucky_key) t.median_us *= device_.measures[key] == 1 ? 0.1 : 10.0;
    t.min_us = t.median_us * 0.99;
    t.p10_us = t.min_us;
    t.p90_us = t.median_us * 1.01;
    t.repetitions = options.repetitions;
    if (options.prune_above_us && t.min_us > *options.prune_above_us) {
      m.status = db::CandidateStatus::kPruned;
      t.repetitions = options.probe_repetitions;
    }
    m.timing = t;
    return m;
  }

 private:
  FakeDevice& device_;
  std::string wrong_key_;
};

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(FakeDevice& device) : fake_(device), device_(kernels::DescribedH100()) {}
  const kernels::DeviceInfo& device() const override { return device_; }
  db::Environment environment() const override { return {580, 13000, "test+k1"}; }
  absl::StatusOr<double> MeasureCopyGbps() override { return 4000.0; }
  absl::StatusOr<std::unique_ptr<PointMeasurer>> Prepare(const GridPoint& point) override {
    // The fastest config by the model is the wrong one.
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        kernels::EnumerateConfigs(point.op, point.dtype, point.shape, device_);
    if (!configs.ok()) return configs.status();
    std::string fastest;
    for (const LaunchConfig& c : *configs) {
      const std::string key = kernels::ConfigKey(c);
      if (fastest.empty() || ModelTime(key, 1) < ModelTime(fastest, 1)) fastest = key;
    }
    return std::unique_ptr<PointMeasurer>(new FakeMeasurer(fake_, fastest));
  }

 private:
  FakeDevice& fake_;
  kernels::DeviceInfo device_;
};

class SweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db::OpenOptions open;
    open.create_if_missing = true;
    absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
        db::TuningStore::Open(dir_.File("tuning.db"), open);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    grid_ = *CustomGrid({Op::kSoftmax, Op::kLayerNorm}, {DType::kFloat16}, {64}, {1024, 4096});
  }

  std::vector<db::BestConfig> Best() {
    absl::StatusOr<std::vector<db::BestConfig>> best = store_->ListBestConfigs({});
    EXPECT_TRUE(best.ok()) << best.status();
    return best.ok() ? *best : std::vector<db::BestConfig>{};
  }

  kt::testing::ScopedTempDir dir_;
  std::unique_ptr<db::TuningStore> store_;
  std::vector<GridPoint> grid_;
  FakeDevice fake_;
};

TEST_F(SweepTest, RecordsEveryCandidateAndTheFastestCorrectOneWins) {
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, grid_, {});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->interrupted);
  ASSERT_EQ(summary->points.size(), 4u);
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 4u);
  for (const db::BestConfig& row : best) {
    absl::StatusOr<std::vector<db::Candidate>> candidates =
        store_->ListCandidates(row.point, std::nullopt);
    ASSERT_TRUE(candidates.ok());
    const kernels::Shape shape{row.point.rows, row.point.cols};
    const Op op = *kernels::ParseOp(row.point.op);
    const auto configs = kernels::EnumerateConfigs(op, DType::kFloat16, shape,
                                                   kernels::DescribedH100());
    EXPECT_EQ(candidates->size(), configs->size()) << "every enumerated config is recorded";
    double fastest_correct = 1e30;
    int wrong = 0;
    for (const db::Candidate& c : *candidates) {
      if (c.status == db::CandidateStatus::kFailedCheck) {
        ++wrong;
        EXPECT_NE(c.config.key, row.config.key) << "a wrong config won";
      }
      if (c.status == db::CandidateStatus::kMeasured && c.correct) {
        fastest_correct = std::min(fastest_correct, *c.median_us);
      }
    }
    EXPECT_EQ(wrong, 1);
    // The fastest correct config, unless the heuristic is within the
    // confirmation margin of it.
    if (row.config.key != row.heuristic_key) {
      EXPECT_DOUBLE_EQ(row.median_us, fastest_correct);
    } else {
      EXPECT_LE(row.median_us, fastest_correct / 0.99);
    }
    ASSERT_TRUE(row.heuristic_us.has_value());
    EXPECT_GE(*row.heuristic_us, row.median_us) << "tuned is never slower than the heuristic";
    EXPECT_NEAR(row.pct_of_copy, row.gbps / 40.0, 1e-9);
    EXPECT_EQ(row.env.kernel_version, "test+k1");
  }
  absl::StatusOr<db::TuningRun> run = store_->GetRun(summary->run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->status, db::RunStatus::kFinished);
  EXPECT_EQ(run->points_done, 4);
  EXPECT_EQ(*run->copy_gbps, 4000.0);
  const std::string table = FormatSummary(*summary);
  EXPECT_NE(table.find("geometric mean"), std::string::npos) << table;
}

TEST_F(SweepTest, ALeaderThatWasLuckyOnceLosesTheConfirmation) {
  const GridPoint point = grid_[0];
  const auto configs = kernels::EnumerateConfigs(point.op, point.dtype, point.shape,
                                                 kernels::DescribedH100());
  const auto heuristic = kernels::HeuristicConfig(point.op, point.dtype, point.shape,
                                                  kernels::DescribedH100());
  ASSERT_TRUE(configs.ok() && heuristic.ok());
  // The slowest correct config gets one lucky run.
  std::string slowest;
  for (const LaunchConfig& c : *configs) {
    const std::string key = kernels::ConfigKey(c);
    if (c == *heuristic) continue;
    if (slowest.empty() || ModelTime(key, 1) > ModelTime(slowest, 1)) slowest = key;
  }
  fake_.lucky_key = slowest;
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, {point}, {});
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(summary->points.size(), 1u);
  EXPECT_TRUE(summary->points[0].leader_overturned);
  EXPECT_NE(summary->points[0].best_key, slowest);
  EXPECT_EQ(fake_.measures[slowest], 1 + 3) << "the sweep's timing plus three rounds";
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_NE(best[0].config.key, slowest);
  EXPECT_GE(*best[0].heuristic_us, best[0].median_us);
}

TEST_F(SweepTest, ALeaderWithinTheMarginKeepsTheHeuristic) {
  SweepOptions options;
  options.confirm_margin = 10.0;  // nothing is ever faster by 1000%
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, grid_, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  for (const PointOutcome& o : summary->points) {
    EXPECT_EQ(o.best_key, o.heuristic_key);
    EXPECT_DOUBLE_EQ(o.best_us, o.heuristic_us);
  }
}

TEST_F(SweepTest, HeuristicIsTimedFullyFirstAndOthersArePrunedAgainstTheBest) {
  FakeBackend backend(fake_);
  SweepOptions options;
  options.prune_factor = 1.1;
  options.confirm_rounds = 0;  // count the sweep's own measurements only
  ASSERT_TRUE(RunSweep(*store_, backend, {grid_[0]}, options).ok());
  ASSERT_FALSE(fake_.options_seen.empty());
  EXPECT_FALSE(fake_.options_seen[0].prune_above_us.has_value());
  int pruned_thresholds = 0;
  for (size_t i = 1; i < fake_.options_seen.size(); ++i) {
    if (fake_.options_seen[i].prune_above_us) ++pruned_thresholds;
  }
  EXPECT_EQ(pruned_thresholds, static_cast<int>(fake_.options_seen.size()) - 1);
  absl::StatusOr<std::vector<db::Candidate>> candidates =
      store_->ListCandidates(Best()[0].point, std::nullopt);
  int pruned = 0;
  for (const db::Candidate& c : *candidates) {
    if (c.status == db::CandidateStatus::kPruned) {
      ++pruned;
      EXPECT_GT(*c.median_us, Best()[0].median_us);
    }
  }
  EXPECT_GT(pruned, 0);
}

TEST_F(SweepTest, LaunchBoundPointsAreRankedUnderGraphReplay) {
  fake_.scale_us = 5.0;  // every config under the 20 us threshold
  FakeBackend backend(fake_);
  ASSERT_TRUE(RunSweep(*store_, backend, {grid_[0]}, {}).ok());
  ASSERT_GE(fake_.options_seen.size(), 3u);
  EXPECT_FALSE(fake_.options_seen[0].graph_replay);  // the heuristic's first timing decides
  for (size_t i = 1; i < fake_.options_seen.size(); ++i) {
    EXPECT_TRUE(fake_.options_seen[i].graph_replay) << i;
  }
  EXPECT_TRUE(Best()[0].graph_replay);
}

TEST_F(SweepTest, InterruptedRunResumesWhereItStoppedAndForceRedoesAll) {
  std::atomic<bool> stop{false};
  // Stop in the middle of the third point.
  const auto first = kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat16, {64, 1024},
                                               kernels::DescribedH100());
  const auto second = kernels::EnumerateConfigs(Op::kSoftmax, DType::kFloat16, {64, 4096},
                                                kernels::DescribedH100());
  const int stop_after = static_cast<int>(first->size() + second->size()) + 3;
  fake_.on_measure = [&](int n) {
    if (n == stop_after) stop = true;
  };
  SweepOptions options;
  options.stop = &stop;
  options.confirm_rounds = 0;  // the stop point counts the sweep's measurements
  {
    FakeBackend backend(fake_);
    absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, grid_, options);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_TRUE(summary->interrupted);
    EXPECT_EQ(Best().size(), 2u) << "completed points are kept, the broken one is not";
    EXPECT_EQ(store_->GetRun(summary->run_id)->status, db::RunStatus::kInterrupted);
  }
  stop = false;
  fake_.on_measure = nullptr;
  fake_.measures.clear();
  fake_.total_measures = 0;
  {
    FakeBackend backend(fake_);
    absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, grid_, options);
    ASSERT_TRUE(summary.ok());
    int reused = 0;
    for (const PointOutcome& o : summary->points) reused += o.already_complete;
    EXPECT_EQ(reused, 2);
    EXPECT_EQ(Best().size(), 4u);
    EXPECT_EQ(store_->GetRun(summary->run_id)->points_total, 2);
  }
  const int measured_second_time = fake_.total_measures;
  {
    FakeBackend backend(fake_);
    absl::StatusOr<SweepSummary> nothing = RunSweep(*store_, backend, grid_, options);
    ASSERT_TRUE(nothing.ok());
    EXPECT_EQ(nothing->run_id, 0) << "nothing to do creates no run";
    EXPECT_EQ(fake_.total_measures, measured_second_time);
    options.force = true;
    absl::StatusOr<SweepSummary> forced = RunSweep(*store_, backend, grid_, options);
    ASSERT_TRUE(forced.ok());
    EXPECT_EQ(store_->GetRun(forced->run_id)->points_done, 4);
  }
}

TEST_F(SweepTest, AStopDuringTheConfirmationDropsThePoint) {
  const GridPoint point = grid_[0];
  const auto configs = kernels::EnumerateConfigs(point.op, point.dtype, point.shape,
                                                 kernels::DescribedH100());
  ASSERT_TRUE(configs.ok());
  std::atomic<bool> stop{false};
  // The sweep measures every config once; the next measurement is the
  // confirmation's first re-timing (of the heuristic).
  const int first_confirmation = static_cast<int>(configs->size()) + 1;
  fake_.on_measure = [&](int n) {
    if (n == first_confirmation) stop = true;
  };
  SweepOptions options;
  options.stop = &stop;
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, {point}, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->interrupted);
  EXPECT_EQ(fake_.total_measures, first_confirmation) << "no re-timing after the stop";
  EXPECT_TRUE(Best().empty()) << "a point stopped in its confirmation is not written";
  EXPECT_EQ(store_->GetRun(summary->run_id)->status, db::RunStatus::kInterrupted);
}

TEST_F(SweepTest, TunesTheNewRowOpsAndRecordsTheirConfigsWhole) {
  absl::StatusOr<std::vector<GridPoint>> grid =
      CustomGrid({Op::kRmsNorm, Op::kReduceScale, Op::kScaledMaskedSoftmax}, {DType::kBFloat16},
                 {256}, {2048});
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->size(), 3u);
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, *grid, {});
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 3u);
  std::set<std::string> ops;
  for (const db::BestConfig& row : best) {
    ops.insert(row.point.op);
    EXPECT_EQ(row.point.inner, 1);
    absl::StatusOr<kernels::LaunchConfig> config = kernels::ParseLaunchConfig(row.config.key);
    ASSERT_TRUE(config.ok()) << row.config.key;
    EXPECT_EQ(row.config.split, config->split) << row.config.key;
    absl::StatusOr<std::vector<db::Candidate>> candidates =
        store_->ListCandidates(row.point, std::nullopt);
    ASSERT_TRUE(candidates.ok());
    const auto configs =
        kernels::EnumerateConfigs(*kernels::ParseOp(row.point.op), DType::kBFloat16,
                                  {row.point.rows, row.point.cols}, kernels::DescribedH100());
    ASSERT_TRUE(configs.ok());
    EXPECT_EQ(candidates->size(), configs->size()) << row.point.op;
    for (const db::Candidate& c : *candidates) {
      EXPECT_EQ(c.config.split, kernels::ParseLaunchConfig(c.config.key)->split);
    }
  }
  EXPECT_EQ(ops, (std::set<std::string>{"rms_norm", "reduce_scale", "scaled_masked_softmax"}));
  // The masked point's bandwidth counts its (q, k) mask; ReduceScale's its scales.
  for (const PointOutcome& o : summary->points) {
    EXPECT_NEAR(o.gbps, static_cast<double>(PointBytes(o.point)) / (o.best_us * 1e3), 1e-6)
        << PointName(o.point);
  }
  EXPECT_NE(FormatSummary(*summary).find("scaled_masked_softmax"), std::string::npos);
}

TEST_F(SweepTest, MiddleAxisPointsAreStoredUnderTheirInner) {
  const GridPoint axis{"axis", Op::kSoftmax, DType::kFloat16, {512, 896, 48}};
  const absl::StatusOr<kernels::LaunchConfig> heuristic = kernels::HeuristicConfig(
      axis.op, axis.dtype, axis.shape, kernels::DescribedH100());
  if (!heuristic.ok()) {
    GTEST_SKIP() << "the axis implementation's rules have not landed: " << heuristic.status();
  }
  const GridPoint last{"custom", Op::kSoftmax, DType::kFloat16, {512, 896}};
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, {axis, last}, {});
  ASSERT_TRUE(summary.ok()) << summary.status();
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].point.inner, 1);
  EXPECT_NE(best[0].config.impl, "axis");
  EXPECT_EQ(best[1].point.inner, 48);
  EXPECT_EQ(best[1].config.impl, "axis");
  absl::StatusOr<std::vector<db::Candidate>> candidates =
      store_->ListCandidates(best[1].point, std::nullopt);
  ASSERT_TRUE(candidates.ok());
  for (const db::Candidate& c : *candidates) EXPECT_EQ(c.config.impl, "axis");
  // Resume knows the two apart.
  absl::StatusOr<SweepSummary> again = RunSweep(*store_, backend, {axis, last}, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->run_id, 0);
  EXPECT_NE(FormatSummary(*summary).find("softmax"), std::string::npos);
}

TEST_F(SweepTest, DeviceErrorStopsTheRunNamingThePoint) {
  FakeBackend backend(fake_);
  fake_.on_measure = [&](int n) {
    if (n == 5) fake_.fail_with_error = true;
  };
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, grid_, {});
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("softmax float16 64x1024"), absl::string_view::npos)
      << summary.status();
  EXPECT_TRUE(Best().empty());
  absl::StatusOr<std::vector<db::TuningRun>> runs = store_->ListRuns(std::nullopt);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].status, db::RunStatus::kInterrupted);
}

}  // namespace
}  // namespace kt::tuner
