-- A tuning store as kerntune schema v2 wrote it: applied on top of
-- v1_fixture.sql, the v2 DDL (frozen copy of db/sql.h kMigrationV2) plus a
-- second run with two points measured by a known environment (timing spread,
-- CUDA-graph flag, versions). schema_test.cc loads both into a file and
-- opens it with the current code to check the v3 migration: every row keeps
-- its values and gains inner 1 and split 1.
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

INSERT INTO runs (id, gpu_id, started_at, finished_at, host, user_name,
                  command_line, status, points_total, points_done, copy_gbps,
                  grid, driver_version, runtime_version, kernel_version)
VALUES (2, 1, 1700000000, 1700000600, 'v2-node', 'bob',
        'kerntune tune --ops=layer_norm', 'finished', 2, 2, 3010.0,
        'ops=layer_norm dtypes=bfloat16 groups=main points=2', 12040, 12020,
        '0.1.0+k1');

INSERT INTO candidates (id, run_id, gpu_id, op, dtype, rows, cols, impl,
                        block_size, pack_size, thread_group_width,
                        rows_per_access, grid_waves, config_key, status,
                        message, occupancy, median_us, spread_low_us,
                        spread_high_us, repetitions, gbps, pct_of_copy,
                        graph_replay, correct)
VALUES
  (3, 2, 1, 'layer_norm', 'bfloat16', 49152, 4096, 'block_smem', 256, 8, 32,
   1, 0, 'block_smem/b256/p8/g32/r1/w0', 'measured', '', 6, 300.0, 298.5,
   303.0, 30, 2684.4, 89.2, 0, 1),
  (4, 2, 1, 'layer_norm', 'bfloat16', 49152, 4096, 'warp', 128, 8, 32, 1, 1,
   'warp/b128/p8/g32/r1/w1', 'pruned', 'probe slower', 8, 400.0, 399.0,
   401.0, 5, 2013.3, 66.9, 0, 1),
  (5, 2, 1, 'layer_norm', 'bfloat16', 64, 32, 'warp', 128, 8, 4, 2, 0,
   'warp/b128/p8/g4/r2/w0', 'measured', '', 16, 4.5, 4.4, 4.7, 30, 3.7,
   0.1, 1, 1);

INSERT INTO best_configs (gpu_id, op, dtype, rows, cols, impl, block_size,
                          pack_size, thread_group_width, rows_per_access,
                          grid_waves, config_key, median_us, gbps,
                          pct_of_copy, heuristic_key, heuristic_us, run_id,
                          updated_at, spread_low_us, spread_high_us,
                          graph_replay, driver_version, runtime_version,
                          kernel_version)
VALUES
  (1, 'layer_norm', 'bfloat16', 49152, 4096, 'block_smem', 256, 8, 32, 1, 0,
   'block_smem/b256/p8/g32/r1/w0', 300.0, 2684.4, 89.2,
   'block_smem/b512/p8/g32/r1/w0', 310.0, 2, 1700000600, 298.5, 303.0, 0,
   12040, 12020, '0.1.0+k1'),
  (1, 'layer_norm', 'bfloat16', 64, 32, 'warp', 128, 8, 4, 2, 0,
   'warp/b128/p8/g4/r2/w0', 4.5, 3.7, 0.1, 'warp/b128/p8/g4/r2/w0', 4.5, 2,
   1700000500, 4.4, 4.7, 1, 12040, 12020, '0.1.0+k1');

UPDATE meta SET value = 7 WHERE key = 'data_version';

PRAGMA user_version = 2;
