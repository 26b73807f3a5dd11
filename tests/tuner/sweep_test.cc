// The sweep on a fake backend: what it records, what may win, pruning,
// graph replay for launch-bound points, resume and --force, failures; and
// the node sweep on several fake devices at once.
#include "tuner/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/launch_config.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::tuner {
namespace {

using kernels::DType;
using kernels::LaunchConfig;
using kernels::Op;

// Holds each device's first Prepare until `expected` devices have arrived:
// every device then has a point, so a test knows the devices worked at once
// (one cannot take the whole grid before another starts).
class Rendezvous {
 public:
  explicit Rendezvous(int expected) : expected_(expected) {}
  // False when the others did not arrive within 10 s.
  bool Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return arrived_ >= expected_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  const int expected_;
};

// Times are a fixed function of the config key; the fastest config of every
// point fails the reference check, so the sweep must never pick it. A node
// sweep's devices each have their own (used on that device's thread only).
struct FakeDevice {
  std::map<std::string, int> measures;  // per config key, across points
  std::vector<MeasureOptions> options_seen;
  int total_measures = 0;
  std::function<void(int)> on_measure;  // called with total_measures
  double scale_us = 100.0;              // makes points launch-bound when small
  bool fail_with_error = false;
  // A config that looks fastest on its first timing and slow ever after.
  std::string lucky_key;
  // A config that times at a quarter of its model time under graph replay
  // (per-launch events overstate it, as they did block_reread's).
  std::string graph_favored_key;
  std::vector<std::string> prepared;  // PointName of every Prepare
  Rendezvous* rendezvous = nullptr;         // the first Prepare waits here
  Rendezvous* second_rendezvous = nullptr;  // and the second here
  bool rendezvous_ok = true;
  // Measurements begun after *stop was set.
  const std::atomic<bool>* stop = nullptr;
  int measures_after_stop = 0;
  // Set (by on_measure): this measurement shares the device and comes out
  // a hundred times too fast, as SweepOptions::yield is told.
  bool disturbed = false;
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
    if (device_.stop != nullptr && device_.stop->load()) ++device_.measures_after_stop;
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
    if (key == device_.graph_favored_key && options.graph_replay) t.median_us *= 0.25;
    if (device_.disturbed) t.median_us *= 0.01;
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
  explicit FakeBackend(FakeDevice& device, kernels::DeviceInfo info = kernels::DescribedH100())
      : fake_(device), device_(std::move(info)) {}
  const kernels::DeviceInfo& device() const override { return device_; }
  db::Environment environment() const override { return {580, 13000, "test+k1"}; }
  absl::StatusOr<double> MeasureCopyGbps() override { return 4000.0; }
  absl::StatusOr<std::unique_ptr<PointMeasurer>> Prepare(const GridPoint& point) override {
    Rendezvous* rendezvous = fake_.prepared.empty()       ? fake_.rendezvous
                             : fake_.prepared.size() == 1 ? fake_.second_rendezvous
                                                          : nullptr;
    if (rendezvous != nullptr && !rendezvous->Arrive()) fake_.rendezvous_ok = false;
    fake_.prepared.push_back(PointName(point));
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

// The confirmation re-times the leaders as kt_kernel_bench times kerntune,
// under graph replay, though the sweep ranked them by per-launch events:
// the third leader, which graph replay times at a quarter, wins.
TEST_F(SweepTest, TheConfirmationRanksTheLeadersUnderGraphReplay) {
  const GridPoint point = grid_[0];
  const auto configs = kernels::EnumerateConfigs(point.op, point.dtype, point.shape,
                                                 kernels::DescribedH100());
  const auto heuristic = kernels::HeuristicConfig(point.op, point.dtype, point.shape,
                                                  kernels::DescribedH100());
  ASSERT_TRUE(configs.ok() && heuristic.ok());
  std::vector<std::string> keys;  // by model time; the fastest fails the check
  for (const LaunchConfig& c : *configs) keys.push_back(kernels::ConfigKey(c));
  std::sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    return ModelTime(a, 1) < ModelTime(b, 1);
  });
  const std::string heuristic_key = kernels::ConfigKey(*heuristic);
  std::vector<std::string> leaders;
  for (size_t i = 1; i < keys.size() && leaders.size() < 3; ++i) {
    if (keys[i] != heuristic_key) leaders.push_back(keys[i]);
  }
  ASSERT_EQ(leaders.size(), 3u);
  ASSERT_LT(ModelTime(leaders[0], 1), ModelTime(heuristic_key, 1)) << "no confirmation would run";
  fake_.graph_favored_key = leaders[2];
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, {point}, {});
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(summary->points.size(), 1u);
  EXPECT_EQ(summary->points[0].best_key, leaders[2]);
  EXPECT_TRUE(summary->points[0].graph_replay);
  // The sweep's timings (the point is not launch-bound) were events, the
  // three rounds of the heuristic and three leaders graph replays.
  ASSERT_EQ(fake_.options_seen.size(), configs->size() + 3 * 4);
  for (size_t i = 0; i < fake_.options_seen.size(); ++i) {
    EXPECT_EQ(fake_.options_seen[i].graph_replay, i >= configs->size()) << i;
  }
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].config.key, leaders[2]);
  EXPECT_TRUE(best[0].graph_replay);
  EXPECT_DOUBLE_EQ(best[0].median_us, ModelTime(leaders[2], fake_.scale_us) * 0.25);
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

// A measurement others disturbed (SweepOptions::yield says so) is taken
// again: its timing is never stored, wherever it falls (a candidate, the
// heuristic, a confirmation round), and every other measurement is as
// without the callback.
TEST_F(SweepTest, ADisturbedMeasurementIsTakenAgainAndNeverStored) {
  const GridPoint point = grid_[0];
  FakeDevice undisturbed;
  {
    FakeBackend backend(undisturbed);
    kt::testing::ScopedTempDir other;
    db::OpenOptions open;
    open.create_if_missing = true;
    auto store = db::TuningStore::Open(other.File("tuning.db"), open);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(RunSweep(**store, backend, {point}, {}).ok());
  }
  const int total = undisturbed.total_measures;
  for (const int disturbed_at : {1, 2, 7, total - 1}) {
    SCOPED_TRACE(disturbed_at);
    FakeDevice fake;
    fake.on_measure = [&](int n) { fake.disturbed = n == disturbed_at; };
    int yields = 0, disturbances = 0;
    SweepOptions options;
    options.force = true;
    options.yield = [&] {
      ++yields;
      if (!fake.disturbed) return false;
      ++disturbances;
      fake.disturbed = false;
      return true;
    };
    FakeBackend backend(fake);
    absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, {point}, options);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(disturbances, 1);
    EXPECT_EQ(fake.total_measures, total + 1) << "the disturbed one again, nothing else";
    EXPECT_EQ(yields, total + 1 + 1) << "after every measurement and the copy roofline";
    const std::vector<db::BestConfig> best = Best();
    ASSERT_EQ(best.size(), 1u);
    absl::StatusOr<std::vector<db::Candidate>> candidates =
        store_->ListCandidates(best[0].point, summary->run_id);
    ASSERT_TRUE(candidates.ok());
    for (const db::Candidate& c : *candidates) {
      if (c.median_us) EXPECT_GE(*c.median_us, fake.scale_us) << c.config.key;
    }
    EXPECT_GE(best[0].median_us, fake.scale_us);
  }
}

// A stop while the callback waits for the device ends the point unwritten.
TEST_F(SweepTest, AStopWhileWaitingForTheDeviceDropsThePoint) {
  std::atomic<bool> stop{false};
  SweepOptions options;
  options.stop = &stop;
  fake_.on_measure = [&](int n) { fake_.disturbed = n == 4; };
  options.yield = [&] {
    if (!fake_.disturbed) return false;
    stop = true;  // stopped while it waited
    return true;
  };
  FakeBackend backend(fake_);
  absl::StatusOr<SweepSummary> summary = RunSweep(*store_, backend, {grid_[0]}, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->interrupted);
  EXPECT_EQ(fake_.total_measures, 4);
  EXPECT_TRUE(Best().empty());
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

// --- RunNodeSweep: several fake devices, each on its own thread ---

kernels::DeviceInfo DescribedH200() {
  absl::StatusOr<kernels::DeviceInfo> info =
      kernels::DescribeSku("NVIDIA H200 (described)", 9, 0, 132, 150754820096);
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? *info : kernels::DescribedH100();
}

class NodeSweepTest : public SweepTest {
 protected:
  void SetUp() override {
    SweepTest::SetUp();
    grid_ = *CustomGrid({Op::kSoftmax, Op::kLayerNorm, Op::kRmsNorm}, {DType::kFloat16}, {64},
                        {1024, 4096});
    ASSERT_EQ(grid_.size(), 6u);
    options_.progress = &progress_;
  }

  // A device on fakes_[i]; its Prepare waits at `rendezvous` first when given.
  SweepDevice Device(int i, kernels::DeviceInfo info = kernels::DescribedH100(),
                     Rendezvous* rendezvous = nullptr) {
    FakeDevice& fake = fakes_[i];
    fake.rendezvous = rendezvous;
    return {absl::StrCat("GPU ", i), [&fake, info]() -> absl::StatusOr<std::unique_ptr<Backend>> {
              return std::unique_ptr<Backend>(new FakeBackend(fake, info));
            }};
  }

  absl::StatusOr<NodeSweepSummary> Run(const std::vector<SweepDevice>& devices) {
    return RunNodeSweep(*store_, devices, grid_, options_);
  }

  // Candidates the store holds for `row`'s point, against the configs the
  // point has: equal when the point was measured once and written whole.
  void ExpectWhole(const db::BestConfig& row, const kernels::DeviceInfo& device) {
    absl::StatusOr<std::vector<db::Candidate>> candidates =
        store_->ListCandidates(row.point, std::nullopt);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    const auto configs = kernels::EnumerateConfigs(
        *kernels::ParseOp(row.point.op), DType::kFloat16, {row.point.rows, row.point.cols},
        device);
    ASSERT_TRUE(configs.ok());
    EXPECT_EQ(candidates->size(), configs->size())
        << row.point.op << " " << row.point.cols << ": measured more than once, or not whole";
  }

  std::set<std::string> GridNames() const {
    std::set<std::string> names;
    for (const GridPoint& p : grid_) names.insert(PointName(p));
    return names;
  }

  FakeDevice fakes_[3];
  SweepOptions options_;
  std::ostringstream progress_;
};

TEST_F(NodeSweepTest, DevicesOfOneSkuShareTheGridEachPointMeasuredOnce) {
  Rendezvous rendezvous(2);
  absl::StatusOr<NodeSweepSummary> summary =
      Run({Device(0, kernels::DescribedH100(), &rendezvous),
           Device(1, kernels::DescribedH100(), &rendezvous)});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->failed());
  EXPECT_FALSE(summary->interrupted);
  for (const FakeDevice& fake : fakes_) EXPECT_TRUE(fake.rendezvous_ok) << "devices ran at once";

  // Each point prepared on exactly one device, and every device had some.
  std::multiset<std::string> prepared;
  for (const FakeDevice& fake : fakes_) prepared.insert(fake.prepared.begin(), fake.prepared.end());
  EXPECT_EQ(std::set<std::string>(prepared.begin(), prepared.end()), GridNames());
  EXPECT_EQ(prepared.size(), grid_.size()) << "a point was measured on two devices";
  EXPECT_GE(fakes_[0].prepared.size(), 1u);
  EXPECT_GE(fakes_[1].prepared.size(), 1u);

  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), grid_.size());
  for (const db::BestConfig& row : best) ExpectWhole(row, kernels::DescribedH100());
  // One SKU: one run, which every device wrote under.
  absl::StatusOr<std::vector<db::TuningRun>> runs = store_->ListRuns(std::nullopt);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].status, db::RunStatus::kFinished);
  EXPECT_EQ((*runs)[0].points_total, 6);
  EXPECT_EQ((*runs)[0].points_done, 6);
  for (const db::BestConfig& row : best) EXPECT_EQ(row.run_id, (*runs)[0].id);

  // The summary says which device measured what.
  ASSERT_EQ(summary->skus.size(), 1u);
  const SweepSummary& sku = summary->skus[0];
  EXPECT_EQ(sku.devices, (std::vector<std::string>{"GPU 0", "GPU 1"}));
  EXPECT_EQ(sku.run_id, (*runs)[0].id);
  ASSERT_EQ(sku.points.size(), grid_.size());
  for (size_t i = 0; i < sku.points.size(); ++i) {
    const PointOutcome& o = sku.points[i];
    EXPECT_EQ(PointName(o.point), PointName(grid_[i])) << "grid order";
    const FakeDevice& fake = fakes_[o.device == "GPU 0" ? 0 : 1];
    EXPECT_EQ(std::count(fake.prepared.begin(), fake.prepared.end(), PointName(o.point)), 1)
        << PointName(o.point) << " is not " << o.device << "'s";
  }
  ASSERT_EQ(summary->devices.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const DeviceOutcome& d = summary->devices[i];
    EXPECT_EQ(d.name, absl::StrCat("GPU ", i));
    EXPECT_EQ(d.gpu, "NVIDIA H100 80GB HBM3 (described)");
    EXPECT_TRUE(d.status.ok()) << d.status;
    EXPECT_EQ(d.points, static_cast<int>(fakes_[i].prepared.size()));
  }

  // Progress names the device of every point and ends with each device's count.
  const std::string log = progress_.str();
  EXPECT_NE(log.find("NVIDIA H100 80GB HBM3 (described) on GPU 0, GPU 1: 6 points to tune"),
            std::string::npos)
      << log;
  for (const PointOutcome& o : sku.points) {
    EXPECT_NE(log.find(absl::StrCat(o.device, " ", PointName(o.point))), std::string::npos)
        << log;
  }
  for (const DeviceOutcome& d : summary->devices) {
    const std::string line = absl::StrCat(d.name, " (NVIDIA H100 80GB HBM3 (described)): ",
                                          d.points, " points tuned, ", d.candidates,
                                          " candidates\n");
    EXPECT_NE(log.find(line), std::string::npos) << log;
    EXPECT_NE(FormatNodeSummary(*summary).find(line), std::string::npos);
  }
}

TEST_F(NodeSweepTest, EachSkuTunesTheWholeGridOnItsOwnDevices) {
  // GPUs 0 and 2 are H100s and share a grid; GPU 1, an H200, has its own.
  Rendezvous rendezvous(3);
  absl::StatusOr<NodeSweepSummary> summary =
      Run({Device(0, kernels::DescribedH100(), &rendezvous),
           Device(1, DescribedH200(), &rendezvous),
           Device(2, kernels::DescribedH100(), &rendezvous)});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->failed());
  for (const FakeDevice& fake : fakes_) EXPECT_TRUE(fake.rendezvous_ok);

  std::multiset<std::string> h100(fakes_[0].prepared.begin(), fakes_[0].prepared.end());
  h100.insert(fakes_[2].prepared.begin(), fakes_[2].prepared.end());
  EXPECT_EQ(h100.size(), grid_.size());
  EXPECT_EQ(std::set<std::string>(h100.begin(), h100.end()), GridNames());
  EXPECT_EQ(fakes_[1].prepared.size(), grid_.size());
  EXPECT_EQ(std::set<std::string>(fakes_[1].prepared.begin(), fakes_[1].prepared.end()),
            GridNames());

  absl::StatusOr<std::vector<db::GpuSummary>> gpus = store_->ListGpus();
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 2u);
  for (const db::GpuSummary& gpu : *gpus) {
    EXPECT_EQ(gpu.best_configs, 6) << gpu.gpu.sku.name;
    EXPECT_EQ(gpu.runs, 1) << gpu.gpu.sku.name;
  }
  for (const db::BestConfig& row : Best()) {
    ExpectWhole(row, row.point.gpu_id == (*gpus)[0].gpu.id ? kernels::DescribedH100()
                                                            : DescribedH200());
  }
  ASSERT_EQ(summary->skus.size(), 2u);
  EXPECT_EQ(summary->skus[0].gpu, "NVIDIA H100 80GB HBM3 (described)");
  EXPECT_EQ(summary->skus[0].devices, (std::vector<std::string>{"GPU 0", "GPU 2"}));
  EXPECT_EQ(summary->skus[1].gpu, "NVIDIA H200 (described)");
  EXPECT_EQ(summary->skus[1].devices, (std::vector<std::string>{"GPU 1"}));
  EXPECT_EQ(summary->devices[1].points, 6);
  EXPECT_EQ(summary->devices[0].points + summary->devices[2].points, 6);
  const std::string table = FormatNodeSummary(*summary);
  EXPECT_NE(table.find("== NVIDIA H200 (described) on GPU 1\n"), std::string::npos) << table;
  EXPECT_NE(table.find("== NVIDIA H100 80GB HBM3 (described) on GPU 0, GPU 2\n"),
            std::string::npos)
      << table;
  EXPECT_NE(progress_.str().find("NVIDIA H200 (described) on GPU 1: 6 points to tune"),
            std::string::npos)
      << progress_.str();
}

TEST_F(NodeSweepTest, AStopHaltsEveryDeviceAndTheNextRunResumesPerSku) {
  std::atomic<bool> stop{false};
  // Both devices finish a point, then both start their second; GPU 1 waits
  // inside its third measurement there while GPU 0 stops the run three
  // measurements into its own: two points stored, two dropped, two never
  // taken.
  Rendezvous first(2), second(2);
  std::vector<SweepDevice> devices = {Device(0, kernels::DescribedH100(), &first),
                                      Device(1, kernels::DescribedH100(), &first)};
  int in_second[2] = {0, 0};
  fakes_[0].on_measure = [&](int) {
    if (fakes_[0].prepared.size() == 2 && ++in_second[0] == 3) stop = true;
  };
  fakes_[1].on_measure = [&](int) {
    if (fakes_[1].prepared.size() != 2 || ++in_second[1] != 3) return;
    for (int i = 0; i < 10000 && !stop; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  for (FakeDevice& fake : fakes_) {
    fake.second_rendezvous = &second;
    fake.stop = &stop;
  }
  options_.stop = &stop;
  absl::StatusOr<NodeSweepSummary> summary = Run(devices);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->interrupted);
  EXPECT_FALSE(summary->failed());
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(summary->devices[i].interrupted) << i;
    EXPECT_LE(fakes_[i].measures_after_stop, 1) << "GPU " << i << " went on after the stop";
  }
  for (const FakeDevice& fake : fakes_) EXPECT_TRUE(fake.rendezvous_ok);
  EXPECT_EQ(fakes_[0].prepared.size(), 2u);
  EXPECT_EQ(fakes_[1].prepared.size(), 2u);
  const std::vector<db::BestConfig> first_best = Best();
  EXPECT_EQ(first_best.size(), 2u);
  for (const db::BestConfig& row : first_best) ExpectWhole(row, kernels::DescribedH100());
  std::set<std::string> stored;
  for (const db::BestConfig& row : first_best) {
    stored.insert(db::DescribePoint(row.point.op, row.point.dtype, row.point.rows,
                                    row.point.cols, row.point.inner));
  }
  absl::StatusOr<std::vector<db::TuningRun>> runs = store_->ListRuns(std::nullopt);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].status, db::RunStatus::kInterrupted);
  EXPECT_EQ((*runs)[0].points_done, static_cast<int64_t>(first_best.size()));

  // The next run measures exactly the points the first did not store.
  stop = false;
  for (FakeDevice& fake : fakes_) fake = FakeDevice();
  summary = Run({Device(0), Device(1)});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->interrupted);
  std::multiset<std::string> prepared;
  for (const FakeDevice& fake : fakes_) prepared.insert(fake.prepared.begin(), fake.prepared.end());
  std::multiset<std::string> missing;
  for (const std::string& name : GridNames()) {
    if (stored.count(name) == 0) missing.insert(name);
  }
  EXPECT_EQ(prepared, missing);
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), grid_.size());
  for (const db::BestConfig& row : best) ExpectWhole(row, kernels::DescribedH100());
  int reused = 0;
  for (const PointOutcome& o : summary->skus[0].points) reused += o.already_complete;
  EXPECT_EQ(reused, static_cast<int>(first_best.size()));
  EXPECT_EQ(store_->GetRun(summary->skus[0].run_id)->points_total,
            static_cast<int64_t>(missing.size()));
  EXPECT_EQ(store_->GetRun(summary->skus[0].run_id)->status, db::RunStatus::kFinished);

  // Nothing left: no run, nothing measured.
  for (FakeDevice& fake : fakes_) fake = FakeDevice();
  summary = Run({Device(0), Device(1)});
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->skus[0].run_id, 0);
  EXPECT_EQ(fakes_[0].total_measures + fakes_[1].total_measures, 0);
}

TEST_F(NodeSweepTest, AFailingDeviceStopsAloneAndTheOthersFinishTheGrid) {
  Rendezvous rendezvous(2);
  std::vector<SweepDevice> devices = {Device(0, kernels::DescribedH100(), &rendezvous),
                                      Device(1, kernels::DescribedH100(), &rendezvous)};
  // GPU 1 faults inside its first point.
  fakes_[1].on_measure = [&](int n) {
    if (n == 3) fakes_[1].fail_with_error = true;
  };
  absl::StatusOr<NodeSweepSummary> summary = Run(devices);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(fakes_[1].prepared.size(), 1u) << "GPU 1 took no point after its failure";
  const std::string failed_point = fakes_[1].prepared[0];
  EXPECT_TRUE(summary->failed());
  EXPECT_FALSE(summary->interrupted);
  const DeviceOutcome& bad = summary->devices[1];
  EXPECT_EQ(bad.points, 0);
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(bad.status.message().find(failed_point + ": "), absl::string_view::npos)
      << bad.status;
  EXPECT_NE(bad.status.message().find("kernel fault (simulated)"), absl::string_view::npos);
  const DeviceOutcome& good = summary->devices[0];
  EXPECT_TRUE(good.status.ok()) << good.status;
  EXPECT_EQ(good.points, 5) << "GPU 0 tuned every other point";

  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 5u);
  for (const db::BestConfig& row : best) {
    ExpectWhole(row, kernels::DescribedH100());
    EXPECT_NE(db::DescribePoint(row.point.op, row.point.dtype, row.point.rows, row.point.cols),
              failed_point)
        << "the failed point is dropped, not written";
  }
  EXPECT_EQ(store_->GetRun(summary->skus[0].run_id)->status, db::RunStatus::kInterrupted);
  EXPECT_NE(FormatNodeSummary(*summary).find(absl::StrCat("GPU 1 (NVIDIA H100 80GB HBM3 "
                                                          "(described)): 0 points tuned, 0 "
                                                          "candidates; STOPPED: ",
                                                          failed_point)),
            std::string::npos)
      << FormatNodeSummary(*summary);

  // The next run tunes just that point.
  for (FakeDevice& fake : fakes_) fake = FakeDevice();
  summary = Run({Device(0), Device(1)});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->failed());
  EXPECT_EQ(fakes_[0].prepared.size() + fakes_[1].prepared.size(), 1u);
  EXPECT_EQ(Best().size(), grid_.size());
}

TEST_F(NodeSweepTest, ADeviceThatCannotBeOpenedLeavesTheGridToTheOthers) {
  SweepDevice broken{"GPU 1", []() -> absl::StatusOr<std::unique_ptr<Backend>> {
                       return absl::NotFoundError("cannot use CUDA device 1");
                     }};
  absl::StatusOr<NodeSweepSummary> summary = Run({Device(0), broken});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->failed());
  EXPECT_EQ(summary->devices[1].status, absl::NotFoundError("cannot use CUDA device 1"));
  EXPECT_EQ(summary->devices[1].gpu, "");
  EXPECT_EQ(summary->devices[0].points, 6);
  ASSERT_EQ(summary->skus.size(), 1u);
  EXPECT_EQ(summary->skus[0].devices, (std::vector<std::string>{"GPU 0"}));
  EXPECT_EQ(Best().size(), grid_.size());
  EXPECT_NE(progress_.str().find("GPU 1: 0 points tuned, 0 candidates; STOPPED: cannot use CUDA "
                                 "device 1"),
            std::string::npos)
      << progress_.str();
}

TEST_F(NodeSweepTest, OneDeviceReadsAsASweepAlwaysDidNamingItsGpu) {
  absl::StatusOr<NodeSweepSummary> summary = Run({Device(0)});
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(summary->skus.size(), 1u);
  EXPECT_EQ(FormatNodeSummary(*summary), FormatSummary(summary->skus[0]))
      << "no per-device lines";
  EXPECT_EQ(FormatSummary(summary->skus[0]).rfind("op", 0), 0u) << "no gpu column";
  const std::string log = progress_.str();
  EXPECT_EQ(log.rfind("NVIDIA H100 80GB HBM3 (described) on GPU 0: 6 points to tune, 0 already "
                      "in the store (use --force to redo them)\n",
                      0),
            0u)
      << log;
  EXPECT_NE(log.find("[1/6] softmax float16 64x1024 "), std::string::npos) << log;
  EXPECT_EQ(log.find("GPU 0 ("), std::string::npos) << log;

  // RunSweep's header names the SKU only, as it always has.
  std::ostringstream plain;
  SweepOptions options;
  options.progress = &plain;
  options.force = true;
  FakeBackend backend(fakes_[1]);
  ASSERT_TRUE(RunSweep(*store_, backend, {grid_[0]}, options).ok());
  EXPECT_EQ(plain.str().rfind("NVIDIA H100 80GB HBM3 (described): 1 points to tune, 0 already "
                              "in the store\n",
                              0),
            0u)
      << plain.str();
}

}  // namespace
}  // namespace kt::tuner
