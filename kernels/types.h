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

// Row-wise ops over a (rows, cols) view, reduced along cols (the last axis).
enum class Op { kSoftmax, kLogSoftmax, kLayerNorm };

// Storage dtype of inputs and outputs. Compute is always float32.
enum class DType { kFloat32, kFloat16, kBFloat16 };

struct Shape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t elements() const { return rows * cols; }
};

inline constexpr Op kAllOps[] = {Op::kSoftmax, Op::kLogSoftmax, Op::kLayerNorm};
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16,
                                       DType::kBFloat16};

// Canonical lower-case names used on the CLI, in the database and in the
// proto: "softmax", "log_softmax", "layer_norm"; "float32", "float16",
// "bfloat16".
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

// Bytes an op must move at minimum: input read once, output written once,
// plus LayerNorm's gamma/beta reads and mean/inv_std writes when present.
// This is the numerator of every GB/s figure kerntune reports.
int64_t MinimumBytesMoved(Op op, DType dtype, Shape shape, bool has_gamma,
                          bool has_beta, bool has_stats);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_TYPES_H_
