-- A tuning store as kerntune schema v1 wrote it: the v1 DDL (frozen copy of
-- db/sql.h kMigrationV1) plus one GPU, one finished run, one point with two
-- candidates and its best row. schema_test.cc loads it into a file and opens
-- it with the current code to check the migration.
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

INSERT INTO gpus (id, name, cc_major, cc_minor, sm_count, total_memory_bytes)
VALUES (1, 'NVIDIA H100 80GB HBM3', 9, 0, 132, 85045231616);

INSERT INTO runs (id, gpu_id, started_at, finished_at, host, user_name,
                  command_line, status, points_total, points_done, copy_gbps)
VALUES (1, 1, 1690000000, 1690000900, 'old-node', 'alice',
        'kerntune tune --ops=softmax', 'finished', 1, 1, 2950.0);

INSERT INTO candidates (id, run_id, gpu_id, op, dtype, rows, cols, impl,
                        block_size, pack_size, thread_group_width,
                        rows_per_access, grid_waves, config_key, status,
                        message, occupancy, median_us, repetitions, gbps,
                        pct_of_copy, correct)
VALUES
  (1, 1, 1, 'softmax', 'float16', 49152, 1024, 'warp', 128, 8, 32, 1, 0,
   'warp/b128/p8/g32/r1/w0', 'measured', '', 8, 80.0, 100, 2516.6, 85.3, 1),
  (2, 1, 1, 'softmax', 'float16', 49152, 1024, 'block_smem', 1024, 8, 32, 1,
   0, 'block_smem/b1024/p8/g32/r1/w0', 'skipped_occupancy',
   '0 active blocks per SM', 0, NULL, 0, NULL, NULL, 0);

INSERT INTO best_configs (gpu_id, op, dtype, rows, cols, impl, block_size,
                          pack_size, thread_group_width, rows_per_access,
                          grid_waves, config_key, median_us, gbps,
                          pct_of_copy, heuristic_key, heuristic_us, run_id,
                          updated_at)
VALUES (1, 'softmax', 'float16', 49152, 1024, 'warp', 128, 8, 32, 1, 0,
        'warp/b128/p8/g32/r1/w0', 80.0, 2516.6, 85.3,
        'warp/b256/p8/g32/r1/w0', 95.0, 1, 1690000900);

PRAGMA user_version = 1;
