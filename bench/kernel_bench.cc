// kt_kernel_bench: the standard grid of shared/PERF.md (every op in the
// groups of its kind, tuner/grid.h: the attention group's masked softmax,
// the axis group's middle-axis softmax and, with --groups=llm_norm, the
// fused add / quant norms and per-head RMSNorm included) with the heuristic config
// (and, for --sweep-dtypes, every enumerated config), on the GPU.
// --configs times given configs beside it wherever they are valid.
// Every timed variant is first checked against the fp64 reference; figures
// are GB/s of the minimum bytes moved and % of the measured copy roofline.
// Every point is timed two ways, as bench/torch_bench.py times the PyTorch
// peers: events around each launch, and replays of one CUDA graph of
// launches (the comparison's basis: host overhead never counts), each beside
// a copy of the same bytes timed the same way ("copy-same").
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "db/tuning_store.h"
#include "kernels/device_info.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "tuner/gpu_backend.h"
#include "tuner/grid.h"

ABSL_FLAG(std::string, out, "", "write results as JSON to this file");
ABSL_FLAG(std::string, groups, "main,few_rows,attention,axis,llm",
          "grid groups to run (tuner/grid.h: each op runs in the groups of its kind; "
          "llm_norm: the LLM norm ops)");
ABSL_FLAG(std::string, ops, "", "ops to run (comma list; default every op)");
ABSL_FLAG(std::string, dtypes, "float32,float16,bfloat16", "dtypes to run");
ABSL_FLAG(std::vector<std::string>, rows, {},
          "keep only the grid points with these row counts (comma list; as torch_bench.py --rows)");
ABSL_FLAG(std::vector<std::string>, cols, {},
          "keep only the grid points with these column counts (comma list)");
ABSL_FLAG(bool, causal, false,
          "scaled_masked_softmax points: add the causal mask to the additive (s, s) one (as "
          "torch_bench.py --causal)");
ABSL_FLAG(std::string, sweep_dtypes, "",
          "also time every enumerated config of the main group for these dtypes");
ABSL_FLAG(int, reps, 50, "timed repetitions per variant (median reported)");
ABSL_FLAG(int, sweep_reps, 15, "timed repetitions per config in the sweep");
ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, commit, "", "commit id to record in the results");
ABSL_FLAG(std::string, db, "",
          "tuning store: also time each point's tuned config for this GPU beside the heuristic");
ABSL_FLAG(std::vector<std::string>, configs, {},
          "also time these configs (ConfigKey strings, comma list, e.g. "
          "split_row/b512/p8/g32/r1/w0/s4) at every point where they are valid, the same way "
          "as the heuristic");

namespace kt::bench {
namespace {

using kernels::DType;
using kernels::LaunchConfig;
using kernels::Op;

struct Options {
  std::string out;
  std::vector<std::string> groups;
  std::vector<Op> ops;
  std::vector<DType> dtypes;
  std::vector<DType> sweep_dtypes;
  std::vector<int64_t> rows, cols;  // filters; empty keeps every point
  bool causal = false;
  int reps = 50;
  int sweep_reps = 15;
  int device = 0;
  std::string commit;
  std::string db_path;
  std::vector<LaunchConfig> configs;  // --configs: timed where valid
};

// The key of a point in the map of tuned configs.
std::string TunedKey(absl::string_view op, absl::string_view dtype, int64_t rows, int64_t cols,
                     int64_t inner) {
  return absl::StrCat(op, " ", dtype, " ", rows, " ", cols, " ", inner);
}

// Tuned configs of this GPU from the store, by TunedKey.
absl::StatusOr<std::map<std::string, LaunchConfig>> LoadTunedConfigs(
    const std::string& path, const kernels::DeviceInfo& device) {
  std::map<std::string, LaunchConfig> tuned;
  if (path.empty()) return tuned;
  db::OpenOptions open;
  open.read_only = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(path, open);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::vector<db::BestConfig>> rows = (*store)->BestConfigsForSku(tuner::SkuOf(device));
  if (!rows.ok()) return rows.status();
  for (const db::BestConfig& row : *rows) {
    absl::StatusOr<LaunchConfig> config = kernels::ParseLaunchConfig(row.config.key);
    if (!config.ok()) return config.status();
    tuned[TunedKey(row.point.op, row.point.dtype, row.point.rows, row.point.cols,
                   row.point.inner)] = *config;
  }
  return tuned;
}

// The tuner's figure: minimum bytes (the mask, ReduceScale's scales and the
// norms' weights included: tuner::PointBytes) over time.
double Gbps(const tuner::GridPoint& p, double us) {
  return static_cast<double>(tuner::PointBytes(p)) / (us * 1e3);
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.4f", v) : "null";
}

std::string PointJson(const tuner::GridPoint& p) {
  return absl::StrCat("\"group\":", JsonString(p.group), ",\"op\":",
                      JsonString(kernels::OpName(p.op)), ",\"dtype\":",
                      JsonString(kernels::DTypeName(p.dtype)), ",\"rows\":", p.shape.rows,
                      ",\"cols\":", p.shape.cols, ",\"inner\":", p.shape.inner,
                      ",\"mask\":", p.with_mask ? "true" : "false", ",\"causal\":",
                      p.causal ? "true" : "false", ",\"mask_rows\":", p.mask_rows,
                      // The quantization and row layout, as PointName shows them
                      // ("" for the plain ops).
                      ",\"variant\":", JsonString(absl::StripLeadingAsciiWhitespace(
                                            tuner::PointVariant(p))),
                      ",\"bytes\":", tuner::PointBytes(p));
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

absl::Status Run(const Options& o) {
  absl::StatusOr<std::unique_ptr<tuner::GpuBackend>> backend = tuner::GpuBackend::Create(o.device);
  if (!backend.ok()) return backend.status();
  const kernels::DeviceInfo& device = (*backend)->device();
  absl::StatusOr<double> copy_gbps = (*backend)->MeasureCopyGbps();
  if (!copy_gbps.ok()) return copy_gbps.status();
  std::printf("%s, %d SMs; copy roofline %.0f GB/s (1 GiB D2D, read + write)\n",
              device.name.c_str(), device.sm_count, *copy_gbps);
  absl::StatusOr<std::vector<tuner::GridPoint>> grid =
      tuner::StandardGrid(o.groups, o.ops, o.dtypes);
  if (!grid.ok()) return grid.status();
  auto filtered_out = [](const std::vector<int64_t>& keep, int64_t value) {
    return !keep.empty() && std::find(keep.begin(), keep.end(), value) == keep.end();
  };
  grid->erase(std::remove_if(grid->begin(), grid->end(),
                             [&](const tuner::GridPoint& p) {
                               return filtered_out(o.rows, p.shape.rows) ||
                                      filtered_out(o.cols, p.shape.cols);
                             }),
              grid->end());
  if (grid->empty()) {
    return absl::InvalidArgumentError("no point of the chosen groups and ops has those --rows/--cols");
  }
  if (o.causal) {
    for (tuner::GridPoint& p : *grid) p.causal = p.op == Op::kScaledMaskedSoftmax;
  }
  absl::StatusOr<std::map<std::string, LaunchConfig>> tuned = LoadTunedConfigs(o.db_path, device);
  if (!tuned.ok()) return tuned.status();
  if (!o.db_path.empty()) std::printf("%zu tuned configs for this GPU\n", tuned->size());

  tuner::MeasureOptions timing;
  timing.repetitions = o.reps;
  tuner::MeasureOptions graph_timing = timing;
  graph_timing.graph_replay = true;
  tuner::MeasureOptions sweep_timing = timing;
  sweep_timing.repetitions = o.sweep_reps;

  std::vector<std::string> results, sweeps;
  int failures = 0;
  for (const tuner::GridPoint& p : *grid) {
    const kernels::RowPlacement rows = kernels::PlacementOf(tuner::ParamsOf(p), p.shape);
    absl::StatusOr<LaunchConfig> config =
        kernels::HeuristicConfig(p.op, p.dtype, p.shape, device, 16, rows);
    if (!config.ok()) {
      // A point no kernel serves (yet): recorded as a failure, the run goes on.
      ++failures;
      results.push_back(absl::StrCat("{", PointJson(p), ",\"config\":null,\"passed\":false,",
                                     "\"detail\":", JsonString(config.status().ToString()),
                                     ",\"median_us\":null,\"gbps\":null,\"tuned\":null}"));
      std::printf("%-9s %-21s %-8s %s  NO CONFIG: %s\n", p.group.c_str(),
                  kernels::OpName(p.op).data(), kernels::DTypeName(p.dtype).data(),
                  tuner::PointName(p).c_str(), config.status().ToString().c_str());
      std::fflush(stdout);
      continue;
    }
    absl::StatusOr<std::unique_ptr<tuner::PointMeasurer>> measurer = (*backend)->Prepare(p);
    if (!measurer.ok()) return measurer.status();
    absl::StatusOr<tuner::CandidateMeasurement> m = (*measurer)->Measure(*config, timing);
    if (!m.ok()) return m.status();
    // Under graph replay too, with fewer replays for long launches.
    std::optional<tuner::CandidateMeasurement> graph;
    tuner::MeasureOptions point_graph_timing = graph_timing;
    if (m->timing) {
      point_graph_timing.repetitions = tuner::GraphRepetitions(o.reps, m->timing->median_us);
      absl::StatusOr<tuner::CandidateMeasurement> g =
          (*measurer)->Measure(*config, point_graph_timing);
      if (!g.ok()) return g.status();
      graph = *g;
    }
    const bool passed = m->correct && m->timing.has_value();
    if (!passed) ++failures;
    const double gbps = passed ? Gbps(p, m->timing->median_us) : NAN;
    const bool has_graph = graph && graph->timing;
    const double graph_gbps = has_graph ? Gbps(p, graph->timing->median_us) : NAN;
    // The tuned config, timed the same way in the same run.
    std::string tuned_json = "null";
    double tuned_gbps = NAN;
    const auto found = tuned->find(TunedKey(kernels::OpName(p.op), kernels::DTypeName(p.dtype),
                                            p.shape.rows, p.shape.cols, p.shape.inner));
    if (found != tuned->end()) {
      absl::StatusOr<tuner::CandidateMeasurement> t =
          (*measurer)->Measure(found->second, has_graph ? point_graph_timing : timing);
      if (!t.ok()) return t.status();
      const bool ok = t->correct && t->timing.has_value();
      if (!ok) ++failures;
      tuned_gbps = ok ? Gbps(p, t->timing->median_us) : NAN;
      tuned_json = absl::StrCat("{\"config\":", JsonString(kernels::ConfigKey(found->second)),
                                ",\"passed\":", ok ? "true" : "false", ",\"median_us\":",
                                JsonNumber(ok ? t->timing->median_us : NAN),
                                ",\"graph_replay\":", has_graph ? "true" : "false",
                                ",\"gbps\":", JsonNumber(tuned_gbps), "}");
    }
    // The copy of the same bytes, timed the same way, is the ceiling a
    // point can be held to (for launch-bound points PERF.md's 1 GiB copy
    // is not).
    double copy_same_gbps = NAN;
    if (has_graph) {
      absl::StatusOr<tuner::TimingStats> copy = (*measurer)->TimeInputCopy(point_graph_timing);
      if (!copy.ok()) return copy.status();
      copy_same_gbps = 2.0 * static_cast<double>(p.shape.elements() *
                                                 kernels::DTypeSize(p.dtype)) /
                       (copy->median_us * 1e3);
    }
    // The configs named on the command line, timed as the tuned one; their
    // lines print under the point's.
    std::vector<std::string> forced_json, forced_lines;
    for (const LaunchConfig& c : o.configs) {
      const std::string key = kernels::ConfigKey(c);
      if (absl::Status valid = kernels::ValidateConfig(p.op, p.dtype, p.shape, c, device);
          !valid.ok()) {
        forced_lines.push_back(absl::StrCat("  ", key, " not valid here: ", valid.ToString()));
        continue;
      }
      absl::StatusOr<tuner::CandidateMeasurement> f =
          (*measurer)->Measure(c, has_graph ? point_graph_timing : timing);
      if (!f.ok()) return f.status();
      const bool ok = f->correct && f->timing.has_value();
      if (!ok) ++failures;
      const double forced_gbps = ok ? Gbps(p, f->timing->median_us) : NAN;
      forced_json.push_back(absl::StrCat(
          "{\"config\":", JsonString(key), ",\"passed\":", ok ? "true" : "false",
          ",\"detail\":", JsonString(f->message), ",\"occupancy\":", f->occupancy,
          ",\"median_us\":", JsonNumber(ok ? f->timing->median_us : NAN),
          ",\"graph_replay\":", has_graph ? "true" : "false",
          ",\"gbps\":", JsonNumber(forced_gbps), "}"));
      forced_lines.push_back(absl::StrFormat(
          "  %-27s %6.0f GB/s %5.1f%% of copy-same, occupancy %d%s", key, forced_gbps,
          100 * forced_gbps / copy_same_gbps, f->occupancy, ok ? "" : "  WRONG"));
    }
    results.push_back(absl::StrCat(
        "{", PointJson(p), ",\"config\":", JsonString(kernels::ConfigKey(*config)),
        ",\"passed\":", passed ? "true" : "false", ",\"detail\":", JsonString(m->message),
        ",\"median_us\":", JsonNumber(passed ? m->timing->median_us : NAN),
        ",\"p10_us\":", JsonNumber(passed ? m->timing->p10_us : NAN),
        ",\"p90_us\":", JsonNumber(passed ? m->timing->p90_us : NAN),
        ",\"graph_median_us\":", has_graph ? JsonNumber(graph->timing->median_us) : "null",
        ",\"gbps\":", JsonNumber(gbps), ",\"graph_gbps\":", JsonNumber(graph_gbps),
        ",\"pct_copy\":", JsonNumber(100 * gbps / *copy_gbps),
        ",\"copy_same_bytes_graph_gbps\":", JsonNumber(copy_same_gbps), ",\"tuned\":", tuned_json,
        ",\"forced\":[", absl::StrJoin(forced_json, ","), "]}"));
    std::printf("%s\n", absl::StrFormat("%-9s %-21s %-8s %7d %6d %6d  %-27s %6.0f %5.1f%% %6s%s%s%s%s",
                                        p.group, kernels::OpName(p.op),
                                        kernels::DTypeName(p.dtype), p.shape.rows, p.shape.cols,
                                        p.shape.inner,
                                        kernels::ConfigKey(*config), gbps,
                                        100 * gbps / *copy_gbps,
                                        has_graph ? absl::StrFormat("%.0f", graph_gbps) : "-",
                                        std::isnan(tuned_gbps)
                                            ? std::string()
                                            : absl::StrFormat("  tuned %.0f", tuned_gbps),
                                        std::isnan(copy_same_gbps)
                                            ? std::string()
                                            : absl::StrFormat("  copy-same %.0f", copy_same_gbps),
                                        passed ? "" : "  WRONG", tuner::PointVariant(p))
                            .c_str());
    for (const std::string& line : forced_lines) std::printf("%s\n", line.c_str());
    std::fflush(stdout);

    const bool sweep = p.group == "main" &&
                       std::find(o.sweep_dtypes.begin(), o.sweep_dtypes.end(), p.dtype) !=
                           o.sweep_dtypes.end();
    if (!sweep) continue;
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        kernels::EnumerateConfigs(p.op, p.dtype, p.shape, device, rows);
    if (!configs.ok()) return configs.status();
    std::vector<std::string> entries;
    std::string best_key;
    double best_us = INFINITY;
    int wrong = 0;
    for (const LaunchConfig& c : *configs) {
      absl::StatusOr<tuner::CandidateMeasurement> cm = (*measurer)->Measure(c, sweep_timing);
      if (!cm.ok()) return cm.status();
      if (!cm->correct || !cm->timing) {
        ++wrong;
        continue;
      }
      entries.push_back(absl::StrCat("[", JsonString(kernels::ConfigKey(c)), ",",
                                     JsonNumber(cm->timing->median_us), "]"));
      if (cm->timing->median_us < best_us) {
        best_us = cm->timing->median_us;
        best_key = kernels::ConfigKey(c);
      }
    }
    failures += wrong;
    sweeps.push_back(absl::StrCat("{", PointJson(p), ",\"heuristic\":",
                                  JsonString(kernels::ConfigKey(*config)), ",\"best\":",
                                  JsonString(best_key), ",\"best_us\":", JsonNumber(best_us),
                                  ",\"wrong\":", wrong, ",\"configs\":[",
                                  absl::StrJoin(entries, ","), "]}"));
    std::printf("  sweep: %zu configs, best %s %.0f GB/s (heuristic %.0f GB/s), %d wrong\n",
                configs->size(), best_key.c_str(), Gbps(p, best_us), gbps, wrong);
    std::fflush(stdout);
  }

  if (!o.out.empty()) {
    std::ofstream out(o.out);
    out << "{\"tool\":\"kt_kernel_bench\",\"gpu\":" << JsonString(device.name)
        << ",\"sm_count\":" << device.sm_count << ",\"date\":" << JsonString(UtcNow())
        << ",\"commit\":" << JsonString(o.commit)
        // All device work on one stream (tuner/measure.h), as torch_bench.py does.
        << ",\"streams\":\"one\""
        << ",\"copy_gbps\":" << JsonNumber(*copy_gbps)
        << ",\"results\":[\n" << absl::StrJoin(results, ",\n") << "\n],\"sweep\":[\n"
        << absl::StrJoin(sweeps, ",\n") << "\n]}\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", o.out));
  }
  if (failures > 0) {
    return absl::InternalError(absl::StrCat(failures, " variants failed the reference check"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kt::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kernel benchmark on the standard grid (needs a GPU)");
  absl::ParseCommandLine(argc, argv);
  kt::bench::Options o;
  o.out = absl::GetFlag(FLAGS_out);
  o.groups = absl::StrSplit(absl::GetFlag(FLAGS_groups), ',', absl::SkipEmpty());
  auto ops = absl::GetFlag(FLAGS_ops).empty()
                 ? absl::StatusOr<std::vector<kt::kernels::Op>>(std::vector<kt::kernels::Op>(
                       std::begin(kt::kernels::kAllOps), std::end(kt::kernels::kAllOps)))
                 : kt::kernels::ParseOpList(absl::GetFlag(FLAGS_ops));
  auto dtypes = kt::kernels::ParseDTypeList(absl::GetFlag(FLAGS_dtypes));
  auto sweep = kt::kernels::ParseDTypeList(absl::GetFlag(FLAGS_sweep_dtypes));
  for (const absl::Status& s : {ops.status(), dtypes.status(), sweep.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "kt_kernel_bench: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  for (auto [flag, name, target] :
       {std::tuple(&FLAGS_rows, "rows", &o.rows), std::tuple(&FLAGS_cols, "cols", &o.cols)}) {
    for (const std::string& item : absl::GetFlag(*flag)) {
      int64_t value = 0;
      if (!absl::SimpleAtoi(item, &value) || value < 1) {
        std::fprintf(stderr, "kt_kernel_bench: --%s: '%s' is not a positive integer\n", name,
                     item.c_str());
        return 2;
      }
      target->push_back(value);
    }
  }
  o.ops = *ops;
  o.dtypes = *dtypes;
  o.sweep_dtypes = *sweep;
  o.causal = absl::GetFlag(FLAGS_causal);
  o.reps = absl::GetFlag(FLAGS_reps);
  o.sweep_reps = absl::GetFlag(FLAGS_sweep_reps);
  o.device = absl::GetFlag(FLAGS_device);
  o.commit = absl::GetFlag(FLAGS_commit);
  o.db_path = absl::GetFlag(FLAGS_db);
  for (const std::string& key : absl::GetFlag(FLAGS_configs)) {
    absl::StatusOr<kt::kernels::LaunchConfig> config = kt::kernels::ParseLaunchConfig(key);
    if (!config.ok()) {
      std::fprintf(stderr, "kt_kernel_bench: --configs: %s\n", config.status().ToString().c_str());
      return 2;
    }
    o.configs.push_back(*config);
  }
  const absl::Status status = kt::bench::Run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "kt_kernel_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
