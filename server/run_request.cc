// Request validation for the daemon (see run_request.h).
#include "server/run_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/convert.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

constexpr size_t kMaxBufferIdBytes = 128;

// Stage 1 of a BufferSlice or IpcSlice: the form, not the memory.
template <typename Slice>
absl::Status CheckOffset(const Slice& slice, absl::string_view field, int64_t alignment) {
  if (slice.offset_bytes() < 0 || slice.offset_bytes() % alignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".offset_bytes=", slice.offset_bytes(),
                     " must be >= 0 and a multiple of ", alignment, " (the element size)"));
  }
  return absl::OkStatus();
}

// Stage 1 of a reference that names client memory (TensorRef or OutputRef).
template <typename Ref>
absl::Status CheckMemoryRef(const Ref& ref, absl::string_view field, int64_t alignment) {
  if (ref.has_buffer()) {
    const std::string& id = ref.buffer().buffer_id();
    if (id.empty() || id.size() > kMaxBufferIdBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".buffer.buffer_id must be a RegisterBuffer id (1 to ", kMaxBufferIdBytes,
          " characters), got ", id.size()));
    }
    return CheckOffset(ref.buffer(), absl::StrCat(field, ".buffer"), alignment);
  }
  if (ref.cuda_ipc().handle().size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".cuda_ipc.handle has ",
                                                   ref.cuda_ipc().handle().size(),
                                                   " bytes, want exactly ", kCudaIpcHandleBytes,
                                                   " (a cudaIpcMemHandle_t)"));
  }
  if (ref.cuda_ipc().device_ordinal() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".cuda_ipc.device_ordinal=", ref.cuda_ipc().device_ordinal(), " must be >= 0"));
  }
  return CheckOffset(ref.cuda_ipc(), absl::StrCat(field, ".cuda_ipc"), alignment);
}

// Stage 1 of an input: inline bytes of exactly the right size, or memory.
absl::Status CheckInput(const pb::TensorRef& ref, absl::string_view field, int64_t want_bytes,
                        int64_t alignment, TensorView& view) {
  view.bytes = want_bytes;
  switch (ref.location_case()) {
    case pb::TensorRef::kInlineData: {
      const int64_t got = static_cast<int64_t>(ref.inline_data().size());
      if (got != want_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".inline_data has ", got,
                                                       " bytes, want exactly ", want_bytes));
      }
      view.where = TensorView::Where::kInline;
      view.data = const_cast<char*>(ref.inline_data().data());  // read, never written
      return absl::OkStatus();
    }
    case pb::TensorRef::kBuffer:
    case pb::TensorRef::kCudaIpc:
      return CheckMemoryRef(ref, field, alignment);
    case pb::TensorRef::LOCATION_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, " is not set: give ", field,
                                                 ".inline_data, .buffer or .cuda_ipc"));
}

// Stage 1 of an output: returned inline (unset or return_inline=true) or
// written to memory.
absl::Status CheckOutput(const pb::OutputRef& ref, absl::string_view field, int64_t bytes,
                         int64_t alignment, TensorView& view) {
  view.bytes = bytes;
  switch (ref.location_case()) {
    case pb::OutputRef::kReturnInline:
      if (!ref.return_inline()) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".return_inline=false: set it to true, leave ", field,
            " unset (inline), or give .buffer or .cuda_ipc"));
      }
      [[fallthrough]];
    case pb::OutputRef::LOCATION_NOT_SET:
      view.where = TensorView::Where::kInline;
      return absl::OkStatus();
    case pb::OutputRef::kBuffer:
    case pb::OutputRef::kCudaIpc:
      return CheckMemoryRef(ref, field, alignment);
  }
  return absl::OkStatus();
}

absl::Status CheckEvent(const std::string& handle, absl::string_view field) {
  if (!handle.empty() && handle.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", handle.size(),
                                                   " bytes, want exactly ", kCudaIpcHandleBytes,
                                                   " (a cudaIpcEventHandle_t) or none"));
  }
  return absl::OkStatus();
}

// Stage 2 of one reference: the memory it names and the bounds check.
template <typename Ref>
absl::Status Resolve(const Ref& ref, absl::string_view field, TensorResolver& resolver,
                     TensorView& view, RunRequest& run) {
  if (!ref.has_buffer() && !ref.has_cuda_ipc()) return absl::OkStatus();  // inline
  absl::StatusOr<TensorResolver::Opened> opened =
      ref.has_buffer()
          ? resolver.RegisteredBuffer(ref.buffer().buffer_id())
          : resolver.CudaIpcAllocation(ref.cuda_ipc().handle(), ref.cuda_ipc().device_ordinal());
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat(field, ": ", opened.status().message()));
  }
  const int64_t offset =
      ref.has_buffer() ? ref.buffer().offset_bytes() : ref.cuda_ipc().offset_bytes();
  if (offset > opened->usable_bytes || view.bytes > opened->usable_bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        field, ": offset_bytes=", offset, " + ", view.bytes, " bytes is past the end of the ",
        ref.has_buffer() ? "registered buffer" : "CUDA allocation", " (", opened->usable_bytes,
        " bytes)"));
  }
  view.where = opened->memory->space() == MemorySpace::kDevice ? TensorView::Where::kDevice
                                                                : TensorView::Where::kClientHost;
  view.data = opened->memory->base() + offset;
  run.memory.push_back(std::move(opened->memory));
  return absl::OkStatus();
}

bool Overlap(const TensorView& a, const TensorView& b) {
  return a.in_client_memory() && b.in_client_memory() && a.data < b.data + b.bytes &&
         b.data < a.data + a.bytes;
}

}  // namespace

int64_t RunRequest::tensor_bytes() const {
  return shape.elements() * static_cast<int64_t>(kernels::DTypeSize(dtype));
}

namespace {

// Stage 1 of per-row float32 statistics written to client memory (they
// cannot be "returned inline" through an OutputRef: a flag asks for that).
absl::Status CheckStatsRef(const pb::OutputRef& ref, absl::string_view field,
                           absl::string_view inline_flag, int64_t bytes, TensorView& view) {
  if (!ref.has_buffer() && !ref.has_cuda_ipc()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must name client memory (.buffer or .cuda_ipc); for inline statistics set ",
        inline_flag));
  }
  if (absl::Status s = CheckMemoryRef(ref, field, sizeof(float)); !s.ok()) return s;
  view.bytes = bytes;
  return absl::OkStatus();
}

absl::Status CheckEpsilon(double epsilon, absl::string_view field) {
  if (!std::isfinite(epsilon) || epsilon <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", epsilon, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLayerNorm(const pb::RunRequest& request, RunRequest& run) {
  if (!request.has_layer_norm()) {
    return absl::InvalidArgumentError(
        "layer_norm is not set: op=layer_norm needs layer_norm.epsilon");
  }
  const pb::LayerNormParams& params = request.layer_norm();
  const int64_t element = static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  const int64_t param_bytes = run.shape.cols * element;
  if (params.has_gamma()) {
    if (absl::Status s = CheckInput(params.gamma(), "layer_norm.gamma", param_bytes, element,
                                    run.gamma);
        !s.ok()) {
      return s;
    }
  }
  if (params.has_beta()) {
    if (absl::Status s =
            CheckInput(params.beta(), "layer_norm.beta", param_bytes, element, run.beta);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckEpsilon(params.epsilon(), "layer_norm.epsilon"); !s.ok()) return s;
  run.epsilon = params.epsilon();
  const int64_t stats_bytes = run.shape.rows * static_cast<int64_t>(sizeof(float));
  if (params.has_mean() != params.has_inv_std()) {
    return absl::InvalidArgumentError(
        "layer_norm.mean and layer_norm.inv_std go together: give both or neither");
  }
  if (params.has_mean()) {
    if (params.want_mean_inv_std()) {
      return absl::InvalidArgumentError(
          "layer_norm.want_mean_inv_std returns the statistics inline; it cannot be combined "
          "with layer_norm.mean / inv_std");
    }
    for (auto [ref, field, view] : {std::tuple(&params.mean(), "layer_norm.mean", &run.mean),
                                    std::tuple(&params.inv_std(), "layer_norm.inv_std",
                                               &run.inv_std)}) {
      if (absl::Status s =
              CheckStatsRef(*ref, field, "layer_norm.want_mean_inv_std", stats_bytes, *view);
          !s.ok()) {
        return s;
      }
    }
  } else if (params.want_mean_inv_std()) {
    run.mean = {TensorView::Where::kInline, nullptr, stats_bytes};
    run.inv_std = {TensorView::Where::kInline, nullptr, stats_bytes};
  }
  return absl::OkStatus();
}

absl::Status ValidateRmsNorm(const pb::RunRequest& request, RunRequest& run) {
  if (!request.has_rms_norm()) {
    return absl::InvalidArgumentError("rms_norm is not set: op=rms_norm needs rms_norm.epsilon");
  }
  const pb::RmsNormParams& params = request.rms_norm();
  const int64_t element = static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  if (params.has_weight()) {
    if (absl::Status s = CheckInput(params.weight(), "rms_norm.weight",
                                    run.shape.cols * element, element, run.gamma);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckEpsilon(params.epsilon(), "rms_norm.epsilon"); !s.ok()) return s;
  run.epsilon = params.epsilon();
  const int64_t stats_bytes = run.shape.rows * static_cast<int64_t>(sizeof(float));
  if (params.has_inv_rms()) {
    if (params.want_inv_rms()) {
      return absl::InvalidArgumentError(
          "rms_norm.want_inv_rms returns 1/rms inline; it cannot be combined with "
          "rms_norm.inv_rms");
    }
    return CheckStatsRef(params.inv_rms(), "rms_norm.inv_rms", "rms_norm.want_inv_rms",
                         stats_bytes, run.inv_std);
  }
  if (params.want_inv_rms()) run.inv_std = {TensorView::Where::kInline, nullptr, stats_bytes};
  return absl::OkStatus();
}

absl::Status ValidateReduceScale(const pb::RunRequest& request, RunRequest& run) {
  // The scales are half of the result: always written, inline unless the
  // request names memory for them.
  return CheckOutput(request.reduce_scale().row_scale(), "reduce_scale.row_scale",
                     run.shape.rows * static_cast<int64_t>(sizeof(float)), sizeof(float),
                     run.row_scale);
}

absl::Status ValidateScaledMaskedSoftmax(const pb::RunRequest& request,
                                         int64_t max_request_bytes, RunRequest& run) {
  const pb::ScaledMaskedSoftmaxParams& params = request.scaled_masked_softmax();
  if (params.has_scale() && !std::isfinite(params.scale())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_masked_softmax.scale=", params.scale(), " must be finite"));
  }
  run.scale = params.has_scale() ? params.scale() : 1.0;
  run.causal = params.causal();
  const int64_t mask_rows = params.mask_rows();
  if (mask_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_masked_softmax.mask_rows=", mask_rows, " must be >= 0"));
  }
  if ((params.has_mask() || params.causal()) && mask_rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_masked_softmax.mask_rows=", mask_rows, " must be >= 1 with ",
        params.has_mask() ? "a mask" : "causal",
        ": it is the query length q of the (batch, heads, q, k) input"));
  }
  if (mask_rows > 0 && run.shape.rows % mask_rows != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_masked_softmax.mask_rows=", mask_rows, " does not divide shape.rows=",
        run.shape.rows, " (rows are batch x heads x q, the query index is row % mask_rows)"));
  }
  run.mask_rows = mask_rows;
  if (params.has_mask()) {
    // mask_rows divides rows, so the mask is no larger than the input,
    // whose byte count is known not to overflow.
    const int64_t element = static_cast<int64_t>(kernels::DTypeSize(run.dtype));
    const int64_t mask_bytes = mask_rows * run.shape.cols * element;
    if (params.mask().has_inline_data() && mask_bytes > max_request_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "scaled_masked_softmax.mask is ", mask_bytes, " bytes, over the daemon's limit of ",
          max_request_bytes, " for inline tensors (--max_request_bytes)"));
    }
    return CheckInput(params.mask(), "scaled_masked_softmax.mask", mask_bytes, element,
                      run.mask);
  }
  return absl::OkStatus();
}

// The names the op's operands go by in messages.
struct OperandNames {
  const char* gamma = "layer_norm.gamma";
  const char* inv_std = "layer_norm.inv_std";
};

OperandNames NamesOf(kernels::Op op) {
  if (op == kernels::Op::kRmsNorm) return {"rms_norm.weight", "rms_norm.inv_rms"};
  return {};
}

}  // namespace

absl::StatusOr<RunRequest> ValidateRunRequest(const pb::RunRequest& request,
                                              int64_t max_request_bytes) {
  RunRequest run;
  absl::StatusOr<kernels::Op> op = proto::OpFromProto(request.op(), "op");
  if (!op.ok()) return op.status();
  absl::StatusOr<kernels::DType> dtype = proto::DTypeFromProto(request.dtype(), "dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<kernels::Shape> shape = proto::ShapeFromProto(request.shape(), *op, *dtype);
  if (!shape.ok()) return shape.status();
  run.op = *op;
  run.dtype = *dtype;
  run.shape = *shape;
  const int64_t bytes = run.tensor_bytes();
  const int64_t element = static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  // The limit guards the daemon's own memory: it applies when a tensor
  // travels in the messages, not to client memory referenced in place.
  const bool travels_inline = request.input().has_inline_data() ||
                              (!request.output().has_buffer() && !request.output().has_cuda_ipc());
  if (travels_inline && bytes > max_request_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shape.rows=", run.shape.rows, " x shape.cols=", run.shape.cols,
        run.shape.inner > 1 ? absl::StrCat(" x shape.inner=", run.shape.inner) : std::string(),
        " is ", bytes, " bytes per tensor, over the daemon's limit of ", max_request_bytes,
        " for inline tensors (--max_request_bytes)"));
  }
  if (absl::Status s = CheckInput(request.input(), "input", bytes, element, run.input); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckOutput(request.output(), "output", bytes, element, run.output);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckEvent(request.wait_event(), "wait_event"); !s.ok()) return s;
  if (absl::Status s = CheckEvent(request.done_event(), "done_event"); !s.ok()) return s;
  run.wait_event = request.wait_event();
  run.done_event = request.done_event();
  run.time_kernel = request.time_kernel();

  // Each op's parameters, and no other op's.
  const struct {
    const char* field;
    bool set;
    kernels::Op op;
  } params[] = {
      {"layer_norm", request.has_layer_norm(), kernels::Op::kLayerNorm},
      {"rms_norm", request.has_rms_norm(), kernels::Op::kRmsNorm},
      {"reduce_scale", request.has_reduce_scale(), kernels::Op::kReduceScale},
      {"scaled_masked_softmax", request.has_scaled_masked_softmax(),
       kernels::Op::kScaledMaskedSoftmax},
  };
  for (const auto& p : params) {
    if (p.set && p.op != run.op) {
      return absl::InvalidArgumentError(absl::StrCat(p.field, " is set but op=",
                                                     kernels::OpName(run.op), " takes no ",
                                                     p.field, " parameters"));
    }
  }
  absl::Status status;
  switch (run.op) {
    case kernels::Op::kLayerNorm:
      status = ValidateLayerNorm(request, run);
      break;
    case kernels::Op::kRmsNorm:
      status = ValidateRmsNorm(request, run);
      break;
    case kernels::Op::kReduceScale:
      status = ValidateReduceScale(request, run);
      break;
    case kernels::Op::kScaledMaskedSoftmax:
      status = ValidateScaledMaskedSoftmax(request, max_request_bytes, run);
      break;
    case kernels::Op::kSoftmax:
    case kernels::Op::kLogSoftmax:
      break;
  }
  if (!status.ok()) return status;
  return run;
}

absl::Status ResolveTensorRefs(const pb::RunRequest& request, TensorResolver& resolver,
                               RunRequest& run) {
  if (absl::Status s = Resolve(request.input(), "input", resolver, run.input, run); !s.ok()) {
    return s;
  }
  if (absl::Status s = Resolve(request.output(), "output", resolver, run.output, run); !s.ok()) {
    return s;
  }
  const OperandNames names = NamesOf(run.op);
  switch (run.op) {
    case kernels::Op::kLayerNorm: {
      const pb::LayerNormParams& params = request.layer_norm();
      for (auto [ref, field, view] :
           {std::tuple(&params.gamma(), "layer_norm.gamma", &run.gamma),
            std::tuple(&params.beta(), "layer_norm.beta", &run.beta)}) {
        if (absl::Status s = Resolve(*ref, field, resolver, *view, run); !s.ok()) return s;
      }
      for (auto [ref, field, view] :
           {std::tuple(&params.mean(), "layer_norm.mean", &run.mean),
            std::tuple(&params.inv_std(), "layer_norm.inv_std", &run.inv_std)}) {
        if (absl::Status s = Resolve(*ref, field, resolver, *view, run); !s.ok()) return s;
      }
      break;
    }
    case kernels::Op::kRmsNorm: {
      const pb::RmsNormParams& params = request.rms_norm();
      if (absl::Status s = Resolve(params.weight(), names.gamma, resolver, run.gamma, run);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = Resolve(params.inv_rms(), names.inv_std, resolver, run.inv_std, run);
          !s.ok()) {
        return s;
      }
      break;
    }
    case kernels::Op::kReduceScale:
      if (absl::Status s = Resolve(request.reduce_scale().row_scale(), "reduce_scale.row_scale",
                                   resolver, run.row_scale, run);
          !s.ok()) {
        return s;
      }
      break;
    case kernels::Op::kScaledMaskedSoftmax:
      if (absl::Status s = Resolve(request.scaled_masked_softmax().mask(),
                                   "scaled_masked_softmax.mask", resolver, run.mask, run);
          !s.ok()) {
        return s;
      }
      break;
    case kernels::Op::kSoftmax:
    case kernels::Op::kLogSoftmax:
      break;
  }

  // Outputs may not overlap anything else, except the output exactly on
  // the input (the kernels support in place).
  const std::pair<const TensorView*, const char*> outputs[] = {
      {&run.output, "output"},
      {&run.mean, "layer_norm.mean"},
      {&run.inv_std, names.inv_std},
      {&run.row_scale, "reduce_scale.row_scale"}};
  const std::pair<const TensorView*, const char*> all[] = {
      {&run.input, "input"},
      {&run.gamma, names.gamma},
      {&run.beta, "layer_norm.beta"},
      {&run.mask, "scaled_masked_softmax.mask"},
      {&run.output, "output"},
      {&run.mean, "layer_norm.mean"},
      {&run.inv_std, names.inv_std},
      {&run.row_scale, "reduce_scale.row_scale"}};
  for (const auto& [out, out_name] : outputs) {
    for (const auto& [other, other_name] : all) {
      if (out == other || !Overlap(*out, *other)) continue;
      const bool in_place =
          out == &run.output && other == &run.input && out->data == other->data;
      if (in_place) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          out_name, " overlaps ", other_name,
          "; outputs must not overlap other tensors (only output exactly on input, in place, "
          "is allowed)"));
    }
  }

  const bool has_device_tensor = run.input.where == TensorView::Where::kDevice ||
                                 run.output.where == TensorView::Where::kDevice;
  if ((!run.wait_event.empty() || !run.done_event.empty()) && !has_device_tensor) {
    return absl::InvalidArgumentError(
        "wait_event / done_event order work on the GPU: they need the input or the output in "
        "device memory (a CUDA IPC buffer)");
  }
  return absl::OkStatus();
}

}  // namespace kt::server
