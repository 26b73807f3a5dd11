// Public launch path (launch.h): argument checks, alignment fallback, then
// the compiled kernel family for (op, dtype, impl).
#include "kernels/launch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/kernel_request.h"

namespace kt::kernels {
namespace {

// Largest power of two dividing every non-null pointer's address (capped at
// 16 bytes, the widest access).
int64_t CommonAlignment(std::initializer_list<const void*> pointers) {
  int64_t alignment = 16;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    const auto address = reinterpret_cast<uintptr_t>(p);
    while (alignment > 1 && address % alignment != 0) alignment /= 2;
  }
  return alignment;
}

absl::Status CheckArgs(Op op, DType dtype, Shape shape, const RowOpArgs& args) {
  if (args.x == nullptr) return absl::InvalidArgumentError("x is null");
  if (args.y == nullptr) return absl::InvalidArgumentError("y is null");
  const auto refuse = [&](const char* operand) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " takes no ", operand, "; pass null"));
  };
  if (args.gamma != nullptr && !TakesGamma(op)) return refuse("gamma");
  if (args.beta != nullptr && !TakesBeta(op)) return refuse("beta");
  if (args.mean != nullptr && op != Op::kLayerNorm) return refuse("mean output");
  if (args.inv_std != nullptr && op != Op::kLayerNorm && op != Op::kRmsNorm) {
    return refuse("inv_std output");
  }
  if (args.row_scale != nullptr && op != Op::kReduceScale) return refuse("row_scale output");
  const bool masked = op == Op::kScaledMaskedSoftmax;
  if (!masked && (args.mask != nullptr || args.causal)) return refuse("mask");
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  for (const void* p : {args.x, static_cast<const void*>(args.y), args.gamma, args.beta,
                        args.mask}) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % element != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pointer ", absl::Hex(reinterpret_cast<uintptr_t>(p)), " is not aligned to the ", element, "-byte ", DTypeName(dtype)));
    }
  }
  if (TakesEpsilon(op) && !(std::isfinite(args.epsilon) && args.epsilon > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epsilon=", args.epsilon, " must be finite and > 0"));
  }
  if (masked) {
    if (!std::isfinite(args.scale)) {
      return absl::InvalidArgumentError(absl::StrCat("scale=", args.scale, " must be finite"));
    }
    if ((args.mask != nullptr || args.causal) &&
        (args.mask_rows < 1 || shape.rows % args.mask_rows != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("mask_rows=", args.mask_rows,
                       " (the query length) must be >= 1 and divide rows=", shape.rows));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchConfig> Launch(Op op, DType dtype, Shape shape, const RowOpArgs& args,
                                    const LaunchConfig& config, const DeviceInfo& device,
                                    cudaStream_t stream) {
  if (absl::Status s = CheckArgs(op, dtype, shape, args); !s.ok()) return s;
  // The workspace a config needs does not depend on the pack size Launch
  // may narrow, so it is checked with the operands, before the device.
  // (Beyond kMaxWorkspaceBytes the rules refuse the config by name.)
  const int64_t workspace_needed = WorkspaceBytes(shape, config);
  if (workspace_needed > 0 && workspace_needed <= kMaxWorkspaceBytes &&
      (args.workspace == nullptr || args.workspace_bytes < workspace_needed ||
       reinterpret_cast<uintptr_t>(args.workspace) % kTwoPassSlotBytes != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ConfigKey(config), " needs a workspace of ", workspace_needed, " bytes aligned to ",
        kTwoPassSlotBytes, " (RowOpArgs::workspace); got ",
        args.workspace == nullptr ? std::string("none")
                                  : absl::StrCat(args.workspace_bytes, " bytes at ",
                                                 absl::Hex(reinterpret_cast<uintptr_t>(
                                                     args.workspace)))));
  }

  if (absl::Status s = internal::CheckCurrentDevice(device); !s.ok()) return s;

  LaunchConfig effective = config;
  effective.pack_size =
      NarrowPackSize(config.pack_size, dtype, PackedLength(shape, config.impl),
                     CommonAlignment({args.x, args.y, args.gamma, args.beta, args.mask}));
  if (absl::Status s = ValidateConfig(op, dtype, shape, effective, device); !s.ok()) {
    return s;
  }

  internal::KernelRequest request;
  request.device = device.ordinal;
  request.sm_count = device.sm_count;
  request.max_smem_per_block_optin = device.max_smem_per_block_optin;
  request.rows = shape.rows;
  request.cols = shape.cols;
  request.inner = shape.inner;
  request.x = args.x;
  request.y = args.y;
  request.gamma = args.gamma;
  request.beta = args.beta;
  request.mean = args.mean;
  request.inv_std = args.inv_std;
  request.row_scale = args.row_scale;
  request.epsilon = static_cast<float>(args.epsilon);
  request.scale = static_cast<float>(args.scale);
  request.mask = args.mask;
  request.mask_rows = std::max<int64_t>(args.mask_rows, 1);
  request.causal = args.causal;
  request.workspace = args.workspace;
  request.programmatic_launch = device.cc_major >= 9;
  request.config = effective;
  request.cols_per_thread = WarpColsPerThread(effective, dtype, shape.cols);
  // ValidateConfig has refused every (op, impl) without a kernel family.
  const cudaError_t err = internal::SelectEntry(op, dtype, effective.impl)(
      request, internal::KernelAction::kLaunch, stream, nullptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear a sticky launch error so the next launch is judged alone
    return absl::InternalError(absl::StrCat("launch of ", OpName(op), " ", DTypeName(dtype),
                                            " with ", ConfigKey(effective), " failed: ",
                                            cudaGetErrorString(err)));
  }
  return effective;
}

}  // namespace kt::kernels
