// The tuned configs of every GPU SKU the CLI can see, from the local store
// and from the shipped files, with the lookup the daemon would do on each
// (tuner/config_lookup.h): what `kerntune configs list` and `configs show`
// report as a config's source.
#ifndef KERNTUNE_CLIENT_SKU_CONFIGS_H_
#define KERNTUNE_CLIENT_SKU_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "kernels/device_info.h"
#include "proto/shipped_configs.h"
#include "tuner/config_lookup.h"

namespace kt::client {

struct SkuConfigs {
  // The store's GPU; id 0 when only shipped files know the SKU.
  db::Gpu gpu;
  bool in_store = false;
  // Every row of the SKU, stale ones included: the store's, and the shipped
  // files' (point.gpu_id = gpu.id).
  std::vector<db::BestConfig> local;
  std::vector<db::BestConfig> shipped;
  // The file of each shipped row (shipped_from[i] holds shipped[i]), and
  // the SKU's files in order.
  std::vector<std::string> shipped_from;
  std::vector<std::string> shipped_files;
  // The SKU as a described device; an error for an architecture kerntune
  // does not know, and then nothing can be looked up.
  absl::StatusOr<kernels::DeviceInfo> device = kernels::DeviceInfo();
  // Both kinds of rows, as the daemon on this SKU would load them.
  tuner::ConfigTable table;

  // The daemon's choice at `point` (its op, dtype and shape).
  absl::StatusOr<tuner::ConfigChoice> Lookup(const db::PointKey& point) const;

  // The row the daemon serves at exactly `point` (the lookup's tuned or
  // shipped entry there); when neither serves, the store's row at the point
  // (stale, or illegal here), else the shipped one; null when neither has
  // the point. `origin` tells which list it came from.
  const db::BestConfig* ServedRow(const db::PointKey& point, tuner::EntryOrigin& origin) const;
};

// The row of `rows` at exactly `point` (the gpu id aside), if any.
const db::BestConfig* RowAt(const std::vector<db::BestConfig>& rows, const db::PointKey& point);

// Every GPU of the store (by id), then every SKU that only the shipped
// files know (in file order).
absl::StatusOr<std::vector<SkuConfigs>> LoadSkuConfigs(
    db::TuningStore& store, absl::Span<const proto::ShippedConfigFile> shipped);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_SKU_CONFIGS_H_
