// Round trips of every TuningStore record and query, on a real file.
#include "db/tuning_store.h"

#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/db/test_util.h"

namespace kt::db {
namespace {

using ::kt::db::testing::A100Sku;
using ::kt::db::testing::H100Sku;
using ::kt::db::testing::QueryText;
using ::kt::db::testing::SampleBest;
using ::kt::db::testing::SampleCandidates;
using ::kt::db::testing::SamplePoint;
using ::kt::db::testing::SampleRun;
using ::kt::db::testing::ScopedTempDir;

constexpr int kCandidatesPerPoint = 5;

void ExpectCandidateEq(const Candidate& got, const Candidate& want) {
  EXPECT_EQ(got.run_id, want.run_id);
  EXPECT_EQ(got.point, want.point);
  EXPECT_EQ(got.config, want.config);
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.message, want.message);
  EXPECT_EQ(got.occupancy, want.occupancy);
  EXPECT_EQ(got.median_us, want.median_us);
  EXPECT_EQ(got.spread_low_us, want.spread_low_us);
  EXPECT_EQ(got.spread_high_us, want.spread_high_us);
  EXPECT_EQ(got.repetitions, want.repetitions);
  EXPECT_EQ(got.gbps, want.gbps);
  EXPECT_EQ(got.pct_of_copy, want.pct_of_copy);
  EXPECT_EQ(got.graph_replay, want.graph_replay);
  EXPECT_EQ(got.correct, want.correct);
}

void ExpectBestEq(const BestConfig& got, const BestConfig& want) {
  EXPECT_EQ(got.point, want.point);
  EXPECT_EQ(got.config, want.config);
  EXPECT_EQ(got.median_us, want.median_us);
  EXPECT_EQ(got.spread_low_us, want.spread_low_us);
  EXPECT_EQ(got.spread_high_us, want.spread_high_us);
  EXPECT_EQ(got.gbps, want.gbps);
  EXPECT_EQ(got.pct_of_copy, want.pct_of_copy);
  EXPECT_EQ(got.graph_replay, want.graph_replay);
  EXPECT_EQ(got.heuristic_key, want.heuristic_key);
  EXPECT_EQ(got.heuristic_us, want.heuristic_us);
  EXPECT_EQ(got.run_id, want.run_id);
  EXPECT_EQ(got.env, want.env);
  EXPECT_EQ(got.updated_at, want.updated_at);
}

class TuningStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("store/tuning.db");
    OpenOptions options;
    options.create_if_missing = true;
    absl::StatusOr<std::unique_ptr<TuningStore>> store =
        TuningStore::Open(path_, options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<int64_t> gpu = store_->UpsertGpu(H100Sku());
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_id_ = *gpu;
    absl::StatusOr<int64_t> run = store_->CreateRun(SampleRun(gpu_id_));
    ASSERT_TRUE(run.ok()) << run.status();
    run_id_ = *run;
  }

  // Writes a complete point of `cols` and returns its best row.
  BestConfig WriteSamplePoint(const PointKey& point,
                              const std::string& kernel_version = "0.1.0+k1") {
    BestConfig best = SampleBest(run_id_, point, kernel_version);
    absl::Status status = store_->WritePoint(
        best, SampleCandidates(run_id_, point, kCandidatesPerPoint));
    EXPECT_TRUE(status.ok()) << status;
    return best;
  }

  int64_t DataVersion() {
    absl::StatusOr<int64_t> version = store_->DataVersion();
    EXPECT_TRUE(version.ok()) << version.status();
    return version.value_or(-1);
  }

  ScopedTempDir dir_;
  std::string path_;
  std::unique_ptr<TuningStore> store_;
  int64_t gpu_id_ = 0;
  int64_t run_id_ = 0;
};

TEST_F(TuningStoreTest, OpenCreatesTheFileInWalModeAtTheCurrentSchema) {
  EXPECT_TRUE(std::filesystem::exists(path_));
  EXPECT_EQ(store_->path(), path_);
  EXPECT_EQ(QueryText(path_, "PRAGMA journal_mode").value_or(""), "wal");
  EXPECT_EQ(QueryText(path_, "PRAGMA user_version").value_or(""),
            std::to_string(CurrentSchemaVersion()));
  EXPECT_TRUE(store_->CheckIntegrity().ok());
}

TEST(TuningStoreOpenTest, MissingFileWithoutCreateIsNotFound) {
  ScopedTempDir dir;
  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      TuningStore::Open(dir.File("absent.db"), OpenOptions());
  EXPECT_TRUE(absl::IsNotFound(store.status())) << store.status();
  EXPECT_FALSE(std::filesystem::exists(dir.File("absent.db")));
}

TEST(TuningStoreOpenTest, BadOptionsAndPathsAreRefused) {
  ScopedTempDir dir;
  OpenOptions both;
  both.read_only = true;
  both.create_if_missing = true;
  EXPECT_TRUE(absl::IsInvalidArgument(
      TuningStore::Open(dir.File("x.db"), both).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(TuningStore::Open("", OpenOptions()).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      TuningStore::Open(dir.path(), OpenOptions()).status()));
}

TEST_F(TuningStoreTest, ReadOnlyStoreReadsButRefusesWrites) {
  WriteSamplePoint(SamplePoint(gpu_id_, 1024));
  OpenOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<TuningStore>> reader =
      TuningStore::Open(path_, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::vector<BestConfig>> rows =
      (*reader)->ListBestConfigs(BestConfigFilter());
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 1u);
  absl::StatusOr<int64_t> gpu = (*reader)->UpsertGpu(A100Sku());
  EXPECT_TRUE(absl::IsFailedPrecondition(gpu.status())) << gpu.status();
}

TEST_F(TuningStoreTest, UpsertGpuIsIdempotentAndRoundTrips) {
  EXPECT_EQ(store_->UpsertGpu(H100Sku()).value_or(-1), gpu_id_);
  absl::StatusOr<int64_t> a100 = store_->UpsertGpu(A100Sku());
  ASSERT_TRUE(a100.ok()) << a100.status();
  EXPECT_NE(*a100, gpu_id_);
  EXPECT_EQ(store_->FindGpu(A100Sku()).value_or(-1), *a100);

  absl::StatusOr<Gpu> gpu = store_->GetGpu(gpu_id_);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->id, gpu_id_);
  EXPECT_EQ(gpu->sku, H100Sku());

  GpuSku other_memory = H100Sku();
  other_memory.total_memory_bytes += 1;
  EXPECT_TRUE(absl::IsNotFound(store_->FindGpu(other_memory).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->GetGpu(12345).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->UpsertGpu(GpuSku()).status()));
}

TEST_F(TuningStoreTest, ListGpusCountsRunsBestConfigsAndCandidates) {
  WriteSamplePoint(SamplePoint(gpu_id_, 1024));
  WriteSamplePoint(SamplePoint(gpu_id_, 2048));
  ASSERT_TRUE(store_->UpsertGpu(A100Sku()).ok());

  absl::StatusOr<std::vector<GpuSummary>> gpus = store_->ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].gpu.id, gpu_id_);
  EXPECT_EQ((*gpus)[0].gpu.sku, H100Sku());
  EXPECT_EQ((*gpus)[0].runs, 1);
  EXPECT_EQ((*gpus)[0].best_configs, 2);
  EXPECT_EQ((*gpus)[0].candidates, 2 * kCandidatesPerPoint);
  EXPECT_EQ((*gpus)[1].gpu.sku, A100Sku());
  EXPECT_EQ((*gpus)[1].runs, 0);
  EXPECT_EQ((*gpus)[1].best_configs, 0);
  EXPECT_EQ((*gpus)[1].candidates, 0);
}

TEST_F(TuningStoreTest, RunsRoundTripAndFinish) {
  absl::StatusOr<TuningRun> run = store_->GetRun(run_id_);
  ASSERT_TRUE(run.ok()) << run.status();
  const TuningRun want = SampleRun(gpu_id_);
  EXPECT_EQ(run->id, run_id_);
  EXPECT_EQ(run->gpu_id, gpu_id_);
  EXPECT_EQ(run->started_at, want.started_at);
  EXPECT_EQ(run->finished_at, std::nullopt);
  EXPECT_EQ(run->host, want.host);
  EXPECT_EQ(run->user, want.user);
  EXPECT_EQ(run->command_line, want.command_line);
  EXPECT_EQ(run->grid, want.grid);
  EXPECT_EQ(run->status, RunStatus::kRunning);
  EXPECT_EQ(run->points_total, want.points_total);
  EXPECT_EQ(run->points_done, 0);
  EXPECT_EQ(run->copy_gbps, want.copy_gbps);
  EXPECT_EQ(run->env, want.env);

  ASSERT_TRUE(
      store_->FinishRun(run_id_, RunStatus::kInterrupted, 1'700'000'500).ok());
  run = store_->GetRun(run_id_);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->status, RunStatus::kInterrupted);
  EXPECT_EQ(run->finished_at, 1'700'000'500);

  EXPECT_TRUE(absl::IsNotFound(
      store_->FinishRun(999, RunStatus::kFinished, 1)));
  EXPECT_TRUE(absl::IsNotFound(store_->GetRun(999).status()));
}

TEST_F(TuningStoreTest, ListRunsFiltersByGpuInIdOrder) {
  absl::StatusOr<int64_t> a100 = store_->UpsertGpu(A100Sku());
  ASSERT_TRUE(a100.ok());
  absl::StatusOr<int64_t> other = store_->CreateRun(SampleRun(*a100));
  absl::StatusOr<int64_t> second = store_->CreateRun(SampleRun(gpu_id_));
  ASSERT_TRUE(other.ok() && second.ok());

  absl::StatusOr<std::vector<TuningRun>> all = store_->ListRuns(std::nullopt);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id, run_id_);
  EXPECT_EQ((*all)[1].id, *other);
  EXPECT_EQ((*all)[2].id, *second);

  absl::StatusOr<std::vector<TuningRun>> h100 = store_->ListRuns(gpu_id_);
  ASSERT_TRUE(h100.ok()) << h100.status();
  ASSERT_EQ(h100->size(), 2u);
  EXPECT_EQ((*h100)[0].id, run_id_);
  EXPECT_EQ((*h100)[1].id, *second);
}

TEST_F(TuningStoreTest, WritePointRoundTripsCandidatesAndBestRow) {
  const PointKey point = SamplePoint(gpu_id_, 4096);
  const std::vector<Candidate> written =
      SampleCandidates(run_id_, point, kCandidatesPerPoint);
  const BestConfig best = SampleBest(run_id_, point);
  ASSERT_TRUE(store_->WritePoint(best, written).ok());

  absl::StatusOr<BestConfig> stored = store_->GetBestConfig(point);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ExpectBestEq(*stored, best);
  EXPECT_DOUBLE_EQ(stored->Speedup().value_or(0), 1.25);

  absl::StatusOr<std::vector<Candidate>> candidates =
      store_->ListCandidates(point, std::nullopt);
  ASSERT_TRUE(candidates.ok()) << candidates.status();
  ASSERT_EQ(candidates->size(), written.size());
  // Fastest first (the sample is written slowest first), untimed last.
  for (size_t i = 0; i < written.size(); ++i) {
    const size_t from = i + 1 < written.size() ? written.size() - 2 - i : i;
    SCOPED_TRACE(i);
    EXPECT_GT((*candidates)[i].id, 0);
    ExpectCandidateEq((*candidates)[i], written[from]);
  }
  EXPECT_EQ(candidates->back().median_us, std::nullopt);

  EXPECT_EQ(store_->GetRun(run_id_)->points_done, 1);
  EXPECT_TRUE(absl::IsNotFound(
      store_->GetBestConfig(SamplePoint(gpu_id_, 8192)).status()));
}

TEST_F(TuningStoreTest, RewritingAPointReplacesTheBestRowAndKeepsHistory) {
  const PointKey point = SamplePoint(gpu_id_, 256);
  WriteSamplePoint(point, "0.1.0+k1");
  absl::StatusOr<int64_t> rerun = store_->CreateRun(SampleRun(gpu_id_));
  ASSERT_TRUE(rerun.ok());
  BestConfig newer = SampleBest(*rerun, point, "0.2.0+k1");
  newer.median_us = 8.0;
  newer.heuristic_us = std::nullopt;
  ASSERT_TRUE(store_
                  ->WritePoint(newer, SampleCandidates(*rerun, point,
                                                       kCandidatesPerPoint))
                  .ok());

  absl::StatusOr<BestConfig> stored = store_->GetBestConfig(point);
  ASSERT_TRUE(stored.ok());
  ExpectBestEq(*stored, newer);
  EXPECT_EQ(stored->Speedup(), std::nullopt);

  EXPECT_EQ(store_->ListCandidates(point, std::nullopt)->size(),
            2u * kCandidatesPerPoint);
  absl::StatusOr<std::vector<Candidate>> of_rerun =
      store_->ListCandidates(point, *rerun);
  ASSERT_TRUE(of_rerun.ok());
  ASSERT_EQ(of_rerun->size(), size_t{kCandidatesPerPoint});
  for (const Candidate& candidate : *of_rerun) {
    EXPECT_EQ(candidate.run_id, *rerun);
  }
}

TEST_F(TuningStoreTest, WritePointRefusesCandidatesOfAnotherPointOrRun) {
  const PointKey point = SamplePoint(gpu_id_, 512);
  std::vector<Candidate> candidates =
      SampleCandidates(run_id_, point, kCandidatesPerPoint);
  candidates[2].point.cols = 1024;
  absl::Status status =
      store_->WritePoint(SampleBest(run_id_, point), candidates);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;

  candidates = SampleCandidates(run_id_ + 1, point, kCandidatesPerPoint);
  status = store_->WritePoint(SampleBest(run_id_, point), candidates);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;

  BestConfig no_run = SampleBest(run_id_, point);
  no_run.run_id.reset();
  status = store_->WritePoint(no_run, {});
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::IsNotFound(store_->GetBestConfig(point).status()));
}

TEST_F(TuningStoreTest, FailedWritePointLeavesNothingBehind) {
  const int64_t version = DataVersion();
  const PointKey point = SamplePoint(gpu_id_, 512);

  // The last candidate breaks a CHECK constraint after the others went in.
  std::vector<Candidate> candidates =
      SampleCandidates(run_id_, point, kCandidatesPerPoint);
  candidates.back().status = static_cast<CandidateStatus>(99);
  absl::Status status =
      store_->WritePoint(SampleBest(run_id_, point), candidates);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;

  // An unknown run: the foreign key refuses the first candidate.
  status = store_->WritePoint(
      SampleBest(999, point),
      SampleCandidates(999, point, kCandidatesPerPoint));
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;

  EXPECT_TRUE(store_->ListCandidates(point, std::nullopt)->empty());
  EXPECT_TRUE(absl::IsNotFound(store_->GetBestConfig(point).status()));
  EXPECT_EQ(store_->GetRun(run_id_)->points_done, 0);
  EXPECT_EQ(DataVersion(), version);
  // The store is still usable after the rollbacks.
  WriteSamplePoint(point);
  EXPECT_TRUE(store_->GetBestConfig(point).ok());
}

TEST_F(TuningStoreTest, PointIsCompleteOnlyForTheKernelVersionThatMeasuredIt) {
  const PointKey point = SamplePoint(gpu_id_, 128, "layer_norm", "bfloat16");
  EXPECT_FALSE(store_->IsPointComplete(point, "0.1.0+k1").value_or(true));
  WriteSamplePoint(point, "0.1.0+k1");
  EXPECT_TRUE(store_->IsPointComplete(point, "0.1.0+k1").value_or(false));
  EXPECT_FALSE(store_->IsPointComplete(point, "0.1.1+k1").value_or(true));
  PointKey other_dtype = point;
  other_dtype.dtype = "float16";
  EXPECT_FALSE(store_->IsPointComplete(other_dtype, "0.1.0+k1").value_or(true));
}

TEST_F(TuningStoreTest, ListBestConfigsFiltersAndOrders) {
  absl::StatusOr<int64_t> a100_run_gpu = store_->UpsertGpu(A100Sku());
  ASSERT_TRUE(a100_run_gpu.ok());
  const int64_t a100 = *a100_run_gpu;
  absl::StatusOr<int64_t> a100_run = store_->CreateRun(SampleRun(a100));
  ASSERT_TRUE(a100_run.ok());

  // Written out of order; listed by gpu, op, dtype, rows, cols.
  const std::vector<PointKey> h100_points = {
      SamplePoint(gpu_id_, 4096, "softmax", "float16"),
      SamplePoint(gpu_id_, 32, "softmax", "float16"),
      SamplePoint(gpu_id_, 1024, "layer_norm", "float32"),
      SamplePoint(gpu_id_, 1024, "softmax", "bfloat16"),
      SamplePoint(gpu_id_, 1024, "softmax", "float16", 8),
  };
  for (const PointKey& point : h100_points) WriteSamplePoint(point);
  const PointKey a100_point = SamplePoint(a100, 1024, "softmax", "float16");
  ASSERT_TRUE(store_
                  ->WritePoint(SampleBest(*a100_run, a100_point),
                               SampleCandidates(*a100_run, a100_point, 2))
                  .ok());

  auto list = [&](const BestConfigFilter& filter) {
    std::vector<PointKey> points;
    absl::StatusOr<std::vector<BestConfig>> rows =
        store_->ListBestConfigs(filter);
    EXPECT_TRUE(rows.ok()) << rows.status();
    for (const BestConfig& row : rows.value_or(std::vector<BestConfig>())) {
      points.push_back(row.point);
    }
    return points;
  };

  EXPECT_EQ(list(BestConfigFilter()),
            (std::vector<PointKey>{h100_points[2], h100_points[3],
                                   h100_points[4], h100_points[1],
                                   h100_points[0], a100_point}));
  BestConfigFilter by_id;
  by_id.gpu_id = a100;
  EXPECT_EQ(list(by_id), std::vector<PointKey>{a100_point});
  BestConfigFilter by_name;
  by_name.gpu_name = "h100";  // case-insensitive substring
  EXPECT_EQ(list(by_name).size(), h100_points.size());
  BestConfigFilter by_shape;
  by_shape.op = "softmax";
  by_shape.dtype = "float16";
  by_shape.cols = 1024;
  EXPECT_EQ(list(by_shape),
            (std::vector<PointKey>{h100_points[4], a100_point}));
  by_shape.rows = 8;
  EXPECT_EQ(list(by_shape), std::vector<PointKey>{h100_points[4]});
  BestConfigFilter nothing;
  nothing.gpu_name = "MI300";
  EXPECT_TRUE(list(nothing).empty());
}

TEST_F(TuningStoreTest, InnerIsPartOfThePointAndSplitOfTheConfig) {
  // One (op, dtype, rows, cols) as a last-axis problem and as two
  // middle-axis ones: three points, each with its own best row and
  // candidates, listed by inner within the same (rows, cols).
  PointKey last = SamplePoint(gpu_id_, 896, "softmax", "float16", 512);
  PointKey wide = last;
  wide.inner = 48;
  PointKey narrow = last;
  narrow.inner = 4;
  BestConfig last_best = SampleBest(run_id_, last);
  last_best.config = {"split_row", 256, 8, 32, 1, 0, "split_row/b256/p8/g32/r1/w0/s4", 4};
  ASSERT_TRUE(store_->WritePoint(last_best, SampleCandidates(run_id_, last, 2)).ok());
  const BestConfig wide_best = WriteSamplePoint(wide);
  WriteSamplePoint(narrow);

  absl::StatusOr<BestConfig> got = store_->GetBestConfig(last);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBestEq(*got, last_best);
  EXPECT_EQ(got->config.split, 4);
  got = store_->GetBestConfig(wide);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectBestEq(*got, wide_best);
  EXPECT_EQ(store_->ListCandidates(last, std::nullopt)->size(), 2u);
  EXPECT_EQ(store_->ListCandidates(wide, std::nullopt)->size(),
            size_t{kCandidatesPerPoint});
  absl::StatusOr<std::vector<Candidate>> of_wide = store_->ListCandidates(wide, std::nullopt);
  ASSERT_TRUE(of_wide.ok());
  for (const Candidate& c : *of_wide) EXPECT_EQ(c.point.inner, 48);
  PointKey absent = last;
  absent.inner = 2;
  EXPECT_TRUE(absl::IsNotFound(store_->GetBestConfig(absent).status()));
  EXPECT_TRUE(store_->IsPointComplete(wide, "0.1.0+k1").value_or(false));
  EXPECT_FALSE(store_->IsPointComplete(absent, "0.1.0+k1").value_or(true));

  absl::StatusOr<std::vector<BestConfig>> all = store_->ListBestConfigs({});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].point, last);
  EXPECT_EQ((*all)[1].point, narrow);
  EXPECT_EQ((*all)[2].point, wide);
  BestConfigFilter by_inner;
  by_inner.inner = 48;
  absl::StatusOr<std::vector<BestConfig>> filtered = store_->ListBestConfigs(by_inner);
  ASSERT_TRUE(filtered.ok());
  ASSERT_EQ(filtered->size(), 1u);
  EXPECT_EQ(filtered->front().point, wide);
  by_inner.inner = 1;
  filtered = store_->ListBestConfigs(by_inner);
  ASSERT_TRUE(filtered.ok());
  ASSERT_EQ(filtered->size(), 1u);
  EXPECT_EQ(filtered->front().point, last);

  // A candidate of another inner is another point.
  std::vector<Candidate> mixed = SampleCandidates(run_id_, wide, 2);
  mixed[1].point.inner = 4;
  EXPECT_TRUE(absl::IsInvalidArgument(
      store_->WritePoint(SampleBest(run_id_, wide), mixed)));
}

TEST_F(TuningStoreTest, BestConfigsForSkuLoadsOneGpu) {
  WriteSamplePoint(SamplePoint(gpu_id_, 64));
  WriteSamplePoint(SamplePoint(gpu_id_, 32));
  absl::StatusOr<std::vector<BestConfig>> rows =
      store_->BestConfigsForSku(H100Sku());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].point.cols, 32);
  EXPECT_EQ((*rows)[1].point.cols, 64);
  absl::StatusOr<std::vector<BestConfig>> unknown =
      store_->BestConfigsForSku(A100Sku());
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_TRUE(unknown->empty());
}

TEST_F(TuningStoreTest, ImportUpsertsTheGpuAndRowsAtomically) {
  ScopedTempDir other_dir;
  OpenOptions options;
  options.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<TuningStore>> fleet =
      TuningStore::Open(other_dir.File("fleet.db"), options);
  ASSERT_TRUE(fleet.ok()) << fleet.status();

  std::vector<BestConfig> rows = {SampleBest(run_id_, SamplePoint(0, 32)),
                                  SampleBest(run_id_, SamplePoint(0, 64))};
  absl::StatusOr<int64_t> gpu = (*fleet)->ImportBestConfigs(H100Sku(), rows);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  absl::StatusOr<std::vector<BestConfig>> stored =
      (*fleet)->BestConfigsForSku(H100Sku());
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 2u);
  for (size_t i = 0; i < rows.size(); ++i) {
    BestConfig want = rows[i];
    want.point.gpu_id = *gpu;
    want.run_id.reset();
    ExpectBestEq((*stored)[i], want);
  }

  // Re-import replaces; a bad row (NaN time becomes NULL: NOT NULL fails)
  // rolls back the whole file, GPU included.
  rows[0].median_us = 7.0;
  ASSERT_EQ((*fleet)->ImportBestConfigs(H100Sku(), rows).value_or(-1), *gpu);
  EXPECT_EQ((*fleet)->BestConfigsForSku(H100Sku())->front().median_us, 7.0);
  std::vector<BestConfig> bad = {SampleBest(run_id_, SamplePoint(0, 32)),
                                 SampleBest(run_id_, SamplePoint(0, 128))};
  bad[1].median_us = std::numeric_limits<double>::quiet_NaN();
  absl::StatusOr<int64_t> refused = (*fleet)->ImportBestConfigs(A100Sku(), bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_TRUE(absl::IsNotFound((*fleet)->FindGpu(A100Sku()).status()));
}

TEST_F(TuningStoreTest, DataVersionCountsCommittedChangesFromAnyConnection) {
  OpenOptions read_only;
  read_only.read_only = true;
  absl::StatusOr<std::unique_ptr<TuningStore>> reader =
      TuningStore::Open(path_, read_only);
  ASSERT_TRUE(reader.ok()) << reader.status();

  const int64_t start = DataVersion();
  EXPECT_EQ((*reader)->DataVersion().value_or(-1), start);
  ASSERT_TRUE(store_->UpsertGpu(H100Sku()).ok());  // no change: no bump
  EXPECT_EQ(DataVersion(), start);
  WriteSamplePoint(SamplePoint(gpu_id_, 32));  // many rows, one transaction
  EXPECT_EQ(DataVersion(), start + 1);
  EXPECT_EQ((*reader)->DataVersion().value_or(-1), start + 1);
  ASSERT_TRUE(store_->UpsertGpu(A100Sku()).ok());
  EXPECT_EQ((*reader)->DataVersion().value_or(-1), start + 2);
}

TEST(DefaultDatabasePathTest, FollowsTheEnvironment) {
  struct SavedEnv {
    const char* name;
    std::optional<std::string> value;
  } saved[] = {{"KERNTUNE_DB", {}}, {"XDG_DATA_HOME", {}}, {"HOME", {}}};
  for (SavedEnv& env : saved) {
    if (const char* value = getenv(env.name)) env.value = value;
  }

  setenv("KERNTUNE_DB", "/data/k.db", 1);
  setenv("XDG_DATA_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(DefaultDatabasePath().value_or(""), "/data/k.db");
  setenv("KERNTUNE_DB", "", 1);  // empty counts as unset
  EXPECT_EQ(DefaultDatabasePath().value_or(""), "/xdg/kerntune/tuning.db");
  unsetenv("XDG_DATA_HOME");
  EXPECT_EQ(DefaultDatabasePath().value_or(""),
            "/home/u/.local/share/kerntune/tuning.db");
  unsetenv("HOME");
  EXPECT_TRUE(absl::IsFailedPrecondition(DefaultDatabasePath().status()));

  for (const SavedEnv& env : saved) {
    if (env.value.has_value()) {
      setenv(env.name, env.value->c_str(), 1);
    } else {
      unsetenv(env.name);
    }
  }
}

}  // namespace
}  // namespace kt::db
