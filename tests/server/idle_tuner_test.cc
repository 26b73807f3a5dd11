// The idle tuner (kerntuned --tune_idle) on a fake tuner backend, a test-made
// Run activity and a real store and config cache: it tunes only an idle
// device, the most-run problem first; a Run during a measurement pauses it
// until the device is idle again and the measurement is taken again; the
// results are what the daemon then serves; what does not fit or fails is
// left alone; a stop is prompt.
#include "server/idle_tuner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/version.h"
#include "server/config_cache.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tuner/grid.h"

namespace kt::server {
namespace {

using kernels::DType;
using kernels::Op;
using ::testing::HasSubstr;

// What the fake backend did and is told to do; shared with the tuner's
// thread.
struct Fake {
  std::mutex mu;
  std::vector<std::string> prepared;  // PointName of each Prepare
  std::vector<std::string> measured;  // config key of each Measure
  std::vector<absl::Time> measured_at;
  std::set<std::string> too_big;  // Prepare: ResourceExhausted
  int fail_prepares = 0;          // Prepare: this many Internal errors first
  // Called at the start of every Measure with its 1-based number; returns
  // whether the measurement is disturbed (it then comes out 100x too fast).
  std::function<bool(int)> on_measure;
  absl::Duration measure_time = absl::ZeroDuration();
};

double ModelTime(const std::string& key) {
  return 100.0 * (1.0 + static_cast<double>(std::hash<std::string>()(key) % 997) / 997.0);
}

class FakeMeasurer final : public tuner::PointMeasurer {
 public:
  explicit FakeMeasurer(Fake& fake) : fake_(fake) {}
  absl::StatusOr<tuner::CandidateMeasurement> Measure(const kernels::LaunchConfig& config,
                                                      const tuner::MeasureOptions& options) override {
    const std::string key = kernels::ConfigKey(config);
    int n = 0;
    std::function<bool(int)> hook;
    {
      std::lock_guard<std::mutex> lock(fake_.mu);
      fake_.measured.push_back(key);
      fake_.measured_at.push_back(absl::Now());
      n = static_cast<int>(fake_.measured.size());
      hook = fake_.on_measure;
    }
    const bool disturbed = hook && hook(n);
    absl::SleepFor(fake_.measure_time);
    tuner::CandidateMeasurement m;
    m.occupancy = 4;
    m.correct = true;
    tuner::TimingStats t;
    t.median_us = ModelTime(key) * (disturbed ? 0.01 : 1.0);
    t.min_us = t.p10_us = t.median_us * 0.99;
    t.p90_us = t.median_us * 1.01;
    t.repetitions = options.repetitions;
    m.timing = t;
    return m;
  }

 private:
  Fake& fake_;
};

class FakeBackend final : public tuner::Backend {
 public:
  explicit FakeBackend(Fake& fake) : fake_(fake) {}
  const kernels::DeviceInfo& device() const override { return device_; }
  db::Environment environment() const override {
    return {580, 13000, std::string(kernels::kKernelLibraryVersion)};
  }
  absl::StatusOr<double> MeasureCopyGbps() override { return 3000.0; }
  absl::StatusOr<std::unique_ptr<tuner::PointMeasurer>> Prepare(
      const tuner::GridPoint& point) override {
    const std::string name = tuner::PointName(point);
    std::lock_guard<std::mutex> lock(fake_.mu);
    fake_.prepared.push_back(name);
    if (fake_.too_big.count(name) > 0) {
      return absl::ResourceExhaustedError("needs 2000 MiB (simulated)");
    }
    if (fake_.fail_prepares > 0) {
      --fake_.fail_prepares;
      return absl::InternalError("cudaMalloc failed (simulated)");
    }
    return std::unique_ptr<tuner::PointMeasurer>(new FakeMeasurer(fake_));
  }

 private:
  Fake& fake_;
  const kernels::DeviceInfo device_ = kernels::DescribedH100();
};

// Waits up to 20 s for `done`.
bool WaitFor(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

class IdleTunerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cache = ConfigCache::Create(db_, kernels::DescribedH100());
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    options_.db_path = db_;
    options_.idle_after = absl::Milliseconds(300);
    options_.poll_interval = absl::Milliseconds(5);
    options_.retry_failed_after = absl::Milliseconds(400);
  }
  void TearDown() override {
    if (tuner_ != nullptr) tuner_->Stop();
  }

  // `runs` Runs of a problem served untuned on the device.
  void Serve(Op op, DType dtype, kernels::Shape shape, int runs) {
    for (int i = 0; i < runs; ++i) {
      auto choice = cache_->LookupForRun(op, dtype, shape);
      ASSERT_TRUE(choice.ok()) << choice.status();
      ASSERT_NE(choice->source, tuner::ConfigSource::kTuned);
    }
  }
  // A Run comes to the device (and is answered).
  void RunArrives() { runs_.fetch_add(1); }

  absl::StatusOr<std::unique_ptr<IdleTuner>> Make(std::string db_path) {
    IdleTuner::Options options = options_;
    options.db_path = std::move(db_path);
    return IdleTuner::Create(
        {{0, tuner::SkuOf(kernels::DescribedH100()), &cache_->served_untuned()}},
        [this](size_t) { return IdleTuner::Activity{runs_.load(), in_flight_.load()}; },
        [this](int) -> absl::StatusOr<std::unique_ptr<tuner::Backend>> {
          return std::unique_ptr<tuner::Backend>(new FakeBackend(fake_));
        },
        options);
  }
  void Start() {
    absl::StatusOr<std::unique_ptr<IdleTuner>> tuner = Make(db_);
    ASSERT_TRUE(tuner.ok()) << tuner.status();
    tuner_ = *std::move(tuner);
    tuner_->Start();
  }
  bool WaitTuned(int64_t problems) {
    return WaitFor([&] { return tuner_->status().problems_tuned >= problems; });
  }
  std::vector<std::string> Prepared() {
    std::lock_guard<std::mutex> lock(fake_.mu);
    return fake_.prepared;
  }
  std::vector<db::BestConfig> Best() {
    auto store = db::TuningStore::Open(db_, {});
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {};
    auto best = (*store)->ListBestConfigs({});
    EXPECT_TRUE(best.ok()) << best.status();
    return best.ok() ? *best : std::vector<db::BestConfig>{};
  }

  kt::testing::ScopedTempDir dir_;
  const std::string db_ = dir_.File("tuning.db");
  std::unique_ptr<ConfigCache> cache_;
  IdleTuner::Options options_;
  std::atomic<int64_t> runs_{0};
  std::atomic<int64_t> in_flight_{0};
  Fake fake_;
  std::unique_ptr<IdleTuner> tuner_;
};

TEST_F(IdleTunerTest, TunesOnlyAnIdleDeviceAndTheProblemIsThenServedTuned) {
  const kernels::Shape shape{64, 1000};
  Serve(Op::kSoftmax, DType::kFloat16, shape, 3);
  Start();
  // A client sending Runs every 10 ms for a second: never idle.
  for (int i = 0; i < 100; ++i) {
    RunArrives();
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(Prepared().empty()) << "tuned while Runs came";
  EXPECT_EQ(tuner_->status().problems_tuned, 0);
  // And a Run executing all along is not idle either.
  in_flight_ = 1;
  absl::SleepFor(absl::Milliseconds(600));
  EXPECT_TRUE(Prepared().empty()) << "tuned while a Run was in flight";
  in_flight_ = 0;

  ASSERT_TRUE(WaitTuned(1));
  EXPECT_THAT(Prepared(), ::testing::ElementsAre("softmax float16 64x1000"));
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].point.rows, 64);
  EXPECT_EQ(best[0].point.cols, 1000);
  EXPECT_TRUE(WaitFor([&] { return tuner_->status().tuning.empty(); }));

  // The daemon's reload serves it exactly and drops it from the record.
  ASSERT_TRUE(cache_->ReloadIfChanged().ok());
  EXPECT_EQ(cache_->Lookup(Op::kSoftmax, DType::kFloat16, shape)->source,
            tuner::ConfigSource::kTuned);
  EXPECT_TRUE(cache_->served_untuned().List().empty());
  EXPECT_EQ(tuner_->status().problems_failed, 0);
}

TEST_F(IdleTunerTest, TunesTheMostRunProblemFirst) {
  Serve(Op::kSoftmax, DType::kFloat16, {64, 1000}, 2);
  Serve(Op::kLayerNorm, DType::kFloat32, {32, 768}, 5);
  Serve(Op::kSoftmax, DType::kFloat32, {16, 300}, 1);
  Start();
  ASSERT_TRUE(WaitTuned(3));
  EXPECT_THAT(Prepared(), ::testing::ElementsAre("layer_norm float32 32x768",
                                                 "softmax float16 64x1000",
                                                 "softmax float32 16x300"));
  EXPECT_EQ(Best().size(), 3u);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Prepared().size(), 3u) << "a tuned problem is not tuned again before the reload";
}

TEST_F(IdleTunerTest, ARunPausesTuningUntilIdleAndTheMeasurementIsTakenAgain) {
  Serve(Op::kSoftmax, DType::kFloat16, {64, 1000}, 1);
  absl::Time run_at;
  fake_.on_measure = [&](int n) {
    if (n != 10) return false;
    run_at = absl::Now();
    RunArrives();  // a Run during the tenth measurement
    return true;
  };
  Start();
  bool seen_paused = false;
  ASSERT_TRUE(WaitFor([&] {
    const IdleTuner::Status status = tuner_->status();
    if (status.paused) {
      seen_paused = true;
      EXPECT_EQ(status.tuning, "softmax float16 64x1000 on GPU 0");
    }
    return status.problems_tuned == 1;
  }));
  EXPECT_TRUE(seen_paused);
  {
    std::lock_guard<std::mutex> lock(fake_.mu);
    ASSERT_GT(fake_.measured.size(), 11u);
    EXPECT_EQ(fake_.measured[10], fake_.measured[9]) << "the disturbed candidate, again";
    EXPECT_GE(fake_.measured_at[10] - run_at, options_.idle_after)
        << "measuring resumed before the device was idle again";
  }
  // Nothing timed during the Run was stored.
  auto store = db::TuningStore::Open(db_, {});
  ASSERT_TRUE(store.ok());
  const std::vector<db::BestConfig> best = Best();
  ASSERT_EQ(best.size(), 1u);
  auto candidates = (*store)->ListCandidates(best[0].point, std::nullopt);
  ASSERT_TRUE(candidates.ok());
  ASSERT_FALSE(candidates->empty());
  for (const db::Candidate& c : *candidates) {
    ASSERT_TRUE(c.median_us.has_value());
    EXPECT_GE(*c.median_us, 100.0) << c.config.key;
  }
}

TEST_F(IdleTunerTest, AProblemThatDoesNotFitIsSkippedForGood) {
  fake_.too_big = {"softmax float16 8192x8192"};
  Serve(Op::kSoftmax, DType::kFloat16, {8192, 8192}, 10);
  Serve(Op::kSoftmax, DType::kFloat16, {64, 1000}, 1);
  Start();
  ASSERT_TRUE(WaitTuned(1));
  absl::SleepFor(absl::Milliseconds(200));  // many polls
  EXPECT_THAT(Prepared(), ::testing::ElementsAre("softmax float16 8192x8192",
                                                 "softmax float16 64x1000"));
  EXPECT_EQ(tuner_->status().problems_failed, 1);
  EXPECT_EQ(Best().size(), 1u);
}

TEST_F(IdleTunerTest, AFailedProblemIsLeftAloneForAWhileThenTunedAgain) {
  fake_.fail_prepares = 1;
  Serve(Op::kSoftmax, DType::kFloat16, {64, 1000}, 1);
  const absl::Time start = absl::Now();
  Start();
  ASSERT_TRUE(WaitTuned(1));
  EXPECT_THAT(Prepared(), ::testing::ElementsAre("softmax float16 64x1000",
                                                 "softmax float16 64x1000"));
  EXPECT_GE(absl::Now() - start, options_.idle_after + options_.retry_failed_after);
  EXPECT_EQ(tuner_->status().problems_failed, 1);
}

TEST_F(IdleTunerTest, StopsPromptlyMidTuningAndDropsTheProblem) {
  fake_.measure_time = absl::Milliseconds(20);
  Serve(Op::kSoftmax, DType::kFloat16, {64, 1000}, 1);
  Start();
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(fake_.mu);
    return fake_.measured.size() >= 3;
  }));
  EXPECT_FALSE(tuner_->status().tuning.empty());
  const absl::Time stop = absl::Now();
  tuner_->Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));
  EXPECT_TRUE(Best().empty());
  EXPECT_EQ(tuner_->status().problems_tuned, 0);
}

TEST_F(IdleTunerTest, StopsPromptlyWhilePaused) {
  Serve(Op::kSoftmax, DType::kFloat16, {64, 1000}, 1);
  fake_.on_measure = [&](int n) {
    if (n == 2) in_flight_ = 1;  // a Run that stays
    return n == 2;
  };
  Start();
  ASSERT_TRUE(WaitFor([&] { return tuner_->status().paused; }));
  const absl::Time stop = absl::Now();
  tuner_->Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));
  EXPECT_TRUE(Best().empty());
}

TEST_F(IdleTunerTest, AStoreItCannotWriteIsRefusedAtCreation) {
  absl::StatusOr<std::unique_ptr<IdleTuner>> none = Make("");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("no --db"));
  // Under a regular file: no directory can be made there, even by root.
  const std::string file = dir_.File("a_file");
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  absl::StatusOr<std::unique_ptr<IdleTuner>> unwritable = Make(file + "/tuning.db");
  ASSERT_FALSE(unwritable.ok());
  EXPECT_THAT(unwritable.status().message(),
              HasSubstr("--tune_idle needs a tuning store kerntuned can write; " + file));
}

}  // namespace
}  // namespace kt::server
