// Shared pieces of the CLI's database verbs.
#include "client/cli_common.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "kernels/types.h"
#include "kernels/version.h"

namespace kt::client {

absl::StatusOr<std::unique_ptr<db::TuningStore>> OpenStore(
    const std::string& db_path) {
  std::string path = db_path;
  if (path.empty()) {
    absl::StatusOr<std::string> default_path = db::DefaultDatabasePath();
    if (!default_path.ok()) {
      return absl::Status(
          default_path.status().code(),
          absl::StrCat("no --db given and no default database path: ",
                       default_path.status().message()));
    }
    path = *std::move(default_path);
  }
  db::OpenOptions options;
  options.create_if_missing = true;
  return db::TuningStore::Open(path, options);
}

std::string StoreForReading::Describe() const {
  return exists ? path : absl::StrCat(path, " (no store there yet)");
}

absl::StatusOr<StoreForReading> OpenStoreForReading(const std::string& db_path) {
  const char* env = std::getenv("KERNTUNE_DB");
  const bool from_env = db_path.empty() && env != nullptr && env[0] != '\0';
  StoreForReading opened;
  if (!db_path.empty()) {
    opened.path = db_path;
  } else {
    absl::StatusOr<std::string> default_path = db::DefaultDatabasePath();
    if (!default_path.ok()) {
      return absl::Status(default_path.status().code(),
                          absl::StrCat("no --db given and no default database path: ",
                                       default_path.status().message()));
    }
    opened.path = *std::move(default_path);
  }
  std::error_code error;
  if (std::filesystem::exists(opened.path, error)) {
    absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
        db::TuningStore::Open(opened.path, db::OpenOptions());
    if (!store.ok()) return store.status();
    opened.store = *std::move(store);
    return opened;
  }
  if (!db_path.empty() || from_env) {
    const std::filesystem::path parent = std::filesystem::path(opened.path).parent_path();
    const std::string why = !parent.empty() && !std::filesystem::exists(parent, error)
                                ? absl::StrCat("the directory ", parent.string(),
                                               " does not exist")
                                : std::string("the file does not exist");
    return absl::NotFoundError(absl::StrCat(
        "no tuning store at ", opened.path, ": ", why, " (check ",
        db_path.empty() ? "$KERNTUNE_DB" : "--db",
        "; `kerntune tune` or `kerntune configs import FILE` creates one)"));
  }
  // The default store, not created yet: empty, and left uncreated.
  db::OpenOptions in_memory;
  in_memory.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
      db::TuningStore::Open(":memory:", in_memory);
  if (!store.ok()) return store.status();
  opened.store = *std::move(store);
  opened.exists = false;
  return opened;
}

bool GpuSelector::Matches(const db::Gpu& gpu) const {
  if (id.has_value()) return gpu.id == *id;
  if (name_substring.has_value()) {
    return absl::StrContains(absl::AsciiStrToLower(gpu.sku.name),
                             absl::AsciiStrToLower(*name_substring));
  }
  return true;
}

std::string GpuSelector::ToString() const {
  if (id.has_value()) return absl::StrCat("--gpu=", *id);
  if (name_substring.has_value()) return absl::StrCat("--gpu=", *name_substring);
  return "(no --gpu)";
}

GpuSelector ParseGpuSelector(absl::string_view text) {
  GpuSelector selector;
  if (text.empty()) return selector;
  int64_t id = 0;
  const bool all_digits =
      std::all_of(text.begin(), text.end(),
                  [](char c) { return absl::ascii_isdigit(c); });
  if (all_digits && absl::SimpleAtoi(text, &id)) {
    selector.id = id;
  } else {
    selector.name_substring = std::string(text);
  }
  return selector;
}

absl::StatusOr<std::vector<db::Gpu>> MatchGpus(db::TuningStore& store,
                                               const GpuSelector& selector) {
  absl::StatusOr<std::vector<db::GpuSummary>> gpus = store.ListGpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<db::Gpu> matched;
  for (const db::GpuSummary& summary : *gpus) {
    if (selector.Matches(summary.gpu)) matched.push_back(summary.gpu);
  }
  return matched;
}

absl::StatusOr<db::Gpu> SelectOneGpu(db::TuningStore& store,
                                     const GpuSelector& selector) {
  absl::StatusOr<std::vector<db::Gpu>> matched = MatchGpus(store, selector);
  if (!matched.ok()) return matched.status();
  if (matched->empty()) {
    if (selector.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no GPUs in ", store.path(),
                       " (run `kerntune tune` or `kerntune configs import`)"));
    }
    return absl::NotFoundError(absl::StrCat(
        selector.ToString(), " matches no GPU in ", store.path(),
        " (`kerntune gpus` lists them)"));
  }
  if (matched->size() > 1) {
    std::vector<std::string> choices;
    for (const db::Gpu& gpu : *matched) {
      choices.push_back(
          absl::StrCat("--gpu=", gpu.id, " ", SkuDescription(gpu.sku)));
    }
    const std::string what =
        selector.empty() ? absl::StrCat(store.path(), " holds ", matched->size(), " GPUs")
                         : absl::StrCat(selector.ToString(), " matches ",
                                        matched->size(), " GPUs");
    return absl::InvalidArgumentError(absl::StrCat(
        what, "; choose one with --gpu:\n  ", absl::StrJoin(choices, "\n  ")));
  }
  return matched->front();
}

std::string FormatBytes(int64_t bytes) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / kGiB);
}

std::string SkuDescription(const db::GpuSku& sku) {
  return absl::StrCat(sku.name, " (cc ", sku.cc_major, ".", sku.cc_minor, ", ",
                      sku.sm_count, " SMs, ", FormatBytes(sku.total_memory_bytes),
                      ")");
}

std::string FormatCudaVersion(int version) {
  if (version <= 0) return "unknown";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

bool IsStale(absl::string_view kernel_version) {
  return kernel_version != kernels::kKernelLibraryVersion;
}

std::string DescribeKernelVersion(absl::string_view kernel_version) {
  const absl::string_view shown = kernel_version.empty() ? "unknown" : kernel_version;
  if (!IsStale(kernel_version)) return std::string(shown);
  return absl::StrCat(shown, " (stale)");
}

std::string FormatUnixTime(int64_t seconds) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixSeconds(seconds),
                          absl::UTCTimeZone());
}

int ReportError(absl::string_view verb, const absl::Status& status,
                std::ostream& err, int exit_code) {
  err << "kerntune " << verb << ": " << status.message() << "\n";
  return exit_code;
}

absl::StatusOr<PointFilter> MakePointFilter(
    const std::optional<std::string>& gpu, const std::optional<std::string>& op,
    const std::optional<std::string>& dtype, std::optional<int64_t> rows,
    std::optional<int64_t> cols, std::optional<int64_t> inner) {
  PointFilter filter;
  if (gpu.has_value()) filter.gpu = ParseGpuSelector(*gpu);
  if (op.has_value()) {
    absl::StatusOr<kernels::Op> parsed = kernels::ParseOp(*op);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", parsed.status().message()));
    }
    filter.op = std::string(kernels::OpName(*parsed));
  }
  if (dtype.has_value()) {
    absl::StatusOr<kernels::DType> parsed = kernels::ParseDType(*dtype);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", parsed.status().message()));
    }
    filter.dtype = std::string(kernels::DTypeName(*parsed));
  }
  if (rows.has_value() && *rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rows=", *rows, " must be >= 1"));
  }
  if (cols.has_value() && *cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cols=", *cols, " must be >= 1"));
  }
  if (inner.has_value() && *inner < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inner=", *inner, " must be >= 1"));
  }
  filter.rows = rows;
  filter.cols = cols;
  filter.inner = inner;
  return filter;
}

}  // namespace kt::client
