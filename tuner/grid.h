// The problems a tuning run (or the benchmark) covers: the standard grid of
// PERF.md, or rows x cols (x inner) chosen on the command line.
#ifndef KERNTUNE_TUNER_GRID_H_
#define KERNTUNE_TUNER_GRID_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::tuner {

struct GridPoint {
  // "main", "few_rows", "attention", "axis", "llm", "llm_norm" or "custom"
  std::string group;
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat32;
  kernels::Shape shape;  // inner > 1: softmax / log-softmax on a middle axis
  // Scaled-masked softmax only (kernels::AttentionOptions): an additive
  // (mask_rows, cols) mask when with_mask, and/or the causal mask; mask_rows
  // is the query length (it divides rows). Not part of the store's key: a
  // group fixes them for its points.
  bool with_mask = false;
  bool causal = false;
  int64_t mask_rows = 0;
  // The quantizing ops' codes and scales (kernels::OpParams' fields of the
  // same names; the defaults are the llm_norm group's fp8 e4m3 per-row
  // dynamic scales). Like the mask, not part of the store's key.
  kernels::QuantDType quant_dtype = kernels::QuantDType::kFp8E4M3;
  kernels::ScaleMode scale_mode = kernels::ScaleMode::kPerRow;
  int64_t group_size = 0;  // kPerGroup only
  // Where rows start (kernels::OpParams' fields; 0: contiguous): the
  // llm_norm group's per-head QK-norm points read q out of a fused qkv
  // tensor. Not part of the store's key either.
  int64_t x_row_stride = 0;
  int64_t y_row_stride = 0;
  int64_t group_rows = 0;
  int64_t x_group_stride = 0;
  int64_t y_group_stride = 0;
};

// The point's kernels::OpParams: the mask and causal flag (mask_rows), the
// quantization (for the quantizing ops only) and the row layout; epsilon
// and the scale keep their defaults. The one place a GridPoint becomes the
// params the reference, the kernels and the byte count take.
kernels::OpParams ParamsOf(const GridPoint& point);

inline constexpr const char* kStandardGroups[] = {"main", "few_rows", "attention",
                                                  "axis", "llm",      "llm_norm"};

// PERF.md's grid, for every op and dtype given, each op only in the groups
// that hold problems of its kind:
//  - "main": rows = 49152 x cols 32..32768, and "few_rows": rows {1, 8, 64} x
//    cols {4096, 32768, 131072}: every last-axis row op (softmax,
//    log_softmax, layer_norm, rms_norm, reduce_scale). The scaled-masked
//    softmax is an attention op: its (q, k) mask only means something at
//    attention shapes, so it is tuned there.
//  - "attention": (32*64*s, s) for s in {16, 32, 64, 128, 512} (batch 32,
//    heads 64, q = k = s): softmax, and scaled_masked_softmax with an
//    (s, s) additive mask (mask_rows = s).
//  - "axis": softmax and log_softmax along a middle axis, seed 001's shapes:
//    (outer 1, dim 128, inner 32768) and (outer 512, dim 896, inner 48).
//  - "llm": softmax and log_softmax over LLM logits, rows {1, 16, 2048} x
//    vocab {32000, 50257, 128256, 151936} (PERF.md's LLM softmax shapes),
//    and layer_norm and rms_norm over hidden states, rows {1, 64, 8192} x
//    hidden {4096, 5120, 8192, 12288}.
//  - "llm_norm": the row ops LLM inference calls around its norms (issue
//    44), rows {1, 16, 64, 512, 8192} (one token, decoding batches, a
//    prefill) x hidden {2048, 4096, 5120, 7168, 8192, 12288, 16384}:
//    add_rms_norm, add_layer_norm (the residual add before the norm) and
//    rms_norm_quant, layer_norm_quant, add_rms_norm_quant,
//    add_layer_norm_quant. The quantizing ops are tuned with fp8 e4m3 codes
//    and per-row dynamic scales, the representative: the store keys a
//    config by op, dtype and shape only, so that config also serves their
//    int8, e5m2, static and per-group forms (and a request's row strides).
//    Plus per-head QK-norm: rms_norm over cols = head_dim {64, 128, 256},
//    rows = tokens x 32 heads for tokens {1, 16, 64, 512, 8192}, reading q
//    out of a fused [tokens, 3, heads, head_dim] qkv tensor (row stride
//    head_dim, group_rows = heads, group stride 3 * heads * head_dim) into
//    a contiguous output, as q_norm(q.view(tokens, heads, head_dim)) does.
//    The contiguous rms_norm and layer_norm over hidden states are the llm
//    group's (their shapes key the same configs).
// The first five groups hold the six basic ops only (kernels::kBasicOps),
// as they always have. Unknown group names are an error, and so is a selection with no point
// (ops that none of the groups holds).
absl::StatusOr<std::vector<GridPoint>> StandardGrid(const std::vector<std::string>& groups,
                                                    const std::vector<kernels::Op>& ops,
                                                    const std::vector<kernels::DType>& dtypes);

// Every (op, dtype, rows, cols, inner) combination, group "custom"; inner
// > 1 only for the ops that reduce a middle axis (others are left out at
// those inners). A scaled-masked softmax gets an additive mask whose query
// length is the largest divisor of rows <= cols; a quantizing op fp8 e4m3
// codes with per-row scales (llm_norm's representative); rows are
// contiguous. rows, cols, inner must be >= 1.
absl::StatusOr<std::vector<GridPoint>> CustomGrid(const std::vector<kernels::Op>& ops,
                                                  const std::vector<kernels::DType>& dtypes,
                                                  const std::vector<int64_t>& rows,
                                                  const std::vector<int64_t>& cols,
                                                  const std::vector<int64_t>& inner = {1});

// "ops=softmax,layer_norm dtypes=float16 groups=main points=22": recorded
// with a tuning run.
std::string DescribeGrid(const std::vector<GridPoint>& points);

// "softmax float16 49152x1024", "softmax float16 512x896x48" (inner > 1),
// "rms_norm_quant float16 64x4096 fp8_e4m3 per_row", "... int8 per_group
// 128", "rms_norm bfloat16 2048x128 x_stride=128 group_rows=32
// x_group_stride=12288" (each row-layout field that is set).
std::string PointName(const GridPoint& point);
// What PointName adds after the shape: " fp8_e4m3 per_row", " x_stride=128
// ...", or "" for a point with neither.
std::string PointVariant(const GridPoint& point);

// Whether the tuner and the benchmark launch the point with the op's
// per-row outputs: ReduceScale's scale is its result (x = y * scale); the
// LayerNorm and RMSNorm statistics (every norm's) are extras PyTorch's
// forwards do not return either, so they are left out for comparable bytes.
// A quantizing op's dynamic scales are half of its result: it always writes
// them (kernels::MinimumBytesMoved counts them), whatever this says.
bool TimedWithRowOutputs(kernels::Op op);

// Bytes one launch of the point moves at minimum, as the tuner and the
// benchmark time it (kernels::MinimumBytesMoved with the affine parameters,
// the row outputs above, the mask, the residual read and written back and
// the quantization scales; strided rows count their elements, not their
// gaps): the numerator of their GB/s.
int64_t PointBytes(const GridPoint& point);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_GRID_H_
