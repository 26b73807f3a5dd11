// Vocabulary shared by every kerntune module: which op, which storage dtype,
// which problem shape. Plain data and string conversions only; no CUDA here.
#ifndef KERNTUNE_KERNELS_TYPES_H_
#define KERNTUNE_KERNELS_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::kernels {

// Row-wise ops over a (rows, cols) view, reduced along cols (the last axis);
// softmax and log-softmax also along a middle axis (Shape::inner > 1).
//  - kRmsNorm: y = x / sqrt(mean(x^2) + eps) * weight (weight optional).
//  - kReduceScale: y = x / max|x| per row, the row's max|x| returned as its
//    scale (per-row quantization); an all-zero row gives zeros, scale 0.
//  - kScaledMaskedSoftmax: attention's softmax(x * scale + mask) over the
//    last axis of (batch, heads, q, k), with an additive (q, k) mask shared
//    by every batch and head and/or a causal (top-left aligned) mask.
enum class Op {
  kSoftmax,
  kLogSoftmax,
  kLayerNorm,
  kRmsNorm,
  kReduceScale,
  kScaledMaskedSoftmax,
};

// Storage dtype of inputs and outputs. Compute is always float32.
enum class DType { kFloat32, kFloat16, kBFloat16 };

// (rows, cols) reduced along cols; with inner > 1 the tensor is
// (outer = rows, dim = cols, inner), element (o, d, i) at (o * dim + d) *
// inner + i, reduced along dim: softmax on a middle axis of an N-d tensor.
struct Shape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inner = 1;
  int64_t elements() const { return rows * cols * inner; }
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.rows == b.rows && a.cols == b.cols && a.inner == b.inner;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
};

inline constexpr Op kAllOps[] = {Op::kSoftmax,    Op::kLogSoftmax,  Op::kLayerNorm,
                                 Op::kRmsNorm,    Op::kReduceScale, Op::kScaledMaskedSoftmax};

// Reduced along a middle axis (inner > 1): softmax and log-softmax only.
// Which tensors each op takes is in op_args.h (TakesOperand).
bool SupportsInnerAxis(Op op);
// LayerNorm and RMSNorm read OpParams::epsilon.
bool TakesEpsilon(Op op);
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16,
                                       DType::kBFloat16};

// Canonical lower-case names used on the CLI, in the database and in the
// proto: "softmax", "log_softmax", "layer_norm", "rms_norm", "reduce_scale",
// "scaled_masked_softmax"; "float32", "float16", "bfloat16".
absl::string_view OpName(Op op);
absl::string_view DTypeName(DType dtype);
absl::StatusOr<Op> ParseOp(absl::string_view name);
// Accepts the canonical names and the short forms fp32/fp16/bf16,
// f32/f16/half/float.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// Comma-separated lists of the above ("softmax,layer_norm"); empty items are
// ignored, an unknown name is an error naming it.
absl::StatusOr<std::vector<Op>> ParseOpList(absl::string_view names);
absl::StatusOr<std::vector<DType>> ParseDTypeList(absl::string_view names);

size_t DTypeSize(DType dtype);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_TYPES_H_
