// kSplitRow's rules (config_rules.h). PLACEHOLDER until the split-row kernel
// lands: no candidates, every config refused.
#include "absl/strings/str_cat.h"
#include "kernels/config_rules.h"

namespace kt::kernels::internal {

absl::Status CheckSplitRowKnobs(Op, DType, Shape, const LaunchConfig&, const DeviceInfo&) {
  return absl::InvalidArgumentError("split_row is not built yet");
}
int64_t SplitRowSharedMemoryBytes(Op, DType, Shape, const LaunchConfig&) { return 0; }
void AppendSplitRowCandidates(Op, DType, Shape, const DeviceInfo&, std::vector<LaunchConfig>&) {}
std::optional<LaunchConfig> SplitRowHeuristic(Op, DType, Shape, const DeviceInfo&) {
  return std::nullopt;
}

}  // namespace kt::kernels::internal
