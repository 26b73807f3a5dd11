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
  for (const TensorView* view : {&request.output, &request.mean, &request.inv_std,
                                 &request.row_scale}) {
    if (view->where == TensorView::Where::kDevice) {
      return absl::FailedPreconditionError("the CPU backend cannot write device memory");
    }
  }
  std::string input_copy, gamma_copy, beta_copy, mask_copy;
  absl::StatusOr<const void*> x = Readable(request.input, input_copy);
  if (!x.ok()) return x.status();
  absl::StatusOr<const void*> gamma = Readable(request.gamma, gamma_copy);
  if (!gamma.ok()) return gamma.status();
  absl::StatusOr<const void*> beta = Readable(request.beta, beta_copy);
  if (!beta.ok()) return beta.status();
  absl::StatusOr<const void*> mask = Readable(request.mask, mask_copy);
  if (!mask.ok()) return mask.status();

  // Outputs are computed into the response (inline) or a private buffer
  // copied to client memory afterwards.
  RunResult result;
  std::string output_copy;
  std::string& y = request.output.where == TensorView::Where::kInline ? result.output : output_copy;
  y.resize(static_cast<size_t>(request.tensor_bytes()));
  const size_t rows = static_cast<size_t>(request.shape.rows);
  std::vector<float> mean_copy, inv_std_copy, row_scale_copy;
  // A per-row output the request asked for: sized, and its pointer for the
  // reference; null when absent.
  const auto stats = [rows](const TensorView& view, std::vector<float>& inline_values,
                            std::vector<float>& copy) -> std::vector<float>* {
    if (!view.present()) return nullptr;
    std::vector<float>& values = view.where == TensorView::Where::kInline ? inline_values : copy;
    values.resize(rows);
    return &values;
  };
  std::vector<float>* mean = stats(request.mean, result.mean, mean_copy);
  std::vector<float>* inv_std = stats(request.inv_std, result.inv_std, inv_std_copy);
  std::vector<float>* row_scale = stats(request.row_scale, result.row_scale, row_scale_copy);

  kernels::RowOpArgs args;
  args.x = *x;
  args.y = y.data();
  args.gamma = *gamma;
  args.beta = *beta;
  args.mean = mean != nullptr ? mean->data() : nullptr;
  args.inv_std = inv_std != nullptr ? inv_std->data() : nullptr;
  args.row_scale = row_scale != nullptr ? row_scale->data() : nullptr;
  if (kernels::TakesEpsilon(request.op)) args.params.epsilon = request.epsilon;
  if (request.op == kernels::Op::kScaledMaskedSoftmax) {
    args.params.scale = request.scale;
    args.mask = *mask;
    args.params.mask_rows = request.mask_rows;
    args.params.causal = request.causal;
  }
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

  for (auto [view, data] :
       {std::pair(&request.output, static_cast<const void*>(y.data())),
        std::pair(&request.mean, static_cast<const void*>(args.mean)),
        std::pair(&request.inv_std, static_cast<const void*>(args.inv_std)),
        std::pair(&request.row_scale, static_cast<const void*>(args.row_scale))}) {
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
