// The operands of one op, as plain pointers: the same struct describes
// device buffers (kernels::Launch) and host buffers (the fp64 reference and
// the daemon's CPU backend). No CUDA here.
#ifndef KERNTUNE_KERNELS_OP_ARGS_H_
#define KERNTUNE_KERNELS_OP_ARGS_H_

#include <cstdint>

namespace kt::kernels {

// x and y hold shape.elements() elements of the storage dtype, row-major and
// contiguous ((rows, cols), or (rows, cols, inner) for a middle axis); y may
// equal x (in place) but must not otherwise overlap it. Which other operands
// an op reads is in types.h (TakesGamma, RowStatsCount ...); the rest must
// be null.
struct RowOpArgs {
  const void* x = nullptr;
  void* y = nullptr;
  // cols elements of the storage dtype, each optional. LayerNorm: gamma and
  // beta. RMSNorm: gamma is its weight.
  const void* gamma = nullptr;
  const void* beta = nullptr;
  // rows floats, each optional. LayerNorm: mean and inverse standard
  // deviation. RMSNorm: inv_std receives 1 / rms.
  float* mean = nullptr;
  float* inv_std = nullptr;
  // ReduceScale: rows floats, optional: each row's max |x| (x = y * scale).
  float* row_scale = nullptr;
  double epsilon = 1e-5;  // LayerNorm, RMSNorm

  // ScaledMaskedSoftmax: y = softmax(x * scale + mask[q] (+ causal)) where
  // row r is query q = r % mask_rows of its (batch, head).
  double scale = 1.0;
  // (mask_rows, cols) additive mask in the storage dtype, or null.
  const void* mask = nullptr;
  // The query length q: rows must be a multiple of it. Required (>= 1)
  // whenever mask or causal is set.
  int64_t mask_rows = 0;
  // Column c of query q is masked (-inf) when c > q, as PyTorch's
  // is_causal=True (top-left aligned).
  bool causal = false;

  // Device scratch memory of workspace_bytes bytes, 16-byte aligned, for the
  // configs that need it (WorkspaceBytes in launch_config.h: kSplitTwoPass);
  // kMaxWorkspaceBytes suffice for any. No other launch in flight may use
  // it: keep one per stream. Ignored by configs that need none.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// Host buffers in the storage dtype (the reference and the CPU backend).
using HostRowOpArgs = RowOpArgs;

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_OP_ARGS_H_
