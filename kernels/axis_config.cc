// kAxis's rules (config_rules.h). PLACEHOLDER until the axis kernel lands.
#include "absl/strings/str_cat.h"
#include "kernels/config_rules.h"

namespace kt::kernels::internal {

absl::Status CheckAxisKnobs(Op, DType, Shape, const LaunchConfig&, const DeviceInfo&) {
  return absl::InvalidArgumentError("axis is not built yet");
}
int64_t AxisSharedMemoryBytes(Op, DType, Shape, const LaunchConfig&) { return 0; }
void AppendAxisCandidates(Op, DType, Shape, const DeviceInfo&, std::vector<LaunchConfig>&) {}
absl::StatusOr<LaunchConfig> AxisHeuristic(Op, DType, Shape, const DeviceInfo&) {
  return absl::UnimplementedError("axis is not built yet");
}

}  // namespace kt::kernels::internal
