// The config lookup of one GPU SKU (config_lookup.h).
#include "tuner/config_lookup.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/version.h"

namespace kt::tuner {

namespace {

constexpr std::pair<ConfigSource, absl::string_view> kSourceNames[] = {
    {ConfigSource::kTuned, "tuned"},
    {ConfigSource::kShipped, "shipped"},
    {ConfigSource::kNearestTuned, "nearest_tuned"},
    {ConfigSource::kHeuristic, "heuristic"},
};

}  // namespace

db::GpuSku SkuOf(const kernels::DeviceInfo& device) {
  return {device.name, device.cc_major, device.cc_minor, device.sm_count,
          device.total_memory_bytes};
}

absl::string_view ConfigSourceName(ConfigSource source) {
  for (const auto& [named, name] : kSourceNames) {
    if (named == source) return name;
  }
  return "unknown";
}

absl::string_view EntryOriginName(EntryOrigin origin) {
  return origin == EntryOrigin::kLocal ? "local store" : "shipped file";
}

bool TunedEntry::current() const { return kernel_version == kernels::kKernelLibraryVersion; }

absl::StatusOr<TunedEntry> EntryFromRow(const db::BestConfig& row, EntryOrigin origin) {
  absl::StatusOr<kernels::Op> op = kernels::ParseOp(row.point.op);
  if (!op.ok()) return op.status();
  absl::StatusOr<kernels::DType> dtype = kernels::ParseDType(row.point.dtype);
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<kernels::LaunchConfig> config = kernels::ParseLaunchConfig(row.config.key);
  if (!config.ok()) return config.status();
  TunedEntry entry;
  entry.op = *op;
  entry.dtype = *dtype;
  entry.shape = kernels::Shape{row.point.rows, row.point.cols, row.point.inner};
  entry.config = *config;
  entry.median_us = row.median_us;
  entry.kernel_version = row.env.kernel_version;
  entry.origin = origin;
  return entry;
}

std::string DescribeStale(const StaleEntries& stale) {
  if (stale.total() == 0) return "";
  std::vector<std::string> versions;
  for (const std::string& version : stale.versions) {
    versions.push_back(version.empty() ? "unknown" : version);
  }
  return absl::StrCat("skipped ", stale.total(), " tuned ",
                      stale.total() == 1 ? "entry" : "entries", " (", stale.local, " local, ",
                      stale.shipped, " shipped) measured with kernel library ",
                      absl::StrJoin(versions, ", "), " (current ",
                      kernels::kKernelLibraryVersion,
                      "); re-tune or import current configs");
}

ConfigTable MakeConfigTable(const std::vector<db::BestConfig>& local_rows,
                            const std::vector<TunedEntry>& shipped) {
  ConfigTable table;
  for (const db::BestConfig& row : local_rows) {
    absl::StatusOr<TunedEntry> entry = EntryFromRow(row, EntryOrigin::kLocal);
    if (entry.ok()) table.Add(*std::move(entry));
  }
  for (const TunedEntry& entry : shipped) table.Add(entry);
  return table;
}

void ConfigTable::Add(TunedEntry entry) {
  if (!entry.current()) {
    (entry.origin == EntryOrigin::kLocal ? stale_.local : stale_.shipped) += 1;
    stale_.versions.insert(entry.kernel_version);
    return;
  }
  EntryMap& entries = entry.origin == EntryOrigin::kLocal ? local_ : shipped_;
  const Key key{entry.op, entry.dtype, entry.shape.inner, entry.shape.rows, entry.shape.cols};
  entries[key] = std::move(entry);
}

const ConfigTable::EntryMap& ConfigTable::OfOrigin(EntryOrigin origin) const {
  return origin == EntryOrigin::kLocal ? local_ : shipped_;
}

std::optional<TunedEntry> ConfigTable::Exact(const EntryMap& entries, kernels::Op op,
                                             kernels::DType dtype, kernels::Shape shape,
                                             const kernels::DeviceInfo& device) const {
  auto it = entries.find(Key{op, dtype, shape.inner, shape.rows, shape.cols});
  if (it == entries.end()) return std::nullopt;
  if (!kernels::ValidateConfig(op, dtype, shape, it->second.config, device).ok()) {
    return std::nullopt;
  }
  return it->second;
}

std::optional<TunedEntry> ConfigTable::Nearest(const EntryMap& entries, kernels::Op op,
                                               kernels::DType dtype, kernels::Shape shape,
                                               const kernels::DeviceInfo& device) const {
  const TunedEntry* nearest = nullptr;
  double best = std::numeric_limits<double>::infinity();
  for (auto it = entries.lower_bound(Key{op, dtype, shape.inner, 0, 0});
       it != entries.end() && std::get<0>(it->first) == op && std::get<1>(it->first) == dtype &&
       std::get<2>(it->first) == shape.inner;
       ++it) {
    const double distance =
        std::fabs(std::log(static_cast<double>(it->second.shape.rows) / shape.rows)) +
        std::fabs(std::log(static_cast<double>(it->second.shape.cols) / shape.cols));
    if (distance < best) {
      best = distance;
      nearest = &it->second;
    }
  }
  if (nearest == nullptr ||
      !kernels::ValidateConfig(op, dtype, shape, nearest->config, device).ok()) {
    return std::nullopt;
  }
  return *nearest;
}

absl::StatusOr<ConfigChoice> ConfigTable::Lookup(kernels::Op op, kernels::DType dtype,
                                                 kernels::Shape shape,
                                                 const kernels::DeviceInfo& device) const {
  // Exact points first, local before shipped: a local tuning run on this
  // very SKU is the newest word on it.
  const std::pair<EntryOrigin, ConfigSource> exact_sources[] = {
      {EntryOrigin::kLocal, ConfigSource::kTuned},
      {EntryOrigin::kShipped, ConfigSource::kShipped}};
  for (const auto& [origin, source] : exact_sources) {
    if (std::optional<TunedEntry> entry = Exact(OfOrigin(origin), op, dtype, shape, device)) {
      return ConfigChoice{entry->config, source, std::move(entry)};
    }
  }
  for (EntryOrigin origin : {EntryOrigin::kLocal, EntryOrigin::kShipped}) {
    if (std::optional<TunedEntry> entry = Nearest(OfOrigin(origin), op, dtype, shape, device)) {
      return ConfigChoice{entry->config, ConfigSource::kNearestTuned, std::move(entry)};
    }
  }
  absl::StatusOr<kernels::LaunchConfig> heuristic =
      kernels::HeuristicConfig(op, dtype, shape, device);
  if (!heuristic.ok()) return heuristic.status();
  return ConfigChoice{*heuristic, ConfigSource::kHeuristic, std::nullopt};
}

namespace {

// A config batch-invariant mode may serve `shape`'s cols at any rows.
bool InvariantAtAnyRows(kernels::Op op, kernels::DType dtype, kernels::Shape shape,
                        const kernels::LaunchConfig& config, const kernels::DeviceInfo& device,
                        kernels::RowPlacement placement) {
  if (kernels::HasSplit(config.impl)) return false;
  for (int64_t rows : ConfigTable::kInvariantProbeRows) {
    const kernels::Shape probe{rows, shape.cols, shape.inner};
    if (!kernels::ValidateConfig(op, dtype, probe, config, device).ok() ||
        !kernels::ServesRowPlacement(op, dtype, probe, config, placement)) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<ConfigChoice> ConfigTable::LookupBatchInvariant(
    kernels::Op op, kernels::DType dtype, kernels::Shape shape,
    const kernels::DeviceInfo& device, kernels::RowPlacement placement) const {
  for (EntryOrigin origin : {EntryOrigin::kLocal, EntryOrigin::kShipped}) {
    const EntryMap& entries = OfOrigin(origin);
    const TunedEntry* most_rows = nullptr;
    for (auto it = entries.lower_bound(Key{op, dtype, shape.inner, 0, 0});
         it != entries.end() && std::get<0>(it->first) == op &&
         std::get<1>(it->first) == dtype && std::get<2>(it->first) == shape.inner;
         ++it) {
      const TunedEntry& entry = it->second;
      if (entry.shape.cols != shape.cols ||
          (most_rows != nullptr && entry.shape.rows <= most_rows->shape.rows) ||
          !InvariantAtAnyRows(op, dtype, shape, entry.config, device, placement)) {
        continue;
      }
      most_rows = &entry;
    }
    if (most_rows != nullptr) {
      const ConfigSource source =
          most_rows->shape.rows != shape.rows ? ConfigSource::kNearestTuned
          : origin == EntryOrigin::kLocal     ? ConfigSource::kTuned
                                              : ConfigSource::kShipped;
      return ConfigChoice{most_rows->config, source, *most_rows};
    }
  }
  const kernels::Shape canonical{kInvariantRows, shape.cols, shape.inner};
  absl::StatusOr<kernels::LaunchConfig> heuristic =
      kernels::HeuristicConfig(op, dtype, canonical, device, 16, placement);
  if (heuristic.ok() && InvariantAtAnyRows(op, dtype, shape, *heuristic, device, placement)) {
    return ConfigChoice{*heuristic, ConfigSource::kHeuristic, std::nullopt};
  }
  absl::StatusOr<std::vector<kernels::LaunchConfig>> configs =
      kernels::EnumerateConfigs(op, dtype, canonical, device, placement);
  if (!configs.ok()) return configs.status();
  for (const kernels::LaunchConfig& config : *configs) {
    if (InvariantAtAnyRows(op, dtype, shape, config, device, placement)) {
      return ConfigChoice{config, ConfigSource::kHeuristic, std::nullopt};
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "no batch-invariant config runs ", kernels::OpName(op), " ", kernels::DTypeName(dtype),
      " rows of ", shape.cols, " columns at every number of rows"));
}

std::vector<TunedEntry> ConfigTable::Entries() const {
  std::vector<TunedEntry> entries;
  entries.reserve(local_.size() + shipped_.size());
  for (const EntryMap* origin : {&local_, &shipped_}) {
    for (const auto& [key, entry] : *origin) entries.push_back(entry);
  }
  return entries;
}

int64_t ConfigTable::size(EntryOrigin origin) const {
  return static_cast<int64_t>(OfOrigin(origin).size());
}

}  // namespace kt::tuner
