// The operands of one op: which tensors it reads and writes (Operand), its
// scalar parameters (OpParams) and where the tensors are (RowOpArgs). The
// same structs travel from the daemon's validated Run to the launch, and
// describe host buffers for the fp64 reference and the CPU backend. No CUDA
// here.
#ifndef KERNTUNE_KERNELS_OP_ARGS_H_
#define KERNTUNE_KERNELS_OP_ARGS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/types.h"

namespace kt::kernels {

// Every tensor an op may take. Input and output: (rows, cols) of the
// storage dtype (the quantizing ops' output: one-byte codes), row r starting
// at element r * the row stride (OpParams: cols unless given, >= cols), or
// contiguous (rows, cols, inner) for a middle axis. Residual: (rows, cols)
// of the storage dtype at its own row stride, read and written back (the
// kAdd* ops). Gamma and beta: cols elements of the storage dtype
// (LayerNorm's affine transform; RMSNorm's weight is gamma). Mask:
// (mask_rows, cols) of the storage dtype, contiguous (ScaledMaskedSoftmax).
// Mean, inv_std: rows float32 values, written per row (LayerNorm's
// statistics; RMSNorm's 1 / rms in inv_std). Row_scale: float32 scales
// written per row: ReduceScale's max |x|, and the quantizing ops' dynamic
// scales (rows of them per_row, rows x cols / group_size per_group).
// Quant_scale: the one float32 scale a static quantization reads.
enum class Operand {
  kInput,
  kOutput,
  kGamma,
  kBeta,
  kMask,
  kMean,
  kInvStd,
  kRowScale,
  kResidual,
  kQuantScale,
};
inline constexpr Operand kAllOperands[] = {
    Operand::kInput,  Operand::kOutput,   Operand::kGamma,    Operand::kBeta,
    Operand::kMask,   Operand::kMean,     Operand::kInvStd,   Operand::kRowScale,
    Operand::kResidual, Operand::kQuantScale};
inline constexpr int kOperandCount = sizeof(kAllOperands) / sizeof(kAllOperands[0]);

// "input", "output", "gamma", "beta", "mask", "mean", "inv_std", "row_scale",
// "residual", "quant_scale".
absl::string_view OperandName(Operand operand);
// Output, mean, inv_std, row_scale and residual (written back) are written;
// the others only read.
bool IsOutput(Operand operand);
// Float32 values per row (mean, inv_std, row_scale) rather than the storage
// dtype.
bool IsRowStat(Operand operand);
// Whether `op` takes the operand at all: input and output always; gamma and
// inv_std: every norm; beta and mean: the LayerNorm family; mask:
// ScaledMaskedSoftmax; row_scale: ReduceScale and the quantizing ops;
// residual: the kAdd* ops; quant_scale: the quantizing ops.
bool TakesOperand(Op op, Operand operand);

// The scalar parameters of an op; each op reads its own and ignores the
// others.
struct OpParams {
  double epsilon = 1e-5;  // the norms: must be finite and > 0
  // ScaledMaskedSoftmax: y = softmax(x * scale + mask[q] (+ causal)) where
  // row r is query q = r % mask_rows of its (batch, head).
  double scale = 1.0;
  // The query length q: rows must be a multiple of it. Required (>= 1)
  // whenever a mask or causal is given; 0 otherwise.
  int64_t mask_rows = 0;
  // Column c of query q is masked (-inf) when c > q, as PyTorch's
  // is_causal=True (top-left aligned).
  bool causal = false;
  // The RMSNorm family: y = x_hat * (weight_offset + weight); Gemma's
  // RMSNorm uses 1. Finite; without a weight it must be 0.
  double weight_offset = 0;
  // The quantizing ops: the code type and where the scale comes from.
  // Codes are round-half-to-even of y / scale, saturated to +-QuantMax
  // (int8: [-128, 127]); NaN gives the fp8 NaN code, 0 for int8. A dynamic
  // scale is max(min(amax, scale_ub) / QuantMax, 1 / (QuantMax * 512)),
  // amax the max |y| of its row or group (vLLM's dynamic fp8 rule).
  QuantDType quant_dtype = QuantDType::kFp8E4M3;
  ScaleMode scale_mode = ScaleMode::kPerRow;
  int64_t group_size = 0;  // kPerGroup: 64 or 128, dividing cols
  double scale_ub = 0;     // > 0: the upper bound on amax; 0: none
  // Where rows start (last-axis ops), in elements; 0 means contiguous.
  // Without groups (group_rows 0) row r of x starts at r * x_row_stride;
  // with them at (r / group_rows) * x_group_stride + (r % group_rows) *
  // x_row_stride, and likewise for y. The residual has no groups. QK-norm
  // of q in a fused [tokens, 3, heads, head_dim] tensor: rows = tokens *
  // heads, cols = head_dim, row strides head_dim, group_rows = heads, group
  // strides 3 * heads * head_dim.
  int64_t x_row_stride = 0;
  int64_t y_row_stride = 0;
  int64_t residual_row_stride = 0;
  int64_t group_rows = 0;
  int64_t x_group_stride = 0;
  int64_t y_group_stride = 0;
};

// Where each row of one operand starts: Offset(r) elements from its first.
struct RowLayout {
  int64_t stride = 0;        // between rows (of one group)
  int64_t group_rows = 0;    // 0: no groups
  int64_t group_stride = 0;  // between groups
  int64_t Offset(int64_t row) const {
    return group_rows > 0 ? (row / group_rows) * group_stride + (row % group_rows) * stride
                          : row * stride;
  }
  bool contiguous(int64_t cols) const {
    return stride == cols && (group_rows <= 1 || group_stride == group_rows * cols);
  }
};
// The layout of the input, output or residual (contiguous (rows, cols) for
// the others and for the unset strides).
RowLayout RowLayoutOf(Operand operand, const OpParams& params, Shape shape);
// Whether any operand's rows are not contiguous.
bool HasRowStrides(const OpParams& params, Shape shape);
// How a launch's rows are placed, which decides the kernel families that
// serve it (launch_config.h's ServesRowPlacement): contiguous; strided
// (each operand's rows `stride` apart); or grouped (group_rows > 0: RMSNorm
// over per-head views).
enum class RowPlacement { kContiguous, kStrided, kGrouped };
RowPlacement PlacementOf(const OpParams& params, Shape shape);
// Bytes of one element of the output: the storage dtype's, or 1 for codes.
int64_t OutputElementBytes(Op op, DType dtype);

// The operand's extent in bytes: from its first element to one past its
// last (a strided tensor's gaps included; the static scale's 4 bytes).
int64_t OperandBytes(Op op, Operand operand, DType dtype, Shape shape, const OpParams& params);

// Bytes an op must move at minimum: input read once, output written once,
// plus the gamma/beta reads and per-row stats writes the op takes when
// present, a scaled-masked softmax's (mask_rows, cols) mask read once, the
// residual read and written, and the quantization scales. Strided rows
// count their elements, not their gaps. This is the numerator of every GB/s
// figure kerntune reports.
int64_t MinimumBytesMoved(Op op, DType dtype, Shape shape, bool has_gamma, bool has_beta,
                          bool has_stats, const OpParams& params = {});

// Where an op's operands are, as plain pointers (device memory for
// kernels::Launch, host memory for the reference). y may equal x (in place,
// with the same row stride) but must not otherwise overlap it or the
// residual. An operand the op does not take (TakesOperand) must be null;
// optional ones may be.
struct RowOpArgs {
  const void* x = nullptr;
  void* y = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  const void* mask = nullptr;
  float* mean = nullptr;
  float* inv_std = nullptr;
  float* row_scale = nullptr;
  void* residual = nullptr;
  const float* quant_scale = nullptr;
  OpParams params;

  // Device scratch memory of workspace_bytes bytes, 16-byte aligned, for the
  // configs that need it (WorkspaceBytes in launch_config.h: kSplitTwoPass);
  // kMaxWorkspaceBytes suffice for any. No other launch in flight may use
  // it: keep one per stream. Ignored by configs that need none.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  // Any operand's pointer, for code that treats the operands alike (the
  // daemon's staging, argument checks).
  const void* operand(Operand which) const;
  void set_operand(Operand which, void* pointer);
};

// OK when `args` can serve `op` on `shape`: x and y given, no operand the
// op does not take, epsilon finite and > 0 where the op reads it, for the
// scaled-masked softmax a finite scale and a mask_rows >= 1 dividing rows
// whenever a mask or causal is given; the residual of a kAdd* op and the
// scales of a quantizing op (quant_scale when static, else row_scale) given;
// a group size of 64 or 128 dividing cols, a finite scale_ub >= 0; a finite
// weight_offset, 0 without a weight or outside the RMSNorm family; row
// strides >= cols for last-axis ops only, groups for rms_norm only, and y's
// layout equal to x's when y is x.
// InvalidArgument names what is wrong. Launch and the reference both
// check this; the daemon validates its requests before it gets here.
absl::Status ValidateOpArgs(Op op, DType dtype, Shape shape, const RowOpArgs& args);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_OP_ARGS_H_
