// CUDA runtime errors as absl::Status, in one place for the GPU backend's
// files: the error's name and text after what was being done.
#ifndef KERNTUNE_SERVER_CUDA_STATUS_H_
#define KERNTUNE_SERVER_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kt::server {

inline absl::Status CudaError(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CUDA_STATUS_H_
