// GPU wait modes (gpu_wait.h).
#include "server/gpu_wait.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::server {

absl::StatusOr<GpuWait> ParseGpuWait(absl::string_view name) {
  for (GpuWait wait : {GpuWait::kSpin, GpuWait::kYield, GpuWait::kHybrid, GpuWait::kBlock}) {
    if (name == GpuWaitName(wait)) return wait;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--gpu_wait=", name, " must be spin, yield, hybrid or block"));
}

absl::string_view GpuWaitName(GpuWait wait) {
  switch (wait) {
    case GpuWait::kSpin:
      return "spin";
    case GpuWait::kYield:
      return "yield";
    case GpuWait::kHybrid:
      return "hybrid";
    case GpuWait::kBlock:
      return "block";
  }
  return "unknown";
}

}  // namespace kt::server
