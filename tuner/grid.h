// The problems a tuning run (or the benchmark) covers: the standard grid of
// PERF.md, or rows x cols (x inner) chosen on the command line.
#ifndef KERNTUNE_TUNER_GRID_H_
#define KERNTUNE_TUNER_GRID_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/types.h"

namespace kt::tuner {

struct GridPoint {
  std::string group;  // "main", "few_rows", "attention", "axis", "llm" or "custom"
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
};

inline constexpr const char* kStandardGroups[] = {"main", "few_rows", "attention", "axis", "llm"};

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
// Unknown group names are an error, and so is a selection with no point
// (ops that none of the groups holds).
absl::StatusOr<std::vector<GridPoint>> StandardGrid(const std::vector<std::string>& groups,
                                                    const std::vector<kernels::Op>& ops,
                                                    const std::vector<kernels::DType>& dtypes);

// Every (op, dtype, rows, cols, inner) combination, group "custom"; inner
// > 1 only for the ops that reduce a middle axis (others are left out at
// those inners). A scaled-masked softmax gets an additive mask whose query
// length is the largest divisor of rows <= cols. rows, cols, inner must be
// >= 1.
absl::StatusOr<std::vector<GridPoint>> CustomGrid(const std::vector<kernels::Op>& ops,
                                                  const std::vector<kernels::DType>& dtypes,
                                                  const std::vector<int64_t>& rows,
                                                  const std::vector<int64_t>& cols,
                                                  const std::vector<int64_t>& inner = {1});

// "ops=softmax,layer_norm dtypes=float16 groups=main points=22": recorded
// with a tuning run.
std::string DescribeGrid(const std::vector<GridPoint>& points);

// "softmax float16 49152x1024", "softmax float16 512x896x48" (inner > 1).
std::string PointName(const GridPoint& point);

// Whether the tuner and the benchmark launch the point with the op's
// per-row outputs: ReduceScale's scale is its result (x = y * scale); the
// LayerNorm and RMSNorm statistics are extras PyTorch's forwards do not
// return either, so they are left out for comparable bytes.
bool TimedWithRowOutputs(kernels::Op op);

// Bytes one launch of the point moves at minimum, as the tuner and the
// benchmark time it (kernels::MinimumBytesMoved with the affine parameters,
// the row outputs above and the mask): the numerator of their GB/s.
int64_t PointBytes(const GridPoint& point);

}  // namespace kt::tuner

#endif  // KERNTUNE_TUNER_GRID_H_
