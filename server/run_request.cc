// Request validation for the daemon (see run_request.h).
#include "server/run_request.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
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
  // Read and written back in place (the residual): client memory only.
  bool client_memory_only = false;
};

// The one table of the operands' proto fields, per op: the RMSNorm family's
// weight is the gamma operand and its inv_rms the inv_std one; the norms'
// residual and quantization scales are in their family's message, and a
// quantizing op's dynamic scales are its row_scale operand.
OperandField FieldOf(const pb::RunRequest& request, kernels::Op op, kernels::Operand operand) {
  const pb::LayerNormParams& layer_norm = request.layer_norm();
  const pb::RmsNormParams& rms_norm = request.rms_norm();
  const pb::ScaledMaskedSoftmaxParams& masked = request.scaled_masked_softmax();
  const bool rms = kernels::IsRmsNormFamily(op);
  const pb::Quantization& quant = rms ? rms_norm.quant() : layer_norm.quant();
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
      if (kernels::QuantizesOutput(op)) {
        return {rms ? "rms_norm.quant.scales" : "layer_norm.quant.scales", nullptr,
                &quant.scales()};
      }
      return {"reduce_scale.row_scale", nullptr, &request.reduce_scale().row_scale()};
    case kernels::Operand::kResidual: {
      OperandField field = rms ? OperandField{"rms_norm.residual", &rms_norm.residual(), nullptr,
                                              rms_norm.has_residual()}
                               : OperandField{"layer_norm.residual", &layer_norm.residual(),
                                              nullptr, layer_norm.has_residual()};
      field.client_memory_only = true;
      return field;
    }
    case kernels::Operand::kQuantScale:
      return {rms ? "rms_norm.quant.scale" : "layer_norm.quant.scale", &quant.scale(), nullptr,
              quant.has_scale()};
  }
  return {};
}

// Whether a Run of `op` with `params` takes the operand: the op's operands
// (kernels::TakesOperand) less the quantization scale its scale mode does
// not use (a static quantization reads quant_scale and writes no
// row_scale; a dynamic one the other way round).
bool Takes(kernels::Op op, const kernels::OpParams& params, kernels::Operand operand) {
  if (!kernels::TakesOperand(op, operand)) return false;
  if (!kernels::QuantizesOutput(op)) return true;
  const bool is_static = params.scale_mode == kernels::ScaleMode::kStatic;
  if (operand == kernels::Operand::kQuantScale) return is_static;
  if (operand == kernels::Operand::kRowScale) return !is_static;
  return true;
}

// The alignment of an operand's offset: its element (one-byte codes for a
// quantizing op's output; float32 for statistics and scales).
int64_t Alignment(kernels::Op op, kernels::DType dtype, kernels::Operand operand) {
  if (kernels::IsRowStat(operand) || operand == kernels::Operand::kQuantScale) {
    return static_cast<int64_t>(sizeof(float));
  }
  if (operand == kernels::Operand::kOutput) return kernels::OutputElementBytes(op, dtype);
  return static_cast<int64_t>(kernels::DTypeSize(dtype));
}

// Whether the operand's bytes travel in the messages (the size limit's
// business), as opposed to client memory referenced in place.
bool TravelsInline(const OperandField& field) {
  if (field.client_memory_only) return false;  // refused inline, with its own error
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
    if (!field.given) return absl::OkStatus();
    if (field.client_memory_only && !field.input->has_buffer() && !field.input->has_cuda_ipc()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field.name, field.input->has_inline_data() ? ".inline_data is refused" : " is not set",
          ": the residual is read and written back: pass it as a buffer or cuda_ipc (", field.name,
          ".buffer or .cuda_ipc)"));
    }
    return CheckInput(*field.input, field.name, bytes, alignment, view);
  }
  if (field.inline_flag == nullptr) {
    return CheckOutput(*field.output, field.name, bytes, alignment, view);
  }
  if (field.given) return CheckStatsRef(field, bytes, view);
  if (field.inline_wanted) view = {TensorView::Where::kInline, nullptr, bytes};
  return absl::OkStatus();
}

// A static quantization's scale: codes are y / scale, so it must be a
// finite positive number (0 would divide by zero, a negative one flip the
// codes' signs).
absl::Status CheckStaticScale(float value, absl::string_view field) {
  if (!std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", value, " must be finite and > 0 (codes are y / scale)"));
  }
  return absl::OkStatus();
}

absl::Status CheckEpsilon(double epsilon, absl::string_view field) {
  if (!std::isfinite(epsilon) || epsilon <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", epsilon, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

// The residual of a norm's message (`message`: "layer_norm", "rms_norm"):
// required by the add ops, refused on the others.
absl::Status CheckResidualGiven(bool given, absl::string_view message, kernels::Op op) {
  if (kernels::AddsResidual(op) && !given) {
    return absl::InvalidArgumentError(
        absl::StrCat(message, ".residual is not set: op=", kernels::OpName(op),
                     " adds a residual (x + residual, written back to it): give ", message,
                     ".residual as a .buffer or .cuda_ipc"));
  }
  if (!kernels::AddsResidual(op) && given) {
    return absl::InvalidArgumentError(absl::StrCat(
        message, ".residual is set but op=", kernels::OpName(op), " adds none (the add_* ops do)"));
  }
  return absl::OkStatus();
}

// A norm's Quantization (`message`.quant): required by the *_quant ops and
// refused on the others; its scalars read into `params` and checked here,
// with the fields named (the scale tensors are operands: the operand loop
// checks their references).
absl::Status ReadQuantization(bool given, const pb::Quantization& quant, absl::string_view message,
                              kernels::Op op, kernels::Shape shape, kernels::OpParams& params) {
  const std::string field = absl::StrCat(message, ".quant");
  if (!kernels::QuantizesOutput(op)) {
    if (!given) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, " is set but op=", kernels::OpName(op),
                                                   " writes no codes (the *_quant ops do)"));
  }
  if (!given) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is not set: op=", kernels::OpName(op),
                                                   " needs ", field,
                                                   " (its dtype and scale_mode)"));
  }
  if (absl::Status s = proto::QuantizationFromProto(quant, field, params); !s.ok()) return s;
  const absl::string_view mode = kernels::ScaleModeName(params.scale_mode);
  if (params.scale_mode == kernels::ScaleMode::kStatic) {
    if (!quant.has_scale()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field,
                       ".scale is not set: a static quantization reads its one float32 "
                       "scale from it"));
    }
    if (quant.has_scales()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".scales is set but a static quantization writes no scales; leave it unset"));
    }
    if (quant.scale_ub() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".scale_ub=", quant.scale_ub(),
                       " bounds computed scales; a static quantization takes none: leave it 0"));
    }
  } else if (quant.has_scale()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".scale is set but a ", mode, " quantization computes its scales: leave it unset (",
        field, ".scales says where they go)"));
  }
  if (!std::isfinite(quant.scale_ub()) || quant.scale_ub() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".scale_ub=", quant.scale_ub(),
                                                   " must be finite and >= 0 (0: no bound)"));
  }
  if (params.scale_mode == kernels::ScaleMode::kPerGroup) {
    if ((quant.group_size() != 64 && quant.group_size() != 128) ||
        shape.cols % quant.group_size() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".group_size=", quant.group_size(),
                       " must be 64 or 128 and divide shape.cols=", shape.cols));
    }
  } else if (quant.group_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".group_size=", quant.group_size(),
                                                   " is for SCALE_MODE_PER_GROUP; a ", mode,
                                                   " quantization takes 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<kernels::OpParams> LayerNormParams(const pb::RunRequest& request, kernels::Op op,
                                                  kernels::Shape shape) {
  if (!request.has_layer_norm()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_norm is not set: op=", kernels::OpName(op), " needs layer_norm.epsilon"));
  }
  const pb::LayerNormParams& params = request.layer_norm();
  if (absl::Status s = CheckEpsilon(params.epsilon(), "layer_norm.epsilon"); !s.ok()) return s;
  if (params.has_mean() != params.has_inv_std()) {
    return absl::InvalidArgumentError(
        "layer_norm.mean and layer_norm.inv_std go together: give both or neither");
  }
  kernels::OpParams out;
  out.epsilon = params.epsilon();
  if (absl::Status s = CheckResidualGiven(params.has_residual(), "layer_norm", op); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadQuantization(params.has_quant(), params.quant(), "layer_norm", op, shape, out);
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<kernels::OpParams> RmsNormParams(const pb::RunRequest& request, kernels::Op op,
                                                kernels::Shape shape) {
  if (!request.has_rms_norm()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm is not set: op=", kernels::OpName(op), " needs rms_norm.epsilon"));
  }
  const pb::RmsNormParams& params = request.rms_norm();
  if (absl::Status s = CheckEpsilon(params.epsilon(), "rms_norm.epsilon"); !s.ok()) return s;
  kernels::OpParams out;
  out.epsilon = params.epsilon();
  if (!std::isfinite(params.weight_offset())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm.weight_offset=", params.weight_offset(), " must be finite"));
  }
  if (params.weight_offset() != 0 && !params.has_weight()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm.weight_offset=", params.weight_offset(),
                     " needs rms_norm.weight (y = x_hat * (weight_offset + weight))"));
  }
  out.weight_offset = params.weight_offset();
  if (absl::Status s = CheckResidualGiven(params.has_residual(), "rms_norm", op); !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadQuantization(params.has_quant(), params.quant(), "rms_norm", op, shape, out);
      !s.ok()) {
    return s;
  }
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

bool IsReduceScale(kernels::Op op) { return op == kernels::Op::kReduceScale; }
bool IsScaledMaskedSoftmax(kernels::Op op) { return op == kernels::Op::kScaledMaskedSoftmax; }

// The op's parameters message: refused on any other op, checked, and read
// into OpParams (the defaults for an op that has none). Every form of a norm
// (add, quant) takes its family's message.
absl::StatusOr<kernels::OpParams> ValidateParams(const pb::RunRequest& request, kernels::Op op,
                                                 kernels::Shape shape) {
  const struct {
    const char* field;
    bool set;
    bool (*takes)(kernels::Op);
  } messages[] = {
      {"layer_norm", request.has_layer_norm(), &kernels::IsLayerNormFamily},
      {"rms_norm", request.has_rms_norm(), &kernels::IsRmsNormFamily},
      {"reduce_scale", request.has_reduce_scale(), &IsReduceScale},
      {"scaled_masked_softmax", request.has_scaled_masked_softmax(), &IsScaledMaskedSoftmax},
  };
  for (const auto& message : messages) {
    if (message.set && !message.takes(op)) {
      return absl::InvalidArgumentError(absl::StrCat(message.field, " is set but op=",
                                                     kernels::OpName(op), " takes no ",
                                                     message.field, " parameters"));
    }
  }
  if (kernels::IsLayerNormFamily(op)) return LayerNormParams(request, op, shape);
  if (kernels::IsRmsNormFamily(op)) return RmsNormParams(request, op, shape);
  if (op == kernels::Op::kScaledMaskedSoftmax) return ScaledMaskedSoftmaxParams(request, shape);
  return kernels::OpParams();
}

// a * b and a + b, or nullopt past int64_t (hostile strides reach it).
std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}
std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// The bytes one strided operand spans, as kernels::OperandBytes will count
// them, in checked arithmetic: stride and group stride as given (0:
// their defaults, cols and group_rows * stride), the last row's offset plus
// cols, times the element. nullopt when any step passes int64_t.
std::optional<int64_t> CheckedExtent(int64_t stride, int64_t group_rows, int64_t group_stride,
                                     kernels::Shape shape, int64_t element) {
  if (stride == 0) stride = shape.cols;
  int64_t last = 0;
  if (group_rows > 0) {
    if (group_stride == 0) {
      // RowLayoutOf computes the default even for one group.
      const std::optional<int64_t> whole = CheckedMul(group_rows, stride);
      if (!whole) return std::nullopt;
      group_stride = *whole;
    }
    const std::optional<int64_t> groups = CheckedMul((shape.rows - 1) / group_rows, group_stride);
    const std::optional<int64_t> within = CheckedMul((shape.rows - 1) % group_rows, stride);
    if (!groups || !within) return std::nullopt;
    const std::optional<int64_t> sum = CheckedAdd(*groups, *within);
    if (!sum) return std::nullopt;
    last = *sum;
  } else {
    const std::optional<int64_t> offset = CheckedMul(shape.rows - 1, stride);
    if (!offset) return std::nullopt;
    last = *offset;
  }
  const std::optional<int64_t> elements = CheckedAdd(last, shape.cols);
  if (!elements) return std::nullopt;
  return CheckedMul(*elements, element);
}

// RunRequest.row_strides, checked before any extent is computed from them
// (a hostile stride must be refused, never overflow), then read into
// `params`. The rules are kernels::ValidateOpArgs's, with the fields
// named: strides >= 0 (0: contiguous), row strides >= cols, last-axis rows
// only, a residual stride only for the add ops, group_rows for rms_norm
// only and dividing rows,
// group strides only with group_rows and wide enough that groups never
// overlap, and every operand's extent inside int64_t bytes.
absl::Status ReadRowStrides(const pb::RunRequest& request, kernels::Op op, kernels::DType dtype,
                            kernels::Shape shape, kernels::OpParams& params) {
  if (!request.has_row_strides()) return absl::OkStatus();
  const pb::RowStrides& strides = request.row_strides();
  const std::pair<const char*, int64_t> fields[] = {
      {"row_strides.input", strides.input()},
      {"row_strides.output", strides.output()},
      {"row_strides.residual", strides.residual()},
      {"row_strides.group_rows", strides.group_rows()},
      {"row_strides.input_group", strides.input_group()},
      {"row_strides.output_group", strides.output_group()},
  };
  for (const auto& [name, value] : fields) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", value, " must be >= 0 (0: contiguous)"));
    }
    if (value != 0 && shape.inner > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", value,
                       ": row strides are for last-axis rows; rows reduced along a middle "
                       "axis (shape.inner=",
                       shape.inner, ") are contiguous"));
    }
  }
  if (strides.residual() != 0 && !kernels::AddsResidual(op)) {
    return absl::InvalidArgumentError(absl::StrCat("row_strides.residual=", strides.residual(),
                                                   " is set but op=", kernels::OpName(op),
                                                   " takes no residual"));
  }
  const int64_t group_rows = strides.group_rows();
  if (group_rows > 0 && op != kernels::Op::kRmsNorm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_strides.group_rows=", group_rows,
        ": grouped rows (per-head views, QK-norm) are for rms_norm, not op=", kernels::OpName(op)));
  }
  if (group_rows > 0 && shape.rows % group_rows != 0) {
    return absl::InvalidArgumentError(absl::StrCat("row_strides.group_rows=", group_rows,
                                                   " must divide shape.rows=", shape.rows));
  }
  const struct {
    const char* name;
    const char* group_name;
    const char* what;
    int64_t stride;
    int64_t group_stride;
    bool grouped;
    int64_t element;
  } layouts[] = {
      {"row_strides.input", "row_strides.input_group", "input", strides.input(),
       strides.input_group(), true, static_cast<int64_t>(kernels::DTypeSize(dtype))},
      {"row_strides.output", "row_strides.output_group", "output", strides.output(),
       strides.output_group(), true, kernels::OutputElementBytes(op, dtype)},
      {"row_strides.residual", "", "residual", strides.residual(), 0, false,
       static_cast<int64_t>(kernels::DTypeSize(dtype))},
  };
  for (const auto& layout : layouts) {
    if (layout.stride != 0 && layout.stride < shape.cols) {
      return absl::InvalidArgumentError(absl::StrCat(layout.name, "=", layout.stride,
                                                     " must be >= shape.cols=", shape.cols,
                                                     " (rows must not overlap; 0: contiguous)"));
    }
    const int64_t stride = layout.stride == 0 ? shape.cols : layout.stride;
    const int64_t rows_in_group = layout.grouped ? group_rows : 0;
    if (layout.group_stride != 0) {
      if (group_rows == 0) {
        return absl::InvalidArgumentError(absl::StrCat(layout.group_name, "=", layout.group_stride,
                                                       " needs row_strides.group_rows"));
      }
      const std::optional<int64_t> within = CheckedMul(group_rows - 1, stride);
      const std::optional<int64_t> minimum =
          within ? CheckedAdd(*within, shape.cols) : std::nullopt;
      if (!minimum || layout.group_stride < *minimum) {
        return absl::InvalidArgumentError(
            absl::StrCat(layout.group_name, "=", layout.group_stride,
                         " must be >= (row_strides.group_rows - 1) * row stride + shape.cols",
                         minimum ? absl::StrCat(" = ", *minimum) : std::string(" (past 2^63)"),
                         " (groups must not overlap)"));
      }
    }
    if (!CheckedExtent(layout.stride, rows_in_group, layout.group_stride, shape, layout.element)) {
      return absl::InvalidArgumentError(absl::StrCat(
          layout.name, "=", layout.stride,
          rows_in_group > 0 ? absl::StrCat(", row_strides.group_rows=", rows_in_group, ", ",
                                           layout.group_name, "=", layout.group_stride)
                            : std::string(),
          " with shape.rows=", shape.rows, " puts the ", layout.what,
          "'s last row past a 64-bit byte offset"));
    }
  }
  proto::RowStridesFromProto(strides, params);
  return absl::OkStatus();
}

// ResourceExhausted when an operand that travels in the messages is over
// the limit, which guards the daemon's own memory (client memory referenced
// in place is not limited).
absl::Status CheckSizeLimit(const RunRequest& run, kernels::Operand operand,
                            const OperandField& field, int64_t max_request_bytes) {
  const int64_t bytes = kernels::OperandBytes(run.op, operand, run.dtype, run.shape, run.params);
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
  // Before any extent is computed (OperandBytes trusts the strides).
  if (absl::Status s = ReadRowStrides(request, run.op, run.dtype, run.shape, run.params); !s.ok()) {
    return s;
  }

  // The size limit first: a tensor over it is refused before its bytes are
  // looked at.
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (!Takes(run.op, run.params, operand)) continue;
    if (absl::Status s =
            CheckSizeLimit(run, operand, FieldOf(request, run.op, operand), max_request_bytes);
        !s.ok()) {
      return s;
    }
  }
  for (kernels::Operand operand : kernels::kAllOperands) {
    if (!Takes(run.op, run.params, operand)) continue;
    const int64_t bytes = kernels::OperandBytes(run.op, operand, run.dtype, run.shape, run.params);
    if (absl::Status s = CheckOperand(FieldOf(request, run.op, operand), bytes,
                                      Alignment(run.op, run.dtype, operand), run.tensor(operand));
        !s.ok()) {
      return s;
    }
  }
  // The response's output_data is contiguous: strides describe client memory.
  if (run.tensor(kernels::Operand::kOutput).where == TensorView::Where::kInline &&
      !run.layout(kernels::Operand::kOutput).contiguous(run.shape.cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row_strides.output=", request.row_strides().output(),
        " / row_strides.output_group=", request.row_strides().output_group(),
        " lay out the output in client memory, but it is returned inline (contiguous): give "
        "output a .buffer or .cuda_ipc, or leave them 0"));
  }
  const TensorView& scale = run.tensor(kernels::Operand::kQuantScale);
  if (scale.where == TensorView::Where::kInline) {
    float value = 0;
    std::memcpy(&value, scale.data, sizeof(value));
    if (absl::Status s =
            CheckStaticScale(value, FieldOf(request, run.op, kernels::Operand::kQuantScale).name);
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
    if (!Takes(run.op, run.params, operand)) continue;
    const OperandField field = FieldOf(request, run.op, operand);
    TensorView& view = run.tensor(operand);
    const absl::Status s = field.input != nullptr
                               ? Resolve(*field.input, field.name, resolver, view, run)
                               : Resolve(*field.output, field.name, resolver, view, run);
    if (!s.ok()) return s;
  }

  // A static scale the daemon can read now (client host memory; inline
  // ones were read in stage 1). One in device memory is the caller's to
  // get right: reading it would cost a copy and a sync per Run.
  const TensorView& scale = run.tensor(kernels::Operand::kQuantScale);
  if (scale.where == TensorView::Where::kClientHost) {
    float value = 0;
    if (absl::Status s = CopyFromClientHost(&value, scale.data, sizeof(value)); !s.ok()) return s;
    if (absl::Status s =
            CheckStaticScale(value, FieldOf(request, run.op, kernels::Operand::kQuantScale).name);
        !s.ok()) {
      return s;
    }
  }

  // What is written (the output, the residual, statistics and scales) may
  // not overlap anything else, compared as byte extents (a strided tensor's
  // gaps included, conservatively), except the output exactly on the
  // input with the same layout: in place, which the kernels support for
  // the ops that write the storage dtype.
  const TensorView& input = run.tensor(kernels::Operand::kInput);
  const TensorView& output = run.tensor(kernels::Operand::kOutput);
  for (kernels::Operand written : kernels::kAllOperands) {
    if (!kernels::IsOutput(written) || !Takes(run.op, run.params, written)) continue;
    for (kernels::Operand other : kernels::kAllOperands) {
      if (other == written || !Takes(run.op, run.params, other) ||
          !Overlap(run.tensor(written), run.tensor(other))) {
        continue;
      }
      const bool on_input = written == kernels::Operand::kOutput &&
                            other == kernels::Operand::kInput &&
                            ObjectOffset(output) == ObjectOffset(input);
      if (on_input) {
        if (kernels::QuantizesOutput(run.op)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "output is on input, but op=", kernels::OpName(run.op),
              " writes one-byte codes and cannot run in place: give the codes their own memory"));
        }
        const kernels::RowLayout x = run.layout(kernels::Operand::kInput);
        const kernels::RowLayout y = run.layout(kernels::Operand::kOutput);
        if (x.stride == y.stride && x.group_rows == y.group_rows &&
            x.group_stride == y.group_stride) {
          continue;
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "output is on input (in place) but their rows are laid out differently (row stride ",
            y.stride, " and group stride ", y.group_stride, " against ", x.stride, " and ",
            x.group_stride, "): give row_strides.output and .output_group the input's values"));
      }
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
