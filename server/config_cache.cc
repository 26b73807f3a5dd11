// Tuned-config cache of the daemon (see config_cache.h).
#include "server/config_cache.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/log.h"
#include "tuner/backend.h"

namespace kt::server {

ConfigCache::ConfigCache(std::string db_path, kernels::DeviceInfo device,
                         std::vector<tuner::TunedEntry> shipped)
    : db_path_(std::move(db_path)),
      device_(std::move(device)),
      sku_(tuner::SkuOf(device_)),
      shipped_(std::move(shipped)) {}

ConfigCache::~ConfigCache() { StopPolling(); }

absl::StatusOr<std::unique_ptr<ConfigCache>> ConfigCache::Create(
    const std::string& db_path, kernels::DeviceInfo device,
    std::vector<tuner::TunedEntry> shipped) {
  std::unique_ptr<ConfigCache> cache(
      new ConfigCache(db_path, std::move(device), std::move(shipped)));
  absl::StatusOr<bool> loaded = cache->ReloadIfChanged();
  if (!loaded.ok()) return loaded.status();
  // No store yet: the shipped entries alone.
  if (!*loaded) cache->Install({}, 0);
  return cache;
}

absl::StatusOr<bool> ConfigCache::EnsureOpen() {
  if (store_ != nullptr) return true;
  if (db_path_.empty()) return false;  // no database configured
  db::OpenOptions options;
  options.read_only = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(db_path_, options);
  if (absl::IsNotFound(store.status())) return false;
  if (!store.ok()) return store.status();
  store_ = *std::move(store);
  return true;
}

absl::StatusOr<bool> ConfigCache::ReloadIfChanged() {
  absl::MutexLock store_lock(&store_mu_);
  absl::StatusOr<bool> open = EnsureOpen();
  if (!open.ok()) return open.status();
  if (!*open) return false;
  absl::StatusOr<int64_t> version = store_->DataVersion();
  if (!version.ok()) return version.status();
  if (*version == data_version()) return false;
  if (absl::Status s = Load(); !s.ok()) return s;
  return true;
}

absl::Status ConfigCache::Load() {
  // Read the version first: a write landing during the read bumps it again,
  // so the next poll reloads rather than missing it.
  absl::StatusOr<int64_t> version = store_->DataVersion();
  if (!version.ok()) return version.status();
  absl::StatusOr<std::vector<db::BestConfig>> rows = store_->BestConfigsForSku(sku_);
  if (!rows.ok()) return rows.status();
  Install(*rows, *version);
  return absl::OkStatus();
}

void ConfigCache::Install(const std::vector<db::BestConfig>& rows, int64_t data_version) {
  auto table = std::make_shared<tuner::ConfigTable>();
  for (const db::BestConfig& row : rows) {
    // Rows this code cannot read (a newer op, a malformed key) are skipped:
    // the store is shared with other versions of kerntune.
    absl::StatusOr<tuner::TunedEntry> entry = tuner::EntryFromRow(row, tuner::EntryOrigin::kLocal);
    if (entry.ok()) table->Add(*std::move(entry));
  }
  for (const tuner::TunedEntry& entry : shipped_) table->Add(entry);
  // The daemon's log, once per load: a stale entry silently becoming a
  // heuristic launch would look like a slow GPU.
  if (const std::string stale = tuner::DescribeStale(table->stale()); !stale.empty()) {
    LogWarning(stale);
  }
  absl::MutexLock lock(&mu_);
  table_ = std::move(table);
  data_version_ = data_version;
}

std::shared_ptr<const tuner::ConfigTable> ConfigCache::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::StatusOr<tuner::ConfigChoice> ConfigCache::Lookup(kernels::Op op, kernels::DType dtype,
                                                        kernels::Shape shape) const {
  // The last answer of each thread, for the table it came from: a client
  // sending the same Run again (the common case) skips the table's search
  // (~1 us on an H100 host, a tenth of a small Run's daemon time). A
  // reloaded table is another table.
  struct Memo {
    std::shared_ptr<const tuner::ConfigTable> table;
    kernels::Op op;
    kernels::DType dtype;
    kernels::Shape shape;
    absl::StatusOr<tuner::ConfigChoice> choice;
  };
  thread_local Memo memo;
  std::shared_ptr<const tuner::ConfigTable> current = table();
  if (memo.table != current || memo.op != op || memo.dtype != dtype || memo.shape != shape) {
    memo.choice = current->Lookup(op, dtype, shape, device_);
    memo.table = std::move(current);
    memo.op = op;
    memo.dtype = dtype;
    memo.shape = shape;
  }
  return memo.choice;
}

std::vector<tuner::TunedEntry> ConfigCache::Entries() const { return table()->Entries(); }

int64_t ConfigCache::local_entries() const {
  return table()->size(tuner::EntryOrigin::kLocal);
}

int64_t ConfigCache::shipped_entries() const {
  return table()->size(tuner::EntryOrigin::kShipped);
}

tuner::StaleEntries ConfigCache::stale() const { return table()->stale(); }

int64_t ConfigCache::data_version() const {
  absl::MutexLock lock(&mu_);
  return data_version_;
}

void ConfigCache::StartPolling(absl::Duration interval) {
  if (poller_.joinable()) return;
  {
    absl::MutexLock lock(&poll_mu_);
    stop_ = false;
  }
  poller_ = std::thread([this, interval] { PollLoop(interval); });
}

void ConfigCache::StopPolling() {
  {
    absl::MutexLock lock(&poll_mu_);
    stop_ = true;
  }
  if (poller_.joinable()) poller_.join();
}

void ConfigCache::PollLoop(absl::Duration interval) {
  absl::MutexLock lock(&poll_mu_);
  while (!poll_mu_.AwaitWithTimeout(absl::Condition(&stop_), interval)) {
    poll_mu_.Unlock();
    absl::StatusOr<bool> reloaded = ReloadIfChanged();
    // The daemon's log: the poller is the edge of this background work.
    if (!reloaded.ok()) {
      LogError(absl::StrCat("reloading ", db_path_, " failed: ", reloaded.status().ToString()));
    } else if (*reloaded) {
      LogInfo(absl::StrCat("reloaded ", local_entries(), " tuned configs from ", db_path_,
                           " (data version ", data_version(), ")"));
    }
    poll_mu_.Lock();
  }
}

}  // namespace kt::server
