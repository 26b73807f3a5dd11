// kt_kernel_bench: the standard grid of shared/PERF.md with the heuristic
// config (and, for --sweep-dtypes, every enumerated config), on the GPU.
// Every timed variant is first checked against the fp64 reference; figures
// are GB/s of the minimum bytes moved and % of the measured copy roofline.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/device_info.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/verify.h"
#include "tuner/measure.h"

ABSL_FLAG(std::string, out, "", "write results as JSON to this file");
ABSL_FLAG(std::string, groups, "main,few_rows,attention", "grid groups to run");
ABSL_FLAG(std::string, ops, "softmax,log_softmax,layer_norm", "ops to run");
ABSL_FLAG(std::string, dtypes, "float32,float16,bfloat16", "dtypes to run");
ABSL_FLAG(std::string, sweep_dtypes, "",
          "also time every enumerated config of the main group for these dtypes");
ABSL_FLAG(int, reps, 50, "timed repetitions per variant (median reported)");
ABSL_FLAG(int, sweep_reps, 15, "timed repetitions per config in the sweep");
ABSL_FLAG(int, device, 0, "CUDA device ordinal");
ABSL_FLAG(std::string, commit, "", "commit id to record in the results");

namespace kt::bench {
namespace {

using kernels::DeviceBuffer;
using kernels::DType;
using kernels::LaunchConfig;
using kernels::Op;
using kernels::Shape;

struct Options {
  std::string out;
  std::vector<std::string> groups;
  std::vector<Op> ops;
  std::vector<DType> dtypes;
  std::vector<DType> sweep_dtypes;
  int reps = 50;
  int sweep_reps = 15;
  int device = 0;
  std::string commit;
};

struct Point {
  std::string group;
  Op op;
  DType dtype;
  Shape shape;
};

// The standard grid (PERF.md). The non-last-axis log-softmax cases arrive
// with the any-axis kernels.
std::vector<Point> StandardGrid(const Options& o) {
  std::vector<Point> points;
  auto wants = [&](const std::string& g) {
    return std::find(o.groups.begin(), o.groups.end(), g) != o.groups.end();
  };
  for (Op op : o.ops) {
    for (DType dtype : o.dtypes) {
      if (wants("main")) {
        for (int64_t cols : {32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}) {
          points.push_back({"main", op, dtype, {49152, cols}});
        }
      }
      if (wants("few_rows")) {
        for (int64_t rows : {1, 8, 64}) {
          for (int64_t cols : {4096, 32768, 131072}) {
            points.push_back({"few_rows", op, dtype, {rows, cols}});
          }
        }
      }
      if (wants("attention")) {
        for (int64_t s : {16, 32, 64, 128, 512}) {
          points.push_back({"attention", op, dtype, {32 * 64 * s, s}});
        }
      }
    }
  }
  return points;
}

// A problem plus extra input/output sets to rotate through, so that the
// bytes touched between two launches on the same set exceed L2 several times.
struct Workload {
  kernels::DeviceProblem problem;
  std::vector<DeviceBuffer> extra_x, extra_y;
  int sets = 1;

  kernels::RowOpArgs Args(int rep) const {
    kernels::RowOpArgs args = problem.Args(/*with_stats=*/false);
    const int set = rep % sets;
    if (set > 0) {
      args.x = extra_x[set - 1].data();
      args.y = extra_y[set - 1].data();
    }
    return args;
  }
};

absl::StatusOr<Workload> MakeWorkload(const Point& p, const kernels::DeviceInfo& device) {
  // A few hundred distinct random rows, repeated: the reference stays cheap
  // while every row of the timed tensor is real data.
  absl::StatusOr<kernels::HostProblem> host =
      kernels::MakeProblem(p.op, p.dtype, p.shape, /*seed=*/0x6b74 + p.shape.cols,
                           kernels::InputPattern::kNormal, /*with_affine=*/true, 0,
                           /*distinct_rows=*/256);
  if (!host.ok()) return host.status();
  Workload w;
  absl::StatusOr<kernels::DeviceProblem> problem = kernels::Upload(*host);
  if (!problem.ok()) return problem.status();
  w.problem = *std::move(problem);
  const size_t set_bytes = 2 * w.problem.x.bytes();
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  const size_t wanted = (4 * static_cast<size_t>(device.l2_bytes) + set_bytes - 1) / set_bytes;
  const size_t affordable = free_bytes / 2 / set_bytes;
  w.sets = static_cast<int>(std::clamp<size_t>(std::min(wanted, affordable), 1, 64));
  for (int i = 1; i < w.sets; ++i) {
    absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Allocate(w.problem.x.bytes());
    absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Allocate(w.problem.y.bytes());
    if (!x.ok()) return x.status();
    if (!y.ok()) return y.status();
    if (cudaMemcpy(x->data(), w.problem.x.data(), w.problem.x.bytes(),
                   cudaMemcpyDeviceToDevice) != cudaSuccess) {
      return absl::InternalError("copying a rotation set failed");
    }
    w.extra_x.push_back(*std::move(x));
    w.extra_y.push_back(*std::move(y));
  }
  return w;
}

struct Measurement {
  bool passed = false;
  std::string detail;
  tuner::TimingStats timing;
  std::optional<tuner::TimingStats> graph;
};

absl::StatusOr<Measurement> Measure(Workload& w, const LaunchConfig& config,
                                    const kernels::DeviceInfo& device, int reps,
                                    bool allow_graph, cudaStream_t stream) {
  const kernels::DeviceProblem& p = w.problem;
  auto launch = [&](int rep) -> absl::Status {
    return kernels::Launch(p.op, p.dtype, p.shape, w.Args(rep), config, device, stream)
        .status();
  };
  Measurement m;
  if (absl::Status s = kernels::PoisonOutputs(w.problem, stream); !s.ok()) return s;
  if (absl::Status s = launch(0); !s.ok()) return s;
  absl::StatusOr<kernels::CheckReport> report =
      kernels::CheckOutputs(w.problem, /*check_stats=*/false, stream);
  if (!report.ok()) return report.status();
  m.passed = report->passed;
  m.detail = report->detail;
  if (!m.passed) return m;  // a wrong kernel's time is not worth having
  absl::StatusOr<tuner::TimingStats> timing = tuner::TimeLaunches(launch, 3, reps, stream);
  if (!timing.ok()) return timing.status();
  m.timing = *timing;
  // Launches of a few microseconds: also time them the way a graph runs them.
  if (allow_graph && m.timing.median_us < 20.0) {
    absl::StatusOr<tuner::TimingStats> graph =
        tuner::TimeGraphReplay(launch, std::max(w.sets, 20), reps, stream);
    if (!graph.ok()) return graph.status();
    m.graph = *graph;
  }
  return m;
}

double Gbps(const Point& p, double us) {
  const int64_t bytes = kernels::MinimumBytesMoved(p.op, p.dtype, p.shape, true, true, false);
  return static_cast<double>(bytes) / (us * 1e3);
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

std::string PointJson(const Point& p) {
  return absl::StrCat("\"group\":", JsonString(p.group), ",\"op\":",
                      JsonString(kernels::OpName(p.op)), ",\"dtype\":",
                      JsonString(kernels::DTypeName(p.dtype)), ",\"rows\":", p.shape.rows,
                      ",\"cols\":", p.shape.cols);
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

absl::Status Run(const Options& o) {
  if (kernels::CudaDeviceCount() == 0) {
    return absl::FailedPreconditionError("no CUDA device: the kernel benchmark needs a GPU");
  }
  if (cudaSetDevice(o.device) != cudaSuccess) {
    return absl::NotFoundError(absl::StrCat("cannot use CUDA device ", o.device));
  }
  absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(o.device);
  if (!device.ok()) return device.status();
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return absl::InternalError("cudaStreamCreate");

  absl::StatusOr<double> copy_gbps = tuner::MeasureCopyGbps(size_t{1} << 30, 20, stream);
  if (!copy_gbps.ok()) return copy_gbps.status();
  std::printf("%s, %d SMs; copy roofline %.0f GB/s (1 GiB D2D, read + write)\n",
              device->name.c_str(), device->sm_count, *copy_gbps);

  std::vector<std::string> results, sweeps, table;
  int failures = 0;
  for (const Point& p : StandardGrid(o)) {
    absl::StatusOr<LaunchConfig> config =
        kernels::HeuristicConfig(p.op, p.dtype, p.shape, *device);
    if (!config.ok()) return config.status();
    absl::StatusOr<Workload> w = MakeWorkload(p, *device);
    if (!w.ok()) return w.status();
    absl::StatusOr<Measurement> m = Measure(*w, *config, *device, o.reps, true, stream);
    if (!m.ok()) return m.status();
    if (!m->passed) ++failures;
    const double gbps = m->passed ? Gbps(p, m->timing.median_us) : NAN;
    const double graph_gbps = m->graph ? Gbps(p, m->graph->median_us) : NAN;
    results.push_back(absl::StrCat(
        "{", PointJson(p), ",\"config\":", JsonString(kernels::ConfigKey(*config)),
        ",\"passed\":", m->passed ? "true" : "false", ",\"detail\":", JsonString(m->detail),
        ",\"median_us\":", JsonNumber(m->timing.median_us), ",\"p10_us\":",
        JsonNumber(m->timing.p10_us), ",\"p90_us\":", JsonNumber(m->timing.p90_us),
        ",\"graph_median_us\":", m->graph ? JsonNumber(m->graph->median_us) : "null",
        ",\"gbps\":", JsonNumber(gbps), ",\"graph_gbps\":", JsonNumber(graph_gbps),
        ",\"pct_copy\":", JsonNumber(100 * gbps / *copy_gbps), ",\"rotation_sets\":", w->sets,
        "}"));
    table.push_back(absl::StrFormat("%-9s %-11s %-8s %7d %6d  %-24s %6.0f %5.1f%% %6s%s",
                                    p.group, kernels::OpName(p.op), kernels::DTypeName(p.dtype),
                                    p.shape.rows, p.shape.cols, kernels::ConfigKey(*config), gbps,
                                    100 * gbps / *copy_gbps,
                                    m->graph ? absl::StrFormat("%.0f", graph_gbps) : "-",
                                    m->passed ? "" : "  WRONG"));
    std::printf("%s\n", table.back().c_str());
    std::fflush(stdout);

    const bool sweep = p.group == "main" &&
                       std::find(o.sweep_dtypes.begin(), o.sweep_dtypes.end(), p.dtype) !=
                           o.sweep_dtypes.end();
    if (!sweep) continue;
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        kernels::EnumerateConfigs(p.op, p.dtype, p.shape, *device);
    if (!configs.ok()) return configs.status();
    std::vector<std::string> entries;
    std::string best_key;
    double best_us = INFINITY;
    int wrong = 0;
    for (const LaunchConfig& c : *configs) {
      absl::StatusOr<Measurement> cm = Measure(*w, c, *device, o.sweep_reps, false, stream);
      if (!cm.ok()) return cm.status();
      if (!cm->passed) {
        ++wrong;
        continue;
      }
      entries.push_back(absl::StrCat("[", JsonString(kernels::ConfigKey(c)), ",",
                                     JsonNumber(cm->timing.median_us), "]"));
      if (cm->timing.median_us < best_us) {
        best_us = cm->timing.median_us;
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
    out << "{\"tool\":\"kt_kernel_bench\",\"gpu\":" << JsonString(device->name)
        << ",\"sm_count\":" << device->sm_count << ",\"date\":" << JsonString(UtcNow())
        << ",\"commit\":" << JsonString(o.commit) << ",\"copy_gbps\":" << JsonNumber(*copy_gbps)
        << ",\"results\":[\n" << absl::StrJoin(results, ",\n") << "\n],\"sweep\":[\n"
        << absl::StrJoin(sweeps, ",\n") << "\n]}\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", o.out));
  }
  cudaStreamDestroy(stream);
  if (failures > 0) {
    return absl::InternalError(absl::StrCat(failures, " variants failed the reference check"));
  }
  return absl::OkStatus();
}

template <typename T, typename ParseFn>
absl::StatusOr<std::vector<T>> ParseList(const std::string& text, ParseFn parse) {
  std::vector<T> values;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<T> value = parse(item);
    if (!value.ok()) return value.status();
    values.push_back(*value);
  }
  return values;
}

}  // namespace
}  // namespace kt::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("kernel benchmark on the standard grid (needs a GPU)");
  absl::ParseCommandLine(argc, argv);
  kt::bench::Options o;
  o.out = absl::GetFlag(FLAGS_out);
  o.groups = absl::StrSplit(absl::GetFlag(FLAGS_groups), ',', absl::SkipEmpty());
  auto ops = kt::bench::ParseList<kt::kernels::Op>(absl::GetFlag(FLAGS_ops), kt::kernels::ParseOp);
  auto dtypes = kt::bench::ParseList<kt::kernels::DType>(absl::GetFlag(FLAGS_dtypes),
                                                         kt::kernels::ParseDType);
  auto sweep = kt::bench::ParseList<kt::kernels::DType>(absl::GetFlag(FLAGS_sweep_dtypes),
                                                        kt::kernels::ParseDType);
  for (const absl::Status& s : {ops.status(), dtypes.status(), sweep.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "kt_kernel_bench: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  o.ops = *ops;
  o.dtypes = *dtypes;
  o.sweep_dtypes = *sweep;
  o.reps = absl::GetFlag(FLAGS_reps);
  o.sweep_reps = absl::GetFlag(FLAGS_sweep_reps);
  o.device = absl::GetFlag(FLAGS_device);
  o.commit = absl::GetFlag(FLAGS_commit);
  const absl::Status status = kt::bench::Run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "kt_kernel_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
