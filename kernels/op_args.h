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

// Every tensor an op may take. Input and output: shape.elements() elements
// of the storage dtype, row-major and contiguous ((rows, cols), or (rows,
// cols, inner) for a middle axis). Gamma and beta: cols elements of the
// storage dtype (LayerNorm's affine transform; RMSNorm's weight is gamma).
// Mask: (mask_rows, cols) of the storage dtype (ScaledMaskedSoftmax). Mean,
// inv_std, row_scale: rows float32 values, written per row (LayerNorm's
// statistics; RMSNorm's 1 / rms in inv_std; ReduceScale's max |x|).
enum class Operand { kInput, kOutput, kGamma, kBeta, kMask, kMean, kInvStd, kRowScale };
inline constexpr Operand kAllOperands[] = {
    Operand::kInput, Operand::kOutput, Operand::kGamma,  Operand::kBeta,
    Operand::kMask,  Operand::kMean,   Operand::kInvStd, Operand::kRowScale};
inline constexpr int kOperandCount = sizeof(kAllOperands) / sizeof(kAllOperands[0]);

// "input", "output", "gamma", "beta", "mask", "mean", "inv_std", "row_scale".
absl::string_view OperandName(Operand operand);
// Output, mean, inv_std and row_scale are written; the others only read.
bool IsOutput(Operand operand);
// Per-row float32 values (mean, inv_std, row_scale) rather than the
// storage dtype.
bool IsRowStat(Operand operand);
// Whether `op` takes the operand at all: input and output always; gamma:
// LayerNorm and RMSNorm; beta and mean: LayerNorm; mask: ScaledMaskedSoftmax;
// inv_std: LayerNorm and RMSNorm; row_scale: ReduceScale.
bool TakesOperand(Op op, Operand operand);
// The operand's size in bytes for a problem (`mask_rows`: the mask's rows).
int64_t OperandBytes(Operand operand, DType dtype, Shape shape, int64_t mask_rows = 0);

// Bytes an op must move at minimum: input read once, output written once,
// plus the gamma/beta reads and per-row stats writes the op takes when
// present, and a scaled-masked softmax's (mask_rows, cols) mask read once.
// This is the numerator of every GB/s figure kerntune reports.
int64_t MinimumBytesMoved(Op op, DType dtype, Shape shape, bool has_gamma, bool has_beta,
                          bool has_stats, int64_t mask_rows = 0);

// The scalar parameters of an op; each op reads its own and ignores the
// others.
struct OpParams {
  double epsilon = 1e-5;  // LayerNorm, RMSNorm: must be finite and > 0
  // ScaledMaskedSoftmax: y = softmax(x * scale + mask[q] (+ causal)) where
  // row r is query q = r % mask_rows of its (batch, head).
  double scale = 1.0;
  // The query length q: rows must be a multiple of it. Required (>= 1)
  // whenever a mask or causal is given; 0 otherwise.
  int64_t mask_rows = 0;
  // Column c of query q is masked (-inf) when c > q, as PyTorch's
  // is_causal=True (top-left aligned).
  bool causal = false;
};

// Where an op's operands are, as plain pointers (device memory for
// kernels::Launch, host memory for the reference). y may equal x (in place)
// but must not otherwise overlap it. An operand the op does not take
// (TakesOperand) must be null; optional ones may be.
struct RowOpArgs {
  const void* x = nullptr;
  void* y = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  const void* mask = nullptr;
  float* mean = nullptr;
  float* inv_std = nullptr;
  float* row_scale = nullptr;
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
// op does not take, epsilon finite and
// > 0 where the op reads it, and for the scaled-masked softmax a finite
// scale and a mask_rows >= 1 dividing rows whenever a mask or causal is
// given. InvalidArgument names what is wrong. Launch and the reference both
// check this; the daemon validates its requests before it gets here.
absl::Status ValidateOpArgs(Op op, DType dtype, Shape shape, const RowOpArgs& args);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_OP_ARGS_H_
