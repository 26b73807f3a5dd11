// PLACEHOLDER: the split-row family (kSplitRow) until its kernel lands.
#ifndef KERNTUNE_KERNELS_SPLIT_ROW_DISPATCH_CUH_
#define KERNTUNE_KERNELS_SPLIT_ROW_DISPATCH_CUH_

#include "kernels/kernel_request.h"

namespace kt::kernels::internal {

template <Op op, DType dtype>
cudaError_t RunSplitRowOp(const KernelRequest&, KernelAction, cudaStream_t, int*) {
  return cudaErrorInvalidConfiguration;
}

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_SPLIT_ROW_DISPATCH_CUH_
