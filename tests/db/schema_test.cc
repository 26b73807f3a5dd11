// Opening files the store did not just write: migration from a v1 fixture, a
// newer schema, garbage, truncated and foreign files.
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "db/tuning_store.h"
#include "gtest/gtest.h"
#include "tests/db/test_util.h"

namespace kt::db {
namespace {

using ::kt::db::testing::ExecSql;
using ::kt::db::testing::QueryText;
using ::kt::db::testing::ReadFileOrDie;
using ::kt::db::testing::SampleBest;
using ::kt::db::testing::SampleCandidates;
using ::kt::db::testing::SampleRun;
using ::kt::db::testing::ScopedTempDir;
using ::kt::db::testing::WriteFileOrDie;

absl::StatusOr<std::unique_ptr<TuningStore>> OpenExisting(
    const std::string& path, bool read_only = false) {
  OpenOptions options;
  options.read_only = read_only;
  return TuningStore::Open(path, options);
}

// A v1 database file built from the checked-in fixture.
std::string MakeV1File(const ScopedTempDir& dir) {
  const std::string path = dir.File("v1.db");
  const std::string fixture =
      ReadFileOrDie(std::string(KT_DB_TESTDATA_DIR) + "/v1_fixture.sql");
  absl::Status status = ExecSql(path, fixture);
  EXPECT_TRUE(status.ok()) << status;
  return path;
}

// A v2 database file: the v1 fixture brought to v2 by the frozen v2 DDL,
// with rows that use the v2 columns.
std::string MakeV2File(const ScopedTempDir& dir) {
  const std::string path = dir.File("v2.db");
  for (const char* fixture : {"/v1_fixture.sql", "/v2_fixture.sql"}) {
    absl::Status status =
        ExecSql(path, ReadFileOrDie(std::string(KT_DB_TESTDATA_DIR) + fixture));
    EXPECT_TRUE(status.ok()) << fixture << ": " << status;
  }
  return path;
}

const PointKey kFixturePoint{1, "softmax", "float16", 49152, 1024};
const PointKey kV2Point{1, "layer_norm", "bfloat16", 49152, 4096};
const PointKey kV2SmallPoint{1, "layer_norm", "bfloat16", 64, 32};

TEST(SchemaTest, MigratesAV1FixtureKeepingItsRows) {
  ScopedTempDir dir;
  const std::string path = MakeV1File(dir);
  ASSERT_EQ(QueryText(path, "PRAGMA user_version").value_or(""), "1");

  absl::StatusOr<std::unique_ptr<TuningStore>> opened = OpenExisting(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  TuningStore& store = **opened;
  EXPECT_EQ(QueryText(path, "PRAGMA user_version").value_or(""),
            std::to_string(CurrentSchemaVersion()));
  EXPECT_TRUE(store.CheckIntegrity().ok());

  absl::StatusOr<Gpu> gpu = store.GetGpu(1);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->sku.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu->sku.sm_count, 132);

  absl::StatusOr<TuningRun> run = store.GetRun(1);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->user, "alice");
  EXPECT_EQ(run->status, RunStatus::kFinished);
  EXPECT_EQ(run->finished_at, 1690000900);
  EXPECT_EQ(run->copy_gbps, 2950.0);
  EXPECT_EQ(run->grid, "");              // new in v2: default
  EXPECT_EQ(run->env, Environment());    // unknown environment

  absl::StatusOr<std::vector<Candidate>> candidates =
      store.ListCandidates(kFixturePoint, std::nullopt);
  ASSERT_TRUE(candidates.ok()) << candidates.status();
  ASSERT_EQ(candidates->size(), 2u);
  EXPECT_EQ((*candidates)[0].config.key, "warp/b128/p8/g32/r1/w0");
  EXPECT_EQ((*candidates)[0].median_us, 80.0);
  EXPECT_TRUE((*candidates)[0].correct);
  EXPECT_EQ((*candidates)[0].spread_low_us, std::nullopt);
  EXPECT_EQ((*candidates)[0].spread_high_us, std::nullopt);
  EXPECT_FALSE((*candidates)[0].graph_replay);
  EXPECT_EQ((*candidates)[1].status, CandidateStatus::kSkippedOccupancy);
  EXPECT_EQ((*candidates)[1].message, "0 active blocks per SM");

  absl::StatusOr<BestConfig> best = store.GetBestConfig(kFixturePoint);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config.impl, "warp");
  EXPECT_EQ(best->median_us, 80.0);
  EXPECT_EQ(best->heuristic_key, "warp/b256/p8/g32/r1/w0");
  EXPECT_DOUBLE_EQ(best->Speedup().value_or(0), 95.0 / 80.0);
  EXPECT_EQ(best->run_id, 1);
  EXPECT_EQ(best->env, Environment());
  EXPECT_FALSE(best->graph_replay);
  EXPECT_EQ(best->point.inner, 1);  // new in v3: last-axis point
  EXPECT_EQ(best->config.split, 1);
  EXPECT_EQ((*candidates)[0].point.inner, 1);
  EXPECT_EQ((*candidates)[0].config.split, 1);
  // Measured by an unknown kernel version: stale for any real version.
  EXPECT_FALSE(store.IsPointComplete(kFixturePoint, "0.1.0+k1").value_or(true));

  // The migrated file takes new writes and counts them.
  const int64_t version = store.DataVersion().value_or(-1);
  ASSERT_GE(version, 0);
  absl::StatusOr<int64_t> new_run = store.CreateRun(SampleRun(1));
  ASSERT_TRUE(new_run.ok()) << new_run.status();
  ASSERT_TRUE(store
                  .WritePoint(SampleBest(*new_run, kFixturePoint),
                              SampleCandidates(*new_run, kFixturePoint, 3))
                  .ok());
  EXPECT_TRUE(store.IsPointComplete(kFixturePoint, "0.1.0+k1").value_or(false));
  EXPECT_EQ(store.DataVersion().value_or(-1), version + 2);
}

TEST(SchemaTest, MigratesAV2FixtureKeepingItsRowsWithInnerOneAndSplitOne) {
  ScopedTempDir dir;
  const std::string path = MakeV2File(dir);
  ASSERT_EQ(QueryText(path, "PRAGMA user_version").value_or(""), "2");

  absl::StatusOr<std::unique_ptr<TuningStore>> opened = OpenExisting(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  TuningStore& store = **opened;
  EXPECT_EQ(QueryText(path, "PRAGMA user_version").value_or(""),
            std::to_string(CurrentSchemaVersion()));
  EXPECT_TRUE(store.CheckIntegrity().ok());
  // The rebuilt table is the only best_configs, and nothing dangles.
  EXPECT_EQ(QueryText(path, "SELECT COUNT(*) FROM sqlite_schema WHERE name LIKE "
                            "'best_configs%' AND type = 'table'")
                .value_or(""),
            "1");
  EXPECT_EQ(QueryText(path, "SELECT COUNT(*) FROM pragma_foreign_key_check").value_or("x"),
            "0");
  // The per-point index covers inner.
  EXPECT_TRUE(absl::StrContains(
      QueryText(path, "SELECT sql FROM sqlite_schema WHERE name = 'candidates_by_point'")
          .value_or(""),
      "inner"));
  // Writes between the v2 fixture and the migration are still counted from
  // where they were.
  EXPECT_GE(store.DataVersion().value_or(-1), 7);

  // Every best row survived with its values, inner 1 and split 1.
  absl::StatusOr<std::vector<BestConfig>> rows = store.ListBestConfigs({});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 3u);
  for (const BestConfig& row : *rows) {
    EXPECT_EQ(row.point.inner, 1) << row.point.op << " " << row.point.cols;
    EXPECT_EQ(row.config.split, 1) << row.point.op << " " << row.point.cols;
  }
  absl::StatusOr<BestConfig> best = store.GetBestConfig(kV2Point);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config.key, "block_smem/b256/p8/g32/r1/w0");
  EXPECT_EQ(best->config.impl, "block_smem");
  EXPECT_EQ(best->config.block_size, 256);
  EXPECT_EQ(best->median_us, 300.0);
  EXPECT_EQ(best->spread_low_us, 298.5);
  EXPECT_EQ(best->spread_high_us, 303.0);
  EXPECT_EQ(best->gbps, 2684.4);
  EXPECT_EQ(best->pct_of_copy, 89.2);
  EXPECT_FALSE(best->graph_replay);
  EXPECT_EQ(best->heuristic_key, "block_smem/b512/p8/g32/r1/w0");
  EXPECT_EQ(best->heuristic_us, 310.0);
  EXPECT_EQ(best->run_id, 2);
  EXPECT_EQ(best->env, (Environment{12040, 12020, "0.1.0+k1"}));
  EXPECT_EQ(best->updated_at, 1700000600);
  absl::StatusOr<BestConfig> small = store.GetBestConfig(kV2SmallPoint);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->config.thread_group_width, 4);
  EXPECT_EQ(small->config.rows_per_access, 2);
  EXPECT_TRUE(small->graph_replay);
  EXPECT_TRUE(store.IsPointComplete(kV2Point, "0.1.0+k1").value_or(false));
  EXPECT_TRUE(store.GetBestConfig(kFixturePoint).ok());

  // Candidates keep their order, values and run.
  absl::StatusOr<std::vector<Candidate>> candidates =
      store.ListCandidates(kV2Point, std::nullopt);
  ASSERT_TRUE(candidates.ok()) << candidates.status();
  ASSERT_EQ(candidates->size(), 2u);
  EXPECT_EQ((*candidates)[0].config.key, "block_smem/b256/p8/g32/r1/w0");
  EXPECT_EQ((*candidates)[0].spread_high_us, 303.0);
  EXPECT_EQ((*candidates)[1].status, CandidateStatus::kPruned);
  EXPECT_EQ((*candidates)[1].message, "probe slower");
  for (const Candidate& c : *candidates) {
    EXPECT_EQ(c.point, kV2Point);
    EXPECT_EQ(c.config.split, 1);
    EXPECT_EQ(c.run_id, 2);
  }

  // The new key: the same (rows, cols) with another inner is another point,
  // and a split config round-trips.
  PointKey axis = kV2Point;
  axis.op = "softmax";
  axis.inner = 32;
  PointKey last = axis;
  last.inner = 1;
  absl::StatusOr<int64_t> run = store.CreateRun(SampleRun(1));
  ASSERT_TRUE(run.ok()) << run.status();
  BestConfig axis_best = SampleBest(*run, axis);
  axis_best.config.impl = "axis";
  axis_best.config.key = "axis/b256/p4/g1/r1/w0";
  BestConfig last_best = SampleBest(*run, last);
  last_best.config.impl = "split_row";
  last_best.config.split = 8;
  last_best.config.key = "split_row/b512/p8/g32/r1/w0/s8";
  ASSERT_TRUE(store.WritePoint(axis_best, SampleCandidates(*run, axis, 3)).ok());
  ASSERT_TRUE(store.WritePoint(last_best, SampleCandidates(*run, last, 2)).ok());
  absl::StatusOr<BestConfig> got_axis = store.GetBestConfig(axis);
  absl::StatusOr<BestConfig> got_last = store.GetBestConfig(last);
  ASSERT_TRUE(got_axis.ok() && got_last.ok());
  EXPECT_EQ(got_axis->config.key, "axis/b256/p4/g1/r1/w0");
  EXPECT_EQ(got_axis->point.inner, 32);
  EXPECT_EQ(got_last->config.split, 8);
  EXPECT_EQ(store.ListCandidates(axis, std::nullopt)->size(), 3u);
  EXPECT_EQ(store.ListCandidates(last, std::nullopt)->size(), 2u);
}

TEST(SchemaTest, OldSchemaOpenedReadOnlyIsRefusedAndLeftAlone) {
  ScopedTempDir dir;
  const std::string path = MakeV1File(dir);
  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      OpenExisting(path, /*read_only=*/true);
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), "older"));
  EXPECT_EQ(QueryText(path, "PRAGMA user_version").value_or(""), "1");
}

TEST(SchemaTest, NewerSchemaIsRefused) {
  ScopedTempDir dir;
  const std::string path = dir.File("newer.db");
  {
    OpenOptions options;
    options.create_if_missing = true;
    ASSERT_TRUE(TuningStore::Open(path, options).ok());
  }
  const int newer = CurrentSchemaVersion() + 1;
  ASSERT_TRUE(ExecSql(path, absl::StrCat("PRAGMA user_version = ", newer)).ok());

  const std::string expected = absl::StrCat(
      path, ": database schema version ", newer,
      " is newer than this kerntune (knows up to ", CurrentSchemaVersion(),
      "); upgrade kerntune");
  for (bool read_only : {false, true}) {
    absl::StatusOr<std::unique_ptr<TuningStore>> store =
        OpenExisting(path, read_only);
    EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
    EXPECT_EQ(store.status().message(), expected);
  }
  EXPECT_EQ(QueryText(path, "PRAGMA user_version").value_or(""),
            std::to_string(newer));
}

// Found by kt_tuning_store_fuzzer: a negative user_version (a damaged
// header) made the read-write open run kMigrations[-1].
TEST(SchemaTest, NegativeSchemaVersionIsRefused) {
  ScopedTempDir dir;
  const std::string path = dir.File("negative.db");
  {
    OpenOptions options;
    options.create_if_missing = true;
    ASSERT_TRUE(TuningStore::Open(path, options).ok());
  }
  ASSERT_TRUE(ExecSql(path, "PRAGMA user_version = -2147483648").ok());
  for (bool read_only : {false, true}) {
    absl::StatusOr<std::unique_ptr<TuningStore>> store =
        OpenExisting(path, read_only);
    EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
    EXPECT_TRUE(absl::StrContains(store.status().message(),
                                  "schema version -2147483648 is not one kerntune writes"))
        << store.status();
  }
  EXPECT_EQ(QueryText(path, "PRAGMA user_version").value_or(""), "-2147483648");
}

void ExpectRefusedAsDataLoss(const std::string& path) {
  for (bool read_only : {false, true}) {
    absl::StatusOr<std::unique_ptr<TuningStore>> store =
        OpenExisting(path, read_only);
    EXPECT_TRUE(absl::IsDataLoss(store.status())) << store.status();
    EXPECT_TRUE(absl::StartsWith(store.status().message(),
                                 path + " is not a usable kerntune tuning "
                                        "database"))
        << store.status();
  }
}

TEST(SchemaTest, RandomBytesAreRefused) {
  ScopedTempDir dir;
  const std::string path = dir.File("random.db");
  std::mt19937 random(42);
  std::string bytes(64 * 1024, '\0');
  for (char& byte : bytes) byte = static_cast<char>(random());
  WriteFileOrDie(path, bytes);
  ExpectRefusedAsDataLoss(path);
  EXPECT_EQ(ReadFileOrDie(path), bytes);  // and left untouched
}

TEST(SchemaTest, TextFileIsRefused) {
  ScopedTempDir dir;
  const std::string path = dir.File("configs.json");
  const std::string text =
      "{\"format\": \"kerntune-configs\", \"version\": 1, \"configs\": []}\n";
  WriteFileOrDie(path, text);
  ExpectRefusedAsDataLoss(path);
  EXPECT_EQ(ReadFileOrDie(path), text);
}

// A store of a few hundred KiB, closed (its WAL checkpointed into the file).
std::string MakeClosedStore(const ScopedTempDir& dir, const std::string& name) {
  const std::string path = dir.File(name);
  OpenOptions options;
  options.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      TuningStore::Open(path, options);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return path;
  const int64_t gpu = (*store)->UpsertGpu(testing::H100Sku()).value_or(0);
  const int64_t run = (*store)->CreateRun(SampleRun(gpu)).value_or(0);
  for (int64_t cols = 1; cols <= 40; ++cols) {
    const PointKey point{gpu, "softmax", "float32", 49152, cols};
    EXPECT_TRUE((*store)
                    ->WritePoint(SampleBest(run, point),
                                 SampleCandidates(run, point, 30))
                    .ok());
  }
  store->reset();
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_GT(std::filesystem::file_size(path), 64u * 1024u);
  return path;
}

TEST(SchemaTest, TruncatedDatabaseIsRefused) {
  ScopedTempDir dir;
  const std::string path = MakeClosedStore(dir, "truncated.db");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  ExpectRefusedAsDataLoss(path);
}

TEST(SchemaTest, DamagedPagesAreRefusedAtOpen) {
  ScopedTempDir dir;
  const std::string path = MakeClosedStore(dir, "damaged.db");
  // Two pages in the middle overwritten; the header (page 1) is intact, so
  // only the quick_check at open can tell.
  std::string bytes = ReadFileOrDie(path);
  std::mt19937 random(7);
  const size_t middle = bytes.size() / 2 / 4096 * 4096;
  for (size_t i = middle; i < middle + 2 * 4096; ++i) {
    bytes[i] = static_cast<char>(random());
  }
  WriteFileOrDie(path, bytes);
  ExpectRefusedAsDataLoss(path);

  OpenOptions unchecked;
  unchecked.check_integrity = false;
  absl::StatusOr<std::unique_ptr<TuningStore>> store =
      TuningStore::Open(path, unchecked);
  ASSERT_TRUE(store.ok()) << "without quick_check the damage goes unseen: "
                          << store.status();
  EXPECT_TRUE(absl::IsDataLoss((*store)->CheckIntegrity()));
}

TEST(SchemaTest, ForeignSqliteDatabaseIsRefusedAndLeftAlone) {
  ScopedTempDir dir;
  const std::string path = dir.File("other.db");
  ASSERT_TRUE(ExecSql(path, "CREATE TABLE notes (body TEXT)").ok());
  absl::StatusOr<std::unique_ptr<TuningStore>> store = OpenExisting(path);
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_TRUE(absl::StrContains(store.status().message(), "not a kerntune"));
  EXPECT_EQ(QueryText(path, "SELECT COUNT(*) FROM sqlite_schema").value_or(""),
            "1");
}

TEST(SchemaTest, EmptyExistingFileBecomesAStore) {
  ScopedTempDir dir;
  const std::string path = dir.File("empty.db");
  WriteFileOrDie(path, "");
  absl::StatusOr<std::unique_ptr<TuningStore>> store = OpenExisting(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->ListGpus().ok());
}

}  // namespace
}  // namespace kt::db
