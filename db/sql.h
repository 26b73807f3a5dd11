// Every SQL statement kerntune runs, as named constants with `?` parameters:
// the schema migrations and the queries of TuningStore and the sqlite layer.
// Column lists are spelled once (KT_SQL_*_COLUMNS) and read back in that
// order by tuning_store.cc.
#ifndef KERNTUNE_DB_SQL_H_
#define KERNTUNE_DB_SQL_H_

namespace kt::db::sql {

// --- transactions (sqlite.cc) ---------------------------------------------
inline constexpr char kBeginDeferred[] = "BEGIN DEFERRED";
inline constexpr char kBeginImmediate[] = "BEGIN IMMEDIATE";
inline constexpr char kCommit[] = "COMMIT";
inline constexpr char kRollback[] = "ROLLBACK";

// --- connection setup and checks ------------------------------------------
// WAL lets one writer (the tuner) and many readers (CLI, daemons) work at
// once; NORMAL sync is durable across process crashes in WAL mode (a power
// cut may lose the last commits, never corrupt the file). Read-only
// connections need none of it: WAL mode is a property of the file.
inline constexpr char kReadWritePragmas[] =
    "PRAGMA journal_mode = WAL;"
    "PRAGMA synchronous = NORMAL;"
    "PRAGMA foreign_keys = ON;";
inline constexpr char kUserVersion[] = "PRAGMA user_version";
// PRAGMA takes no parameters: the code appends the version number.
inline constexpr char kSetUserVersionPrefix[] = "PRAGMA user_version = ";
inline constexpr char kCountSchemaObjects[] = "SELECT COUNT(*) FROM sqlite_schema";
inline constexpr char kQuickCheck[] = "PRAGMA quick_check";
inline constexpr char kIntegrityCheck[] = "PRAGMA integrity_check";

// --- schema migrations ------------------------------------------------------
// kMigrations[i] takes a file from user_version i to i + 1. Never edit a
// shipped migration: add a new one. A fresh file runs all of them, so the
// upgrade path is exercised by every test.

// v1: the first schema (no timing spread, no CUDA-graph flag, no driver /
// runtime / kernel versions, no change counter).
inline constexpr char kMigrationV1[] = R"sql(
CREATE TABLE gpus (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  cc_major INTEGER NOT NULL,
  cc_minor INTEGER NOT NULL,
  sm_count INTEGER NOT NULL,
  total_memory_bytes INTEGER NOT NULL,
  UNIQUE (name, cc_major, cc_minor, sm_count, total_memory_bytes)
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  gpu_id INTEGER NOT NULL REFERENCES gpus (id),
  started_at INTEGER NOT NULL,
  finished_at INTEGER,
  host TEXT NOT NULL DEFAULT '',
  user_name TEXT NOT NULL DEFAULT '',
  command_line TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'interrupted')),
  points_total INTEGER NOT NULL DEFAULT 0,
  points_done INTEGER NOT NULL DEFAULT 0,
  copy_gbps REAL
);
CREATE TABLE candidates (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id),
  gpu_id INTEGER NOT NULL REFERENCES gpus (id),
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  rows INTEGER NOT NULL,
  cols INTEGER NOT NULL,
  impl TEXT NOT NULL,
  block_size INTEGER NOT NULL,
  pack_size INTEGER NOT NULL,
  thread_group_width INTEGER NOT NULL,
  rows_per_access INTEGER NOT NULL,
  grid_waves INTEGER NOT NULL,
  config_key TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('measured', 'skipped_occupancy',
                                         'failed_check', 'pruned',
                                         'launch_error')),
  message TEXT NOT NULL DEFAULT '',
  occupancy INTEGER NOT NULL DEFAULT 0,
  median_us REAL,
  repetitions INTEGER NOT NULL DEFAULT 0,
  gbps REAL,
  pct_of_copy REAL,
  correct INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE best_configs (
  gpu_id INTEGER NOT NULL REFERENCES gpus (id),
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  rows INTEGER NOT NULL,
  cols INTEGER NOT NULL,
  impl TEXT NOT NULL,
  block_size INTEGER NOT NULL,
  pack_size INTEGER NOT NULL,
  thread_group_width INTEGER NOT NULL,
  rows_per_access INTEGER NOT NULL,
  grid_waves INTEGER NOT NULL,
  config_key TEXT NOT NULL,
  median_us REAL NOT NULL,
  gbps REAL NOT NULL,
  pct_of_copy REAL NOT NULL,
  heuristic_key TEXT NOT NULL,
  heuristic_us REAL,
  run_id INTEGER REFERENCES runs (id),
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (gpu_id, op, dtype, rows, cols)
);
)sql";

// v2: timing spread and CUDA-graph flag on candidates and best rows; the
// environment (driver, CUDA runtime, kernel library version) on runs and best
// rows (candidates inherit it from their run); the grid text of a run; the
// `meta` change counter; an index for per-point candidate lookups. Rows from
// v1 get driver/runtime 0 and kernel version '' ("unknown": never equal to
// a real version, so resume re-measures them).
inline constexpr char kMigrationV2[] = R"sql(
ALTER TABLE runs ADD COLUMN grid TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN driver_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN runtime_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN kernel_version TEXT NOT NULL DEFAULT '';
ALTER TABLE candidates ADD COLUMN spread_low_us REAL;
ALTER TABLE candidates ADD COLUMN spread_high_us REAL;
ALTER TABLE candidates ADD COLUMN graph_replay INTEGER NOT NULL DEFAULT 0;
ALTER TABLE best_configs ADD COLUMN spread_low_us REAL;
ALTER TABLE best_configs ADD COLUMN spread_high_us REAL;
ALTER TABLE best_configs ADD COLUMN graph_replay INTEGER NOT NULL DEFAULT 0;
ALTER TABLE best_configs ADD COLUMN driver_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE best_configs ADD COLUMN runtime_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE best_configs ADD COLUMN kernel_version TEXT NOT NULL DEFAULT '';
CREATE INDEX candidates_by_point ON candidates (gpu_id, op, dtype, rows, cols);
CREATE TABLE meta (
  key TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('data_version', 0);
)sql";

// v3: middle-axis problems and split rows. Points gain `inner` (the
// trailing extent of an (outer, dim, inner) tensor reduced along dim; 1 for
// every last-axis problem) and configs the knob `split` (blocks per row of
// the split_row impl, and of split_grid, which came later and needed no
// schema change; 1 for every other impl). best_configs' primary key
// must include inner, and SQLite cannot alter a primary key: the table is
// rebuilt (create the new one, copy, drop the old, rename), which keeps
// every row with inner 1 and split 1. Nothing references best_configs, so
// the drop needs no foreign-key care. The per-point index gains inner too.
inline constexpr char kMigrationV3[] = R"sql(
ALTER TABLE candidates ADD COLUMN inner INTEGER NOT NULL DEFAULT 1;
ALTER TABLE candidates ADD COLUMN split INTEGER NOT NULL DEFAULT 1;
DROP INDEX candidates_by_point;
CREATE INDEX candidates_by_point ON candidates (gpu_id, op, dtype, rows, cols, inner);
CREATE TABLE best_configs_v3 (
  gpu_id INTEGER NOT NULL REFERENCES gpus (id),
  op TEXT NOT NULL,
  dtype TEXT NOT NULL,
  rows INTEGER NOT NULL,
  cols INTEGER NOT NULL,
  inner INTEGER NOT NULL DEFAULT 1,
  impl TEXT NOT NULL,
  block_size INTEGER NOT NULL,
  pack_size INTEGER NOT NULL,
  thread_group_width INTEGER NOT NULL,
  rows_per_access INTEGER NOT NULL,
  grid_waves INTEGER NOT NULL,
  split INTEGER NOT NULL DEFAULT 1,
  config_key TEXT NOT NULL,
  median_us REAL NOT NULL,
  spread_low_us REAL,
  spread_high_us REAL,
  gbps REAL NOT NULL,
  pct_of_copy REAL NOT NULL,
  graph_replay INTEGER NOT NULL DEFAULT 0,
  heuristic_key TEXT NOT NULL,
  heuristic_us REAL,
  run_id INTEGER REFERENCES runs (id),
  driver_version INTEGER NOT NULL DEFAULT 0,
  runtime_version INTEGER NOT NULL DEFAULT 0,
  kernel_version TEXT NOT NULL DEFAULT '',
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (gpu_id, op, dtype, rows, cols, inner)
);
INSERT INTO best_configs_v3 (gpu_id, op, dtype, rows, cols, inner, impl,
  block_size, pack_size, thread_group_width, rows_per_access, grid_waves,
  split, config_key, median_us, spread_low_us, spread_high_us, gbps,
  pct_of_copy, graph_replay, heuristic_key, heuristic_us, run_id,
  driver_version, runtime_version, kernel_version, updated_at)
SELECT gpu_id, op, dtype, rows, cols, 1, impl, block_size, pack_size,
  thread_group_width, rows_per_access, grid_waves, 1, config_key, median_us,
  spread_low_us, spread_high_us, gbps, pct_of_copy, graph_replay,
  heuristic_key, heuristic_us, run_id, driver_version, runtime_version,
  kernel_version, updated_at
FROM best_configs;
DROP TABLE best_configs;
ALTER TABLE best_configs_v3 RENAME TO best_configs;
)sql";

inline constexpr const char* kMigrations[] = {kMigrationV1, kMigrationV2, kMigrationV3};
inline constexpr int kSchemaVersion =
    static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

// --- change counter -------------------------------------------------------
inline constexpr char kDataVersionKey[] = "data_version";
inline constexpr char kSelectMetaValue[] =
    "SELECT value FROM meta WHERE key = ?";
inline constexpr char kIncrementMetaValue[] =
    "UPDATE meta SET value = value + 1 WHERE key = ?";

// --- gpus -------------------------------------------------------------------
#define KT_SQL_GPU_COLUMNS \
  "g.id, g.name, g.cc_major, g.cc_minor, g.sm_count, g.total_memory_bytes"

inline constexpr char kInsertGpuIfMissing[] =
    "INSERT INTO gpus (name, cc_major, cc_minor, sm_count, total_memory_bytes)"
    " VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (name, cc_major, cc_minor, sm_count, total_memory_bytes)"
    " DO NOTHING";
inline constexpr char kSelectGpuIdBySku[] =
    "SELECT id FROM gpus WHERE name = ? AND cc_major = ? AND cc_minor = ?"
    " AND sm_count = ? AND total_memory_bytes = ?";
inline constexpr char kSelectGpuById[] =
    "SELECT " KT_SQL_GPU_COLUMNS " FROM gpus g WHERE g.id = ?";
inline constexpr char kSelectGpuSummaries[] =
    "SELECT " KT_SQL_GPU_COLUMNS ","
    " (SELECT COUNT(*) FROM runs r WHERE r.gpu_id = g.id),"
    " (SELECT COUNT(*) FROM best_configs b WHERE b.gpu_id = g.id),"
    " (SELECT COUNT(*) FROM candidates c WHERE c.gpu_id = g.id)"
    " FROM gpus g ORDER BY g.id";

// --- runs -------------------------------------------------------------------
#define KT_SQL_RUN_COLUMNS                                                   \
  "id, gpu_id, started_at, finished_at, host, user_name, command_line, grid," \
  " status, points_total, points_done, copy_gbps, driver_version,"           \
  " runtime_version, kernel_version"

inline constexpr char kInsertRun[] =
    "INSERT INTO runs (gpu_id, started_at, finished_at, host, user_name,"
    " command_line, grid, status, points_total, points_done, copy_gbps,"
    " driver_version, runtime_version, kernel_version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
inline constexpr char kFinishRun[] =
    "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?";
inline constexpr char kIncrementRunPointsDone[] =
    "UPDATE runs SET points_done = points_done + 1 WHERE id = ?";
inline constexpr char kSelectRunById[] =
    "SELECT " KT_SQL_RUN_COLUMNS " FROM runs WHERE id = ?";
// ?1: gpu id or NULL for every GPU.
inline constexpr char kSelectRuns[] =
    "SELECT " KT_SQL_RUN_COLUMNS " FROM runs"
    " WHERE (?1 IS NULL OR gpu_id = ?1) ORDER BY id";

// --- candidates ---------------------------------------------------------------
#define KT_SQL_CANDIDATE_COLUMNS                                              \
  "id, run_id, gpu_id, op, dtype, rows, cols, inner, impl, block_size,"       \
  " pack_size, thread_group_width, rows_per_access, grid_waves, split,"       \
  " config_key, status, message, occupancy, median_us, spread_low_us,"        \
  " spread_high_us, repetitions, gbps, pct_of_copy, graph_replay, correct"

inline constexpr char kInsertCandidate[] =
    "INSERT INTO candidates (run_id, gpu_id, op, dtype, rows, cols, inner,"
    " impl, block_size, pack_size, thread_group_width, rows_per_access,"
    " grid_waves, split, config_key, status, message, occupancy, median_us,"
    " spread_low_us, spread_high_us, repetitions, gbps, pct_of_copy,"
    " graph_replay, correct)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " ?, ?, ?, ?, ?)";
// ?1..?6: the point; ?7: run id or NULL for every run. Fastest first,
// unmeasured (NULL time) last.
inline constexpr char kSelectCandidatesOfPoint[] =
    "SELECT " KT_SQL_CANDIDATE_COLUMNS " FROM candidates"
    " WHERE gpu_id = ?1 AND op = ?2 AND dtype = ?3 AND rows = ?4 AND cols = ?5"
    " AND inner = ?6 AND (?7 IS NULL OR run_id = ?7)"
    " ORDER BY median_us IS NULL, median_us, run_id, id";

// --- best configs -------------------------------------------------------------
#define KT_SQL_BEST_COLUMNS                                                   \
  "b.gpu_id, b.op, b.dtype, b.rows, b.cols, b.inner, b.impl, b.block_size,"   \
  " b.pack_size, b.thread_group_width, b.rows_per_access, b.grid_waves,"      \
  " b.split, b.config_key, b.median_us, b.spread_low_us, b.spread_high_us,"   \
  " b.gbps, b.pct_of_copy, b.graph_replay, b.heuristic_key, b.heuristic_us,"  \
  " b.run_id, b.driver_version, b.runtime_version, b.kernel_version,"         \
  " b.updated_at"
#define KT_SQL_BEST_ORDER \
  " ORDER BY b.gpu_id, b.op, b.dtype, b.rows, b.cols, b.inner"

inline constexpr char kUpsertBestConfig[] =
    "INSERT INTO best_configs (gpu_id, op, dtype, rows, cols, inner, impl,"
    " block_size, pack_size, thread_group_width, rows_per_access, grid_waves,"
    " split, config_key, median_us, spread_low_us, spread_high_us, gbps,"
    " pct_of_copy, graph_replay, heuristic_key, heuristic_us, run_id,"
    " driver_version, runtime_version, kernel_version, updated_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
    " ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (gpu_id, op, dtype, rows, cols, inner) DO UPDATE SET"
    " impl = excluded.impl, block_size = excluded.block_size,"
    " pack_size = excluded.pack_size,"
    " thread_group_width = excluded.thread_group_width,"
    " rows_per_access = excluded.rows_per_access,"
    " grid_waves = excluded.grid_waves, split = excluded.split,"
    " config_key = excluded.config_key,"
    " median_us = excluded.median_us, spread_low_us = excluded.spread_low_us,"
    " spread_high_us = excluded.spread_high_us, gbps = excluded.gbps,"
    " pct_of_copy = excluded.pct_of_copy,"
    " graph_replay = excluded.graph_replay,"
    " heuristic_key = excluded.heuristic_key,"
    " heuristic_us = excluded.heuristic_us, run_id = excluded.run_id,"
    " driver_version = excluded.driver_version,"
    " runtime_version = excluded.runtime_version,"
    " kernel_version = excluded.kernel_version,"
    " updated_at = excluded.updated_at";
inline constexpr char kSelectBestConfigOfPoint[] =
    "SELECT " KT_SQL_BEST_COLUMNS " FROM best_configs b"
    " WHERE b.gpu_id = ? AND b.op = ? AND b.dtype = ? AND b.rows = ?"
    " AND b.cols = ? AND b.inner = ?";
inline constexpr char kPointCompleteForKernelVersion[] =
    "SELECT EXISTS (SELECT 1 FROM best_configs WHERE gpu_id = ? AND op = ?"
    " AND dtype = ? AND rows = ? AND cols = ? AND inner = ?"
    " AND kernel_version = ?)";
// Every filter is optional: NULL matches all. ?2 is a case-insensitive
// substring of the GPU name.
inline constexpr char kSelectBestConfigsFiltered[] =
    "SELECT " KT_SQL_BEST_COLUMNS
    " FROM best_configs b JOIN gpus g ON g.id = b.gpu_id"
    " WHERE (?1 IS NULL OR b.gpu_id = ?1)"
    " AND (?2 IS NULL OR instr(lower(g.name), lower(?2)) > 0)"
    " AND (?3 IS NULL OR b.op = ?3) AND (?4 IS NULL OR b.dtype = ?4)"
    " AND (?5 IS NULL OR b.rows = ?5) AND (?6 IS NULL OR b.cols = ?6)"
    " AND (?7 IS NULL OR b.inner = ?7)" KT_SQL_BEST_ORDER;
inline constexpr char kSelectBestConfigsOfSku[] =
    "SELECT " KT_SQL_BEST_COLUMNS
    " FROM best_configs b JOIN gpus g ON g.id = b.gpu_id"
    " WHERE g.name = ? AND g.cc_major = ? AND g.cc_minor = ?"
    " AND g.sm_count = ? AND g.total_memory_bytes = ?" KT_SQL_BEST_ORDER;

#undef KT_SQL_GPU_COLUMNS
#undef KT_SQL_RUN_COLUMNS
#undef KT_SQL_CANDIDATE_COLUMNS
#undef KT_SQL_BEST_COLUMNS
#undef KT_SQL_BEST_ORDER

}  // namespace kt::db::sql

#endif  // KERNTUNE_DB_SQL_H_
