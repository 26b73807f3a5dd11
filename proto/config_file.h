// The tuned-config file: protobuf's canonical JSON mapping of
// kerntune.v1.TunedConfigFile (proto/kerntune/v1/config_file.proto;
// client/README.md documents it). `kerntune configs export/import` write and
// read it, and kerntuned and the CLI read the shipped ones (deploy/configs).
// Writing is a conversion; reading validates every entry on its own so one
// bad entry costs only itself.
#ifndef KERNTUNE_PROTO_CONFIG_FILE_H_
#define KERNTUNE_PROTO_CONFIG_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "db/records.h"
#include "kerntune/v1/config_file.pb.h"

namespace kt::proto {

inline constexpr char kConfigFileFormat[] = "kerntune.tuned_configs";
// The layout this code writes and the newest it reads.
inline constexpr uint32_t kConfigFileVersion = 1;

// The file for `sku` holding `rows` (their gpu ids and run ids are dropped:
// both are local to a store). InvalidArgument naming the point when a row's
// config key is not one this kerntune reads (a newer kerntune wrote it).
absl::StatusOr<kerntune::v1::TunedConfigFile> MakeConfigFile(
    const db::GpuSku& sku, absl::Span<const db::BestConfig> rows, absl::Time exported_at);

// Pretty-printed canonical JSON with snake_case field names and every field
// written, zeros included, ending in a newline.
absl::StatusOr<std::string> ConfigFileToJson(
    const kerntune::v1::TunedConfigFile& file);

struct SkippedEntry {
  size_t index = 0;    // position in the file's "configs" array, from 0
  std::string reason;  // names the field and value, e.g. "rows=0 must be >= 1"
};

// A file read back: its SKU and the entries that passed every check, as rows
// ready for db::TuningStore::ImportBestConfigs (gpu_id 0, no run).
struct ParsedConfigFile {
  db::GpuSku sku;
  std::string exported_at;  // RFC 3339, "" when absent
  std::string exported_by;
  size_t entries = 0;  // size of the "configs" array
  std::vector<db::BestConfig> valid;
  std::vector<SkippedEntry> skipped;  // by index
};

// Reads a file's text. File-level problems are errors and nothing of the
// file is usable: a SQLite file (a tuning store given where a file was
// expected), not JSON (the line and column of the first syntax error), not
// an object, "format" other than
// kConfigFileFormat, a format_version missing or newer than
// kConfigFileVersion (FailedPrecondition), an incomplete SKU or one whose
// architecture kerntune does not know. Every entry is checked on its own:
// op and dtype known, rows and cols >= 1, inner absent/0 (read as 1) or >= 1
// and > 1 only for softmax / log_softmax, the config key parses and agrees
// with the config's fields (a missing split reads as 1),
// kernels::ValidateConfig accepts it on the SKU (kernels::DescribeSku),
// times finite and > 0, no duplicate point. Entries that fail go to
// `skipped` with their index and reason. Files written before inner and
// split existed import as last-axis points with split 1.
absl::StatusOr<ParsedConfigFile> ParseConfigFile(absl::string_view json);

// True when `bytes` start like an SQLite database file (a tuning store given
// where a tuned-config file was expected).
bool IsSqliteFile(absl::string_view bytes);

}  // namespace kt::proto

#endif  // KERNTUNE_PROTO_CONFIG_FILE_H_
