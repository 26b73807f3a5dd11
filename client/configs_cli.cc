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
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/match.h"
#include "client/cli_common.h"
#include "client/sku_configs.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "kernels/version.h"
#include "proto/config_file.h"
#include "proto/shipped_configs.h"

namespace kt::client {
namespace {

// Which table a column is in: the default one of `configs list` (within
// 120 columns), the --wide one, both, or neither (scripts only). Scripts get
// every column but the table-only ones, whichever table is shown.
enum class In { kBoth, kWide, kNarrowOnly, kScripts };

struct BestColumn {
  const char* key;
  const char* title;
  In in;
};

// The columns of a best config, shared by list, show and their scripts'
// output: where the row comes from (origin) and what the daemon serves at
// its point (served: the lookup's source there). The default table keeps the
// point, the config, its time, % of copy, the speedup and the origin; the
// GPU is its short name (the summary line under the table names it in full).
constexpr BestColumn kBestColumns[] = {
    {"gpu_id", "ID", In::kWide},
    {"gpu_name", "GPU", In::kBoth},
    {"op", "OP", In::kBoth},
    {"dtype", "DTYPE", In::kBoth},
    {"rows", "ROWS", In::kWide},
    {"cols", "COLS", In::kWide},
    {"inner", "INNER", In::kWide},
    {"shape", "SHAPE", In::kNarrowOnly},
    {"config", "CONFIG", In::kBoth},
    {"split", "SPLIT", In::kWide},
    {"median_us", "TIME US", In::kBoth},
    {"spread_low_us", "LOW US", In::kScripts},
    {"spread_high_us", "HIGH US", In::kScripts},
    {"gbps", "GB/S", In::kWide},
    {"pct_of_copy", "% COPY", In::kBoth},
    {"heuristic_config", "HEURISTIC", In::kWide},
    {"heuristic_us", "HEUR US", In::kWide},
    {"speedup", "SPEEDUP", In::kBoth},
    {"graph_replay", "GRAPH", In::kWide},
    {"kernel_version", "KERNELS", In::kWide},
    {"stale", "STALE", In::kScripts},
    {"origin", "ORIGIN", In::kBoth},
    {"served", "SERVED", In::kWide},
    {"driver_version", "DRIVER", In::kScripts},
    {"runtime_version", "RUNTIME", In::kScripts},
    {"run_id", "RUN", In::kScripts},
    {"updated_at", "UPDATED", In::kScripts},
};

Table BestConfigTable(bool wide = true) {
  std::vector<Column> columns;
  for (const BestColumn& c : kBestColumns) {
    if (c.in == In::kNarrowOnly) {
      // SHAPE stands for ROWS, COLS, INNER in the narrow table only.
      if (!wide) columns.push_back({c.key, c.title, Visibility::kTableOnly});
      continue;
    }
    const bool shown = c.in == In::kBoth || (wide && c.in == In::kWide);
    columns.push_back({c.key, c.title, shown ? Visibility::kAll : Visibility::kScriptsOnly});
  }
  return Table(std::move(columns));
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

// "bf16" for the narrow table (ParseDType reads it back).
std::string ShortDType(const std::string& dtype) {
  if (dtype == "float32") return "fp32";
  if (dtype == "float16") return "fp16";
  if (dtype == "bfloat16") return "bf16";
  return dtype;
}

// "49152x4096", "512x896x48" with an inner extent.
std::string ShapeText(const db::PointKey& p) {
  return absl::StrCat(p.rows, "x", p.cols, p.inner > 1 ? absl::StrCat("x", p.inner) : "");
}

// The name a table shows for `name`: without "NVIDIA ", its fewest leading
// words that no other name of `names` starts with ("H100" beside "H200";
// "H100 PCIe" beside "H100 80GB HBM3").
std::string ShortGpuName(const std::string& name, const std::vector<std::string>& names) {
  const auto strip = [](absl::string_view n) {
    absl::ConsumePrefix(&n, "NVIDIA ");
    return std::string(n);
  };
  const std::string full = strip(name);
  const std::vector<absl::string_view> words = absl::StrSplit(full, ' ');
  std::string prefix;
  for (absl::string_view word : words) {
    prefix = prefix.empty() ? std::string(word) : absl::StrCat(prefix, " ", word);
    bool unique = true;
    for (const std::string& other : names) {
      const std::string o = strip(other);
      if (o == full) continue;
      unique &= !(o == prefix || absl::StartsWith(o, absl::StrCat(prefix, " ")));
    }
    if (unique) return prefix;
  }
  return full;
}

// A row of BestConfigTable(wide). `gpu_short`: the GPU's name in the
// table; scripts get the full one.
void AddBestConfigRow(const SkuConfigs& sku, const db::BestConfig& best,
                      tuner::EntryOrigin origin, Table& table, bool wide = true,
                      const std::string& gpu_short = "") {
  const std::optional<double> speedup = best.Speedup();
  Cell speedup_cell = Cell::OptionalReal(speedup, 2);
  if (speedup) speedup_cell.ShowAs(absl::StrFormat("%.2fx", *speedup));
  Cell gpu_name = Cell::Text(sku.gpu.sku.name);
  if (!gpu_short.empty()) gpu_name.ShowAs(gpu_short);
  Cell dtype = Cell::Text(best.point.dtype);
  if (!wide) dtype.ShowAs(ShortDType(best.point.dtype));
  std::vector<std::pair<absl::string_view, Cell>> cells = {
      {"gpu_id", sku.in_store ? Cell::Int(best.point.gpu_id) : Cell::Null()},
      {"gpu_name", std::move(gpu_name)},
      {"op", Cell::Text(best.point.op)},
      {"dtype", std::move(dtype)},
      {"rows", Cell::Int(best.point.rows)},
      {"cols", Cell::Int(best.point.cols)},
      {"inner", Cell::Int(best.point.inner)},
      {"shape", Cell::Text(ShapeText(best.point))},
      {"config", Cell::Text(best.config.key)},
      {"split", Cell::Int(best.config.split)},
      {"median_us", Cell::Real(best.median_us)},
      {"spread_low_us", Cell::OptionalReal(best.spread_low_us)},
      {"spread_high_us", Cell::OptionalReal(best.spread_high_us)},
      {"gbps", Cell::Real(best.gbps, 1)},
      {"pct_of_copy", Cell::Real(best.pct_of_copy, 1)},
      {"heuristic_config", Cell::Text(best.heuristic_key)},
      {"heuristic_us", Cell::OptionalReal(best.heuristic_us)},
      {"speedup", std::move(speedup_cell)},
      {"graph_replay", Cell::Bool(best.graph_replay)},
      {"kernel_version", Cell::Text(best.env.kernel_version)
                             .ShowAs(DescribeKernelVersion(best.env.kernel_version))},
      {"stale", Cell::Bool(IsStale(best.env.kernel_version))},
      {"origin", Cell::Text(OriginName(origin))},
      {"served", ServedCell(sku, best)},
      {"driver_version", Cell::Int(best.env.driver_version)},
      {"runtime_version", Cell::Int(best.env.runtime_version)},
      {"run_id", best.run_id ? Cell::Int(*best.run_id) : Cell::Null()},
      {"updated_at", Cell::Int(best.updated_at).ShowAs(FormatUnixTime(best.updated_at))},
  };
  std::vector<Cell> row;
  for (const Column& column : table.columns()) {
    for (auto& [key, cell] : cells) {
      if (key == column.key) row.push_back(std::move(cell));
    }
  }
  table.AddRow(std::move(row));
}

absl::StatusOr<PointFilter> CheckFlags(const PointFlags& flags) {
  return MakePointFilter(flags.gpu, flags.op, flags.dtype, flags.rows, flags.cols,
                         flags.inner);
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

// What the configs verbs read: the store and the shipped files of
// `configs_dir` (none when empty) as SKUs. Each unusable shipped file is
// reported on `err` by name: a bad one must not hide the others.
struct Catalog {
  StoreForReading store;
  std::vector<SkuConfigs> skus;
  // "PATH" of the store, or "PATH or DIR" with shipped files, for messages.
  std::string where;
};

absl::StatusOr<Catalog> ReadCatalog(absl::string_view verb, const std::string& db_path,
                                    const std::string& configs_dir, std::ostream& err) {
  absl::StatusOr<StoreForReading> store = OpenStoreForReading(db_path);
  if (!store.ok()) return store.status();
  std::vector<proto::ShippedConfigFile> shipped;
  if (!configs_dir.empty()) {
    shipped = proto::ReadShippedConfigs(configs_dir);
    for (const std::string& problem : proto::DescribeProblems(shipped)) {
      err << "kerntune " << verb << ": shipped config file " << problem << "\n";
    }
  }
  absl::StatusOr<std::vector<SkuConfigs>> skus = LoadSkuConfigs(*store->store, shipped);
  if (!skus.ok()) return skus.status();
  std::string where = configs_dir.empty() ? store->Describe()
                                          : absl::StrCat(store->Describe(), " or ", configs_dir);
  return Catalog{*std::move(store), *std::move(skus), std::move(where)};
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

// What a row measured: time, bandwidth, the heuristic beside it, and when
// and with what software. `shipped_file`: the shipped file the row comes
// from; empty for a store row.
void AddMeasurementLines(const db::BestConfig& best, const db::Candidate* chosen,
                         const std::string& shipped_file, LabelledLines& lines) {
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
                    !shipped_file.empty() ? absl::StrCat(", shipped in ", shipped_file)
                    : best.run_id         ? absl::StrCat(", run ", *best.run_id)
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

// `show --candidates` at a point only a shipped file has: what the file
// holds, and how to measure the candidates here. The tuner keeps every
// candidate in the store it tuned into; a shipped file carries the winner.
std::string NoShippedCandidates(const SkuConfigs& sku, const db::BestConfig& row,
                                const std::string& file) {
  const db::PointKey& p = row.point;
  return absl::StrCat(
      "shipped entry from ", file, ": ", row.config.key,
      absl::StrFormat(", %.2f us", row.median_us), " measured ",
      FormatUnixTime(row.updated_at), ", kernels ",
      DescribeKernelVersion(row.env.kernel_version),
      "\ncandidates are not shipped (a shipped file holds each point's chosen config only):\nrun "
      "`kerntune tune --ops=", p.op, " --dtypes=", p.dtype, " --rows=", p.rows, " --cols=",
      p.cols, p.inner > 1 ? absl::StrCat(" --inner=", p.inner) : "", "` on ",
      sku.gpu.sku.name, " to measure and record them in the local store\n");
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

// What `configs list` prints under its table: the rows per GPU and per
// origin, the stale ones, and why % of copy can pass 100.
class ListSummary {
 public:
  void Count(const SkuConfigs& sku, const std::string& short_name, const db::BestConfig& row,
             tuner::EntryOrigin origin) {
    ++rows_;
    auto gpu = std::find_if(gpus_.begin(), gpus_.end(),
                            [&](const GpuCount& g) { return g.name == sku.gpu.sku.name; });
    if (gpu == gpus_.end()) gpu = gpus_.insert(gpus_.end(), {sku.gpu.sku.name, short_name, 0});
    ++gpu->rows;
    ++(origin == tuner::EntryOrigin::kLocal ? local_ : shipped_);
    if (IsStale(row.env.kernel_version)) ++stale_;
    if (row.pct_of_copy > 100) {
      // GB/s x us = 1e3 bytes.
      const double mb = row.gbps * row.median_us * 1e3 / 1e6;
      smallest_over_mb_ = over_copy_ == 0 ? mb : std::min(smallest_over_mb_, mb);
      highest_pct_ = std::max(highest_pct_, row.pct_of_copy);
      ++over_copy_;
    }
  }

  // "816 configs: 816 shipped, 0 local; 0 stale", "GPUs: 474 on H100
  // (NVIDIA H100 80GB HBM3), 342 on H200 (NVIDIA H200)", then the note on
  // % of copy when a row passes 100.
  std::string Lines() const {
    std::vector<std::string> gpus;
    for (const GpuCount& g : gpus_) {
      gpus.push_back(absl::StrCat(g.rows, " on ", g.short_name, " (", g.name, ")"));
    }
    std::string lines = absl::StrCat(
        rows_, " configs: ", shipped_, " shipped, ", local_, " local; ", stale_, " stale",
        stale_ > 0 ? " (measured with another kernel library: never served)" : "",
        "\nGPUs: ", absl::StrJoin(gpus, ", "), "\n");
    if (over_copy_ > 0) {
      absl::StrAppend(
          &lines, "% COPY: GB/s over the tuning run's 1 GiB device-to-device copy "
                  "(cudaMemcpyAsync, bytes read + written).\n",
          over_copy_, " rows pass 100",
          absl::StrFormat(" (up to %.1f%%; the smallest moves %.0f MB): a streaming kernel can "
                          "move its bytes",
                          highest_pct_, smallest_over_mb_),
          "\nslightly faster than cudaMemcpyAsync's own copy, and the tuner times each problem "
          "over buffers rotated past L2.\n");
    }
    return lines;
  }

 private:
  struct GpuCount {
    std::string name;
    std::string short_name;
    size_t rows = 0;
  };
  std::vector<GpuCount> gpus_;
  size_t rows_ = 0, local_ = 0, shipped_ = 0, stale_ = 0, over_copy_ = 0;
  double smallest_over_mb_ = 0, highest_pct_ = 0;
};

}  // namespace

int RunConfigsList(const ConfigsListOptions& options, std::ostream& out,
                   std::ostream& err) {
  constexpr absl::string_view kVerb = "configs list";
  absl::StatusOr<PointFilter> filter = CheckFlags(options.filter);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  absl::StatusOr<Catalog> catalog = ReadCatalog(kVerb, options.db_path, options.configs_dir, err);
  if (!catalog.ok()) return ReportError(kVerb, catalog.status(), err);
  const std::vector<SkuConfigs>& skus = catalog->skus;

  std::vector<std::string> names;
  for (const SkuConfigs& sku : skus) names.push_back(sku.gpu.sku.name);
  Table table = BestConfigTable(options.wide);
  ListSummary summary;
  for (const SkuConfigs& sku : skus) {
    if (!Selects(filter->gpu, sku)) continue;
    const std::string short_name = ShortGpuName(sku.gpu.sku.name, names);
    for (const auto& [rows, origin] : {std::pair(&sku.local, tuner::EntryOrigin::kLocal),
                                       std::pair(&sku.shipped, tuner::EntryOrigin::kShipped)}) {
      for (const db::BestConfig& best : *rows) {
        if (!RowMatches(*filter, best)) continue;
        AddBestConfigRow(sku, best, origin, table, options.wide, short_name);
        summary.Count(sku, short_name, best, origin);
      }
    }
  }
  if (table.rows().empty() && options.format == OutputFormat::kTable) {
    const bool filtered = !filter->gpu.empty() || filter->op || filter->dtype ||
                          filter->rows || filter->cols || filter->inner;
    out << (filtered ? "no tuned configs match the filters in " : "no tuned configs in ")
        << catalog->store.Describe()
        << (options.configs_dir.empty() ? "" : absl::StrCat(" or in ", options.configs_dir))
        << "\n";
    return kExitOk;
  }
  Render(table, options.format, out);
  if (options.format == OutputFormat::kTable) out << summary.Lines();
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
  absl::StatusOr<Catalog> catalog = ReadCatalog(kVerb, options.db_path, options.configs_dir, err);
  if (!catalog.ok()) return ReportError(kVerb, catalog.status(), err);
  const std::vector<SkuConfigs>& skus = catalog->skus;

  const std::string described =
      db::DescribePoint(point.op, point.dtype, point.rows, point.cols, point.inner);
  absl::StatusOr<const SkuConfigs*> chosen = ChooseSku(
      skus, filter->gpu, point, described,
      catalog->where);
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
        catalog->store.store->ListCandidates(local->point, std::nullopt);
    if (!listed.ok()) return ReportError(kVerb, listed.status(), err);
    candidates = *std::move(listed);
  }

  // The shipped files' entry at the point, served or not, and its file.
  const db::BestConfig* shipped_row = RowAt(sku.shipped, point);
  const std::string shipped_file =
      shipped_row != nullptr ? sku.shipped_from[shipped_row - sku.shipped.data()] : "";

  Table local_table = BestConfigTable();
  if (local != nullptr) AddBestConfigRow(sku, *local, tuner::EntryOrigin::kLocal, local_table);
  Table shipped_table = BestConfigTable();
  if (shipped_row != nullptr) {
    AddBestConfigRow(sku, *shipped_row, tuner::EntryOrigin::kShipped, shipped_table);
  }
  const Table candidate_table =
      CandidateTable(local != nullptr ? *local : db::BestConfig(), candidates);
  const Table lookup_table = LookupTable(sku, point, *choice);
  switch (options.format) {
    case OutputFormat::kTable: {
      LabelledLines lines = LookupLines(sku, point, *choice);
      const bool local_served = choice->source == tuner::ConfigSource::kTuned;
      const bool shipped_served =
          choice->source == tuner::ConfigSource::kShipped && shipped_row != nullptr;
      if (local_served) {
        AddMeasurementLines(*local, ChosenCandidate(*local, candidates), "", lines);
      } else if (shipped_served) {
        AddMeasurementLines(*shipped_row, nullptr, shipped_file, lines);
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
        if (candidates.empty() && shipped_row != nullptr) {
          out << NoShippedCandidates(sku, *shipped_row, shipped_file);
        } else if (candidates.empty()) {
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
          << ",\n\"best\": " << (local != nullptr ? RowToJson(local_table, 0) : "null")
          << ",\n\"shipped\": "
          << (shipped_row != nullptr ? RowToJson(shipped_table, 0) : "null")
          << ",\n\"shipped_file\": "
          << (shipped_row != nullptr ? JsonQuote(shipped_file) : "null");
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

// The SKU `configs export` writes: the store's one GPU that --gpu selects
// (or its only GPU without --gpu); when the store has none that matches, the
// one shipped files' SKU that does. NotFound when none matches,
// InvalidArgument listing the choices when several do.
absl::StatusOr<const SkuConfigs*> ExportedSku(const std::vector<SkuConfigs>& skus,
                                              const GpuSelector& selector,
                                              const std::string& where) {
  std::vector<const SkuConfigs*> matched;
  for (const SkuConfigs& sku : skus) {
    if (Selects(selector, sku)) matched.push_back(&sku);
  }
  // The store's GPUs first: what this node tuned (an H100 whose memory
  // differs a little from the shipped file's is another SKU, and
  // `--gpu=h100` means this one).
  std::vector<const SkuConfigs*> in_store;
  for (const SkuConfigs* sku : matched) {
    if (sku->in_store) in_store.push_back(sku);
  }
  if (!in_store.empty()) matched = in_store;
  if (matched.empty()) {
    return absl::NotFoundError(
        selector.empty()
            ? absl::StrCat("nothing to export: ", where,
                           " (run `kerntune tune` on a GPU, or pass --db)")
            : absl::StrCat(selector.ToString(), " matches no GPU in ", where,
                           " (`kerntune gpus` lists the store's, `kerntune configs list` "
                           "every SKU)"));
  }
  if (matched.size() > 1) {
    std::vector<std::string> choices;
    for (const SkuConfigs* sku : matched) choices.push_back(GpuChoice(*sku));
    return absl::InvalidArgumentError(absl::StrCat(
        selector.empty() ? absl::StrCat(where, " holds ", matched.size(), " GPUs")
                         : absl::StrCat(selector.ToString(), " matches ", matched.size(),
                                        " GPUs"),
        "; choose one with --gpu:\n  ", absl::StrJoin(choices, "\n  ")));
  }
  return matched.front();
}

// "474 from deploy/configs/h100.json" per shipped file and "36 from the
// store PATH", for export's report.
std::string DescribeSources(size_t local, const StoreForReading& store,
                            const std::vector<std::pair<std::string, size_t>>& shipped) {
  std::vector<std::string> parts;
  if (local > 0 || shipped.empty()) {
    parts.push_back(absl::StrCat(local, " from the store ", store.Describe()));
  }
  for (const auto& [file, count] : shipped) {
    parts.push_back(absl::StrCat(count, " from the shipped file ", file));
  }
  return absl::StrJoin(parts, ", ");
}

int RunConfigsExport(const ConfigsExportOptions& options, std::ostream& out,
                     std::ostream& err) {
  constexpr absl::string_view kVerb = "configs export";
  absl::StatusOr<PointFilter> filter = CheckFlags(options.filter);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  absl::StatusOr<Catalog> catalog = ReadCatalog(kVerb, options.db_path, options.configs_dir, err);
  if (!catalog.ok()) return ReportError(kVerb, catalog.status(), err);
  const std::vector<SkuConfigs>& skus = catalog->skus;
  absl::StatusOr<const SkuConfigs*> chosen = ExportedSku(
      skus, filter->gpu,
      catalog->where);
  if (!chosen.ok()) {
    return ReportError(kVerb, chosen.status(), err,
                       absl::IsInvalidArgument(chosen.status()) ? kExitUsage : kExitFailure);
  }
  const SkuConfigs& sku = **chosen;

  // Every point of the store and of the shipped files, each with the row
  // the daemon serves there: what this node serves, as one file.
  std::vector<db::PointKey> points;
  for (const db::BestConfig& row : sku.local) {
    if (RowMatches(*filter, row)) points.push_back(row.point);
  }
  for (const db::BestConfig& row : sku.shipped) {
    if (RowMatches(*filter, row) && RowAt(sku.local, row.point) == nullptr) {
      points.push_back(row.point);
    }
  }
  std::sort(points.begin(), points.end(), [](const db::PointKey& a, const db::PointKey& b) {
    return std::tie(a.op, a.dtype, a.rows, a.cols, a.inner) <
           std::tie(b.op, b.dtype, b.rows, b.cols, b.inner);
  });
  std::vector<db::BestConfig> rows;
  size_t local = 0;
  std::vector<std::pair<std::string, size_t>> from_files;
  for (const db::PointKey& point : points) {
    tuner::EntryOrigin origin = tuner::EntryOrigin::kLocal;
    const db::BestConfig* row = sku.ServedRow(point, origin);
    rows.push_back(*row);
    if (origin == tuner::EntryOrigin::kLocal) {
      ++local;
      continue;
    }
    const std::string& file = sku.shipped_from[row - sku.shipped.data()];
    auto counted = std::find_if(from_files.begin(), from_files.end(),
                                [&](const auto& entry) { return entry.first == file; });
    if (counted == from_files.end()) {
      from_files.push_back({file, 1});
    } else {
      ++counted->second;
    }
  }
  absl::StatusOr<kerntune::v1::TunedConfigFile> file =
      proto::MakeConfigFile(sku.gpu.sku, rows, options.now);
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
  err << "exported " << rows.size() << " tuned configs of " << SkuDescription(sku.gpu.sku)
      << ": " << DescribeSources(local, catalog->store, from_files)
      << (local > 0 && !from_files.empty()
              ? " (at each point the entry the daemon serves: the store's, else the shipped "
                "one)"
              : "")
      << "\n";
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
