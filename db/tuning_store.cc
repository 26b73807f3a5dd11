// TuningStore: opening, migrating and checking the file, and the typed
// reads and writes over the statements of db/sql.h.
#include "db/tuning_store.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "db/sql.h"
#include "db/sqlite.h"
#include "db/status_macros.h"

namespace kt::db {
namespace {

// At most this many lines of a failed quick/integrity check are quoted.
constexpr int kMaxCheckLinesQuoted = 5;

// `status` with `context` in front of its message, same code.
absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

std::string DescribePoint(const PointKey& point) {
  return absl::StrCat("gpu ", point.gpu_id, " ",
                      db::DescribePoint(point.op, point.dtype, point.rows, point.cols,
                                        point.inner));
}

// Reads the columns of the current row left to right, in the order of the
// KT_SQL_*_COLUMNS lists.
class ColumnReader {
 public:
  explicit ColumnReader(const Statement& statement) : statement_(statement) {}

  int64_t Int64() { return statement_.ColumnInt64(next_++); }
  int Int() { return statement_.ColumnInt(next_++); }
  bool Bool() { return statement_.ColumnBool(next_++); }
  double Double() { return statement_.ColumnDouble(next_++); }
  std::string Text() { return statement_.ColumnText(next_++); }
  std::optional<double> OptionalDouble() {
    return statement_.ColumnOptionalDouble(next_++);
  }
  std::optional<int64_t> OptionalInt64() {
    return statement_.ColumnOptionalInt64(next_++);
  }

 private:
  const Statement& statement_;
  int next_ = 0;
};

Gpu ReadGpu(ColumnReader& row) {
  Gpu gpu;
  gpu.id = row.Int64();
  gpu.sku.name = row.Text();
  gpu.sku.cc_major = row.Int();
  gpu.sku.cc_minor = row.Int();
  gpu.sku.sm_count = row.Int();
  gpu.sku.total_memory_bytes = row.Int64();
  return gpu;
}

PointKey ReadPoint(ColumnReader& row) {
  PointKey point;
  point.gpu_id = row.Int64();
  point.op = row.Text();
  point.dtype = row.Text();
  point.rows = row.Int64();
  point.cols = row.Int64();
  point.inner = row.Int64();
  return point;
}

ConfigRecord ReadConfig(ColumnReader& row) {
  ConfigRecord config;
  config.impl = row.Text();
  config.block_size = row.Int();
  config.pack_size = row.Int();
  config.thread_group_width = row.Int();
  config.rows_per_access = row.Int();
  config.grid_waves = row.Int();
  config.split = row.Int();
  config.key = row.Text();
  return config;
}

absl::StatusOr<TuningRun> ReadRun(ColumnReader& row) {
  TuningRun run;
  run.id = row.Int64();
  run.gpu_id = row.Int64();
  run.started_at = row.Int64();
  run.finished_at = row.OptionalInt64();
  run.host = row.Text();
  run.user = row.Text();
  run.command_line = row.Text();
  run.grid = row.Text();
  KT_DB_ASSIGN_OR_RETURN(run.status, ParseRunStatus(row.Text()));
  run.points_total = row.Int64();
  run.points_done = row.Int64();
  run.copy_gbps = row.OptionalDouble();
  run.env.driver_version = row.Int();
  run.env.runtime_version = row.Int();
  run.env.kernel_version = row.Text();
  return run;
}

absl::StatusOr<Candidate> ReadCandidate(ColumnReader& row) {
  Candidate candidate;
  candidate.id = row.Int64();
  candidate.run_id = row.Int64();
  candidate.point = ReadPoint(row);
  candidate.config = ReadConfig(row);
  KT_DB_ASSIGN_OR_RETURN(candidate.status, ParseCandidateStatus(row.Text()));
  candidate.message = row.Text();
  candidate.occupancy = row.Int();
  candidate.median_us = row.OptionalDouble();
  candidate.spread_low_us = row.OptionalDouble();
  candidate.spread_high_us = row.OptionalDouble();
  candidate.repetitions = row.Int();
  candidate.gbps = row.OptionalDouble();
  candidate.pct_of_copy = row.OptionalDouble();
  candidate.graph_replay = row.Bool();
  candidate.correct = row.Bool();
  return candidate;
}

BestConfig ReadBestConfig(ColumnReader& row) {
  BestConfig best;
  best.point = ReadPoint(row);
  best.config = ReadConfig(row);
  best.median_us = row.Double();
  best.spread_low_us = row.OptionalDouble();
  best.spread_high_us = row.OptionalDouble();
  best.gbps = row.Double();
  best.pct_of_copy = row.Double();
  best.graph_replay = row.Bool();
  best.heuristic_key = row.Text();
  best.heuristic_us = row.OptionalDouble();
  best.run_id = row.OptionalInt64();
  best.env.driver_version = row.Int();
  best.env.runtime_version = row.Int();
  best.env.kernel_version = row.Text();
  best.updated_at = row.Int64();
  return best;
}

absl::Status InsertCandidate(Statement& insert, const Candidate& c) {
  insert.Reset();
  return insert
      .BindAll(c.run_id, c.point.gpu_id, c.point.op, c.point.dtype,
               c.point.rows, c.point.cols, c.point.inner, c.config.impl,
               c.config.block_size, c.config.pack_size,
               c.config.thread_group_width, c.config.rows_per_access,
               c.config.grid_waves, c.config.split, c.config.key,
               CandidateStatusName(c.status), c.message, c.occupancy,
               c.median_us, c.spread_low_us, c.spread_high_us, c.repetitions,
               c.gbps, c.pct_of_copy, c.graph_replay, c.correct)
      .Run();
}

absl::Status UpsertBestConfig(Statement& upsert, const BestConfig& b) {
  upsert.Reset();
  return upsert
      .BindAll(b.point.gpu_id, b.point.op, b.point.dtype, b.point.rows,
               b.point.cols, b.point.inner, b.config.impl,
               b.config.block_size, b.config.pack_size,
               b.config.thread_group_width, b.config.rows_per_access,
               b.config.grid_waves, b.config.split, b.config.key,
               b.median_us, b.spread_low_us, b.spread_high_us, b.gbps,
               b.pct_of_copy, b.graph_replay, b.heuristic_key,
               b.heuristic_us, b.run_id, b.env.driver_version,
               b.env.runtime_version, b.env.kernel_version, b.updated_at)
      .Run();
}

absl::StatusOr<int> ReadUserVersion(Connection& db) {
  KT_DB_ASSIGN_OR_RETURN(Statement statement, db.Prepare(sql::kUserVersion));
  KT_DB_ASSIGN_OR_RETURN(bool has_row, statement.Step());
  if (!has_row) {
    return absl::InternalError(
        absl::StrCat(db.path(), ": PRAGMA user_version returned no row"));
  }
  return statement.ColumnInt(0);
}

// OK for a schema version this code can open or migrate from: 0 (a new
// file) to the current one. user_version is any 32-bit value a damaged or
// foreign file holds; a negative one would index before kMigrations.
absl::Status CheckSchemaVersion(const std::string& path, int version) {
  if (version < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": database schema version ", version,
        " is not one kerntune writes: not a kerntune tuning store, or a damaged one"));
  }
  if (version > sql::kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": database schema version ", version,
        " is newer than this kerntune (knows up to ", sql::kSchemaVersion,
        "); upgrade kerntune"));
  }
  return absl::OkStatus();
}

// Runs a quick_check / integrity_check pragma: OK when it says "ok".
absl::Status RunCheck(Connection& db, const char* pragma) {
  KT_DB_ASSIGN_OR_RETURN(Statement statement, db.Prepare(pragma));
  std::vector<std::string> problems;
  int64_t lines = 0;
  while (true) {
    KT_DB_ASSIGN_OR_RETURN(bool has_row, statement.Step());
    if (!has_row) break;
    std::string line = statement.ColumnText(0);
    if (line == "ok") continue;
    if (++lines <= kMaxCheckLinesQuoted) problems.push_back(std::move(line));
  }
  if (lines == 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      db.path(), ": ", pragma, " found ", lines,
      " problem(s): ", absl::StrJoin(problems, "; ")));
}

// Non-empty environment variable, or nullopt.
std::optional<std::string> GetEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace

int CurrentSchemaVersion() { return sql::kSchemaVersion; }

absl::StatusOr<std::string> DefaultDatabasePath() {
  if (auto path = GetEnv("KERNTUNE_DB")) return *path;
  if (auto data_home = GetEnv("XDG_DATA_HOME")) {
    return absl::StrCat(*data_home, "/kerntune/tuning.db");
  }
  if (auto home = GetEnv("HOME")) {
    return absl::StrCat(*home, "/.local/share/kerntune/tuning.db");
  }
  return absl::FailedPreconditionError(
      "no database path: set KERNTUNE_DB (or XDG_DATA_HOME or HOME)");
}

TuningStore::TuningStore(std::unique_ptr<Connection> db, bool read_only)
    : db_(std::move(db)), read_only_(read_only) {}

TuningStore::~TuningStore() = default;

const std::string& TuningStore::path() const { return db_->path(); }

absl::StatusOr<std::unique_ptr<TuningStore>> TuningStore::Open(
    const std::string& path, const OpenOptions& options) {
  namespace fs = std::filesystem;
  if (path.empty()) {
    return absl::InvalidArgumentError("tuning database path is empty");
  }
  if (options.read_only && options.create_if_missing) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": read_only and create_if_missing cannot both be set"));
  }
  std::error_code error;
  const fs::file_status file = fs::status(path, error);
  if (fs::is_directory(file)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is a directory, not a tuning database"));
  }
  if (!fs::exists(file)) {
    if (!options.create_if_missing) {
      return absl::NotFoundError(
          absl::StrCat("no tuning database at ", path));
    }
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) {
      fs::create_directories(parent, error);
      if (error) {
        return absl::ErrnoToStatus(
            error.value(),
            absl::StrCat("creating ", parent.string(), " for ", path));
      }
    }
  }

  const int flags = options.read_only
                        ? SQLITE_OPEN_READONLY
                        : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  KT_DB_ASSIGN_OR_RETURN(Connection connection, Connection::Open(path, flags));
  sqlite3_busy_timeout(connection.raw(), options.busy_timeout_ms);
  std::unique_ptr<TuningStore> store(new TuningStore(
      std::make_unique<Connection>(std::move(connection)), options.read_only));
  Connection& db = *store->db_;

  // The first read of the file: garbage and damaged headers fail here.
  absl::StatusOr<int> version = ReadUserVersion(db);
  absl::Status status = version.status();
  if (status.ok()) KT_DB_RETURN_IF_ERROR(CheckSchemaVersion(path, *version));
  if (status.ok() && options.check_integrity) {
    status = RunCheck(db, sql::kQuickCheck);
  }
  if (absl::IsDataLoss(status)) {
    return absl::DataLossError(absl::StrCat(
        path, " is not a usable kerntune tuning database (not an SQLite "
        "file, or a damaged one): ", status.message()));
  }
  KT_DB_RETURN_IF_ERROR(status);

  if (options.read_only) {
    if (*version < sql::kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": database schema version ", *version,
          " is older than this kerntune's (", sql::kSchemaVersion,
          "); open it once for writing to upgrade it"));
    }
    return store;
  }
  KT_DB_RETURN_IF_ERROR(db.Exec(sql::kReadWritePragmas));
  if (*version < sql::kSchemaVersion) {
    KT_DB_RETURN_IF_ERROR(store->Migrate());
  }
  return store;
}

absl::Status TuningStore::Migrate() {
  return InWriteTransaction([&]() -> absl::Status {
    // Read again under the write lock: another process may have migrated
    // the file since Open read the version.
    KT_DB_ASSIGN_OR_RETURN(int version, ReadUserVersion(*db_));
    KT_DB_RETURN_IF_ERROR(CheckSchemaVersion(path(), version));
    if (version == 0) {
      KT_DB_ASSIGN_OR_RETURN(Statement count,
                             db_->Prepare(sql::kCountSchemaObjects));
      KT_DB_ASSIGN_OR_RETURN(bool has_row, count.Step());
      if (has_row && count.ColumnInt64(0) > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            path(), " is an SQLite database but not a kerntune tuning store "
            "(it has tables and schema version 0); refusing to modify it"));
      }
    }
    for (int from = version; from < sql::kSchemaVersion; ++from) {
      KT_DB_RETURN_IF_ERROR(
          Annotate(db_->Exec(sql::kMigrations[from]),
                   absl::StrCat("migrating the schema from version ", from,
                                " to ", from + 1)));
    }
    const std::string set_version =
        absl::StrCat(sql::kSetUserVersionPrefix, sql::kSchemaVersion);
    return db_->Exec(set_version.c_str());
  });
}

absl::Status TuningStore::InWriteTransaction(
    absl::FunctionRef<absl::Status()> body) {
  if (read_only_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path(), " was opened read-only"));
  }
  KT_DB_ASSIGN_OR_RETURN(
      Transaction transaction,
      Transaction::Begin(*db_, Transaction::Mode::kImmediate));
  const int64_t changes_before = db_->TotalChanges();
  KT_DB_RETURN_IF_ERROR(body());
  if (db_->TotalChanges() != changes_before) {
    KT_DB_ASSIGN_OR_RETURN(Statement bump,
                           db_->Prepare(sql::kIncrementMetaValue));
    KT_DB_RETURN_IF_ERROR(bump.BindAll(sql::kDataVersionKey).Run());
  }
  return transaction.Commit();
}

// --- GPUs ---------------------------------------------------------------------

absl::StatusOr<int64_t> TuningStore::UpsertGpu(const GpuSku& sku) {
  int64_t id = 0;
  KT_DB_RETURN_IF_ERROR(InWriteTransaction([&]() -> absl::Status {
    KT_DB_ASSIGN_OR_RETURN(id, UpsertGpuLocked(sku));
    return absl::OkStatus();
  }));
  return id;
}

absl::StatusOr<int64_t> TuningStore::UpsertGpuLocked(const GpuSku& sku) {
  if (sku.name.empty()) {
    return absl::InvalidArgumentError("GPU name is empty");
  }
  KT_DB_ASSIGN_OR_RETURN(Statement insert,
                         db_->Prepare(sql::kInsertGpuIfMissing));
  KT_DB_RETURN_IF_ERROR(insert
                            .BindAll(sku.name, sku.cc_major, sku.cc_minor,
                                     sku.sm_count, sku.total_memory_bytes)
                            .Run());
  return FindGpu(sku);
}

absl::StatusOr<int64_t> TuningStore::FindGpu(const GpuSku& sku) {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectGpuIdBySku));
  select.BindAll(sku.name, sku.cc_major, sku.cc_minor, sku.sm_count,
                 sku.total_memory_bytes);
  KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
  if (!has_row) {
    return absl::NotFoundError(absl::StrCat(
        "no GPU \"", sku.name, "\" (cc ", sku.cc_major, ".", sku.cc_minor,
        ", ", sku.sm_count, " SMs, ", sku.total_memory_bytes, " bytes) in ",
        path()));
  }
  return select.ColumnInt64(0);
}

absl::StatusOr<Gpu> TuningStore::GetGpu(int64_t gpu_id) {
  KT_DB_ASSIGN_OR_RETURN(Statement select, db_->Prepare(sql::kSelectGpuById));
  select.BindAll(gpu_id);
  KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
  if (!has_row) {
    return absl::NotFoundError(
        absl::StrCat("no GPU with id ", gpu_id, " in ", path()));
  }
  ColumnReader row(select);
  return ReadGpu(row);
}

absl::StatusOr<std::vector<GpuSummary>> TuningStore::ListGpus() {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectGpuSummaries));
  std::vector<GpuSummary> gpus;
  while (true) {
    KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
    if (!has_row) break;
    ColumnReader row(select);
    GpuSummary summary;
    summary.gpu = ReadGpu(row);
    summary.runs = row.Int64();
    summary.best_configs = row.Int64();
    summary.candidates = row.Int64();
    gpus.push_back(std::move(summary));
  }
  return gpus;
}

// --- runs -------------------------------------------------------------------------

absl::StatusOr<int64_t> TuningStore::CreateRun(const TuningRun& run) {
  int64_t id = 0;
  KT_DB_RETURN_IF_ERROR(InWriteTransaction([&]() -> absl::Status {
    KT_DB_ASSIGN_OR_RETURN(Statement insert, db_->Prepare(sql::kInsertRun));
    KT_DB_RETURN_IF_ERROR(
        insert
            .BindAll(run.gpu_id, run.started_at, run.finished_at, run.host,
                     run.user, run.command_line, run.grid,
                     RunStatusName(run.status), run.points_total,
                     run.points_done, run.copy_gbps, run.env.driver_version,
                     run.env.runtime_version, run.env.kernel_version)
            .Run());
    id = sqlite3_last_insert_rowid(db_->raw());
    return absl::OkStatus();
  }));
  return id;
}

absl::Status TuningStore::FinishRun(int64_t run_id, RunStatus status,
                                    int64_t finished_at) {
  return InWriteTransaction([&]() -> absl::Status {
    KT_DB_ASSIGN_OR_RETURN(Statement update, db_->Prepare(sql::kFinishRun));
    KT_DB_RETURN_IF_ERROR(
        update.BindAll(RunStatusName(status), finished_at, run_id).Run());
    if (sqlite3_changes64(db_->raw()) == 0) {
      return absl::NotFoundError(
          absl::StrCat("no tuning run with id ", run_id, " in ", path()));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<TuningRun> TuningStore::GetRun(int64_t run_id) {
  KT_DB_ASSIGN_OR_RETURN(Statement select, db_->Prepare(sql::kSelectRunById));
  select.BindAll(run_id);
  KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
  if (!has_row) {
    return absl::NotFoundError(
        absl::StrCat("no tuning run with id ", run_id, " in ", path()));
  }
  ColumnReader row(select);
  return ReadRun(row);
}

absl::StatusOr<std::vector<TuningRun>> TuningStore::ListRuns(
    std::optional<int64_t> gpu_id) {
  KT_DB_ASSIGN_OR_RETURN(Statement select, db_->Prepare(sql::kSelectRuns));
  select.BindAll(gpu_id);
  std::vector<TuningRun> runs;
  while (true) {
    KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
    if (!has_row) break;
    ColumnReader row(select);
    KT_DB_ASSIGN_OR_RETURN(TuningRun run, ReadRun(row));
    runs.push_back(std::move(run));
  }
  return runs;
}

// --- points -------------------------------------------------------------------------

absl::Status TuningStore::WritePoint(const BestConfig& best,
                                     absl::Span<const Candidate> candidates) {
  if (!best.run_id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "best config of ", DescribePoint(best.point),
        " has no run id (rows without a run go through ImportBestConfigs)"));
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& candidate = candidates[i];
    if (candidate.run_id != *best.run_id || candidate.point != best.point) {
      return absl::InvalidArgumentError(absl::StrCat(
          "candidate ", i, " (run ", candidate.run_id, ", ",
          DescribePoint(candidate.point), ") does not belong to run ",
          *best.run_id, ", ", DescribePoint(best.point)));
    }
  }
  return InWriteTransaction([&]() -> absl::Status {
    KT_DB_ASSIGN_OR_RETURN(Statement insert,
                           db_->Prepare(sql::kInsertCandidate));
    for (const Candidate& candidate : candidates) {
      KT_DB_RETURN_IF_ERROR(InsertCandidate(insert, candidate));
    }
    KT_DB_ASSIGN_OR_RETURN(Statement upsert,
                           db_->Prepare(sql::kUpsertBestConfig));
    KT_DB_RETURN_IF_ERROR(UpsertBestConfig(upsert, best));
    KT_DB_ASSIGN_OR_RETURN(Statement progress,
                           db_->Prepare(sql::kIncrementRunPointsDone));
    return progress.BindAll(*best.run_id).Run();
  });
}

absl::StatusOr<bool> TuningStore::IsPointComplete(
    const PointKey& point, absl::string_view kernel_version) {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kPointCompleteForKernelVersion));
  select.BindAll(point.gpu_id, point.op, point.dtype, point.rows, point.cols,
                 point.inner, kernel_version);
  KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
  return has_row && select.ColumnBool(0);
}

absl::StatusOr<BestConfig> TuningStore::GetBestConfig(const PointKey& point) {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectBestConfigOfPoint));
  select.BindAll(point.gpu_id, point.op, point.dtype, point.rows, point.cols,
                 point.inner);
  KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
  if (!has_row) {
    return absl::NotFoundError(absl::StrCat(
        "no best config for ", DescribePoint(point), " in ", path()));
  }
  ColumnReader row(select);
  return ReadBestConfig(row);
}

absl::StatusOr<std::vector<BestConfig>> TuningStore::QueryBestConfigs(
    Statement& statement) {
  std::vector<BestConfig> rows;
  while (true) {
    KT_DB_ASSIGN_OR_RETURN(bool has_row, statement.Step());
    if (!has_row) break;
    ColumnReader row(statement);
    rows.push_back(ReadBestConfig(row));
  }
  return rows;
}

absl::StatusOr<std::vector<BestConfig>> TuningStore::ListBestConfigs(
    const BestConfigFilter& filter) {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectBestConfigsFiltered));
  select.BindAll(filter.gpu_id, filter.gpu_name, filter.op, filter.dtype,
                 filter.rows, filter.cols, filter.inner);
  return QueryBestConfigs(select);
}

absl::StatusOr<std::vector<BestConfig>> TuningStore::BestConfigsForSku(
    const GpuSku& sku) {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectBestConfigsOfSku));
  select.BindAll(sku.name, sku.cc_major, sku.cc_minor, sku.sm_count,
                 sku.total_memory_bytes);
  return QueryBestConfigs(select);
}

absl::StatusOr<std::vector<Candidate>> TuningStore::ListCandidates(
    const PointKey& point, std::optional<int64_t> run_id) {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectCandidatesOfPoint));
  select.BindAll(point.gpu_id, point.op, point.dtype, point.rows, point.cols,
                 point.inner, run_id);
  std::vector<Candidate> candidates;
  while (true) {
    KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
    if (!has_row) break;
    ColumnReader row(select);
    KT_DB_ASSIGN_OR_RETURN(Candidate candidate, ReadCandidate(row));
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

// --- import -------------------------------------------------------------------------

absl::StatusOr<int64_t> TuningStore::ImportBestConfigs(
    const GpuSku& sku, absl::Span<const BestConfig> rows) {
  int64_t gpu_id = 0;
  KT_DB_RETURN_IF_ERROR(InWriteTransaction([&]() -> absl::Status {
    KT_DB_ASSIGN_OR_RETURN(gpu_id, UpsertGpuLocked(sku));
    KT_DB_ASSIGN_OR_RETURN(Statement upsert,
                           db_->Prepare(sql::kUpsertBestConfig));
    for (const BestConfig& row : rows) {
      BestConfig local = row;
      local.point.gpu_id = gpu_id;
      local.run_id.reset();
      KT_DB_RETURN_IF_ERROR(UpsertBestConfig(upsert, local));
    }
    return absl::OkStatus();
  }));
  return gpu_id;
}

// --- maintenance ----------------------------------------------------------------------

absl::StatusOr<int64_t> TuningStore::DataVersion() {
  KT_DB_ASSIGN_OR_RETURN(Statement select,
                         db_->Prepare(sql::kSelectMetaValue));
  select.BindAll(sql::kDataVersionKey);
  KT_DB_ASSIGN_OR_RETURN(bool has_row, select.Step());
  if (!has_row) {
    return absl::DataLossError(
        absl::StrCat(path(), ": the meta table has no data_version row"));
  }
  return select.ColumnInt64(0);
}

absl::Status TuningStore::CheckIntegrity() {
  return RunCheck(*db_, sql::kIntegrityCheck);
}

}  // namespace kt::db
