// `kerntune configs list|show|export|import`.
#include "client/configs_cli.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/cli_common.h"
#include "client/sku_configs.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "kernels/version.h"
#include "proto/config_file.h"
#include "proto/shipped_configs.h"

namespace kt::client {
namespace {

// The columns of a best config, shared by list, show and their scripts'
// output: where the row comes from (origin) and what the daemon serves at
// its point (served: the lookup's source there).
Table BestConfigTable() {
  return Table({
      {"gpu_id", "GPU"},
      {"gpu_name", "GPU NAME", Visibility::kScriptsOnly},
      {"op", "OP"},
      {"dtype", "DTYPE"},
      {"rows", "ROWS"},
      {"cols", "COLS"},
      {"inner", "INNER"},
      {"config", "CONFIG"},
      {"split", "SPLIT"},
      {"median_us", "TIME US"},
      {"spread_low_us", "LOW US", Visibility::kScriptsOnly},
      {"spread_high_us", "HIGH US", Visibility::kScriptsOnly},
      {"gbps", "GB/S"},
      {"pct_of_copy", "% COPY"},
      {"heuristic_config", "HEURISTIC"},
      {"heuristic_us", "HEUR US"},
      {"speedup", "SPEEDUP"},
      {"graph_replay", "GRAPH"},
      {"kernel_version", "KERNELS"},
      {"stale", "STALE", Visibility::kScriptsOnly},
      {"origin", "ORIGIN"},
      {"served", "SERVED"},
      {"driver_version", "DRIVER", Visibility::kScriptsOnly},
      {"runtime_version", "RUNTIME", Visibility::kScriptsOnly},
      {"run_id", "RUN", Visibility::kScriptsOnly},
      {"updated_at", "UPDATED", Visibility::kScriptsOnly},
  });
}

// "local" or "shipped".
std::string OriginName(tuner::EntryOrigin origin) {
  return origin == tuner::EntryOrigin::kLocal ? "local" : "shipped";
}

// What the daemon serves at the row's point on its SKU; null when the SKU
// cannot be described (an architecture this kerntune does not know).
Cell ServedCell(const SkuConfigs& sku, const db::BestConfig& best) {
  absl::StatusOr<tuner::ConfigChoice> choice = sku.Lookup(best.point);
  if (!choice.ok()) return Cell::Null();
  return Cell::Text(std::string(tuner::ConfigSourceName(choice->source)));
}

void AddBestConfigRow(const SkuConfigs& sku, const db::BestConfig& best,
                      tuner::EntryOrigin origin, Table& table) {
  const std::optional<double> speedup = best.Speedup();
  Cell speedup_cell = Cell::OptionalReal(speedup, 2);
  if (speedup) speedup_cell.ShowAs(absl::StrFormat("%.2fx", *speedup));
  table.AddRow({
      sku.in_store ? Cell::Int(best.point.gpu_id) : Cell::Null(),
      Cell::Text(sku.gpu.sku.name),
      Cell::Text(best.point.op),
      Cell::Text(best.point.dtype),
      Cell::Int(best.point.rows),
      Cell::Int(best.point.cols),
      Cell::Int(best.point.inner),
      Cell::Text(best.config.key),
      Cell::Int(best.config.split),
      Cell::Real(best.median_us),
      Cell::OptionalReal(best.spread_low_us),
      Cell::OptionalReal(best.spread_high_us),
      Cell::Real(best.gbps, 1),
      Cell::Real(best.pct_of_copy, 1),
      Cell::Text(best.heuristic_key),
      Cell::OptionalReal(best.heuristic_us),
      std::move(speedup_cell),
      Cell::Bool(best.graph_replay),
      Cell::Text(best.env.kernel_version)
          .ShowAs(DescribeKernelVersion(best.env.kernel_version)),
      Cell::Bool(IsStale(best.env.kernel_version)),
      Cell::Text(OriginName(origin)),
      ServedCell(sku, best),
      Cell::Int(best.env.driver_version),
      Cell::Int(best.env.runtime_version),
      best.run_id ? Cell::Int(*best.run_id) : Cell::Null(),
      Cell::Int(best.updated_at).ShowAs(FormatUnixTime(best.updated_at)),
  });
}

absl::StatusOr<PointFilter> CheckFlags(const PointFlags& flags) {
  return MakePointFilter(flags.gpu, flags.op, flags.dtype, flags.rows, flags.cols,
                         flags.inner);
}

db::BestConfigFilter ToStoreFilter(const PointFilter& filter) {
  db::BestConfigFilter store_filter;
  store_filter.gpu_id = filter.gpu.id;
  store_filter.gpu_name = filter.gpu.name_substring;
  store_filter.op = filter.op;
  store_filter.dtype = filter.dtype;
  store_filter.rows = filter.rows;
  store_filter.cols = filter.cols;
  store_filter.inner = filter.inner;
  return store_filter;
}

// Whether --gpu picks the SKU: one that only shipped files know has no id,
// so only a name picks it.
bool Selects(const GpuSelector& selector, const SkuConfigs& sku) {
  if (selector.id.has_value() && !sku.in_store) return false;
  return selector.Matches(sku.gpu);
}

bool RowMatches(const PointFilter& filter, const db::BestConfig& row) {
  const db::PointKey& p = row.point;
  return (!filter.op || *filter.op == p.op) && (!filter.dtype || *filter.dtype == p.dtype) &&
         (!filter.rows || *filter.rows == p.rows) && (!filter.cols || *filter.cols == p.cols) &&
         (!filter.inner || *filter.inner == p.inner);
}

// The shipped files of `dir` (none when empty), each unusable one reported
// on `err` by name: a bad shipped file must not hide the others.
std::vector<proto::ShippedConfigFile> ReadShipped(absl::string_view verb,
                                                  const std::string& dir, std::ostream& err) {
  if (dir.empty()) return {};
  std::vector<proto::ShippedConfigFile> files = proto::ReadShippedConfigs(dir);
  for (const std::string& problem : proto::DescribeProblems(files)) {
    err << "kerntune " << verb << ": shipped config file " << problem << "\n";
  }
  return files;
}

// "1: NVIDIA H100 ... (cc 9.0, ...)", or "NVIDIA H100 ... (cc 9.0, ...);
// shipped configs only" for a SKU the store does not hold.
std::string DescribeGpu(const SkuConfigs& sku) {
  return sku.in_store ? absl::StrCat(sku.gpu.id, ": ", SkuDescription(sku.gpu.sku))
                      : absl::StrCat(SkuDescription(sku.gpu.sku), "; shipped configs only");
}

// "--gpu=1 NVIDIA H100 ...": how to pick the SKU on the command line.
std::string GpuChoice(const SkuConfigs& sku) {
  return sku.in_store
             ? absl::StrCat("--gpu=", sku.gpu.id, " ", SkuDescription(sku.gpu.sku))
             : absl::StrCat("--gpu=\"", sku.gpu.sku.name, "\" ", SkuDescription(sku.gpu.sku),
                            " (shipped configs only)");
}

// The row of `rows` at exactly `point` (the gpu id aside), if any.
const db::BestConfig* RowAt(const std::vector<db::BestConfig>& rows,
                            const db::PointKey& point) {
  for (const db::BestConfig& row : rows) {
    db::PointKey key = row.point;
    key.gpu_id = point.gpu_id;
    if (key == point) return &row;
  }
  return nullptr;
}

// The SKU `show` reports on: the one --gpu selects; without --gpu the only
// SKU, or the only one with an entry (local or shipped) at the point.
// InvalidArgument listing the choices when that is not one; NotFound when
// nothing matches.
absl::StatusOr<const SkuConfigs*> ChooseSku(const std::vector<SkuConfigs>& skus,
                                            const GpuSelector& selector,
                                            const db::PointKey& point,
                                            const std::string& described,
                                            const std::string& where) {
  std::vector<const SkuConfigs*> matched, with_point;
  for (const SkuConfigs& sku : skus) {
    if (!Selects(selector, sku)) continue;
    matched.push_back(&sku);
    db::PointKey at = point;
    at.gpu_id = sku.gpu.id;
    if (RowAt(sku.local, at) != nullptr || RowAt(sku.shipped, at) != nullptr) {
      with_point.push_back(&sku);
    }
  }
  if (matched.empty()) {
    return absl::NotFoundError(absl::StrCat(
        selector.empty() ? "no GPU SKU" : absl::StrCat(selector.ToString(), " matches no GPU SKU"),
        " in ", where, " (run `kerntune tune`, import configs, or ship them)"));
  }
  if (matched.size() == 1) return matched.front();
  if (with_point.size() == 1) return with_point.front();
  const std::vector<const SkuConfigs*>& listed = with_point.empty() ? matched : with_point;
  std::vector<std::string> choices;
  for (const SkuConfigs* sku : listed) choices.push_back(GpuChoice(*sku));
  return absl::InvalidArgumentError(absl::StrCat(
      described,
      with_point.empty() ? absl::StrCat(" has no entry on any of ", matched.size(), " GPUs")
                         : absl::StrCat(" is tuned on ", with_point.size(), " GPUs"),
      "; choose one with --gpu:\n  ", absl::StrJoin(choices, "\n  ")));
}

// The candidates of one point, fastest first, unmeasured last (the store's
// order), with the chosen one marked.
Table CandidateTable(const db::BestConfig& best,
                     const std::vector<db::Candidate>& candidates) {
  Table table({
      {"rank", "#"},
      {"chosen", ""},
      {"config", "CONFIG"},
      {"split", "SPLIT", Visibility::kScriptsOnly},
      {"status", "STATUS"},
      {"occupancy", "OCC"},
      {"median_us", "MEDIAN US"},
      {"spread_low_us", "LOW US"},
      {"spread_high_us", "HIGH US"},
      {"repetitions", "REPS", Visibility::kScriptsOnly},
      {"gbps", "GB/S"},
      {"pct_of_copy", "% COPY"},
      {"correct", "CORRECT"},
      {"graph_replay", "GRAPH"},
      {"run_id", "RUN"},
      {"message", "MESSAGE"},
  });
  int64_t rank = 0;
  for (const db::Candidate& candidate : candidates) {
    const bool chosen =
        candidate.config.key == best.config.key &&
        (!best.run_id.has_value() || candidate.run_id == *best.run_id);
    table.AddRow({
        Cell::Int(++rank),
        Cell::Bool(chosen).ShowAs(chosen ? "*" : ""),
        Cell::Text(candidate.config.key),
        Cell::Int(candidate.config.split),
        Cell::Text(std::string(db::CandidateStatusName(candidate.status))),
        Cell::Int(candidate.occupancy),
        Cell::OptionalReal(candidate.median_us),
        Cell::OptionalReal(candidate.spread_low_us),
        Cell::OptionalReal(candidate.spread_high_us),
        Cell::Int(candidate.repetitions),
        Cell::OptionalReal(candidate.gbps, 1),
        Cell::OptionalReal(candidate.pct_of_copy, 1),
        Cell::Bool(candidate.correct),
        Cell::Bool(candidate.graph_replay),
        Cell::Int(candidate.run_id),
        Cell::Text(candidate.message),
    });
  }
  return table;
}

bool HasPruned(const std::vector<db::Candidate>& candidates) {
  return std::any_of(candidates.begin(), candidates.end(), [](const db::Candidate& c) {
    return c.status == db::CandidateStatus::kPruned;
  });
}

// Why pruned rows' thresholds differ (tuner/sweep.h, SweepOptions::prune_factor).
constexpr absl::string_view kPrunedNote =
    "pruned: a short probe's fastest run was slower than the threshold in its message, the "
    "prune factor times the best median found before it (so the threshold falls as the sweep "
    "finds faster configs); its median and spread are the probe's\n";

// How the daemon came to the config: "tuned (the local store's entry for
// this point)", "nearest tuned (the shipped file's entry at 4096x1024,
// 12.50 us there)", ...
std::string DescribeSource(const tuner::ConfigChoice& choice) {
  const std::string source =
      absl::StrReplaceAll(tuner::ConfigSourceName(choice.source), {{"_", " "}});
  if (!choice.tuned) return absl::StrCat(source, " (no current tuned or shipped entry applies)");
  const tuner::TunedEntry& entry = *choice.tuned;
  const std::string whose = absl::StrCat("the ", tuner::EntryOriginName(entry.origin), "'s entry");
  if (choice.source != tuner::ConfigSource::kNearestTuned) {
    return absl::StrCat(source, " (", whose, " for this point)");
  }
  return absl::StrCat(source, " (", whose, " at ", entry.shape.rows, "x", entry.shape.cols,
                      entry.shape.inner > 1 ? absl::StrCat("x", entry.shape.inner) : "",
                      absl::StrFormat(", %.2f us there)", entry.median_us));
}

std::string DescribeSplit(int split) {
  return split == 1 ? std::string("1 (one block per row)")
                    : absl::StrCat(split, " blocks share each row");
}

// The lookup for one point as "label  value" lines: the SKU, the point, the
// source and the config served.
LabelledLines LookupLines(const SkuConfigs& sku, const db::PointKey& point,
                          const tuner::ConfigChoice& choice) {
  LabelledLines lines;
  lines.push_back({"gpu", DescribeGpu(sku)});
  lines.push_back({"point", db::DescribePoint(point.op, point.dtype, point.rows, point.cols,
                                              point.inner)});
  if (point.inner > 1) {
    lines.push_back({"inner", absl::StrCat(point.inner, " (reduced along the middle axis of (",
                                           point.rows, ", ", point.cols, ", ", point.inner,
                                           "))")});
  }
  lines.push_back({"source", DescribeSource(choice)});
  lines.push_back({"config", kernels::ConfigKey(choice.config)});
  lines.push_back({"split", DescribeSplit(choice.config.split)});
  return lines;
}

// The candidate row the store's entry was chosen from (same config, same
// run); null when the entry was imported or its run's rows are gone.
const db::Candidate* ChosenCandidate(const db::BestConfig& best,
                                     const std::vector<db::Candidate>& candidates) {
  if (!best.run_id) return nullptr;
  for (const db::Candidate& candidate : candidates) {
    if (candidate.config.key == best.config.key && candidate.run_id == *best.run_id &&
        candidate.median_us) {
      return &candidate;
    }
  }
  return nullptr;
}

// "p10 .. p90 2.18 .. 2.21 us"
std::string Spread(double low, double high) {
  return absl::StrFormat("p10 .. p90 %.2f .. %.2f us", low, high);
}

// The entry's time, and its spread labelled with the measurement it comes
// from: the tuner ranks candidates by a sweep (30 repetitions each, median
// and p10/p90 kept), then re-times the leaders against the heuristic in
// interleaved rounds, whose median becomes the entry's time when they ran;
// the spread is always the sweep's.
void AddTimeLines(const db::BestConfig& best, const db::Candidate* chosen,
                  LabelledLines& lines) {
  const std::string graph = best.graph_replay ? ", timed under CUDA-graph replay" : "";
  const bool spread = best.spread_low_us && best.spread_high_us;
  if (chosen != nullptr && *chosen->median_us == best.median_us) {
    lines.push_back(
        {"time", absl::StrCat(absl::StrFormat("%.2f us, median of %d repetitions", best.median_us,
                                              chosen->repetitions),
                              spread ? absl::StrCat(" (", Spread(*best.spread_low_us,
                                                                 *best.spread_high_us), ")")
                                     : "",
                              graph)});
    return;
  }
  if (chosen != nullptr) {
    lines.push_back({"time", absl::StrFormat("%.2f us, median of the final rounds against the "
                                             "heuristic%s",
                                             best.median_us, graph)});
    lines.push_back(
        {"sweep", absl::StrCat(absl::StrFormat("%.2f us, median of %d repetitions",
                                               *chosen->median_us, chosen->repetitions),
                               spread ? absl::StrCat(" (", Spread(*best.spread_low_us,
                                                                  *best.spread_high_us), ")")
                                      : "",
                               "; it ranked the candidates")});
    return;
  }
  lines.push_back({"time", absl::StrFormat("%.2f us%s", best.median_us, graph)});
  if (spread) {
    lines.push_back({"spread", absl::StrCat(Spread(*best.spread_low_us, *best.spread_high_us),
                                            " in the tuner's sweep; the time above may come "
                                            "from its later rounds against the heuristic")});
  }
}

// What a store row measured: time, bandwidth, the heuristic beside it, and
// when and with what software.
void AddMeasurementLines(const db::BestConfig& best, const db::Candidate* chosen,
                         LabelledLines& lines) {
  AddTimeLines(best, chosen, lines);
  lines.push_back({"bandwidth",
                   absl::StrFormat("%.1f GB/s, %.1f%% of copy", best.gbps, best.pct_of_copy)});
  std::string heuristic = best.heuristic_key.empty() ? "unknown" : best.heuristic_key;
  absl::StrAppend(&heuristic, best.heuristic_us
                                  ? absl::StrFormat(", %.2f us", *best.heuristic_us)
                                  : std::string(", not timed"));
  lines.push_back({"heuristic", heuristic});
  if (const std::optional<double> speedup = best.Speedup()) {
    lines.push_back({"speedup", absl::StrFormat("%.2fx over the heuristic", *speedup)});
  }
  lines.push_back(
      {"measured",
       absl::StrCat(FormatUnixTime(best.updated_at),
                    best.run_id ? absl::StrCat(", run ", *best.run_id)
                                : std::string(", imported"),
                    "; kernels ", DescribeKernelVersion(best.env.kernel_version), ", driver ",
                    FormatCudaVersion(best.env.driver_version), ", runtime ",
                    FormatCudaVersion(best.env.runtime_version))});
}

// Why the store's entry at the point is not what the daemon serves.
std::string WhyNotServed(const db::BestConfig& local, const SkuConfigs& sku) {
  const std::string entry =
      absl::StrCat(local.config.key, ", kernels ", DescribeKernelVersion(local.env.kernel_version));
  if (IsStale(local.env.kernel_version)) {
    return absl::StrCat(entry, ": not served, measured with another kernel library; re-tune or "
                        "import current configs");
  }
  return absl::StrCat(entry, ": not served, not a legal config for this point on ",
                      sku.gpu.sku.name);
}

// The lookup as one row for scripts.
Table LookupTable(const SkuConfigs& sku, const db::PointKey& point,
                  const tuner::ConfigChoice& choice) {
  Table table({{"gpu_id", "GPU"},
               {"gpu_name", "GPU NAME"},
               {"op", "OP"},
               {"dtype", "DTYPE"},
               {"rows", "ROWS"},
               {"cols", "COLS"},
               {"inner", "INNER"},
               {"source", "SOURCE"},
               {"config", "CONFIG"},
               {"split", "SPLIT"},
               {"tuned_origin", "TUNED ORIGIN"},
               {"tuned_rows", "TUNED ROWS"},
               {"tuned_cols", "TUNED COLS"},
               {"tuned_inner", "TUNED INNER"},
               {"tuned_median_us", "TUNED US"}});
  const std::optional<tuner::TunedEntry>& tuned = choice.tuned;
  table.AddRow({sku.in_store ? Cell::Int(sku.gpu.id) : Cell::Null(),
                Cell::Text(sku.gpu.sku.name),
                Cell::Text(point.op),
                Cell::Text(point.dtype),
                Cell::Int(point.rows),
                Cell::Int(point.cols),
                Cell::Int(point.inner),
                Cell::Text(std::string(tuner::ConfigSourceName(choice.source))),
                Cell::Text(kernels::ConfigKey(choice.config)),
                Cell::Int(choice.config.split),
                tuned ? Cell::Text(OriginName(tuned->origin)) : Cell::Null(),
                tuned ? Cell::Int(tuned->shape.rows) : Cell::Null(),
                tuned ? Cell::Int(tuned->shape.cols) : Cell::Null(),
                tuned ? Cell::Int(tuned->shape.inner) : Cell::Null(),
                tuned ? Cell::Real(tuned->median_us) : Cell::Null()});
  return table;
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin),
                       std::istreambuf_iterator<char>());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ",
                                            std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat("cannot read ", path));
  }
  return contents.str();
}

// The skipped entries of an import, for scripts.
Table SkippedTable(const proto::ParsedConfigFile& parsed) {
  Table skipped({{"index", "INDEX"}, {"reason", "REASON"}});
  for (const proto::SkippedEntry& entry : parsed.skipped) {
    skipped.AddRow({Cell::Int(static_cast<int64_t>(entry.index)), Cell::Text(entry.reason)});
  }
  return skipped;
}

}  // namespace

int RunConfigsList(const ConfigsListOptions& options, std::ostream& out,
                   std::ostream& err) {
  constexpr absl::string_view kVerb = "configs list";
  absl::StatusOr<PointFilter> filter = CheckFlags(options.filter);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  absl::StatusOr<StoreForReading> store = OpenStoreForReading(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  const std::vector<proto::ShippedConfigFile> shipped =
      ReadShipped(kVerb, options.configs_dir, err);
  absl::StatusOr<std::vector<SkuConfigs>> skus = LoadSkuConfigs(*store->store, shipped);
  if (!skus.ok()) return ReportError(kVerb, skus.status(), err);

  Table table = BestConfigTable();
  for (const SkuConfigs& sku : *skus) {
    if (!Selects(filter->gpu, sku)) continue;
    for (const auto& [rows, origin] : {std::pair(&sku.local, tuner::EntryOrigin::kLocal),
                                       std::pair(&sku.shipped, tuner::EntryOrigin::kShipped)}) {
      for (const db::BestConfig& best : *rows) {
        if (RowMatches(*filter, best)) AddBestConfigRow(sku, best, origin, table);
      }
    }
  }
  if (table.rows().empty() && options.format == OutputFormat::kTable) {
    const bool filtered = !filter->gpu.empty() || filter->op || filter->dtype ||
                          filter->rows || filter->cols || filter->inner;
    out << (filtered ? "no tuned configs match the filters in " : "no tuned configs in ")
        << store->Describe()
        << (options.configs_dir.empty() ? "" : absl::StrCat(" or in ", options.configs_dir))
        << "\n";
    return kExitOk;
  }
  Render(table, options.format, out);
  return kExitOk;
}

int RunConfigsShow(const ConfigsShowOptions& options, std::ostream& out,
                   std::ostream& err) {
  constexpr absl::string_view kVerb = "configs show";
  const PointFlags& point_flags = options.point;
  std::vector<std::string> missing;
  if (!point_flags.op) missing.push_back("--op");
  if (!point_flags.dtype) missing.push_back("--dtype");
  if (!point_flags.rows) missing.push_back("--rows");
  if (!point_flags.cols) missing.push_back("--cols");
  if (!missing.empty()) {
    return ReportError(
        kVerb,
        absl::InvalidArgumentError(absl::StrCat(
            "missing ", absl::StrJoin(missing, ", "),
            ": show needs one point (--op --dtype --rows --cols)")),
        err, kExitUsage);
  }
  absl::StatusOr<PointFilter> filter = CheckFlags(point_flags);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  // A point: without --inner, the last-axis one.
  db::PointKey point{0, *filter->op, *filter->dtype, *filter->rows, *filter->cols,
                     filter->inner.value_or(1)};
  absl::StatusOr<StoreForReading> store = OpenStoreForReading(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  const std::vector<proto::ShippedConfigFile> shipped =
      ReadShipped(kVerb, options.configs_dir, err);
  absl::StatusOr<std::vector<SkuConfigs>> skus = LoadSkuConfigs(*store->store, shipped);
  if (!skus.ok()) return ReportError(kVerb, skus.status(), err);

  const std::string described =
      db::DescribePoint(point.op, point.dtype, point.rows, point.cols, point.inner);
  absl::StatusOr<const SkuConfigs*> chosen = ChooseSku(
      *skus, filter->gpu, point, described,
      options.configs_dir.empty() ? store->Describe()
                                  : absl::StrCat(store->Describe(), " or ", options.configs_dir));
  if (!chosen.ok()) {
    return ReportError(kVerb, chosen.status(), err,
                       absl::IsInvalidArgument(chosen.status()) ? kExitUsage : kExitFailure);
  }
  const SkuConfigs& sku = **chosen;
  point.gpu_id = sku.gpu.id;
  absl::StatusOr<tuner::ConfigChoice> choice = sku.Lookup(point);
  if (!choice.ok()) {
    return ReportError(kVerb,
                       absl::Status(choice.status().code(),
                                    absl::StrCat(described, " on ", sku.gpu.sku.name, ": ",
                                                 choice.status().message())),
                       err);
  }
  // The store's entry at the point, served or not, and the candidates it
  // was chosen from.
  const db::BestConfig* local = RowAt(sku.local, point);
  std::vector<db::Candidate> candidates;
  if (local != nullptr) {
    absl::StatusOr<std::vector<db::Candidate>> listed =
        store->store->ListCandidates(local->point, std::nullopt);
    if (!listed.ok()) return ReportError(kVerb, listed.status(), err);
    candidates = *std::move(listed);
  }

  Table local_table = BestConfigTable();
  if (local != nullptr) AddBestConfigRow(sku, *local, tuner::EntryOrigin::kLocal, local_table);
  const Table candidate_table =
      CandidateTable(local != nullptr ? *local : db::BestConfig(), candidates);
  const Table lookup_table = LookupTable(sku, point, *choice);
  switch (options.format) {
    case OutputFormat::kTable: {
      LabelledLines lines = LookupLines(sku, point, *choice);
      const bool local_served = choice->source == tuner::ConfigSource::kTuned;
      if (local_served) {
        AddMeasurementLines(*local, ChosenCandidate(*local, candidates), lines);
      } else if (choice->tuned) {
        lines.push_back({"time", absl::StrFormat("%.2f us where tuned; kernels %s",
                                                 choice->tuned->median_us,
                                                 choice->tuned->kernel_version)});
      }
      if (local != nullptr && !local_served) {
        lines.push_back({"local entry", WhyNotServed(*local, sku)});
      }
      WriteLabelledLines(lines, out);
      if (options.candidates) {
        out << "\n";
        if (candidates.empty()) {
          out << "no candidates recorded for this point (not tuned in this store, imported "
                 "from a file, or measured in another store)\n";
        } else {
          out << "candidates: " << candidates.size()
              << ", fastest first, unmeasured last; * = chosen\n";
          Render(candidate_table, OutputFormat::kTable, out);
          if (HasPruned(candidates)) out << kPrunedNote;
        }
      }
      break;
    }
    case OutputFormat::kJson:
      out << "{\"lookup\": " << RowToJson(lookup_table, 0)
          << ",\n\"best\": " << (local != nullptr ? RowToJson(local_table, 0) : "null");
      if (options.candidates) {
        out << ",\n\"candidates\": " << TableToJson(candidate_table);
      }
      out << "}\n";
      break;
    case OutputFormat::kCsv:
      Render(options.candidates ? candidate_table : lookup_table, OutputFormat::kCsv, out);
      break;
  }
  return kExitOk;
}

int RunConfigsExport(const ConfigsExportOptions& options, std::ostream& out,
                     std::ostream& err) {
  constexpr absl::string_view kVerb = "configs export";
  absl::StatusOr<PointFilter> filter = CheckFlags(options.filter);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  absl::StatusOr<StoreForReading> store = OpenStoreForReading(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  if (!store->exists) {
    return ReportError(kVerb,
                       absl::NotFoundError(absl::StrCat(
                           "nothing to export: ", store->Describe(),
                           " (run `kerntune tune` on a GPU, or pass --db)")),
                       err);
  }
  absl::StatusOr<db::Gpu> gpu = SelectOneGpu(*store->store, filter->gpu);
  if (!gpu.ok()) {
    return ReportError(kVerb, gpu.status(), err,
                       absl::IsInvalidArgument(gpu.status()) ? kExitUsage
                                                             : kExitFailure);
  }
  PointFilter one_gpu = *filter;
  one_gpu.gpu = GpuSelector{gpu->id, std::nullopt};
  absl::StatusOr<std::vector<db::BestConfig>> rows =
      store->store->ListBestConfigs(ToStoreFilter(one_gpu));
  if (!rows.ok()) return ReportError(kVerb, rows.status(), err);
  absl::StatusOr<kerntune::v1::TunedConfigFile> file =
      proto::MakeConfigFile(gpu->sku, *rows, options.now);
  if (!file.ok()) {
    return ReportError(kVerb,
                       absl::Status(file.status().code(), absl::StrCat(file.status().message(),
                                                                       "; nothing exported")),
                       err);
  }
  absl::StatusOr<std::string> json = proto::ConfigFileToJson(*file);
  if (!json.ok()) return ReportError(kVerb, json.status(), err);
  out << *json;
  out.flush();
  if (!out) {
    return ReportError(kVerb, absl::DataLossError("cannot write the output"), err);
  }
  err << "exported " << rows->size() << " tuned configs of "
      << SkuDescription(gpu->sku) << "\n";
  return kExitOk;
}

int RunConfigsImport(const ConfigsImportOptions& options, std::ostream& out,
                     std::ostream& err) {
  constexpr absl::string_view kVerb = "configs import";
  if (options.file.empty()) {
    return ReportError(
        kVerb, absl::InvalidArgumentError("missing FILE: configs import FILE"),
        err, kExitUsage);
  }
  absl::StatusOr<std::string> text = ReadInput(options.file);
  if (!text.ok()) return ReportError(kVerb, text.status(), err, kExitUsage);
  if (proto::IsSqliteFile(*text)) {
    return ReportError(
        kVerb,
        absl::InvalidArgumentError(absl::StrCat(
            options.file, " is a SQLite tuning store, not a tuned-config file: read it with --db=",
            options.file, " (`kerntune configs list --db=", options.file,
            "`), or write a file from it with `kerntune configs export --db=", options.file,
            " > FILE`; nothing imported")),
        err, kExitUsage);
  }
  absl::StatusOr<proto::ParsedConfigFile> parsed = proto::ParseConfigFile(*text);
  if (!parsed.ok()) {
    return ReportError(kVerb,
                       absl::InvalidArgumentError(absl::StrCat(
                           options.file, ": ", parsed.status().message(),
                           "; nothing imported")),
                       err, kExitUsage);
  }
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
      OpenStore(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  if (!parsed->valid.empty()) {
    absl::StatusOr<int64_t> gpu_id =
        (*store)->ImportBestConfigs(parsed->sku, parsed->valid);
    if (!gpu_id.ok()) {
      return ReportError(kVerb,
                         absl::Status(gpu_id.status().code(),
                                      absl::StrCat(gpu_id.status().message(),
                                                   "; nothing imported")),
                         err);
    }
  }
  for (const proto::SkippedEntry& skipped : parsed->skipped) {
    err << "kerntune " << kVerb << ": " << options.file << ": entry "
        << skipped.index << " skipped: " << skipped.reason << "\n";
  }
  // Stale entries are imported (the store keeps history) but never served.
  std::set<std::string> stale_versions;
  size_t stale = 0;
  for (const db::BestConfig& row : parsed->valid) {
    if (!IsStale(row.env.kernel_version)) continue;
    ++stale;
    stale_versions.insert(row.env.kernel_version.empty() ? "unknown" : row.env.kernel_version);
  }
  if (stale > 0) {
    err << "kerntune " << kVerb << ": " << options.file << ": " << stale << " of "
        << parsed->valid.size() << " imported entries were measured with kernel library "
        << absl::StrJoin(stale_versions, ", ") << ", not this kerntune's "
        << kernels::kKernelLibraryVersion
        << ": the daemon does not serve them (`kerntune configs list` marks them stale); "
           "re-tune, or import a file exported with kernels "
        << kernels::kKernelLibraryVersion << "\n";
  }

  switch (options.format) {
    case OutputFormat::kTable:
      out << "imported " << parsed->valid.size() << " of " << parsed->entries
          << " tuned configs of " << SkuDescription(parsed->sku) << " into "
          << (*store)->path();
      if (!parsed->skipped.empty()) {
        out << "; skipped " << parsed->skipped.size() << " (reasons on stderr)";
      }
      if (stale > 0) out << "; " << stale << " stale, not served (see stderr)";
      out << "\n";
      break;
    case OutputFormat::kJson:
      out << "{\"file\": " << JsonQuote(options.file)
          << ", \"db\": " << JsonQuote((*store)->path())
          << ", \"gpu\": " << JsonQuote(parsed->sku.name)
          << ", \"entries\": " << parsed->entries
          << ", \"imported\": " << parsed->valid.size() << ", \"stale\": " << stale
          << ",\n\"skipped\": " << TableToJson(SkippedTable(*parsed)) << "}\n";
      break;
    case OutputFormat::kCsv:
      Render(SkippedTable(*parsed), OutputFormat::kCsv, out);
      break;
  }
  return parsed->skipped.empty() ? kExitOk : kExitFailure;
}

}  // namespace kt::client
