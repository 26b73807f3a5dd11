// kt_tune_child: what `kerntune tune` does (client/tune_cli.cc: the store
// opened or created, RunNodeSweep on every device, resume), on two fake
// H100s, for the tuner's crash tests. Each measurement takes a little
// time and gives a time that depends on the config alone, so two runs of
// the same grid store the same winners however often they are killed.
//   kt_tune_child DB_PATH
// Exit 0 when the grid is done, 1 otherwise.
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "db/tuning_store.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "tuner/backend.h"
#include "tuner/grid.h"
#include "tuner/sweep.h"

namespace kt::tuner {
namespace {

// Long enough that a run of the grid below takes seconds, so kills land
// inside points, inside the confirmation and between points alike.
constexpr auto kMeasureTime = std::chrono::milliseconds(1);

class SteadyMeasurer final : public PointMeasurer {
 public:
  absl::StatusOr<CandidateMeasurement> Measure(const kernels::LaunchConfig& config,
                                               const MeasureOptions& options) override {
    std::this_thread::sleep_for(kMeasureTime);
    // std::hash of a string is the same in every process of this build.
    const std::string key = kernels::ConfigKey(config);
    TimingStats timing;
    timing.median_us = 30.0 + static_cast<double>(std::hash<std::string>()(key) % 1000) / 10.0;
    timing.min_us = timing.median_us * 0.99;
    timing.p10_us = timing.min_us;
    timing.p90_us = timing.median_us * 1.01;
    timing.repetitions = options.repetitions;
    CandidateMeasurement m;
    m.occupancy = 4;
    m.correct = true;
    if (options.prune_above_us && timing.min_us > *options.prune_above_us) {
      m.status = db::CandidateStatus::kPruned;
      timing.repetitions = options.probe_repetitions;
    }
    m.timing = timing;
    return m;
  }
};

class FakeGpu final : public Backend {
 public:
  const kernels::DeviceInfo& device() const override { return device_; }
  db::Environment environment() const override { return {580, 13000, "crash-test+k1"}; }
  absl::StatusOr<double> MeasureCopyGbps() override { return 3000.0; }
  absl::StatusOr<std::unique_ptr<PointMeasurer>> Prepare(const GridPoint& point) override {
    return std::unique_ptr<PointMeasurer>(new SteadyMeasurer());
  }

 private:
  kernels::DeviceInfo device_ = kernels::DescribedH100();
};

int Tune(const std::string& path) {
  db::OpenOptions open;
  open.create_if_missing = true;
  absl::StatusOr<std::unique_ptr<db::TuningStore>> store = db::TuningStore::Open(path, open);
  if (!store.ok()) {
    std::fprintf(stderr, "kt_tune_child: %s\n", store.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::vector<GridPoint>> grid = CustomGrid(
      {kernels::Op::kSoftmax, kernels::Op::kLayerNorm, kernels::Op::kRmsNorm},
      {kernels::DType::kFloat16, kernels::DType::kBFloat16}, {64, 4096}, {512, 1024, 4096});
  if (!grid.ok()) return 1;
  std::vector<SweepDevice> devices;
  for (const char* name : {"GPU 0", "GPU 1"}) {
    devices.push_back({name, []() -> absl::StatusOr<std::unique_ptr<Backend>> {
                         return std::unique_ptr<Backend>(new FakeGpu());
                       }});
  }
  SweepOptions options;
  options.command_line = "kt_tune_child " + path;
  absl::StatusOr<NodeSweepSummary> summary = RunNodeSweep(**store, devices, *grid, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "kt_tune_child: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  return summary->failed() || summary->interrupted ? 1 : 0;
}

}  // namespace
}  // namespace kt::tuner

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kt_tune_child DB_PATH\n");
    return 2;
  }
  return kt::tuner::Tune(argv[1]);
}
