// PLACEHOLDER: the middle-axis family (kAxis) until its kernel lands.
#ifndef KERNTUNE_KERNELS_AXIS_DISPATCH_CUH_
#define KERNTUNE_KERNELS_AXIS_DISPATCH_CUH_

#include "kernels/kernel_request.h"

namespace kt::kernels::internal {

template <Op op, DType dtype>
cudaError_t RunAxisOp(const KernelRequest&, KernelAction, cudaStream_t, int*) {
  return cudaErrorInvalidConfiguration;
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_AXIS_DISPATCH_CUH_
