// Maps (op, dtype, impl) onto the compiled kernel families: the one switch
// from runtime enums to the per-file template instances; and the one place
// a KernelRequest is made.
#include "kernels/kernel_request.h"

#include "absl/strings/str_cat.h"

namespace kt::kernels::internal {
namespace {

template <Op op, DType dtype>
RowOpEntry SelectBasicFamily(Impl impl);

template <Op op, DType dtype>
RowOpEntry SelectFamily(Impl impl) {
  // The fused norms have the register-resident families only (their load
  // reads each element once, their store holds the whole row).
  if constexpr (IsFusedNorm(op)) {
    if (impl == Impl::kWarp) return &RunWarpRowOp<op, dtype>;
    if (impl == Impl::kBlockRegs) return &RunBlockRegsRowOp<op, dtype>;
    return nullptr;
  } else {
    return SelectBasicFamily<op, dtype>(impl);
  }
}

template <Op op, DType dtype>
RowOpEntry SelectBasicFamily(Impl impl) {
  switch (impl) {
    case Impl::kWarp:
      return &RunWarpRowOp<op, dtype>;
    case Impl::kBlockSmem:
    case Impl::kBlockUncached:
      return &RunBlockRowOp<op, dtype>;
    case Impl::kBlockRegs:
      return &RunBlockRegsRowOp<op, dtype>;
    case Impl::kSplitRow:
    case Impl::kSplitGrid:
      return &RunSplitRowOp<op, dtype>;
    case Impl::kSplitTwoPass:
      return &RunSplitTwoPassOp<op, dtype>;
    case Impl::kSplitRegs:
      if constexpr (op == Op::kSoftmax || op == Op::kLogSoftmax) {
        return &RunSplitRegsOp<op, dtype>;
      } else {
        return nullptr;
      }
    case Impl::kAxis:
      if constexpr (op == Op::kSoftmax || op == Op::kLogSoftmax) {
        return &RunAxisOp<op, dtype>;
      } else {
        return nullptr;
      }
    case Impl::kBlockReread:
      if constexpr (BlockRereadServes(op)) {
        return &RunBlockRereadRowOp<op, dtype>;
      } else {
        return nullptr;
      }
  }
  return nullptr;
}

template <Op op>
RowOpEntry SelectForOp(DType dtype, Impl impl) {
  switch (dtype) {
    case DType::kFloat32:
      return SelectFamily<op, DType::kFloat32>(impl);
    case DType::kFloat16:
      return SelectFamily<op, DType::kFloat16>(impl);
    case DType::kBFloat16:
      return SelectFamily<op, DType::kBFloat16>(impl);
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
    case Op::kRmsNorm:
      return SelectForOp<Op::kRmsNorm>(dtype, impl);
    case Op::kReduceScale:
      return SelectForOp<Op::kReduceScale>(dtype, impl);
    case Op::kScaledMaskedSoftmax:
      return SelectForOp<Op::kScaledMaskedSoftmax>(dtype, impl);
    case Op::kAddRmsNorm:
      return SelectForOp<Op::kAddRmsNorm>(dtype, impl);
    case Op::kAddLayerNorm:
      return SelectForOp<Op::kAddLayerNorm>(dtype, impl);
    case Op::kRmsNormQuant:
      return SelectForOp<Op::kRmsNormQuant>(dtype, impl);
    case Op::kLayerNormQuant:
      return SelectForOp<Op::kLayerNormQuant>(dtype, impl);
    case Op::kAddRmsNormQuant:
      return SelectForOp<Op::kAddRmsNormQuant>(dtype, impl);
    case Op::kAddLayerNormQuant:
      return SelectForOp<Op::kAddLayerNormQuant>(dtype, impl);
  }
  return nullptr;
}

KernelRequest MakeKernelRequest(DType dtype, Shape shape, const RowOpArgs& args,
                                const LaunchConfig& config, const DeviceInfo& device) {
  KernelRequest request;
  request.device = device.ordinal;
  request.sm_count = device.sm_count;
  request.max_smem_per_block_optin = device.max_smem_per_block_optin;
  request.programmatic_launch = device.cc_major >= 9;
  request.shape = shape;
  request.args = args;
  request.config = config;
  request.cols_per_thread = WarpColsPerThread(config, dtype, shape.cols);
  return request;
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
