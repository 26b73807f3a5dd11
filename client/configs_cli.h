// `kerntune configs list|show|export|import`: the tuned configs of the
// store and of the shipped files, which one the daemon would serve for a
// point and why (the daemon's own lookup, tuner/config_lookup.h), and moving
// configs between stores as files.
#ifndef KERNTUNE_CLIENT_CONFIGS_CLI_H_
#define KERNTUNE_CLIENT_CONFIGS_CLI_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/time/time.h"
#include "client/output_format.h"

namespace kt::client {

// Filters as the user typed them; each verb checks them (a bad value is a
// usage error naming the flag). Unset matches everything.
struct PointFlags {
  std::optional<std::string> gpu = std::nullopt;  // id, or a substring of its name
  std::optional<std::string> op = std::nullopt;
  std::optional<std::string> dtype = std::nullopt;
  std::optional<int64_t> rows = std::nullopt;
  std::optional<int64_t> cols = std::nullopt;
  // The trailing extent of a middle-axis point; show: unset means 1.
  std::optional<int64_t> inner = std::nullopt;
};

struct ConfigsListOptions {
  std::string db_path;  // empty: db::DefaultDatabasePath()
  OutputFormat format = OutputFormat::kTable;
  PointFlags filter;
  // Shipped tuned-config files (proto/shipped_configs.h); empty: none.
  std::string configs_dir = "";
  // The table with every column (today's 200+ characters) instead of the
  // ones that fit 120; scripts always get every column.
  bool wide = false;
};

// One row per tuned point (inner included) of the store, then of the shipped
// files: the GPU, the chosen config and its split, its time, GB/s, % of copy,
// the heuristic's config and time, the speedup, graph replay, the kernel
// version (stale ones marked), where the row comes from (local or shipped)
// and what the daemon serves at its point (tuned, shipped, nearest_tuned,
// heuristic). The table (within 120 columns unless `wide`) ends with a
// summary line (rows per GPU, shipped and local, stale) and, when a row is
// above 100% of copy, a note saying why that happens.
// Exit code kExitOk / kExitFailure / kExitUsage.
int RunConfigsList(const ConfigsListOptions& options, std::ostream& out,
                   std::ostream& err);

struct ConfigsShowOptions {
  std::string db_path;
  OutputFormat format = OutputFormat::kTable;
  // op, dtype, rows and cols are required (inner defaults to 1, the last
  // axis); gpu when several GPUs have the point.
  PointFlags point;
  // Also every candidate measured for the point, fastest first, unmeasured
  // last. CSV then holds the candidates only.
  bool candidates = false;
  // Shipped tuned-config files (proto/shipped_configs.h); empty: none.
  std::string configs_dir = "";
};

// The config the daemon would launch for one point on one GPU SKU and its
// source (tuned / shipped / nearest tuned / heuristic), with the local
// store's entry for the point (its measurements, or why it is not served:
// stale, or not legal there). The SKU is the one --gpu selects among the
// store's GPUs and the shipped files' SKUs; without --gpu, the only one, or
// the only one with an entry at the point.
int RunConfigsShow(const ConfigsShowOptions& options, std::ostream& out,
                   std::ostream& err);

struct ConfigsExportOptions {
  std::string db_path;
  // gpu must select exactly one of the store's GPUs, or when it selects
  // none of them, one SKU of the shipped files (unset: the store's only GPU,
  // else the only shipped SKU); the others narrow the points exported.
  PointFlags filter;
  absl::Time now = absl::Now();  // the file's exported_at
  // Shipped tuned-config files (proto/shipped_configs.h); empty: none.
  std::string configs_dir = "";
};

// Writes the tuned-config file (client/README.md) to `out`: for each point,
// the entry the daemon would serve there (the store's current one, else the
// shipped one; a stale store entry when nothing else is there), so an empty
// store exports the shipped files' entries. Says on `err` how many came from
// the store (its path) and from which shipped files.
int RunConfigsExport(const ConfigsExportOptions& options, std::ostream& out,
                     std::ostream& err);

struct ConfigsImportOptions {
  std::string db_path;
  OutputFormat format = OutputFormat::kTable;  // of the report
  std::string file;  // "-" reads standard input
};

// Imports every valid entry in one transaction and reports each skipped one
// with its index and reason. Exit code kExitOk when every entry was
// imported, kExitFailure when some were skipped (or the store failed), and
// kExitUsage when the file cannot be read or is not a tuned-config file of a
// version this code reads (nothing imported).
int RunConfigsImport(const ConfigsImportOptions& options, std::ostream& out,
                     std::ostream& err);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_CONFIGS_CLI_H_
