// Request validation for the daemon (see run_request.h).
#include "server/run_request.h"

#include <algorithm>
#include <cmath>
#include <string>
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
  view.memory = opened->memory.get();
  run.memory.push_back(std::move(opened->memory));
  return absl::OkStatus();
}

// Where a view in client memory starts in its memory object: two
// registrations of one shared-memory object are two mappings at two
// addresses, and their views are compared by these.
uint64_t ObjectOffset(const TensorView& view) {
  return view.memory->object_offset() + static_cast<uint64_t>(view.data - view.memory->base());
}

bool SameMemory(const TensorView& a, const TensorView& b) {
  return a.in_client_memory() && b.in_client_memory() &&
         a.memory->object() == b.memory->object();
}

bool Overlap(const TensorView& a, const TensorView& b) {
  if (!SameMemory(a, b)) return false;
  const uint64_t a_first = ObjectOffset(a);
  const uint64_t b_first = ObjectOffset(b);
  return a_first < b_first + static_cast<uint64_t>(b.bytes) &&
         b_first < a_first + static_cast<uint64_t>(a.bytes);
}

// Where one operand travels in a RunRequest: the field errors name, and its
// reference (an input's TensorRef or an output's OutputRef).
struct OperandField {
  const char* name = "";
  const pb::TensorRef* input = nullptr;
  const pb::OutputRef* output = nullptr;
  // Whether the request gives it (optional operands may be left out).
  bool given = true;
  // Per-row statistics travel as client memory or, when this flag of the
  // request is set, inline (their OutputRef cannot say "inline").
  const char* inline_flag = nullptr;
  bool inline_wanted = false;
};

// The one table of the operands' proto fields, per op: rms_norm's weight is
// the gamma operand and its inv_rms the inv_std one.
OperandField FieldOf(const pb::RunRequest& request, kernels::Op op, kernels::Operand operand) {
  const pb::LayerNormParams& layer_norm = request.layer_norm();
  const pb::RmsNormParams& rms_norm = request.rms_norm();
  const pb::ScaledMaskedSoftmaxParams& masked = request.scaled_masked_softmax();
  const bool rms = op == kernels::Op::kRmsNorm;
  switch (operand) {
    case kernels::Operand::kInput:
      return {"input", &request.input()};
    case kernels::Operand::kOutput:
      return {"output", nullptr, &request.output()};
    case kernels::Operand::kGamma:
      return rms ? OperandField{"rms_norm.weight", &rms_norm.weight(), nullptr,
                                rms_norm.has_weight()}
                 : OperandField{"layer_norm.gamma", &layer_norm.gamma(), nullptr,
                                layer_norm.has_gamma()};
    case kernels::Operand::kBeta:
      return {"layer_norm.beta", &layer_norm.beta(), nullptr, layer_norm.has_beta()};
    case kernels::Operand::kMask:
      return {"scaled_masked_softmax.mask", &masked.mask(), nullptr, masked.has_mask()};
    case kernels::Operand::kMean:
      return {"layer_norm.mean", nullptr, &layer_norm.mean(), layer_norm.has_mean(),
              "layer_norm.want_mean_inv_std", layer_norm.want_mean_inv_std()};
    case kernels::Operand::kInvStd:
      return rms ? OperandField{"rms_norm.inv_rms", nullptr, &rms_norm.inv_rms(),
                                rms_norm.has_inv_rms(), "rms_norm.want_inv_rms",
                                rms_norm.want_inv_rms()}
                 : OperandField{"layer_norm.inv_std", nullptr, &layer_norm.inv_std(),
                                layer_norm.has_inv_std(), "layer_norm.want_mean_inv_std",
                                layer_norm.want_mean_inv_std()};
    case kernels::Operand::kRowScale:
      return {"reduce_scale.row_scale", nullptr, &request.reduce_scale().row_scale()};
  }
  return {};
}

// Whether the operand's bytes travel in the messages (the size limit's
// business), as opposed to client memory referenced in place.
bool TravelsInline(const OperandField& field) {
  if (field.input != nullptr) return field.given && field.input->has_inline_data();
  if (field.inline_flag != nullptr) return !field.given && field.inline_wanted;
  return !field.output->has_buffer() && !field.output->has_cuda_ipc();
}

// Stage 1 of per-row float32 statistics written to client memory (they
// cannot be "returned inline" through an OutputRef: a flag asks for that).
absl::Status CheckStatsRef(const OperandField& field, int64_t bytes, TensorView& view) {
  if (field.inline_wanted) {
    return absl::InvalidArgumentError(
        absl::StrCat(field.inline_flag, " returns ", field.name,
                     " inline; it cannot be combined with ", field.name, " in client memory"));
  }
  const pb::OutputRef& ref = *field.output;
  if (!ref.has_buffer() && !ref.has_cuda_ipc()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field.name, " must name client memory (.buffer or .cuda_ipc); for inline statistics set ",
        field.inline_flag));
  }
  if (absl::Status s = CheckMemoryRef(ref, field.name, sizeof(float)); !s.ok()) return s;
  view.bytes = bytes;
  return absl::OkStatus();
}

// Stage 1 of one operand, filling its view.
absl::Status CheckOperand(const OperandField& field, int64_t bytes, int64_t alignment,
                          TensorView& view) {
  if (field.input != nullptr) {
    return field.given ? CheckInput(*field.input, field.name, bytes, alignment, view)
                       : absl::OkStatus();
  }
  if (field.inline_flag == nullptr) {
    return CheckOutput(*field.output, field.name, bytes, alignment, view);
  }
  if (field.given) return CheckStatsRef(field, bytes, view);
  if (field.inline_wanted) view = {TensorView::Where::kInline, nullptr, bytes};
  return absl::OkStatus();
}

absl::Status CheckEpsilon(double epsilon, absl::string_view field) {
  if (!std::isfinite(epsilon) || epsilon <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", epsilon, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::OpParams> LayerNormParams(const pb::RunRequest& request) {
  if (!request.has_layer_norm()) {
    return absl::InvalidArgumentError(
        "layer_norm is not set: op=layer_norm needs layer_norm.epsilon");
  }
  const pb::LayerNormParams& params = request.layer_norm();
  if (absl::Status s = CheckEpsilon(params.epsilon(), "layer_norm.epsilon"); !s.ok()) return s;
  if (params.has_mean() != params.has_inv_std()) {
    return absl::InvalidArgumentError(
        "layer_norm.mean and layer_norm.inv_std go together: give both or neither");
  }
  kernels::OpParams out;
  out.epsilon = params.epsilon();
  return out;
}

absl::StatusOr<kernels::OpParams> RmsNormParams(const pb::RunRequest& request) {
  if (!request.has_rms_norm()) {
    return absl::InvalidArgumentError("rms_norm is not set: op=rms_norm needs rms_norm.epsilon");
  }
  if (absl::Status s = CheckEpsilon(request.rms_norm().epsilon(), "rms_norm.epsilon"); !s.ok()) {
    return s;
  }
  kernels::OpParams out;
  out.epsilon = request.rms_norm().epsilon();
  return out;
}

absl::StatusOr<kernels::OpParams> ScaledMaskedSoftmaxParams(const pb::RunRequest& request,
                                                            kernels::Shape shape) {
  const pb::ScaledMaskedSoftmaxParams& params = request.scaled_masked_softmax();
  if (params.has_scale() && !std::isfinite(params.scale())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_masked_softmax.scale=", params.scale(), " must be finite"));
  }
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
  if (mask_rows > 0 && shape.rows % mask_rows != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scaled_masked_softmax.mask_rows=", mask_rows, " does not divide shape.rows=",
        shape.rows, " (rows are batch x heads x q, the query index is row % mask_rows)"));
  }
  kernels::OpParams out;
  out.scale = params.has_scale() ? params.scale() : 1.0;
  out.mask_rows = mask_rows;
  out.causal = params.causal();
  return out;
}

// The op's parameters message: refused on any other op, checked, and read
// into OpParams (the defaults for an op that has none).
absl::StatusOr<kernels::OpParams> ValidateParams(const pb::RunRequest& request, kernels::Op op,
                                                 kernels::Shape shape) {
  const struct {
    const char* field;
    bool set;
    kernels::Op op;
  } messages[] = {
      {"layer_norm", request.has_layer_norm(), kernels::Op::kLayerNorm},
      {"rms_norm", request.has_rms_norm(), kernels::Op::kRmsNorm},
      {"reduce_scale", request.has_reduce_scale(), kernels::Op::kReduceScale},
      {"scaled_masked_softmax", request.has_scaled_masked_softmax(),
       kernels::Op::kScaledMaskedSoftmax},
  };
  for (const auto& message : messages) {
    if (message.set && message.op != op) {
      return absl::InvalidArgumentError(absl::StrCat(message.field, " is set but op=",
                                                     kernels::OpName(op), " takes no ",
                                                     message.field, " parameters"));
    }
  }
  switch (op) {
    case kernels::Op::kLayerNorm:
      return LayerNormParams(request);
    case kernels::Op::kRmsNorm:
      return RmsNormParams(request);
    case kernels::Op::kScaledMaskedSoftmax:
      return ScaledMaskedSoftmaxParams(request, shape);
    case kernels::Op::kSoftmax:
    case kernels::Op::kLogSoftmax:
    case kernels::Op::kReduceScale:
      break;
  }
  return kernels::OpParams();
}

// ResourceExhausted when an operand that travels in the messages is over
// the limit, which guards the daemon's own memory (client memory referenced
// in place is not limited).
absl::Status CheckSizeLimit(const RunRequest& run, kernels::Operand operand,
                            const OperandField& field, int64_t max_request_bytes) {
  const int64_t bytes =
      kernels::OperandBytes(operand, run.dtype, run.shape, run.params.mask_rows);
  if (!TravelsInline(field) || bytes <= max_request_bytes) return absl::OkStatus();
  const bool whole_tensor =
      operand == kernels::Operand::kInput || operand == kernels::Operand::kOutput;
  const std::string what =
      whole_tensor
          ? absl::StrCat("shape.rows=", run.shape.rows, " x shape.cols=", run.shape.cols,
                         run.shape.inner > 1 ? absl::StrCat(" x shape.inner=", run.shape.inner)
                                             : std::string(),
                         " is ", bytes, " bytes per tensor")
          : absl::StrCat(field.name, " is ", bytes, " bytes");
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ", over the daemon's limit of ", max_request_bytes,
                   " for inline tensors (--max_request_bytes); register shared memory or CUDA "
                   "IPC memory for larger ones"));
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
  absl::StatusOr<kernels::OpParams> params = ValidateParams(request, run.op, run.shape);
  if (!params.ok()) return params.status();
  run.params = *params;

  // The size limit first: a tensor over it is refused before its bytes are
  // looked at.
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (!kernels::TakesOperand(run.op, operand)) continue;
    if (absl::Status s =
            CheckSizeLimit(run, operand, FieldOf(request, run.op, operand), max_request_bytes);
        !s.ok()) {
      return s;
    }
  }
  const int64_t element = static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (!kernels::TakesOperand(run.op, operand)) continue;
    const int64_t bytes =
        kernels::OperandBytes(operand, run.dtype, run.shape, run.params.mask_rows);
    const int64_t alignment =
        kernels::IsRowStat(operand) ? static_cast<int64_t>(sizeof(float)) : element;
    if (absl::Status s = CheckOperand(FieldOf(request, run.op, operand), bytes, alignment,
                                      run.tensor(operand));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckEvent(request.wait_event(), "wait_event"); !s.ok()) return s;
  if (absl::Status s = CheckEvent(request.done_event(), "done_event"); !s.ok()) return s;
  run.wait_event = request.wait_event();
  run.done_event = request.done_event();
  run.time_kernel = request.time_kernel();
  // Which device it names is the backend's to say (it knows the devices);
  // here only its form: a UUID or an ordinal is short and printable.
  if (request.device().size() > kMaxDeviceSelectorBytes ||
      !std::all_of(request.device().begin(), request.device().end(),
                   [](char c) { return c > ' ' && c < 127; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device must be a GPU UUID or a CUDA ordinal (at most ", kMaxDeviceSelectorBytes,
        " printable characters), got ", request.device().size(), " bytes"));
  }
  run.device = request.device();
  return run;
}

absl::Status ResolveTensorRefs(const pb::RunRequest& request, TensorResolver& resolver,
                               RunRequest& run) {
  run.memory.reserve(kernels::kOperandCount);  // one allocation, not one per reference
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (!kernels::TakesOperand(run.op, operand)) continue;
    const OperandField field = FieldOf(request, run.op, operand);
    TensorView& view = run.tensor(operand);
    const absl::Status s = field.input != nullptr
                               ? Resolve(*field.input, field.name, resolver, view, run)
                               : Resolve(*field.output, field.name, resolver, view, run);
    if (!s.ok()) return s;
  }

  // Outputs may not overlap anything else, except the output exactly on
  // the input (the kernels support in place).
  const TensorView& input = run.tensor(kernels::Operand::kInput);
  const TensorView& output = run.tensor(kernels::Operand::kOutput);
  for (kernels::Operand written : kernels::kAllOperands) {
    if (!kernels::IsOutput(written) || !kernels::TakesOperand(run.op, written)) continue;
    for (kernels::Operand other : kernels::kAllOperands) {
      if (other == written || !kernels::TakesOperand(run.op, other) ||
          !Overlap(run.tensor(written), run.tensor(other))) {
        continue;
      }
      const bool in_place = written == kernels::Operand::kOutput &&
                            other == kernels::Operand::kInput &&
                            ObjectOffset(output) == ObjectOffset(input);
      if (in_place) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          FieldOf(request, run.op, written).name, " overlaps ",
          FieldOf(request, run.op, other).name,
          "; outputs must not overlap other tensors (only output exactly on input, in place, "
          "is allowed)"));
    }
  }

  const bool has_device_tensor = input.where == TensorView::Where::kDevice ||
                                 output.where == TensorView::Where::kDevice;
  if ((!run.wait_event.empty() || !run.done_event.empty()) && !has_device_tensor) {
    return absl::InvalidArgumentError(
        "wait_event / done_event order work on the GPU: they need the input or the output in "
        "device memory (a CUDA IPC buffer)");
  }
  return absl::OkStatus();
}

}  // namespace kt::server
