// `kerntune gpus`.
#include "client/gpus_cli.h"

#include "absl/strings/str_cat.h"
#include "client/cli_common.h"

namespace kt::client {

int RunGpus(const GpusOptions& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<StoreForReading> store = OpenStoreForReading(options.db_path);
  if (!store.ok()) return ReportError("gpus", store.status(), err);
  absl::StatusOr<std::vector<db::GpuSummary>> gpus = store->store->ListGpus();
  if (!gpus.ok()) return ReportError("gpus", gpus.status(), err);

  if (gpus->empty() && options.format == OutputFormat::kTable) {
    out << (store->exists ? "no GPUs in " : "no tuning store yet at ") << store->path
        << " (run `kerntune tune` on a GPU, or `kerntune configs import "
           "FILE`)\n";
    return kExitOk;
  }
  Table table({
      {"gpu_id", "ID"},
      {"name", "NAME"},
      {"compute_capability", "CC"},
      {"sm_count", "SMS"},
      {"total_memory_bytes", "MEMORY"},
      {"runs", "RUNS"},
      {"best_configs", "BEST CONFIGS"},
      {"candidates", "CANDIDATES"},
  });
  for (const db::GpuSummary& summary : *gpus) {
    const db::GpuSku& sku = summary.gpu.sku;
    table.AddRow({
        Cell::Int(summary.gpu.id),
        Cell::Text(sku.name),
        Cell::Text(absl::StrCat(sku.cc_major, ".", sku.cc_minor)),
        Cell::Int(sku.sm_count),
        Cell::Int(sku.total_memory_bytes)
            .ShowAs(FormatBytes(sku.total_memory_bytes)),
        Cell::Int(summary.runs),
        Cell::Int(summary.best_configs),
        Cell::Int(summary.candidates),
    });
  }
  Render(table, options.format, out);
  return kExitOk;
}

}  // namespace kt::client
