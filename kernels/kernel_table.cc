// Maps (op, dtype, impl) onto the compiled kernel families: the one switch
// from runtime enums to the per-file template instances.
#include "kernels/kernel_request.h"

#include "absl/strings/str_cat.h"

namespace kt::kernels::internal {
namespace {

template <Op op>
RowOpEntry SelectForOp(DType dtype, Impl impl) {
  const bool warp = impl == Impl::kWarp;
  switch (dtype) {
    case DType::kFloat32:
      return warp ? &RunWarpRowOp<op, DType::kFloat32> : &RunBlockRowOp<op, DType::kFloat32>;
    case DType::kFloat16:
      return warp ? &RunWarpRowOp<op, DType::kFloat16> : &RunBlockRowOp<op, DType::kFloat16>;
    case DType::kBFloat16:
      return warp ? &RunWarpRowOp<op, DType::kBFloat16>
                  : &RunBlockRowOp<op, DType::kBFloat16>;
  }
  return nullptr;
}

}  // namespace

RowOpEntry SelectEntry(Op op, DType dtype, Impl impl) {
  switch (op) {
    case Op::kSoftmax:
      return SelectForOp<Op::kSoftmax>(dtype, impl);
    case Op::kLogSoftmax:
      return SelectForOp<Op::kLogSoftmax>(dtype, impl);
    case Op::kLayerNorm:
      return SelectForOp<Op::kLayerNorm>(dtype, impl);
  }
  return nullptr;
}

absl::Status CheckCurrentDevice(const DeviceInfo& device) {
  if (!device.has_gpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("described device \"", device.name, "\" has no GPU to run on"));
  }
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device.ordinal) {
    cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "device ", device.ordinal, " is not the current CUDA device (current: ", current,
        "); call cudaSetDevice first"));
  }
  return absl::OkStatus();
}

}  // namespace kt::kernels::internal
