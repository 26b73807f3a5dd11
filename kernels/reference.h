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
void ReferenceRow(Op op, int64_t cols, const double* x, const double* gamma,
                  const double* beta, double epsilon, double* y, double* mean,
                  double* inv_std, double* row_scale = nullptr);

// Runs the reference over rows [row_begin, row_end) (outer indices when
// shape.inner > 1) of host buffers whose
// inputs are in the storage dtype `dtype`; y is written in `y_dtype`: the
// storage dtype for the CPU backend, float32 to keep reference precision for
// checks. Uses up to `threads` threads (0 = hardware concurrency).
absl::Status RunReference(Op op, DType dtype, Shape shape,
                          const RowOpArgs& args, int64_t row_begin,
                          int64_t row_end, DType y_dtype, int threads = 0);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_REFERENCE_H_
