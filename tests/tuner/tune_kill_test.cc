// The tuner killed with SIGKILL at 20 random moments (kt_tune_child: what
// `kerntune tune` does, on two fake GPUs writing one store): after every
// kill the store passes PRAGMA integrity_check and holds whole points only,
// and the run resumed to its end stores exactly what an uninterrupted run
// stores: the same points, winners and candidates, none twice, none lost.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "db/tuning_store.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::db {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kKills = 20;
// kt_tune_child's grid, and its devices (each tunes a point at a time).
constexpr size_t kPoints = 36;
constexpr int kDevices = 2;

pid_t StartTuner(const std::string& db_path, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (freopen(log.c_str(), "a", stderr) == nullptr) _exit(126);
    execl(KT_TUNE_CHILD_BINARY, KT_TUNE_CHILD_BINARY, db_path.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

int WaitFor(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// What the store holds of one point.
struct Point {
  std::string config;
  double median_us = 0;
  size_t candidates = 0;
  friend bool operator==(const Point& a, const Point& b) {
    return a.config == b.config && a.median_us == b.median_us && a.candidates == b.candidates;
  }
};
using Points = std::map<std::string, Point>;  // by DescribePoint

// Opens the store as a resumed run would, checks it with PRAGMA
// integrity_check and reads every point. No file yet: no point.
Points CheckAndRead(const std::string& path) {
  OpenOptions options;  // quick_check at open, then the full check below
  absl::StatusOr<std::unique_ptr<TuningStore>> store = TuningStore::Open(path, options);
  if (absl::IsNotFound(store.status())) return {};
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  const absl::Status integrity = (*store)->CheckIntegrity();
  EXPECT_TRUE(integrity.ok()) << integrity;
  absl::StatusOr<std::vector<BestConfig>> best = (*store)->ListBestConfigs({});
  EXPECT_TRUE(best.ok()) << best.status();
  Points points;
  for (const BestConfig& row : best.value_or(std::vector<BestConfig>{})) {
    absl::StatusOr<std::vector<Candidate>> candidates =
        (*store)->ListCandidates(row.point, std::nullopt);
    EXPECT_TRUE(candidates.ok()) << candidates.status();
    points[DescribePoint(row.point.op, row.point.dtype, row.point.rows, row.point.cols,
                         row.point.inner)] = {row.config.key, row.median_us,
                                              candidates.ok() ? candidates->size() : 0};
  }
  return points;
}

TEST(TunerCrashTest, KilledAtRandomMomentsTheStoreStaysWholeAndTheResumedRunMatchesAnUnbrokenOne) {
  kt::testing::ScopedTempDir dir;
  const std::string log = dir.File("tuner.log");

  const Clock::time_point started = Clock::now();
  ASSERT_EQ(WaitFor(StartTuner(dir.File("whole.db"), log)), 0) << "an unbroken run failed";
  const auto whole_run = Clock::now() - started;
  const Points whole = CheckAndRead(dir.File("whole.db"));
  ASSERT_EQ(whole.size(), kPoints);

  // A killed point is lost, so a run gains only the points it finishes.
  // Kills land up to two points' time after the start: half the runs finish
  // a point (or two) first, half die in their first one, and at one point
  // per run on average the 20 leave about half the grid to the resumed run.
  // Kills fall in start-up, planning, measuring, confirming and committing.
  const int64_t point_us =
      std::chrono::duration_cast<std::chrono::microseconds>(whole_run).count() * kDevices /
      static_cast<int64_t>(kPoints);
  const uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> moment(0, 2 * point_us);
  const std::string path = dir.File("killed.db");
  int killed_running = 0;
  size_t stored = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    const pid_t tuner = StartTuner(path, log);
    std::this_thread::sleep_for(std::chrono::microseconds(moment(rng)));
    ::kill(tuner, SIGKILL);
    const int status = WaitFor(tuner);
    if (WIFSIGNALED(status)) ++killed_running;
    SCOPED_TRACE(absl::StrCat("after kill ", kill + 1));
    // Whole points only, each as the unbroken run has it; never fewer.
    const Points now = CheckAndRead(path);
    for (const auto& [name, point] : now) {
      auto it = whole.find(name);
      ASSERT_NE(it, whole.end()) << name;
      EXPECT_EQ(point.candidates, it->second.candidates) << name << ": a partial or repeated point";
      EXPECT_EQ(point.config, it->second.config) << name;
    }
    EXPECT_GE(now.size(), stored) << "points were lost";
    stored = now.size();
  }
  EXPECT_GE(killed_running, kKills - 2) << "the tuner was done before most kills";
  EXPECT_GT(stored, 0u) << "no point survived the kills";
  EXPECT_LT(stored, whole.size()) << "the kills left nothing to resume";

  ASSERT_EQ(WaitFor(StartTuner(path, log)), 0) << "the resumed run failed";
  EXPECT_EQ(CheckAndRead(path), whole);
  RecordProperty("points_before_resume", static_cast<int>(stored));
  RecordProperty(
      "unbroken_run_ms",
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(whole_run).count()));
}

}  // namespace
}  // namespace kt::db
