// Helpers of the db tests (see test_util.h).
#include "tests/db/test_util.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "db/sqlite.h"
#include "gtest/gtest.h"

namespace kt::db::testing {

GpuSku H100Sku() {
  return GpuSku{"NVIDIA H100 80GB HBM3", 9, 0, 132, 85'045'231'616};
}

GpuSku A100Sku() {
  return GpuSku{"NVIDIA A100-SXM4-40GB", 8, 0, 108, 42'505'273'344};
}

Environment TestEnvironment(const std::string& kernel_version) {
  return Environment{12040, 12020, kernel_version};
}

TuningRun SampleRun(int64_t gpu_id) {
  TuningRun run;
  run.gpu_id = gpu_id;
  run.started_at = 1'700'000'000;
  run.host = "gpu-node-7";
  run.user = "tuner";
  run.command_line = "kerntune tune --ops=softmax --dtypes=float16";
  run.grid = "ops=softmax dtypes=float16 rows=49152 cols=32..32768";
  run.points_total = 11;
  run.copy_gbps = 3012.5;
  run.env = TestEnvironment();
  return run;
}

PointKey SamplePoint(int64_t gpu_id, int64_t cols, const std::string& op,
                     const std::string& dtype, int64_t rows) {
  return PointKey{gpu_id, op, dtype, rows, cols};
}

namespace {

ConfigRecord WarpConfig(int block_size, int pack_size, int grid_waves) {
  ConfigRecord config;
  config.impl = "warp";
  config.block_size = block_size;
  config.pack_size = pack_size;
  config.thread_group_width = 32;
  config.rows_per_access = 1;
  config.grid_waves = grid_waves;
  config.key = absl::StrCat("warp/b", block_size, "/p", pack_size, "/g32/r1/w",
                            grid_waves);
  return config;
}

}  // namespace

std::vector<Candidate> SampleCandidates(int64_t run_id, const PointKey& point,
                                        int count) {
  std::vector<Candidate> candidates;
  for (int i = 0; i < count; ++i) {
    Candidate c;
    c.run_id = run_id;
    c.point = point;
    // grid_waves = i keeps every config of a point distinct.
    c.config = WarpConfig(128 << (i % 3), 1 << (i % 4), i);
    if (i == count - 1) {
      c.status = CandidateStatus::kSkippedOccupancy;
      c.message = "0 active blocks per SM";
    } else {
      // Slowest first, so "ordered by median" differs from insertion order.
      const double median = 10.0 + (count - 2 - i);
      c.status = CandidateStatus::kMeasured;
      c.occupancy = 4 + i;
      c.median_us = median;
      c.spread_low_us = median - 0.25;
      c.spread_high_us = median + 0.5;
      c.repetitions = 50;
      c.gbps = 2000.0 / median;
      c.pct_of_copy = 100.0 * *c.gbps / 3012.5;
      c.graph_replay = (i % 2) == 0;
      c.correct = true;
    }
    candidates.push_back(std::move(c));
  }
  return candidates;
}

BestConfig SampleBest(int64_t run_id, const PointKey& point,
                      const std::string& kernel_version) {
  BestConfig best;
  best.point = point;
  best.config = WarpConfig(512, 8, 0);
  best.median_us = 10.0;
  best.spread_low_us = 9.75;
  best.spread_high_us = 10.5;
  best.gbps = 200.0;
  best.pct_of_copy = 6.64;
  best.graph_replay = true;
  best.heuristic_key = "warp/b128/p8/g32/r1/w0";
  best.heuristic_us = 12.5;
  best.run_id = run_id;
  best.env = TestEnvironment(kernel_version);
  best.updated_at = 1'700'000'100;
  return best;
}

absl::Status ExecSql(const std::string& db_path, const std::string& sql) {
  absl::StatusOr<Connection> db =
      Connection::Open(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  if (!db.ok()) return db.status();
  return db->Exec(sql.c_str());
}

absl::StatusOr<std::string> QueryText(const std::string& db_path,
                                      const std::string& sql) {
  absl::StatusOr<Connection> db = Connection::Open(db_path, SQLITE_OPEN_READWRITE);
  if (!db.ok()) return db.status();
  absl::StatusOr<Statement> statement = db->Prepare(sql.c_str());
  if (!statement.ok()) return statement.status();
  absl::StatusOr<bool> has_row = statement->Step();
  if (!has_row.ok()) return has_row.status();
  if (!*has_row) return absl::NotFoundError(absl::StrCat("no row: ", sql));
  return statement->ColumnText(0);
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFileOrDie(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

}  // namespace kt::db::testing
