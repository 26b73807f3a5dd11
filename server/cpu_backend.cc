// CPU fallback backend (see cpu_backend.h).
#include "server/cpu_backend.h"

#include <chrono>

#include "kernels/reference.h"

namespace kt::server {

absl::StatusOr<RunResult> CpuBackend::Execute(const RunRequest& request) {
  RunResult result;
  result.output.resize(static_cast<size_t>(request.tensor_bytes()));
  const bool stats = request.op == kernels::Op::kLayerNorm && request.want_mean_inv_std;
  if (stats) {
    result.mean.resize(static_cast<size_t>(request.shape.rows));
    result.inv_std.resize(static_cast<size_t>(request.shape.rows));
  }
  kernels::HostRowOpArgs args;
  args.x = request.input.data();
  args.y = result.output.data();
  args.gamma = request.gamma.empty() ? nullptr : request.gamma.data();
  args.beta = request.beta.empty() ? nullptr : request.beta.data();
  args.mean = stats ? result.mean.data() : nullptr;
  args.inv_std = stats ? result.inv_std.data() : nullptr;
  if (request.op == kernels::Op::kLayerNorm) args.epsilon = request.epsilon;
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = kernels::RunReference(request.op, request.dtype, request.shape, args, 0,
                                             request.shape.rows, request.dtype, threads_);
      !s.ok()) {
    return s;
  }
  result.kernel_time_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace kt::server
