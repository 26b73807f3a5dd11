// TuningStore: the SQLite file where the tuner writes every measured
// candidate and the best config per (GPU SKU, op, dtype, shape), and where
// the CLI and the daemon read them back.
//
// Concurrency: one writer (a tuner or an import) and any number of readers
// (CLIs, daemons) in other processes at once: WAL mode, a busy timeout, and
// write transactions that take the write lock up front. One TuningStore per
// thread; never use one across fork().
//
// Change detection: every write transaction that changes a row also bumps a
// counter in the `meta` table, in the same transaction; DataVersion() reads
// it. The file's mtime would not do (in WAL mode commits land in the -wal
// file) and PRAGMA data_version only compares within one connection.
#ifndef KERNTUNE_DB_TUNING_STORE_H_
#define KERNTUNE_DB_TUNING_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "db/records.h"

namespace kt::db {

class Connection;
class Statement;

// Schema version this code writes (PRAGMA user_version).
int CurrentSchemaVersion();

// $KERNTUNE_DB, else $XDG_DATA_HOME/kerntune/tuning.db, else
// $HOME/.local/share/kerntune/tuning.db. Empty variables count as unset;
// FailedPrecondition when none is set.
absl::StatusOr<std::string> DefaultDatabasePath();

struct OpenOptions {
  // Create the file and its parent directories when missing. Otherwise a
  // missing file is NotFound.
  bool create_if_missing = false;
  // No writes at all (CLI queries, the daemon). The file must already be at
  // the current schema version. Incompatible with create_if_missing.
  bool read_only = false;
  // How long a statement waits for another process's lock before failing
  // with Unavailable.
  int busy_timeout_ms = 5000;
  // Run PRAGMA quick_check at open, so a damaged file fails here with
  // DataLoss rather than later (O(file size): ~tens of ms for 100k rows).
  bool check_integrity = true;
};

class TuningStore {
 public:
  // Opens (or creates) the store at `path` and brings its schema up to date
  // in one transaction. Errors:
  //   NotFound            no file and !create_if_missing
  //   DataLoss            not an SQLite file, or a corrupt one
  //   FailedPrecondition  a schema newer than this code, an SQLite file that
  //                       is not a kerntune store, or an old schema opened
  //                       read-only
  //   Unavailable         another process held a lock for busy_timeout_ms
  static absl::StatusOr<std::unique_ptr<TuningStore>> Open(
      const std::string& path, const OpenOptions& options);

  TuningStore(const TuningStore&) = delete;
  TuningStore& operator=(const TuningStore&) = delete;
  ~TuningStore();

  const std::string& path() const;

  // --- GPUs ---
  // Id of the SKU's row, inserting it when new.
  absl::StatusOr<int64_t> UpsertGpu(const GpuSku& sku);
  // NotFound when the SKU has no row.
  absl::StatusOr<int64_t> FindGpu(const GpuSku& sku);
  absl::StatusOr<Gpu> GetGpu(int64_t gpu_id);
  // Every GPU with its counts of runs, best configs and candidates, by id.
  absl::StatusOr<std::vector<GpuSummary>> ListGpus();

  // --- tuning runs ---
  // Inserts `run` (its id is ignored) and returns the new id.
  absl::StatusOr<int64_t> CreateRun(const TuningRun& run);
  // Sets the final status and finish time. NotFound for an unknown run.
  absl::Status FinishRun(int64_t run_id, RunStatus status,
                         int64_t finished_at);
  absl::StatusOr<TuningRun> GetRun(int64_t run_id);
  // Runs of one GPU, or of all when empty, by id.
  absl::StatusOr<std::vector<TuningRun>> ListRuns(
      std::optional<int64_t> gpu_id);

  // --- points ---
  // Stores one finished point in ONE transaction: every candidate, the best
  // row (replacing an older one) and +1 on the run's points_done. A killed
  // writer leaves the point either whole or absent. `best.run_id` must be
  // set; every candidate must carry the same run id and point
  // (InvalidArgument otherwise).
  absl::Status WritePoint(const BestConfig& best,
                          absl::Span<const Candidate> candidates);
  // True when the point has a best row measured by `kernel_version`: resume
  // skips it.
  absl::StatusOr<bool> IsPointComplete(const PointKey& point,
                                       absl::string_view kernel_version);
  // NotFound when the point has no best row.
  absl::StatusOr<BestConfig> GetBestConfig(const PointKey& point);
  // Ordered by gpu id, op, dtype, rows, cols, inner.
  absl::StatusOr<std::vector<BestConfig>> ListBestConfigs(
      const BestConfigFilter& filter);
  // Every best row of one SKU (what the daemon loads); empty when the SKU is
  // unknown. Same order as ListBestConfigs.
  absl::StatusOr<std::vector<BestConfig>> BestConfigsForSku(
      const GpuSku& sku);
  // Candidates of one point, of one run or of all runs; fastest median
  // first, untimed ones last, ties by run and insertion order.
  absl::StatusOr<std::vector<Candidate>> ListCandidates(
      const PointKey& point, std::optional<int64_t> run_id);

  // --- import ---
  // Upserts the SKU and all `rows` in ONE transaction (all or nothing) and
  // returns the SKU's gpu id. Each row's point.gpu_id is replaced by that id
  // and its run_id dropped (runs are local to a store). The caller has
  // validated the rows (ops, dtypes, configs).
  absl::StatusOr<int64_t> ImportBestConfigs(const GpuSku& sku,
                                            absl::Span<const BestConfig> rows);

  // --- maintenance ---
  // Increases with every committed write that changed a row, from any
  // process. Cheap: poll it to know when to reload.
  absl::StatusOr<int64_t> DataVersion();
  // PRAGMA integrity_check: OK, or DataLoss quoting what it found.
  absl::Status CheckIntegrity();

 private:
  TuningStore(std::unique_ptr<Connection> db, bool read_only);

  absl::Status Migrate();
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, bumping the data version
  // when it changed a row. Rolled back when `body` fails.
  absl::Status InWriteTransaction(absl::FunctionRef<absl::Status()> body);
  absl::StatusOr<int64_t> UpsertGpuLocked(const GpuSku& sku);
  absl::StatusOr<std::vector<BestConfig>> QueryBestConfigs(
      Statement& statement);

  std::unique_ptr<Connection> db_;
  bool read_only_;
};

}  // namespace kt::db

#endif  // KERNTUNE_DB_TUNING_STORE_H_
