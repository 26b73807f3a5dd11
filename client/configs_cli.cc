// `kerntune configs list|show|export|import`.
#include "client/configs_cli.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli_common.h"
#include "db/records.h"
#include "db/tuning_store.h"
#include "proto/config_file.h"

namespace kt::client {
namespace {

// The columns of a best config, shared by list, show and their scripts'
// output. `gpu` names the row's GPU.
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
      {"driver_version", "DRIVER", Visibility::kScriptsOnly},
      {"runtime_version", "RUNTIME", Visibility::kScriptsOnly},
      {"run_id", "RUN", Visibility::kScriptsOnly},
      {"updated_at", "UPDATED", Visibility::kScriptsOnly},
  });
}

void AddBestConfigRow(const db::BestConfig& best, const std::string& gpu_name,
                      Table& table) {
  const std::optional<double> speedup = best.Speedup();
  Cell speedup_cell = Cell::OptionalReal(speedup, 2);
  if (speedup) speedup_cell.ShowAs(absl::StrFormat("%.2fx", *speedup));
  table.AddRow({
      Cell::Int(best.point.gpu_id),
      Cell::Text(gpu_name),
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
      Cell::Int(best.env.driver_version),
      Cell::Int(best.env.runtime_version),
      best.run_id ? Cell::Int(*best.run_id) : Cell::Null(),
      Cell::Int(best.updated_at).ShowAs(FormatUnixTime(best.updated_at)),
  });
}

// Names of the store's GPUs by id, for the gpu_name column.
absl::StatusOr<std::map<int64_t, std::string>> GpuNames(db::TuningStore& store) {
  absl::StatusOr<std::vector<db::GpuSummary>> gpus = store.ListGpus();
  if (!gpus.ok()) return gpus.status();
  std::map<int64_t, std::string> names;
  for (const db::GpuSummary& summary : *gpus) {
    names[summary.gpu.id] = summary.gpu.sku.name;
  }
  return names;
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

// The chosen config of one point as a block of "label  value" lines.
void WriteBestConfigText(const db::BestConfig& best, const db::Gpu& gpu,
                         std::ostream& out) {
  std::vector<std::pair<std::string, std::string>> lines;
  lines.push_back({"gpu", absl::StrCat(gpu.id, ": ", SkuDescription(gpu.sku))});
  lines.push_back({"point", db::DescribePoint(best.point.op, best.point.dtype, best.point.rows,
                                          best.point.cols, best.point.inner)});
  if (best.point.inner > 1) {
    lines.push_back({"inner", absl::StrCat(best.point.inner, " (reduced along the middle axis of (",
                                           best.point.rows, ", ", best.point.cols, ", ",
                                           best.point.inner, "))")});
  }
  lines.push_back({"config", best.config.key});
  lines.push_back({"split", best.config.split == 1
                                ? std::string("1 (one block per row)")
                                : absl::StrCat(best.config.split,
                                               " blocks share each row (a thread-block cluster)")});
  std::string time = absl::StrFormat("%.2f us", best.median_us);
  if (best.spread_low_us && best.spread_high_us) {
    absl::StrAppend(&time, absl::StrFormat(" (spread %.2f .. %.2f us)",
                                           *best.spread_low_us,
                                           *best.spread_high_us));
  }
  if (best.graph_replay) absl::StrAppend(&time, ", timed under CUDA-graph replay");
  lines.push_back({"time", time});
  lines.push_back({"bandwidth", absl::StrFormat("%.1f GB/s, %.1f%% of copy",
                                                best.gbps, best.pct_of_copy)});
  std::string heuristic =
      best.heuristic_key.empty() ? "unknown" : best.heuristic_key;
  if (best.heuristic_us) {
    absl::StrAppend(&heuristic, absl::StrFormat(", %.2f us", *best.heuristic_us));
  } else {
    absl::StrAppend(&heuristic, ", not timed");
  }
  lines.push_back({"heuristic", heuristic});
  if (const std::optional<double> speedup = best.Speedup()) {
    lines.push_back(
        {"speedup", absl::StrFormat("%.2fx over the heuristic", *speedup)});
  }
  lines.push_back(
      {"measured",
       absl::StrCat(FormatUnixTime(best.updated_at),
                    best.run_id ? absl::StrCat(", run ", *best.run_id)
                                : std::string(", imported"),
                    "; kernels ", DescribeKernelVersion(best.env.kernel_version),
                    ", driver ", FormatCudaVersion(best.env.driver_version),
                    ", runtime ", FormatCudaVersion(best.env.runtime_version))});
  size_t width = 0;
  for (const auto& line : lines) width = std::max(width, line.first.size());
  for (const auto& [label, value] : lines) {
    out << label << std::string(width - label.size() + 2, ' ') << value << "\n";
  }
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

}  // namespace

int RunConfigsList(const ConfigsListOptions& options, std::ostream& out,
                   std::ostream& err) {
  constexpr absl::string_view kVerb = "configs list";
  absl::StatusOr<PointFilter> filter = CheckFlags(options.filter);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
      OpenStore(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  absl::StatusOr<std::map<int64_t, std::string>> names = GpuNames(**store);
  if (!names.ok()) return ReportError(kVerb, names.status(), err);
  absl::StatusOr<std::vector<db::BestConfig>> rows =
      (*store)->ListBestConfigs(ToStoreFilter(*filter));
  if (!rows.ok()) return ReportError(kVerb, rows.status(), err);

  if (rows->empty() && options.format == OutputFormat::kTable) {
    const bool filtered = !filter->gpu.empty() || filter->op || filter->dtype ||
                          filter->rows || filter->cols || filter->inner;
    out << (filtered ? "no tuned configs match the filters in "
                     : "no tuned configs in ")
        << (*store)->path() << "\n";
    return kExitOk;
  }
  Table table = BestConfigTable();
  for (const db::BestConfig& best : *rows) {
    AddBestConfigRow(best, (*names)[best.point.gpu_id], table);
  }
  Render(table, options.format, out);
  return kExitOk;
}

int RunConfigsShow(const ConfigsShowOptions& options, std::ostream& out,
                   std::ostream& err) {
  constexpr absl::string_view kVerb = "configs show";
  const PointFlags& point = options.point;
  std::vector<std::string> missing;
  if (!point.op) missing.push_back("--op");
  if (!point.dtype) missing.push_back("--dtype");
  if (!point.rows) missing.push_back("--rows");
  if (!point.cols) missing.push_back("--cols");
  if (!missing.empty()) {
    return ReportError(
        kVerb,
        absl::InvalidArgumentError(absl::StrCat(
            "missing ", absl::StrJoin(missing, ", "),
            ": show needs one point (--op --dtype --rows --cols)")),
        err, kExitUsage);
  }
  absl::StatusOr<PointFilter> filter = CheckFlags(point);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  // A point: without --inner, the last-axis one.
  if (!filter->inner) filter->inner = 1;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
      OpenStore(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  absl::StatusOr<std::vector<db::BestConfig>> rows =
      (*store)->ListBestConfigs(ToStoreFilter(*filter));
  if (!rows.ok()) return ReportError(kVerb, rows.status(), err);

  const std::string described = db::DescribePoint(*filter->op, *filter->dtype, *filter->rows,
                                              *filter->cols, *filter->inner);
  if (rows->empty()) {
    return ReportError(
        kVerb,
        absl::NotFoundError(absl::StrCat(
            "no tuned config for ", described,
            filter->gpu.empty() ? "" : absl::StrCat(" on ", filter->gpu.ToString()),
            " in ", (*store)->path(), " (`kerntune configs list` shows what is there)")),
        err);
  }
  if (rows->size() > 1) {
    std::vector<std::string> choices;
    for (const db::BestConfig& row : *rows) {
      absl::StatusOr<db::Gpu> gpu = (*store)->GetGpu(row.point.gpu_id);
      choices.push_back(absl::StrCat(
          "--gpu=", row.point.gpu_id, " ",
          gpu.ok() ? SkuDescription(gpu->sku) : std::string()));
    }
    return ReportError(
        kVerb,
        absl::InvalidArgumentError(absl::StrCat(
            described, " is tuned on ", rows->size(),
            " GPUs; choose one with --gpu:\n  ", absl::StrJoin(choices, "\n  "))),
        err, kExitUsage);
  }
  const db::BestConfig& best = rows->front();
  absl::StatusOr<db::Gpu> gpu = (*store)->GetGpu(best.point.gpu_id);
  if (!gpu.ok()) return ReportError(kVerb, gpu.status(), err);
  std::vector<db::Candidate> candidates;
  if (options.candidates) {
    absl::StatusOr<std::vector<db::Candidate>> listed =
        (*store)->ListCandidates(best.point, std::nullopt);
    if (!listed.ok()) return ReportError(kVerb, listed.status(), err);
    candidates = *std::move(listed);
  }

  Table best_table = BestConfigTable();
  AddBestConfigRow(best, gpu->sku.name, best_table);
  const Table candidate_table = CandidateTable(best, candidates);
  switch (options.format) {
    case OutputFormat::kTable:
      WriteBestConfigText(best, *gpu, out);
      if (options.candidates) {
        out << "\n";
        if (candidates.empty()) {
          out << "no candidates recorded for this point (imported from a "
                 "file, or measured in another store)\n";
        } else {
          out << "candidates: " << candidates.size()
              << ", fastest first, unmeasured last; * = chosen\n";
          Render(candidate_table, OutputFormat::kTable, out);
        }
      }
      break;
    case OutputFormat::kJson:
      out << "{\"best\": " << RowToJson(best_table, 0);
      if (options.candidates) {
        out << ",\n\"candidates\": " << TableToJson(candidate_table);
      }
      out << "}\n";
      break;
    case OutputFormat::kCsv:
      Render(options.candidates ? candidate_table : best_table,
             OutputFormat::kCsv, out);
      break;
  }
  return kExitOk;
}

int RunConfigsExport(const ConfigsExportOptions& options, std::ostream& out,
                     std::ostream& err) {
  constexpr absl::string_view kVerb = "configs export";
  absl::StatusOr<PointFilter> filter = CheckFlags(options.filter);
  if (!filter.ok()) return ReportError(kVerb, filter.status(), err, kExitUsage);
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store =
      OpenStore(options.db_path);
  if (!store.ok()) return ReportError(kVerb, store.status(), err);
  absl::StatusOr<db::Gpu> gpu = SelectOneGpu(**store, filter->gpu);
  if (!gpu.ok()) {
    return ReportError(kVerb, gpu.status(), err,
                       absl::IsInvalidArgument(gpu.status()) ? kExitUsage
                                                             : kExitFailure);
  }
  PointFilter one_gpu = *filter;
  one_gpu.gpu = GpuSelector{gpu->id, std::nullopt};
  absl::StatusOr<std::vector<db::BestConfig>> rows =
      (*store)->ListBestConfigs(ToStoreFilter(one_gpu));
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

  switch (options.format) {
    case OutputFormat::kTable:
      out << "imported " << parsed->valid.size() << " of " << parsed->entries
          << " tuned configs of " << SkuDescription(parsed->sku) << " into "
          << (*store)->path();
      if (!parsed->skipped.empty()) {
        out << "; skipped " << parsed->skipped.size() << " (reasons on stderr)";
      }
      out << "\n";
      break;
    case OutputFormat::kJson: {
      Table skipped({{"index", "INDEX"}, {"reason", "REASON"}});
      for (const proto::SkippedEntry& entry : parsed->skipped) {
        skipped.AddRow({Cell::Int(static_cast<int64_t>(entry.index)),
                        Cell::Text(entry.reason)});
      }
      out << "{\"file\": " << JsonQuote(options.file)
          << ", \"db\": " << JsonQuote((*store)->path())
          << ", \"gpu\": " << JsonQuote(parsed->sku.name)
          << ", \"entries\": " << parsed->entries
          << ", \"imported\": " << parsed->valid.size()
          << ",\n\"skipped\": " << TableToJson(skipped) << "}\n";
      break;
    }
    case OutputFormat::kCsv: {
      Table skipped({{"index", "INDEX"}, {"reason", "REASON"}});
      for (const proto::SkippedEntry& entry : parsed->skipped) {
        skipped.AddRow({Cell::Int(static_cast<int64_t>(entry.index)),
                        Cell::Text(entry.reason)});
      }
      Render(skipped, OutputFormat::kCsv, out);
      break;
    }
  }
  return parsed->skipped.empty() ? kExitOk : kExitFailure;
}

}  // namespace kt::client
