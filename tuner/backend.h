// What the sweep needs from a device, as an interface: the GPU backend
// (gpu_backend.h) measures real launches; tests drive the sweep with a fake.
#ifndef KERNTUNE_TUNER_BACKEND_H_
#define KERNTUNE_TUNER_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "db/records.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "tuner/config_lookup.h"  // SkuOf
#include "tuner/grid.h"
#include "tuner/measure.h"

namespace kt::tuner {

struct MeasureOptions {
  int warmup = 3;
  int repetitions = 30;
  // Time with CUDA-graph replay instead of one launch per event pair (for
  // launch-bound points, so the ranking is not decided by queueing noise).
  bool graph_replay = false;
  // Pruning: time `probe_repetitions` first, and stop there (status kPruned)
  // if even the probe's fastest run is slower than this.
  std::optional<double> prune_above_us;
  int probe_repetitions = 5;
};

// The outcome of one candidate config on one problem.
struct CandidateMeasurement {
  db::CandidateStatus status = db::CandidateStatus::kMeasured;
  std::string message;  // why it was skipped or failed; the check's detail
  int occupancy = 0;    // resident blocks per SM
  bool correct = false;
  std::optional<TimingStats> timing;  // absent unless timed (measured/pruned)
  bool graph_replay = false;
};

// One problem, prepared on the device (inputs, references, rotation sets).
class PointMeasurer {
 public:
  virtual ~PointMeasurer() = default;
  // Occupancy, then a launch on poisoned outputs checked against the fp64
  // reference, then (only if correct) timing. Candidate-level failures are
  // outcomes; an error Status means the device can no longer be trusted
  // (e.g. a kernel fault) and the run must stop.
  virtual absl::StatusOr<CandidateMeasurement> Measure(const kernels::LaunchConfig& config,
                                                       const MeasureOptions& options) = 0;
  // The size-matched copy: the point's input (its rows x cols x inner
  // elements) copied onto its output, or onto a buffer as large where the
  // output is smaller (device to device, the same rotation of buffers),
  // timed as Measure times a kernel. Small problems cannot reach the 1 GiB
  // copy roofline at all; this is the figure they can be held to.
  virtual absl::StatusOr<TimingStats> TimeInputCopy(const MeasureOptions& options) {
    return absl::UnimplementedError("this backend does not time copies");
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const kernels::DeviceInfo& device() const = 0;
  // Driver, runtime and kernel-library versions recorded with results.
  virtual db::Environment environment() const = 0;
  // The run's roofline: device-to-device copy GB/s (read + write).
  virtual absl::StatusOr<double> MeasureCopyGbps() = 0;
  virtual absl::StatusOr<std::unique_ptr<PointMeasurer>> Prepare(const GridPoint& point) = 0;
};

// A launch config as the store records it (fields plus its ConfigKey).
db::ConfigRecord ConfigRecordOf(const kernels::LaunchConfig& config);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_BACKEND_H_
