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

const PointKey kFixturePoint{1, "softmax", "float16", 49152, 1024};

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
