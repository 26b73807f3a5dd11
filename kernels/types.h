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
//  - kAddRmsNorm, kAddLayerNorm: the residual add before the norm that LLM
//    engines call: r = x + residual is rounded to the storage dtype and
//    written back to residual, then y = norm(r).
//  - kRmsNormQuant, kLayerNormQuant, kAddRmsNormQuant, kAddLayerNormQuant:
//    the same four norms with y quantized (OpParams::quant: fp8 e4m3, fp8
//    e5m2 or int8 codes, with a static, per-row or per-group scale).
enum class Op {
  kSoftmax,
  kLogSoftmax,
  kLayerNorm,
  kRmsNorm,
  kReduceScale,
  kScaledMaskedSoftmax,
  kAddRmsNorm,
  kAddLayerNorm,
  kRmsNormQuant,
  kLayerNormQuant,
  kAddRmsNormQuant,
  kAddLayerNormQuant,
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

inline constexpr Op kAllOps[] = {
    Op::kSoftmax,         Op::kLogSoftmax,   Op::kLayerNorm,          Op::kRmsNorm,
    Op::kReduceScale,     Op::kScaledMaskedSoftmax, Op::kAddRmsNorm,   Op::kAddLayerNorm,
    Op::kRmsNormQuant,    Op::kLayerNormQuant,      Op::kAddRmsNormQuant, Op::kAddLayerNormQuant};
// The six forward ops kerntune started with: the ones every row-kernel
// family serves.
inline constexpr Op kBasicOps[] = {Op::kSoftmax,    Op::kLogSoftmax,  Op::kLayerNorm,
                                   Op::kRmsNorm,    Op::kReduceScale, Op::kScaledMaskedSoftmax};

// The normalization families: RMSNorm (kRmsNorm and its add / quant forms)
// and LayerNorm (kLayerNorm and its forms). Constexpr: the kernels pick
// their functors by them.
constexpr bool IsRmsNormFamily(Op op) {
  return op == Op::kRmsNorm || op == Op::kAddRmsNorm || op == Op::kRmsNormQuant ||
         op == Op::kAddRmsNormQuant;
}
constexpr bool IsLayerNormFamily(Op op) {
  return op == Op::kLayerNorm || op == Op::kAddLayerNorm || op == Op::kLayerNormQuant ||
         op == Op::kAddLayerNormQuant;
}
// Adds a residual first (kAdd*).
constexpr bool AddsResidual(Op op) {
  return op == Op::kAddRmsNorm || op == Op::kAddLayerNorm || op == Op::kAddRmsNormQuant ||
         op == Op::kAddLayerNormQuant;
}
// Writes quantized codes (k*Quant).
constexpr bool QuantizesOutput(Op op) {
  return op == Op::kRmsNormQuant || op == Op::kLayerNormQuant || op == Op::kAddRmsNormQuant ||
         op == Op::kAddLayerNormQuant;
}
// The plain norm an op normalizes with (kRmsNorm or kLayerNorm), or op
// itself for the others.
constexpr Op BaseNormOp(Op op) {
  return IsRmsNormFamily(op) ? Op::kRmsNorm : IsLayerNormFamily(op) ? Op::kLayerNorm : op;
}
// The fused forms (add and/or quant): the register-resident families
// (kWarp, kBlockRegs) serve them.
constexpr bool IsFusedNorm(Op op) { return AddsResidual(op) || QuantizesOutput(op); }

// The codes a quantizing op writes, one byte each.
//  - kFp8E4M3: OCP fp8 e4m3fn (bias 7, no infinities, max 448).
//  - kFp8E5M2: OCP fp8 e5m2 (bias 15, max finite 57344).
//  - kInt8: two's complement int8, [-128, 127].
enum class QuantDType { kFp8E4M3, kFp8E5M2, kInt8 };
inline constexpr QuantDType kAllQuantDTypes[] = {QuantDType::kFp8E4M3, QuantDType::kFp8E5M2,
                                                 QuantDType::kInt8};
// How the quantization scale is found (y ~= code * scale):
//  - kStatic: one float32 scale for the whole tensor, given by the caller.
//  - kPerRow: one per row, computed in the kernel from the row's max |y|.
//  - kPerGroup: one per group_size consecutive elements of a row (the
//    "1 x 128 block" layout), computed likewise; (rows, cols / group_size)
//    float32 scales, row-major.
enum class ScaleMode { kStatic, kPerRow, kPerGroup };
// "fp8_e4m3", "fp8_e5m2", "int8"; parsing also takes "e4m3", "e5m2".
absl::string_view QuantDTypeName(QuantDType dtype);
absl::StatusOr<QuantDType> ParseQuantDType(absl::string_view name);
// "static", "per_row", "per_group".
absl::string_view ScaleModeName(ScaleMode mode);
absl::StatusOr<ScaleMode> ParseScaleMode(absl::string_view name);
// The largest finite code value: 448, 57344, 127.
double QuantMax(QuantDType dtype);

// Reduced along a middle axis (inner > 1): softmax and log-softmax only.
// Which tensors each op takes is in op_args.h (TakesOperand).
bool SupportsInnerAxis(Op op);
// The norms (every form) read OpParams::epsilon.
bool TakesEpsilon(Op op);
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16,
                                       DType::kBFloat16};

// Canonical lower-case names used on the CLI, in the database and in the
// proto: "softmax", "log_softmax", "layer_norm", "rms_norm", "reduce_scale",
// "scaled_masked_softmax", "add_rms_norm", "add_layer_norm", "rms_norm_quant",
// "layer_norm_quant", "add_rms_norm_quant", "add_layer_norm_quant";
// "float32", "float16", "bfloat16".
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
