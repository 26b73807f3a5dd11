// `kerntune tune` (tune_cli.h).
#include "client/tune_cli.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "db/tuning_store.h"
#include "kernels/device_identity.h"
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

}  // namespace

int RunTuneCommand(const TuneCliOptions& o, std::ostream& out, std::ostream& err) {
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
  const std::vector<kernels::VisibleDevice> visible = kernels::VisibleDevices();
  if (visible.empty()) {
    err << "kerntune tune: no CUDA device found: tuning needs a GPU\n";
    return 1;
  }
  absl::StatusOr<std::vector<int>> ordinals = kernels::SelectDevices(o.devices, visible);
  if (!ordinals.ok()) {
    err << "kerntune tune: " << ordinals.status().message() << "\n";
    return 2;
  }
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
  err << "kerntune tune: on " << DescribeSelection(*ordinals, visible) << "\n";
  absl::StatusOr<tuner::NodeSweepSummary> summary =
      tuner::RunNodeSweep(**store, SweepDevices(*ordinals), *grid, options);
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

}  // namespace kt::client
