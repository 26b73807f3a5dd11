// CPU fallback backend (see cpu_backend.h).
#include "server/cpu_backend.h"

#include <array>
#include <chrono>

#include "kernels/reference.h"
#include "server/client_tensors.h"

namespace kt::server {
namespace {

// The host buffer the reference uses for one operand: an inline input in
// place, client shared memory through a private copy (guarded against the
// client shrinking it), an output in the response (inline) or in the
// private copy that goes to client memory afterwards (the residual's copy
// made from client memory first: it is read, then written back).
absl::StatusOr<void*> HostBuffer(kernels::Operand operand, const TensorView& view,
                                 RunResult& result, std::string& copy) {
  if (view.where == TensorView::Where::kDevice) {
    return absl::FailedPreconditionError(
        "the CPU backend cannot read or write device memory (CUDA IPC)");
  }
  if (!ReadBeforeRun(operand)) {
    std::string& bytes =
        view.where == TensorView::Where::kInline ? result.inline_output(operand) : copy;
    if (absl::Status s = ResizeForClientCopy(bytes, view.bytes); !s.ok()) return s;
    return bytes.data();
  }
  if (view.where == TensorView::Where::kInline) return view.data;
  if (absl::Status s = ResizeForClientCopy(copy, view.bytes); !s.ok()) return s;
  if (absl::Status s = CopyFromClientHost(copy.data(), view.data, view.bytes); !s.ok()) return s;
  return copy.data();
}

}  // namespace

absl::StatusOr<RunResult> CpuBackend::Execute(int device_index, const RunRequest& request) {
  if (!request.wait_event.empty() || !request.done_event.empty()) {
    return absl::FailedPreconditionError("the CPU backend cannot wait on or record CUDA events");
  }
  RunResult result;
  std::array<std::string, kernels::kOperandCount> copies;
  kernels::RowOpArgs args;
  for (kernels::Operand operand : kernels::kAllOperands) {
    const TensorView& view = request.tensor(operand);
    if (!view.present()) continue;
    absl::StatusOr<void*> host =
        HostBuffer(operand, view, result, copies[static_cast<size_t>(operand)]);
    if (!host.ok()) return host.status();
    args.set_operand(operand, *host);
  }
  args.params = request.params;

  const auto start = std::chrono::steady_clock::now();
  // y in the storage dtype (the *_quant ops: their one-byte codes).
  if (absl::Status s = kernels::RunReference(request.op, request.dtype, request.shape, args, 0,
                                             request.shape.rows, request.dtype, threads_);
      !s.ok()) {
    return s;
  }
  result.kernel_time_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.kernels_timed;
    stats_.kernel_us += result.kernel_time_us;
  }

  for (kernels::Operand operand : kernels::kAllOperands) {
    const TensorView& view = request.tensor(operand);
    if (!kernels::IsOutput(operand) || view.where != TensorView::Where::kClientHost) continue;
    const std::string& copy = copies[static_cast<size_t>(operand)];
    if (absl::Status s = WriteOutputToClientHost(request, operand, copy.data()); !s.ok()) {
      return s;
    }
  }
  return result;
}

BackendStats CpuBackend::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kt::server
