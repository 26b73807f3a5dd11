// Staging a Run's operands on the GPU (operand_staging.h).
#include "server/operand_staging.h"

#include "server/client_tensors.h"
#include "server/cuda_status.h"

namespace kt::server {

OperandStaging::~OperandStaging() {
  for (const Staged& staged : staged_) {
    if (staged.device != nullptr) cudaFreeAsync(staged.device, stream_);
  }
}

absl::Status OperandStaging::Allocate(Staged& staged, int64_t bytes) {
  return CudaError(cudaMallocAsync(&staged.device, static_cast<size_t>(bytes), stream_),
                   "cudaMallocAsync");
}

absl::Status OperandStaging::StageInput(const TensorView& view, Staged& staged) {
  const char* source = view.data;
  if (view.where == TensorView::Where::kClientHost) {
    // A private copy: the client could change or shrink its memory under
    // the copy (CopyFromClientHost turns that into an error, not a crash).
    if (absl::Status s = ResizeForClientCopy(staged.host, view.bytes); !s.ok()) return s;
    if (absl::Status s = CopyFromClientHost(staged.host.data(), view.data, view.bytes);
        !s.ok()) {
      return s;
    }
    source = staged.host.data();
  }
  if (absl::Status s = Allocate(staged, view.bytes); !s.ok()) return s;
  // Pageable source: the call returns once the bytes are staged, so
  // `source` need not outlive it.
  return CudaError(cudaMemcpyAsync(staged.device, source, static_cast<size_t>(view.bytes),
                                   cudaMemcpyHostToDevice, stream_),
                   "copying an input to the device");
}

absl::Status OperandStaging::Stage(const RunRequest& request, kernels::RowOpArgs& args) {
  for (kernels::Operand operand : kernels::kAllOperands) {
    const TensorView& view = request.tensor(operand);
    Staged& staged = staged_[static_cast<size_t>(operand)];
    switch (view.where) {
      case TensorView::Where::kAbsent:
        continue;
      case TensorView::Where::kDevice:
        args.set_operand(operand, view.data);
        continue;
      case TensorView::Where::kInline:
      case TensorView::Where::kClientHost:
        break;
    }
    // The residual is both: copied in, and back after the launch.
    const absl::Status s =
        ReadBeforeRun(operand) ? StageInput(view, staged) : Allocate(staged, view.bytes);
    if (!s.ok()) return s;
    args.set_operand(operand, staged.device);
  }
  return absl::OkStatus();
}

bool OperandStaging::stages_outputs() const {
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (kernels::IsOutput(operand) && staged_[static_cast<size_t>(operand)].device != nullptr) {
      return true;
    }
  }
  return false;
}

bool OperandStaging::stages_any() const {
  for (const Staged& staged : staged_) {
    if (staged.device != nullptr) return true;
  }
  return false;
}

absl::Status OperandStaging::QueueCopiesBack(const RunRequest& request, RunResult& result) {
  for (kernels::Operand operand : kernels::kAllOperands) {
    Staged& staged = staged_[static_cast<size_t>(operand)];
    if (!kernels::IsOutput(operand) || staged.device == nullptr) continue;
    const TensorView& view = request.tensor(operand);
    std::string& host = view.where == TensorView::Where::kInline
                            ? result.inline_output(operand)
                            : staged.host;
    if (absl::Status s = ResizeForClientCopy(host, view.bytes); !s.ok()) return s;
    if (absl::Status s = CudaError(cudaMemcpyAsync(host.data(), staged.device, host.size(),
                                                   cudaMemcpyDeviceToHost, stream_),
                                   "copying an output to the host");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status OperandStaging::WriteToClientHost(const RunRequest& request) const {
  for (kernels::Operand operand : kernels::kAllOperands) {
    const TensorView& view = request.tensor(operand);
    if (!kernels::IsOutput(operand) || view.where != TensorView::Where::kClientHost) continue;
    const Staged& staged = staged_[static_cast<size_t>(operand)];
    if (absl::Status s = WriteOutputToClientHost(request, operand, staged.host.data()); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace kt::server
