// fp64 CPU reference implementations of every op: the ground truth for the
// GPU tests, the tuner's correctness check and the daemon's CPU fallback.
// Written for clarity, not speed: two passes, double accumulation.
#ifndef KERNTUNE_KERNELS_REFERENCE_H_
#define KERNTUNE_KERNELS_REFERENCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/types.h"

namespace kt::kernels {

// One row in double precision. gamma/beta may be null (LayerNorm only);
// mean/inv_std may be null. Softmax/log-softmax ignore the LayerNorm fields.
// An all -inf row gives NaN (as PyTorch does); any NaN in the row gives NaN.
void ReferenceRow(Op op, int64_t cols, const double* x, const double* gamma,
                  const double* beta, double epsilon, double* y, double* mean,
                  double* inv_std);

// Host buffers in the storage dtype, the same layout as RowOpArgs.
struct HostRowOpArgs {
  const void* x = nullptr;
  void* y = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;
  float* mean = nullptr;
  float* inv_std = nullptr;
  double epsilon = 1e-5;
};

// Runs the reference over rows [row_begin, row_end) of host buffers whose
// inputs are in the storage dtype `dtype`; y is written in `y_dtype`: the
// storage dtype for the CPU backend, float32 to keep reference precision for
// checks. Uses up to `threads` threads (0 = hardware concurrency).
absl::Status RunReference(Op op, DType dtype, Shape shape,
                          const HostRowOpArgs& args, int64_t row_begin,
                          int64_t row_end, DType y_dtype, int threads = 0);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_REFERENCE_H_
