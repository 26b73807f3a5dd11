// ConfigCache: the tuned configs of this GPU's SKU, in memory, and the rule
// that picks the config of a request: the exact tuned point, else the nearest
// tuned point of the same op, dtype and inner (a middle-axis problem is
// never served by a last-axis config, nor one inner by another's) when its
// config is legal for the shape, else the heuristic. Reloads when the tuning
// store's data changes.
#ifndef KERNTUNE_SERVER_CONFIG_CACHE_H_
#define KERNTUNE_SERVER_CONFIG_CACHE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"

namespace kt::server {

enum class ConfigSource { kTuned, kNearestTuned, kHeuristic };
absl::string_view ConfigSourceName(ConfigSource source);

// One tuned point as loaded from the store.
struct TunedEntry {
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;
  kernels::LaunchConfig config;
  double median_us = 0;
  std::string kernel_version;
};

struct ConfigChoice {
  kernels::LaunchConfig config;
  ConfigSource source = ConfigSource::kHeuristic;
  // The tuned point the config came from (kTuned, kNearestTuned).
  std::optional<TunedEntry> tuned;
};

class ConfigCache {
 public:
  // Loads the entries of `device`'s SKU from the store at `db_path`, opened
  // read-only. A missing file means no tuned entries (the cache keeps
  // looking for it); any other open or read error is returned.
  static absl::StatusOr<std::unique_ptr<ConfigCache>> Create(const std::string& db_path,
                                                             kernels::DeviceInfo device);
  ~ConfigCache();  // stops the poller
  ConfigCache(const ConfigCache&) = delete;
  ConfigCache& operator=(const ConfigCache&) = delete;

  // Starts a background thread that calls ReloadIfChanged every `interval`.
  void StartPolling(absl::Duration interval);
  // Stops and joins it; idempotent.
  void StopPolling();

  // Reloads when the store's DataVersion changed (or the file appeared).
  // Returns whether it reloaded. On error the old entries stay.
  absl::StatusOr<bool> ReloadIfChanged();

  // The config to launch for a problem (shape.inner included). Errors only
  // when even the heuristic has none (a shape no kernel can run).
  absl::StatusOr<ConfigChoice> Lookup(kernels::Op op, kernels::DType dtype,
                                      kernels::Shape shape) const;

  std::vector<TunedEntry> Entries() const;
  // DataVersion of the loaded data; 0 while no database is loaded.
  int64_t data_version() const;
  const std::string& db_path() const { return db_path_; }
  const kernels::DeviceInfo& device() const { return device_; }
  const db::GpuSku& sku() const { return sku_; }

 private:
  // (op, dtype, inner, rows, cols): the entries one lookup may choose among
  // (same op, dtype, inner) are adjacent.
  using Key = std::tuple<kernels::Op, kernels::DType, int64_t, int64_t, int64_t>;
  ConfigCache(std::string db_path, kernels::DeviceInfo device);
  // Opens the store when not yet open. False when the file does not exist.
  absl::StatusOr<bool> EnsureOpen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(store_mu_);
  void PollLoop(absl::Duration interval);

  const std::string db_path_;
  const kernels::DeviceInfo device_;
  const db::GpuSku sku_;

  // The store is used by one thread at a time (TuningStore is not
  // thread-safe): the creator, then the poller or a test calling Reload.
  absl::Mutex store_mu_;
  std::unique_ptr<db::TuningStore> store_ ABSL_GUARDED_BY(store_mu_);

  mutable absl::Mutex mu_;
  std::map<Key, TunedEntry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t data_version_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex poll_mu_;
  bool stop_ ABSL_GUARDED_BY(poll_mu_) = false;
  std::thread poller_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CONFIG_CACHE_H_
