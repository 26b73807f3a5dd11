// Every SKU's configs, local and shipped (sku_configs.h).
#include "client/sku_configs.h"

#include <utility>

#include "absl/status/status.h"
#include "kernels/types.h"

namespace kt::client {
namespace {

// Adds the rows this kerntune can read to `table` (a store or file may come
// from a newer kerntune; its unreadable rows are not served by this one).
void AddRows(const std::vector<db::BestConfig>& rows, tuner::EntryOrigin origin,
             tuner::ConfigTable& table) {
  for (const db::BestConfig& row : rows) {
    absl::StatusOr<tuner::TunedEntry> entry = tuner::EntryFromRow(row, origin);
    if (entry.ok()) table.Add(*std::move(entry));
  }
}

// `sku` with its shipped rows and the table of both kinds.
SkuConfigs Complete(SkuConfigs sku, absl::Span<const proto::ShippedConfigFile> shipped) {
  for (const proto::ShippedConfigFile& file : shipped) {
    if (!file.contents.ok() || !(file.contents->sku == sku.gpu.sku)) continue;
    sku.shipped_files.push_back(file.path);
    for (db::BestConfig row : file.contents->valid) {
      row.point.gpu_id = sku.gpu.id;
      sku.shipped.push_back(std::move(row));
      sku.shipped_from.push_back(file.path);
    }
  }
  const db::GpuSku& s = sku.gpu.sku;
  sku.device = kernels::DescribeSku(s.name, s.cc_major, s.cc_minor, s.sm_count,
                                    s.total_memory_bytes);
  AddRows(sku.local, tuner::EntryOrigin::kLocal, sku.table);
  AddRows(sku.shipped, tuner::EntryOrigin::kShipped, sku.table);
  return sku;
}

}  // namespace

absl::StatusOr<tuner::ConfigChoice> SkuConfigs::Lookup(const db::PointKey& point) const {
  if (!device.ok()) return device.status();
  absl::StatusOr<kernels::Op> op = kernels::ParseOp(point.op);
  if (!op.ok()) return op.status();
  absl::StatusOr<kernels::DType> dtype = kernels::ParseDType(point.dtype);
  if (!dtype.ok()) return dtype.status();
  return table.Lookup(*op, *dtype, kernels::Shape{point.rows, point.cols, point.inner}, *device);
}

const db::BestConfig* RowAt(const std::vector<db::BestConfig>& rows,
                            const db::PointKey& point) {
  for (const db::BestConfig& row : rows) {
    db::PointKey key = row.point;
    key.gpu_id = point.gpu_id;
    if (key == point) return &row;
  }
  return nullptr;
}

const db::BestConfig* SkuConfigs::ServedRow(const db::PointKey& point,
                                            tuner::EntryOrigin& origin) const {
  const db::BestConfig* local_row = RowAt(local, point);
  const db::BestConfig* shipped_row = RowAt(shipped, point);
  absl::StatusOr<tuner::ConfigChoice> choice = Lookup(point);
  const bool shipped_serves = choice.ok() && choice->source == tuner::ConfigSource::kShipped;
  if (shipped_row != nullptr && (shipped_serves || local_row == nullptr)) {
    origin = tuner::EntryOrigin::kShipped;
    return shipped_row;
  }
  origin = tuner::EntryOrigin::kLocal;
  return local_row;
}

absl::StatusOr<std::vector<SkuConfigs>> LoadSkuConfigs(
    db::TuningStore& store, absl::Span<const proto::ShippedConfigFile> shipped) {
  absl::StatusOr<std::vector<db::GpuSummary>> gpus = store.ListGpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<SkuConfigs> skus;
  for (const db::GpuSummary& summary : *gpus) {
    SkuConfigs sku;
    sku.gpu = summary.gpu;
    sku.in_store = true;
    db::BestConfigFilter filter;
    filter.gpu_id = summary.gpu.id;
    absl::StatusOr<std::vector<db::BestConfig>> rows = store.ListBestConfigs(filter);
    if (!rows.ok()) return rows.status();
    sku.local = *std::move(rows);
    skus.push_back(Complete(std::move(sku), shipped));
  }
  for (const proto::ShippedConfigFile& file : shipped) {
    if (!file.contents.ok()) continue;
    bool known = false;
    for (const SkuConfigs& sku : skus) known |= sku.gpu.sku == file.contents->sku;
    if (known) continue;
    SkuConfigs sku;
    sku.gpu.sku = file.contents->sku;
    skus.push_back(Complete(std::move(sku), shipped));
  }
  return skus;
}

}  // namespace kt::client
