// fp64 CPU reference implementations of every op: the ground truth for the
// GPU tests, the tuner's correctness check and the daemon's CPU fallback.
// Written for clarity, not speed: two passes, double accumulation.
#ifndef KERNTUNE_KERNELS_REFERENCE_H_
#define KERNTUNE_KERNELS_REFERENCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::kernels {

// One contiguous row in double precision. gamma/beta may be null
// (LayerNorm; RMSNorm takes gamma as its weight); mean/inv_std/row_scale may
// be null (RMSNorm writes 1/rms to inv_std, ReduceScale max|x| to
// row_scale). Softmax/log-softmax ignore the other fields;
// kScaledMaskedSoftmax is plain softmax here: RunReference applies the scale
// and mask first. An all -inf row gives NaN (as PyTorch does); any NaN in
// the row gives NaN. ReduceScale: an all-zero row gives zeros (scale 0).
// The add and quant forms of the norms compute their base norm here (on x =
// the rounded x + residual), unquantized; the RMSNorm family's weight is
// weight_offset + gamma (gamma null: 1, no offset).
void ReferenceRow(Op op, int64_t cols, const double* x, const double* gamma, const double* beta,
                  double epsilon, double* y, double* mean, double* inv_std,
                  double* row_scale = nullptr, double weight_offset = 0);

// Runs the reference over rows [row_begin, row_end) (outer indices when
// shape.inner > 1) of host buffers whose inputs are in the storage dtype
// `dtype`, each operand's rows where RowLayoutOf puts them (gaps between
// rows are neither read nor written). y is written in `y_dtype`: the
// storage dtype for the CPU backend, float32 to keep reference precision
// for checks; a quantizing op's y is its one-byte codes whatever y_dtype.
//  - kAdd*: r = x + residual, rounded to the storage dtype, is written back
//    to the residual, and the norm is of that rounded r.
//  - k*Quant: code = EncodeQuant(y / scale) (host_dtype.h: round half to
//    even, saturated, NaN to the NaN code or int8 0), y the fp64 norm.
//    Static: scale = quant_scale[0] as given (0, inf or NaN follow the
//    division: y / 0 saturates, 0 / 0 and NaN give NaN codes). Dynamic:
//    scale = max(min(amax, scale_ub if > 0) / QuantMax, 1 / (QuantMax *
//    512)) rounded to float32, amax the max |y| of the row or group (NaN
//    skipped), written to row_scale (per_group: cols / group_size per row,
//    row-major); the codes divide by that float32 scale.
// mean / inv_std, when given, are those of the norm (of r for kAdd*). Uses
// up to `threads` threads (0 = hardware concurrency).
absl::Status RunReference(Op op, DType dtype, Shape shape,
                          const RowOpArgs& args, int64_t row_begin,
                          int64_t row_end, DType y_dtype, int threads = 0);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_REFERENCE_H_
