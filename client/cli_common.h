// What every database verb of the CLI shares: exit codes, opening the store,
// choosing GPUs with --gpu, and the words used to describe SKUs and versions.
#ifndef KERNTUNE_CLIENT_CLI_COMMON_H_
#define KERNTUNE_CLIENT_CLI_COMMON_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "db/records.h"
#include "db/tuning_store.h"

namespace kt::client {

// Exit codes of every verb.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work failed (database, file)
inline constexpr int kExitUsage = 2;    // the command line was wrong

// Opens the store at `db_path`, or at db::DefaultDatabasePath() when empty,
// creating it when missing: the verbs that write (tune, configs import).
absl::StatusOr<std::unique_ptr<db::TuningStore>> OpenStore(
    const std::string& db_path);

// The store of a verb that only reads (gpus, configs list/show/export),
// never created. One named by --db or $KERNTUNE_DB that does not exist is
// NotFound saying so: a typo must not read as an empty store. At the
// default path ($XDG_DATA_HOME, ~/.local/share) a store not created yet
// reads as empty (an in-memory one), so shipped configs still list.
struct StoreForReading {
  std::unique_ptr<db::TuningStore> store;
  std::string path;
  bool exists = true;
  // "PATH", or "PATH (no store there yet)".
  std::string Describe() const;
};
absl::StatusOr<StoreForReading> OpenStoreForReading(const std::string& db_path);

// --gpu: all digits selects a gpu id, anything else a case-insensitive
// substring of the device name. Empty selects every GPU.
struct GpuSelector {
  std::optional<int64_t> id;
  std::optional<std::string> name_substring;

  bool empty() const { return !id && !name_substring; }
  bool Matches(const db::Gpu& gpu) const;
  std::string ToString() const;  // "--gpu=..." as the user wrote it
};
GpuSelector ParseGpuSelector(absl::string_view text);

// GPUs of the store the selector matches, by id.
absl::StatusOr<std::vector<db::Gpu>> MatchGpus(db::TuningStore& store,
                                               const GpuSelector& selector);
// Exactly one GPU for verbs that need one: NotFound when none matches,
// InvalidArgument listing the candidates when several do.
absl::StatusOr<db::Gpu> SelectOneGpu(db::TuningStore& store,
                                     const GpuSelector& selector);

// "NVIDIA H100 80GB HBM3 (cc 9.0, 132 SMs, 79.6 GiB)"
std::string SkuDescription(const db::GpuSku& sku);
// "79.6 GiB"
std::string FormatBytes(int64_t bytes);
// cudaDriverGetVersion style 12040 -> "12.4"; 0 -> "unknown".
std::string FormatCudaVersion(int version);

// True when a result was measured by another kernel library version than
// the one linked in (kernels::kKernelLibraryVersion), unknown included.
bool IsStale(absl::string_view kernel_version);
// "0.1.0+k1", "0.1.0+k0 (stale)", "unknown (stale)"
std::string DescribeKernelVersion(absl::string_view kernel_version);

// "2024-05-01 12:00:00 UTC"
std::string FormatUnixTime(int64_t seconds);

// Writes "kerntune <verb>: <message>" to `err` and returns `exit_code`.
int ReportError(absl::string_view verb, const absl::Status& status,
                std::ostream& err, int exit_code = kExitFailure);

// Filters shared by `configs list/show/export`, already checked and in
// canonical spelling (ParseOp/ParseDType names).
struct PointFilter {
  GpuSelector gpu;
  std::optional<std::string> op;
  std::optional<std::string> dtype;
  std::optional<int64_t> rows;
  std::optional<int64_t> cols;
  std::optional<int64_t> inner;
};
// Checks and canonicalises the raw flag values: InvalidArgument naming the
// flag and value ("--op=sofmax: ...", "--rows=0 must be >= 1").
absl::StatusOr<PointFilter> MakePointFilter(
    const std::optional<std::string>& gpu, const std::optional<std::string>& op,
    const std::optional<std::string>& dtype, std::optional<int64_t> rows,
    std::optional<int64_t> cols, std::optional<int64_t> inner = std::nullopt);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_CLI_COMMON_H_
