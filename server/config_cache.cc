// Tuned-config cache of the daemon (see config_cache.h).
#include "server/config_cache.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tuner/backend.h"

namespace kt::server {

absl::string_view ConfigSourceName(ConfigSource source) {
  switch (source) {
    case ConfigSource::kTuned:
      return "tuned";
    case ConfigSource::kNearestTuned:
      return "nearest_tuned";
    case ConfigSource::kHeuristic:
      return "heuristic";
  }
  return "unknown";
}

ConfigCache::ConfigCache(std::string db_path, kernels::DeviceInfo device)
    : db_path_(std::move(db_path)), device_(std::move(device)), sku_(tuner::SkuOf(device_)) {}

ConfigCache::~ConfigCache() { StopPolling(); }

absl::StatusOr<std::unique_ptr<ConfigCache>> ConfigCache::Create(const std::string& db_path,
                                                                 kernels::DeviceInfo device) {
  std::unique_ptr<ConfigCache> cache(new ConfigCache(db_path, std::move(device)));
  absl::StatusOr<bool> loaded = cache->ReloadIfChanged();
  if (!loaded.ok()) return loaded.status();
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
  std::map<Key, TunedEntry> entries;
  for (const db::BestConfig& row : *rows) {
    // Rows this code cannot read (a newer op, a malformed key) are skipped:
    // the store is shared with other versions of kerntune.
    absl::StatusOr<kernels::Op> op = kernels::ParseOp(row.point.op);
    absl::StatusOr<kernels::DType> dtype = kernels::ParseDType(row.point.dtype);
    absl::StatusOr<kernels::LaunchConfig> config = kernels::ParseLaunchConfig(row.config.key);
    if (!op.ok() || !dtype.ok() || !config.ok()) continue;
    TunedEntry entry;
    entry.op = *op;
    entry.dtype = *dtype;
    entry.shape = kernels::Shape{row.point.rows, row.point.cols, row.point.inner};
    entry.config = *config;
    entry.median_us = row.median_us;
    entry.kernel_version = row.env.kernel_version;
    entries[Key{entry.op, entry.dtype, entry.shape.inner, entry.shape.rows, entry.shape.cols}] =
        std::move(entry);
  }
  absl::MutexLock lock(&mu_);
  entries_ = std::move(entries);
  data_version_ = *version;
  return absl::OkStatus();
}

absl::StatusOr<ConfigChoice> ConfigCache::Lookup(kernels::Op op, kernels::DType dtype,
                                                 kernels::Shape shape) const {
  std::optional<TunedEntry> exact;
  std::optional<TunedEntry> nearest;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(Key{op, dtype, shape.inner, shape.rows, shape.cols});
    if (it != entries_.end()) {
      exact = it->second;
    } else {
      // Nearest in log space among the entries of the same op, dtype and
      // inner: a 2x change of rows costs as much as a 2x change of cols.
      // Ties go to the first in (rows, cols) order.
      double best = std::numeric_limits<double>::infinity();
      for (auto e = entries_.lower_bound(Key{op, dtype, shape.inner, 0, 0});
           e != entries_.end() && std::get<0>(e->first) == op && std::get<1>(e->first) == dtype &&
           std::get<2>(e->first) == shape.inner;
           ++e) {
        const double distance =
            std::fabs(std::log(static_cast<double>(e->second.shape.rows) / shape.rows)) +
            std::fabs(std::log(static_cast<double>(e->second.shape.cols) / shape.cols));
        if (distance < best) {
          best = distance;
          nearest = e->second;
        }
      }
    }
  }
  // Tuned configs may come from an imported file: check them on this shape
  // and device like any other config before trusting them.
  if (exact && kernels::ValidateConfig(op, dtype, shape, exact->config, device_).ok()) {
    return ConfigChoice{exact->config, ConfigSource::kTuned, exact};
  }
  if (nearest && kernels::ValidateConfig(op, dtype, shape, nearest->config, device_).ok()) {
    return ConfigChoice{nearest->config, ConfigSource::kNearestTuned, nearest};
  }
  absl::StatusOr<kernels::LaunchConfig> heuristic =
      kernels::HeuristicConfig(op, dtype, shape, device_);
  if (!heuristic.ok()) return heuristic.status();
  return ConfigChoice{*heuristic, ConfigSource::kHeuristic, std::nullopt};
}

std::vector<TunedEntry> ConfigCache::Entries() const {
  absl::MutexLock lock(&mu_);
  std::vector<TunedEntry> entries;
  entries.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) entries.push_back(entry);
  return entries;
}

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
      std::fprintf(stderr, "kerntuned: reloading %s failed: %s\n", db_path_.c_str(),
                   reloaded.status().ToString().c_str());
    } else if (*reloaded) {
      std::fprintf(stderr, "kerntuned: reloaded %zu tuned configs from %s (data version %lld)\n",
                   Entries().size(), db_path_.c_str(), static_cast<long long>(data_version()));
    }
    poll_mu_.Lock();
  }
}

}  // namespace kt::server
