// Request validation for the daemon (see run_request.h).
#include "server/run_request.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;

absl::Status CheckInline(const pb::TensorRef& ref, absl::string_view field,
                         int64_t want_bytes) {
  switch (ref.location_case()) {
    case pb::TensorRef::kInlineData:
      break;
    case pb::TensorRef::LOCATION_NOT_SET:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is not set: give ", field, ".inline_data"));
  }
  const int64_t got = static_cast<int64_t>(ref.inline_data().size());
  if (got != want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".inline_data has ", got,
                                                   " bytes, want exactly ", want_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t RunRequest::tensor_bytes() const {
  return shape.elements() * static_cast<int64_t>(kernels::DTypeSize(dtype));
}

absl::StatusOr<kernels::Op> OpFromProto(pb::Op op, absl::string_view field) {
  switch (op) {
    case pb::OP_SOFTMAX:
      return kernels::Op::kSoftmax;
    case pb::OP_LOG_SOFTMAX:
      return kernels::Op::kLogSoftmax;
    case pb::OP_LAYER_NORM:
      return kernels::Op::kLayerNorm;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, "=", static_cast<int>(op), " (", pb::Op_Name(op),
          ") must be OP_SOFTMAX, OP_LOG_SOFTMAX or OP_LAYER_NORM"));
  }
}

absl::StatusOr<kernels::DType> DTypeFromProto(pb::DType dtype, absl::string_view field) {
  switch (dtype) {
    case pb::DTYPE_FLOAT32:
      return kernels::DType::kFloat32;
    case pb::DTYPE_FLOAT16:
      return kernels::DType::kFloat16;
    case pb::DTYPE_BFLOAT16:
      return kernels::DType::kBFloat16;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, "=", static_cast<int>(dtype), " (", pb::DType_Name(dtype),
          ") must be DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16"));
  }
}

pb::Op OpToProto(kernels::Op op) {
  switch (op) {
    case kernels::Op::kSoftmax:
      return pb::OP_SOFTMAX;
    case kernels::Op::kLogSoftmax:
      return pb::OP_LOG_SOFTMAX;
    case kernels::Op::kLayerNorm:
      return pb::OP_LAYER_NORM;
  }
  return pb::OP_UNSPECIFIED;
}

pb::DType DTypeToProto(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::kFloat32:
      return pb::DTYPE_FLOAT32;
    case kernels::DType::kFloat16:
      return pb::DTYPE_FLOAT16;
    case kernels::DType::kBFloat16:
      return pb::DTYPE_BFLOAT16;
  }
  return pb::DTYPE_UNSPECIFIED;
}

absl::StatusOr<kernels::Shape> ValidateShape(const pb::Shape& shape, kernels::DType dtype) {
  if (shape.rows() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape.rows=", shape.rows(), " must be >= 1"));
  }
  if (shape.cols() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape.cols=", shape.cols(), " must be >= 1"));
  }
  const int64_t size = static_cast<int64_t>(kernels::DTypeSize(dtype));
  const int64_t max = std::numeric_limits<int64_t>::max();
  if (shape.rows() > max / shape.cols() || shape.rows() * shape.cols() > max / size) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape.rows=", shape.rows(), " x shape.cols=", shape.cols(), " x ", size,
                     " bytes overflows a 64-bit byte count"));
  }
  return kernels::Shape{shape.rows(), shape.cols()};
}

absl::StatusOr<RunRequest> ValidateRunRequest(const pb::RunRequest& request,
                                              int64_t max_request_bytes) {
  RunRequest run;
  absl::StatusOr<kernels::Op> op = OpFromProto(request.op(), "op");
  if (!op.ok()) return op.status();
  absl::StatusOr<kernels::DType> dtype = DTypeFromProto(request.dtype(), "dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<kernels::Shape> shape = ValidateShape(request.shape(), *dtype);
  if (!shape.ok()) return shape.status();
  run.op = *op;
  run.dtype = *dtype;
  run.shape = *shape;
  const int64_t bytes = run.tensor_bytes();
  if (bytes > max_request_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shape.rows=", run.shape.rows, " x shape.cols=", run.shape.cols, " is ",
                     bytes, " bytes per tensor, over the daemon's limit of ",
                     max_request_bytes, " (--max_request_bytes)"));
  }
  if (absl::Status s = CheckInline(request.input(), "input", bytes); !s.ok()) return s;
  run.input = request.input().inline_data();

  switch (request.output().location_case()) {
    case pb::OutputRef::kReturnInline:
      if (!request.output().return_inline()) {
        return absl::InvalidArgumentError(
            "output.return_inline=false: the only output this daemon supports is inline; "
            "set it to true or leave output unset");
      }
      break;
    case pb::OutputRef::LOCATION_NOT_SET:
      break;
  }

  const bool is_layer_norm = run.op == kernels::Op::kLayerNorm;
  if (!is_layer_norm) {
    if (request.has_layer_norm()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer_norm is set but op=", kernels::OpName(run.op), " takes no LayerNorm parameters"));
    }
    return run;
  }
  if (!request.has_layer_norm()) {
    return absl::InvalidArgumentError(
        "layer_norm is not set: op=layer_norm needs layer_norm.epsilon");
  }
  const pb::LayerNormParams& params = request.layer_norm();
  const int64_t param_bytes =
      run.shape.cols * static_cast<int64_t>(kernels::DTypeSize(run.dtype));
  if (params.has_gamma()) {
    if (absl::Status s = CheckInline(params.gamma(), "layer_norm.gamma", param_bytes); !s.ok()) {
      return s;
    }
    run.gamma = params.gamma().inline_data();
  }
  if (params.has_beta()) {
    if (absl::Status s = CheckInline(params.beta(), "layer_norm.beta", param_bytes); !s.ok()) {
      return s;
    }
    run.beta = params.beta().inline_data();
  }
  if (!std::isfinite(params.epsilon()) || params.epsilon() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_norm.epsilon=", params.epsilon(), " must be finite and > 0"));
  }
  run.epsilon = params.epsilon();
  run.want_mean_inv_std = params.want_mean_inv_std();
  return run;
}

}  // namespace kt::server
