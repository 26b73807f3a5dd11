// Two processes on one store: a reader beside a writer, and a writer killed
// with SIGKILL in the middle of its work. The children use no gtest and leave
// with _exit; each process opens its own connection after fork().
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "db/tuning_store.h"
#include "gtest/gtest.h"
#include "tests/db/test_util.h"

namespace kt::db {
namespace {

using ::kt::db::testing::H100Sku;
using ::kt::db::testing::SampleBest;
using ::kt::db::testing::SampleCandidates;
using ::kt::db::testing::SampleRun;
using ::kt::db::testing::ScopedTempDir;

constexpr int kWriterCandidatesPerPoint = 8;

struct Prepared {
  int64_t gpu_id = 0;
  int64_t run_id = 0;
};

// Creates the store with one GPU and one run, then closes it so that no
// connection exists at fork() time.
Prepared PrepareStore(const std::string& path) {
  OpenOptions options;
  options.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      TuningStore::Open(path, options);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  Prepared prepared;
  prepared.gpu_id = (*store)->UpsertGpu(H100Sku()).value_or(0);
  prepared.run_id = (*store)->CreateRun(SampleRun(prepared.gpu_id)).value_or(0);
  EXPECT_GT(prepared.run_id, 0);
  return prepared;
}

PointKey PointNumber(int64_t gpu_id, int i) {
  return PointKey{gpu_id, i % 2 == 0 ? "softmax" : "layer_norm", "float16",
                  49152, 32 + i / 2};
}

// Child body: writes `points` points, one transaction each, writing a byte to
// `notify_fd` (when >= 0) after every commit. Returns the exit code.
int WritePoints(const std::string& path, const Prepared& prepared, int points,
                int notify_fd) {
  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      TuningStore::Open(path, OpenOptions());
  if (!store.ok()) {
    std::fprintf(stderr, "writer: %s\n", store.status().ToString().c_str());
    return 2;
  }
  for (int i = 0; i < points; ++i) {
    const PointKey point = PointNumber(prepared.gpu_id, i);
    absl::Status status = (*store)->WritePoint(
        SampleBest(prepared.run_id, point),
        SampleCandidates(prepared.run_id, point, kWriterCandidatesPerPoint));
    if (!status.ok()) {
      std::fprintf(stderr, "writer: point %d: %s\n", i,
                   status.ToString().c_str());
      return 3;
    }
    if (notify_fd >= 0 && write(notify_fd, "+", 1) != 1) return 4;
  }
  return 0;
}

pid_t ForkWriter(const std::string& path, const Prepared& prepared,
                 int points, int notify_fd, int close_fd) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (close_fd >= 0) close(close_fd);
    _exit(WritePoints(path, prepared, points, notify_fd));
  }
  return pid;
}

TEST(MultiProcessTest, ReaderAndWriterAtOnce) {
  constexpr int kPoints = 300;
  ScopedTempDir dir;
  const std::string path = dir.File("shared.db");
  const Prepared prepared = PrepareStore(path);
  ASSERT_GT(prepared.run_id, 0);

  const pid_t writer = ForkWriter(path, prepared, kPoints, -1, -1);
  ASSERT_GT(writer, 0);

  OpenOptions read_only;
  read_only.read_only = true;
  absl::StatusOr<std::unique_ptr<TuningStore>> reader =
      TuningStore::Open(path, read_only);
  ASSERT_TRUE(reader.ok()) << reader.status();

  int64_t last_best = 0;
  int64_t last_version = 0;
  int reads = 0;
  int wait_status = 0;
  bool writer_done = false;
  while (!writer_done) {
    writer_done = waitpid(writer, &wait_status, WNOHANG) == writer;
    // One statement = one snapshot: a reader never sees half a point.
    absl::StatusOr<std::vector<GpuSummary>> gpus = (*reader)->ListGpus();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    ASSERT_EQ(gpus->size(), 1u);
    const GpuSummary& summary = gpus->front();
    EXPECT_EQ(summary.candidates, summary.best_configs * kWriterCandidatesPerPoint);
    EXPECT_GE(summary.best_configs, last_best);
    last_best = summary.best_configs;

    absl::StatusOr<int64_t> version = (*reader)->DataVersion();
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_GE(*version, last_version);
    last_version = *version;

    absl::StatusOr<std::vector<BestConfig>> rows =
        (*reader)->ListBestConfigs(BestConfigFilter());
    ASSERT_TRUE(rows.ok()) << rows.status();
    EXPECT_GE(static_cast<int64_t>(rows->size()), summary.best_configs);
    ++reads;
  }
  ASSERT_TRUE(WIFEXITED(wait_status));
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_EQ(last_best, kPoints);
  EXPECT_GT(reads, 1);
  EXPECT_EQ((*reader)->GetRun(prepared.run_id)->points_done, kPoints);
}

TEST(MultiProcessTest, KilledWriterLeavesConsistentDatabase) {
  constexpr int kCommitsBeforeKill = 40;
  ScopedTempDir dir;
  const std::string path = dir.File("killed.db");
  const Prepared prepared = PrepareStore(path);
  ASSERT_GT(prepared.run_id, 0);

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  // Far more points than it will get to write before the kill.
  const pid_t writer =
      ForkWriter(path, prepared, 1'000'000, pipe_fds[1], pipe_fds[0]);
  ASSERT_GT(writer, 0);
  close(pipe_fds[1]);
  for (int commits = 0; commits < kCommitsBeforeKill; ++commits) {
    char byte;
    ASSERT_EQ(read(pipe_fds[0], &byte, 1), 1) << "writer died early";
  }
  ASSERT_EQ(kill(writer, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(writer, &wait_status, 0), writer);
  ASSERT_TRUE(WIFSIGNALED(wait_status));
  close(pipe_fds[0]);

  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      TuningStore::Open(path, OpenOptions());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::Status integrity = (*store)->CheckIntegrity();
  EXPECT_TRUE(integrity.ok()) << integrity;

  // Every committed point is whole: its best row and all its candidates.
  absl::StatusOr<std::vector<BestConfig>> rows =
      (*store)->ListBestConfigs(BestConfigFilter());
  ASSERT_TRUE(rows.ok()) << rows.status();
  const int64_t points = static_cast<int64_t>(rows->size());
  EXPECT_GE(points, kCommitsBeforeKill);
  for (int i = 0; i < points; ++i) {
    const PointKey point = PointNumber(prepared.gpu_id, i);
    EXPECT_TRUE(
        (*store)->IsPointComplete(point, "0.1.0+k1").value_or(false))
        << "point " << i;
    EXPECT_EQ((*store)->ListCandidates(point, std::nullopt)->size(),
              size_t{kWriterCandidatesPerPoint})
        << "point " << i;
  }
  // ... and nothing of a half-written one.
  absl::StatusOr<std::vector<GpuSummary>> gpus = (*store)->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(gpus->front().best_configs, points);
  EXPECT_EQ(gpus->front().candidates, points * kWriterCandidatesPerPoint);
  absl::StatusOr<TuningRun> run = (*store)->GetRun(prepared.run_id);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->points_done, points);
  EXPECT_EQ(run->status, RunStatus::kRunning);  // nobody marked it finished

  // A resumed writer skips the complete points and carries on.
  const int resumed_points = static_cast<int>(points) + 5;
  for (int i = 0; i < resumed_points; ++i) {
    const PointKey point = PointNumber(prepared.gpu_id, i);
    absl::StatusOr<bool> done = (*store)->IsPointComplete(point, "0.1.0+k1");
    ASSERT_TRUE(done.ok()) << done.status();
    if (*done) continue;
    ASSERT_TRUE((*store)
                    ->WritePoint(SampleBest(prepared.run_id, point),
                                 SampleCandidates(prepared.run_id, point,
                                                  kWriterCandidatesPerPoint))
                    .ok());
  }
  gpus = (*store)->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(gpus->front().best_configs, resumed_points);
  EXPECT_EQ(gpus->front().candidates, resumed_points * kWriterCandidatesPerPoint);
}

}  // namespace
}  // namespace kt::db
