// CPU fallback backend (see cpu_backend.h).
#include "server/cpu_backend.h"

#include <chrono>

#include "kernels/reference.h"

namespace kt::server {
namespace {

// Where the reference reads an input: the request's bytes, or a private
// copy of client shared memory (guarded against the client shrinking it).
absl::StatusOr<const void*> Readable(const TensorView& view, std::string& copy) {
  switch (view.where) {
    case TensorView::Where::kAbsent:
      return nullptr;
    case TensorView::Where::kInline:
      return view.data;
    case TensorView::Where::kClientHost:
      copy.resize(static_cast<size_t>(view.bytes));
      if (absl::Status s = CopyFromClientHost(copy.data(), view.data, view.bytes); !s.ok()) {
        return s;
      }
      return copy.data();
    case TensorView::Where::kDevice:
      break;
  }
  return absl::FailedPreconditionError("the CPU backend cannot read device memory");
}

}  // namespace

absl::StatusOr<RunResult> CpuBackend::Execute(const RunRequest& request) {
  if (!request.wait_event.empty() || !request.done_event.empty()) {
    return absl::FailedPreconditionError("the CPU backend cannot wait on or record CUDA events");
  }
  if (request.output.where == TensorView::Where::kDevice ||
      request.mean.where == TensorView::Where::kDevice ||
      request.inv_std.where == TensorView::Where::kDevice) {
    return absl::FailedPreconditionError("the CPU backend cannot write device memory");
  }
  std::string input_copy, gamma_copy, beta_copy;
  absl::StatusOr<const void*> x = Readable(request.input, input_copy);
  if (!x.ok()) return x.status();
  absl::StatusOr<const void*> gamma = Readable(request.gamma, gamma_copy);
  if (!gamma.ok()) return gamma.status();
  absl::StatusOr<const void*> beta = Readable(request.beta, beta_copy);
  if (!beta.ok()) return beta.status();

  // Outputs are computed into the response (inline) or a private buffer
  // copied to client memory afterwards.
  RunResult result;
  std::string output_copy;
  std::string& y = request.output.where == TensorView::Where::kInline ? result.output : output_copy;
  y.resize(static_cast<size_t>(request.tensor_bytes()));
  const size_t rows = static_cast<size_t>(request.shape.rows);
  std::vector<float> mean_copy, inv_std_copy;
  std::vector<float>& mean =
      request.mean.where == TensorView::Where::kInline ? result.mean : mean_copy;
  std::vector<float>& inv_std =
      request.inv_std.where == TensorView::Where::kInline ? result.inv_std : inv_std_copy;
  if (request.has_stats()) {
    mean.resize(rows);
    inv_std.resize(rows);
  }

  kernels::HostRowOpArgs args;
  args.x = *x;
  args.y = y.data();
  args.gamma = *gamma;
  args.beta = *beta;
  args.mean = request.has_stats() ? mean.data() : nullptr;
  args.inv_std = request.has_stats() ? inv_std.data() : nullptr;
  if (request.op == kernels::Op::kLayerNorm) args.epsilon = request.epsilon;
  const auto start = std::chrono::steady_clock::now();
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

  for (auto [view, data] : {std::pair(&request.output, static_cast<const void*>(y.data())),
                            std::pair(&request.mean, static_cast<const void*>(mean.data())),
                            std::pair(&request.inv_std,
                                      static_cast<const void*>(inv_std.data()))}) {
    if (view->where != TensorView::Where::kClientHost) continue;
    if (absl::Status s = CopyToClientHost(view->data, data, view->bytes); !s.ok()) return s;
  }
  return result;
}

BackendStats CpuBackend::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kt::server
