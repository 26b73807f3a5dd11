// `kerntune tune` and `kerntune tune --served` (tune_cli.h).
#include "client/tune_cli.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli_common.h"
#include "client/daemon_client.h"
#include "client/served_points.h"
#include "db/tuning_store.h"
#include "kernels/device_identity.h"
#include "kernels/device_info.h"
#include "tuner/backend.h"
#include "tuner/gpu_backend.h"
#include "tuner/grid.h"
#include "tuner/sweep.h"

namespace kt::client {
namespace {

std::atomic<bool> g_stop{false};

void RequestStop(int) { g_stop.store(true); }

// Ctrl-C / SIGTERM: every GPU finishes the candidate in flight, then stops
// cleanly.
class StopOnSignals {
 public:
  StopOnSignals() {
    g_stop = false;
    previous_int_ = std::signal(SIGINT, RequestStop);
    previous_term_ = std::signal(SIGTERM, RequestStop);
  }
  ~StopOnSignals() {
    std::signal(SIGINT, previous_int_);
    std::signal(SIGTERM, previous_term_);
  }

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

// "GPU 1": how progress and the summary name a device.
std::string DeviceName(int ordinal) { return absl::StrCat("GPU ", ordinal); }

// The selected GPUs, each opened on its sweep worker's thread.
std::vector<tuner::SweepDevice> SweepDevices(const std::vector<int>& ordinals) {
  std::vector<tuner::SweepDevice> devices;
  for (int ordinal : ordinals) {
    devices.push_back({DeviceName(ordinal),
                       [ordinal]() -> absl::StatusOr<std::unique_ptr<tuner::Backend>> {
                         absl::StatusOr<std::unique_ptr<tuner::GpuBackend>> backend =
                             tuner::GpuBackend::Create(ordinal);
                         if (!backend.ok()) return backend.status();
                         return std::unique_ptr<tuner::Backend>(*std::move(backend));
                       }});
  }
  return devices;
}

// "GPU 0 (GPU-5b7f...), GPU 1 (GPU-...)": which physical GPUs the names mean.
std::string DescribeSelection(const std::vector<int>& ordinals,
                              const std::vector<kernels::VisibleDevice>& visible) {
  return absl::StrJoin(ordinals, ", ", [&](std::string* out, int ordinal) {
    absl::StrAppend(out, DeviceName(ordinal));
    for (const kernels::VisibleDevice& d : visible) {
      if (d.ordinal == ordinal && !d.uuid.empty()) absl::StrAppend(out, " (", d.uuid, ")");
    }
  });
}


std::string DescribeSkus(const std::vector<db::GpuSku>& skus) {
  return absl::StrJoin(skus, ", ", [](std::string* out, const db::GpuSku& sku) {
    out->append(SkuDescription(sku));
  });
}

// Tunes `grid` on `ordinals` into the store at `path`: the sweep, its
// progress and summary, and RunTuneCommand's exit code.
int Sweep(const std::string& path, const std::vector<int>& ordinals,
          const std::vector<kernels::VisibleDevice>& visible,
          const std::vector<tuner::GridPoint>& grid, const TuneCliOptions& o, std::ostream& out,
          std::ostream& err) {
  db::OpenOptions open;
  open.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(path, open);
  if (!store.ok()) {
    err << "kerntune tune: " << store.status().message() << "\n";
    return 1;
  }

  StopOnSignals stop_on_signals;
  tuner::SweepOptions options;
  options.force = o.force;
  options.timing.repetitions = o.repetitions;
  options.command_line = o.command_line;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  options.host = host;
  options.user = EnvOr("USER", "");
  options.stop = &g_stop;
  options.progress = &err;
  options.progress_is_terminal = isatty(STDERR_FILENO) != 0;
  err << "kerntune tune: database " << path << "\n";
  err << "kerntune tune: on " << DescribeSelection(ordinals, visible) << "\n";
  absl::StatusOr<tuner::NodeSweepSummary> summary =
      tuner::RunNodeSweep(**store, SweepDevices(ordinals), grid, options);
  constexpr const char* kKept = "(points completed before this are kept; run again to resume)\n";
  if (!summary.ok()) {
    err << "kerntune tune: " << summary.status().message() << "\n" << kKept;
    return 1;
  }
  // The table, unless no GPU got through its share (one GPU that failed
  // prints only its error, as a single-GPU tune always has).
  const bool every_device_failed =
      std::all_of(summary->devices.begin(), summary->devices.end(),
                  [](const tuner::DeviceOutcome& d) { return !d.status.ok(); });
  if (!every_device_failed) out << tuner::FormatNodeSummary(*summary);
  if (summary->failed()) {
    for (const tuner::DeviceOutcome& d : summary->devices) {
      if (!d.status.ok()) err << "kerntune tune: " << d.name << ": " << d.status.message() << "\n";
    }
    err << kKept;
    return 1;
  }
  if (summary->interrupted) {
    err << "kerntune tune: interrupted; completed points are kept, run the same command to "
           "resume\n";
    return 130;
  }
  return 0;
}

// The GPUs --devices selects, as every tune finds them; RunTuneCommand's
// exit code, 0 when found.
struct Where {
  std::vector<kernels::VisibleDevice> visible;
  std::vector<int> ordinals;
};
int FindGpus(const std::string& devices, Where& where, std::ostream& err) {
  where.visible = kernels::VisibleDevices();
  if (where.visible.empty()) {
    err << "kerntune tune: no CUDA device found: tuning needs a GPU\n";
    return 1;
  }
  absl::StatusOr<std::vector<int>> ordinals = kernels::SelectDevices(devices, where.visible);
  if (!ordinals.ok()) {
    err << "kerntune tune: " << ordinals.status().message() << "\n";
    return 2;
  }
  where.ordinals = *std::move(ordinals);
  return 0;
}

// Whether two paths name one file (or, where either is missing, are spelt
// alike once made absolute).
bool SameFile(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::equivalent(a, b, error)) return true;
  if (!error) return false;  // both exist, and differ
  return std::filesystem::weakly_canonical(a, error) ==
         std::filesystem::weakly_canonical(b, error);
}

// The selected GPUs of one SKU.
struct SkuDevices {
  db::GpuSku sku;
  std::vector<int> ordinals;
};
// Grouped by SKU, in the order of each SKU's first.
absl::StatusOr<std::vector<SkuDevices>> GroupBySku(const std::vector<int>& ordinals) {
  std::vector<SkuDevices> groups;
  for (int ordinal : ordinals) {
    absl::StatusOr<kernels::DeviceInfo> info = kernels::GetDeviceInfo(ordinal);
    if (!info.ok()) return info.status();
    const db::GpuSku sku = tuner::SkuOf(*info);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const SkuDevices& g) { return g.sku == sku; });
    if (it == groups.end()) {
      groups.push_back({sku, {ordinal}});
    } else {
      it->ordinals.push_back(ordinal);
    }
  }
  return groups;
}

// `kerntune tune --served`: what the daemon served untuned, asked before
// anything else (no GPU is needed to learn there is nothing to tune).
int RunServedTune(const TuneCliOptions& o, std::ostream& out, std::ostream& err) {
  if (!o.rows.empty() || !o.cols.empty() || !o.inner.empty()) {
    err << "kerntune tune: --served tunes the problems the daemon served; it takes no --rows, "
           "--cols or --inner\n";
    return 2;
  }
  DaemonClientOptions client_options;
  client_options.target = o.server;
  absl::StatusOr<TcpCredentials> tcp = ReadTcpCredentials(o.tcp);
  if (!tcp.ok()) return ReportError("tune", tcp.status(), err, kExitUsage);
  client_options.tcp = *std::move(tcp);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(client_options);
  if (!client.ok()) return ReportError("tune", client.status(), err, kExitUsage);
  absl::StatusOr<pb::GetStatusResponse> status = client->GetStatus();
  if (!status.ok()) return ReportDaemonError("tune", status.status(), err);
  if (status->backend() == "cpu") {
    err << "kerntune tune: the daemon at " << client->target()
        << " runs the CPU backend, which launches no tuned configs: it has served no problem "
           "to tune\n";
    return 1;
  }
  absl::StatusOr<pb::ListServedShapesResponse> served = client->ListServedShapes();
  if (!served.ok()) return ReportDaemonError("tune", served.status(), err);
  if (served->shapes().empty()) {
    err << "kerntune tune: nothing to tune: every Run the daemon at " << client->target()
        << " served since it started had its tuned entry\n";
    return 0;
  }

  const std::vector<db::GpuSku> daemon_skus = ServedSkus(*served);
  if (o.dry_run && kernels::VisibleDevices().empty()) {
    // Nothing here to tune on: what a GPU of each model would tune.
    err << "kerntune tune: no CUDA device here: listing the problems of every GPU model\n";
    for (const db::GpuSku& sku : daemon_skus) {
      absl::StatusOr<std::vector<ServedPoint>> points =
          ServedPointsOf(*served, sku, o.ops, o.dtypes);
      if (!points.ok()) {
        err << "kerntune tune: " << points.status().message() << "\n";
        return 1;
      }
      if (!points->empty()) out << FormatServedPoints(sku, *points);
    }
    return 0;
  }
  Where where;
  if (int code = FindGpus(o.devices, where, err); code != 0) return code;
  absl::StatusOr<std::vector<SkuDevices>> local = GroupBySku(where.ordinals);
  if (!local.ok()) {
    err << "kerntune tune: " << local.status().message() << "\n";
    return 1;
  }
  struct Job {
    SkuDevices devices;
    std::vector<ServedPoint> points;
  };
  std::vector<Job> jobs;
  std::vector<db::GpuSku> local_skus;
  bool matched = false;  // a GPU here is of a model the daemon served untuned
  for (const SkuDevices& devices : *local) {
    local_skus.push_back(devices.sku);
    if (std::find(daemon_skus.begin(), daemon_skus.end(), devices.sku) == daemon_skus.end()) {
      continue;
    }
    matched = true;
    absl::StatusOr<std::vector<ServedPoint>> points =
        ServedPointsOf(*served, devices.sku, o.ops, o.dtypes);
    if (!points.ok()) {
      err << "kerntune tune: " << points.status().message() << "\n";
      return 1;
    }
    if (!points->empty()) jobs.push_back({devices, *std::move(points)});
  }
  if (!matched) {
    err << "kerntune tune: the daemon served untuned problems on " << DescribeSkus(daemon_skus)
        << ", and the GPUs selected here (" << DescribeSelection(where.ordinals, where.visible)
        << ") are " << DescribeSkus(local_skus) << ": tune on a GPU of the daemon's model\n";
    return 1;
  }
  if (jobs.empty()) {
    err << "kerntune tune: nothing to tune: none of the problems the daemon served untuned on "
           "these GPUs' model is of --ops and --dtypes\n";
    return 0;
  }
  if (o.dry_run) {
    for (const Job& job : jobs) out << FormatServedPoints(job.devices.sku, job.points);
    return 0;
  }
  // The store the daemon reads, unless another is named.
  std::string path = o.db_path;
  if (path.empty()) {
    path = status->database_path();
    if (path.empty()) {
      err << "kerntune tune: the daemon at " << client->target()
          << " reads no tuning store; give --db (and start kerntuned with the same --db)\n";
      return 1;
    }
  } else if (!status->database_path().empty() && !SameFile(path, status->database_path())) {
    err << "kerntune tune: warning: the daemon reads " << status->database_path() << ", not "
        << path << ": it will not serve these results from there\n";
  }
  for (const Job& job : jobs) {
    err << "kerntune tune: " << job.points.size() << " problems kerntuned served untuned on "
        << SkuDescription(job.devices.sku) << "\n";
    if (int code = Sweep(path, job.devices.ordinals, where.visible, GridOf(job.points), o, out,
                         err);
        code != 0) {
      return code;
    }
  }
  err << "kerntune tune: kerntuned serves the new entries once it has reloaded " << path
      << " (it looks every few seconds)\n";
  return 0;
}

}  // namespace

int RunTuneCommand(const TuneCliOptions& o, std::ostream& out, std::ostream& err) {
  if (o.served) return RunServedTune(o, out, err);
  if (o.dry_run) {
    err << "kerntune tune: --dry_run lists what --served would tune; give --served\n";
    return 2;
  }
  if (o.rows.empty() != o.cols.empty()) {
    err << "kerntune tune: give both --rows and --cols (a custom grid), or neither (the "
           "standard grid)\n";
    return 2;
  }
  if (!o.inner.empty() && o.rows.empty()) {
    err << "kerntune tune: --inner takes --rows and --cols (a custom grid); the standard grid's "
           "middle-axis points are --groups=axis\n";
    return 2;
  }
  absl::StatusOr<std::vector<tuner::GridPoint>> grid =
      o.rows.empty()
          ? tuner::StandardGrid(o.groups, o.ops, o.dtypes)
          : tuner::CustomGrid(o.ops, o.dtypes, o.rows, o.cols,
                              o.inner.empty() ? std::vector<int64_t>{1} : o.inner);
  if (grid.ok() && grid->empty()) {
    err << "kerntune tune: the custom grid has no point (--inner > 1 is for softmax and "
           "log_softmax only)\n";
    return 2;
  }
  if (!grid.ok()) {
    err << "kerntune tune: " << grid.status().message() << "\n";
    return 2;
  }
  std::string path = o.db_path;
  if (path.empty()) {
    absl::StatusOr<std::string> default_path = db::DefaultDatabasePath();
    if (!default_path.ok()) {
      err << "kerntune tune: " << default_path.status().message() << "\n";
      return 1;
    }
    path = *default_path;
  }
  Where where;
  if (int code = FindGpus(o.devices, where, err); code != 0) return code;
  return Sweep(path, where.ordinals, where.visible, *grid, o, out, err);
}

}  // namespace kt::client
