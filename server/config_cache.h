// ConfigCache: the daemon's tuned configs for its GPU's SKU, kept current.
// The local tuning store's entries are reloaded whenever the store's data
// changes or another file takes its path; the shipped ones (deploy/configs)
// are given once at start. A store that cannot be read (deleted, damaged,
// unreadable, on a filesystem that does not let SQLite open it) never stops
// the daemon: the entries loaded last are served, store_problem() says
// why, and the next readable store is loaded. The choice of a request's
// config is tuner::ConfigTable's (config_lookup.h): local tuned, shipped,
// nearest tuned, heuristic; stale entries never. The problems Runs got
// served by anything but an exact tuned entry are recorded (served_shapes.h)
// for `kerntune tune --served`, and leave the record once the store or the
// shipped files hold a current entry for them.
#ifndef KERNTUNE_SERVER_CONFIG_CACHE_H_
#define KERNTUNE_SERVER_CONFIG_CACHE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "kernels/device_info.h"
#include "kernels/types.h"
#include "server/served_shapes.h"
#include "tuner/config_lookup.h"

namespace kt::server {

class ConfigCache {
 public:
  // Loads the entries of `device`'s SKU from the store at `db_path`, opened
  // read-only, beside `shipped` (the shipped files' entries for the SKU;
  // stale ones are counted, not served). A missing or unreadable store
  // means no local entries until it can be read (store_problem() says why
  // for an unreadable one).
  static absl::StatusOr<std::unique_ptr<ConfigCache>> Create(
      const std::string& db_path, kernels::DeviceInfo device,
      std::vector<tuner::TunedEntry> shipped = {});
  ~ConfigCache();  // stops the poller
  ConfigCache(const ConfigCache&) = delete;
  ConfigCache& operator=(const ConfigCache&) = delete;

  // Starts a background thread that calls ReloadIfChanged every `interval`.
  void StartPolling(absl::Duration interval);
  // Stops and joins it; idempotent.
  void StopPolling();

  // Reloads when the store's DataVersion changed, the file appeared or
  // another file took its path. Returns whether it reloaded. When the store
  // is gone or cannot be read the entries loaded last stay, store_problem()
  // says so, and an error is returned (none for a store that never was
  // there). Each load that leaves stale entries out says so once on stderr.
  absl::StatusOr<bool> ReloadIfChanged();

  // The config to launch for a problem (shape.inner included). Errors only
  // when even the heuristic has none (a shape no kernel can run).
  absl::StatusOr<tuner::ConfigChoice> Lookup(kernels::Op op, kernels::DType dtype,
                                             kernels::Shape shape) const;
  // Lookup for a Run about to be launched: a choice other than an exact
  // current entry (tuned or shipped) is counted in served_untuned(). A
  // thread sending the same problem again counts it without a lock.
  absl::StatusOr<tuner::ConfigChoice> LookupForRun(kernels::Op op, kernels::DType dtype,
                                                   kernels::Shape shape);
  // The problems Runs were served untuned, those tuned since left out.
  const ServedShapes& served_untuned() const { return served_; }

  // The entries that may be served, local then shipped.
  std::vector<tuner::TunedEntry> Entries() const;
  int64_t local_entries() const;
  int64_t shipped_entries() const;
  // Entries left out of the last load for their kernel library version.
  tuner::StaleEntries stale() const;
  // DataVersion of the loaded data; 0 while no database is loaded.
  int64_t data_version() const;
  // Why the store's current state is not what is served (it was deleted,
  // or cannot be read), naming what is served instead; empty while the
  // entries are the store's.
  std::string store_problem() const;
  const std::string& db_path() const { return db_path_; }
  const kernels::DeviceInfo& device() const { return device_; }
  const db::GpuSku& sku() const { return sku_; }

 private:
  ConfigCache(std::string db_path, kernels::DeviceInfo device,
              std::vector<tuner::TunedEntry> shipped);
  // Opens the store when not yet open, or again when another file now has
  // its path; closes it when no file has.
  enum class StoreFile { kMissing, kOpen, kOpenedNow };
  absl::StatusOr<StoreFile> EnsureOpen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  // ReloadIfChanged's work; store_problem() is its outcome.
  absl::StatusOr<bool> Reload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  void SetProblem(std::string problem);
  // Installs a table of the store's current rows and the shipped entries.
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  // Installs a table of `rows` (the store's, for this SKU) and the shipped
  // entries.
  void Install(const std::vector<db::BestConfig>& rows, int64_t data_version);
  std::shared_ptr<const tuner::ConfigTable> table() const;
  struct Memo;
  // The calling thread's last lookup, made again unless it was of this
  // problem in the current table.
  Memo& Remember(kernels::Op op, kernels::DType dtype, kernels::Shape shape) const;
  void PollLoop(absl::Duration interval);

  const std::string db_path_;
  const kernels::DeviceInfo device_;
  const db::GpuSku sku_;
  const std::vector<tuner::TunedEntry> shipped_;

  // The store is used by one thread at a time (TuningStore is not
  // thread-safe): the creator, then the poller or a test calling Reload.
  absl::Mutex store_mu_;
  std::unique_ptr<db::TuningStore> store_ ABSL_GUARDED_BY(store_mu_);
  // The file store_ was opened from (st_dev, st_ino, taken before the
  // open: a file replaced in between is opened again next time).
  std::pair<uint64_t, uint64_t> store_file_ ABSL_GUARDED_BY(store_mu_) = {0, 0};

  // Lookups copy the pointer and read the table outside the lock; a reload
  // swaps in a new one, of the next generation.
  mutable absl::Mutex mu_;
  std::shared_ptr<const tuner::ConfigTable> table_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  // The serial of table_, unique in the process (no two tables of any
  // ConfigCache share one), written with it: a thread's memo of a lookup
  // in that table is current while this still reads the same, which a
  // repeated Run checks without the lock.
  std::atomic<uint64_t> table_serial_{0};
  int64_t data_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::string store_problem_ ABSL_GUARDED_BY(mu_);

  ServedShapes served_;

  absl::Mutex poll_mu_;
  bool stop_ ABSL_GUARDED_BY(poll_mu_) = false;
  std::thread poller_;
};

// Makes the config cache for a device's SKU: each device owns one.
using ConfigCacheFactory =
    std::function<absl::StatusOr<std::unique_ptr<ConfigCache>>(const kernels::DeviceInfo&)>;

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CONFIG_CACHE_H_
