// Request validation: a RunRequest proto becomes a RunRequest in the kernel
// library's vocabulary, or a precise error. Nothing runs before this passes.
#ifndef KERNTUNE_SERVER_RUN_REQUEST_H_
#define KERNTUNE_SERVER_RUN_REQUEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kerntune/v1/kerntune.pb.h"
#include "kernels/types.h"

namespace kt::server {

// A validated Run: every size checked, inline data viewed in place (the
// views point into the proto, which must outlive this struct).
struct RunRequest {
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;
  absl::string_view input;  // rows * cols * DTypeSize(dtype) bytes
  absl::string_view gamma;  // empty or cols * DTypeSize(dtype) bytes
  absl::string_view beta;
  double epsilon = 0;
  bool want_mean_inv_std = false;
  int64_t tensor_bytes() const;
};

// Proto enums <-> kernel library enums. InvalidArgument names the field.
absl::StatusOr<kernels::Op> OpFromProto(kerntune::v1::Op op, absl::string_view field);
absl::StatusOr<kernels::DType> DTypeFromProto(kerntune::v1::DType dtype,
                                              absl::string_view field);
kerntune::v1::Op OpToProto(kernels::Op op);
kerntune::v1::DType DTypeToProto(kernels::DType dtype);

// op and dtype known, rows >= 1, cols >= 1, rows * cols * dtype size without
// overflow. `shape_field` prefixes the field names ("shape").
absl::StatusOr<kernels::Shape> ValidateShape(const kerntune::v1::Shape& shape,
                                             kernels::DType dtype);

// Every check of a Run, in order: op, dtype, shape, size limit
// (ResourceExhausted beyond max_request_bytes), input, output, LayerNorm
// parameters (only for layer_norm).
absl::StatusOr<RunRequest> ValidateRunRequest(const kerntune::v1::RunRequest& request,
                                              int64_t max_request_bytes);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_RUN_REQUEST_H_
