// Public launch path (launch.h): argument checks, alignment fallback, then
// the compiled kernel family for (op, dtype, impl).
#include "kernels/launch.h"

#include <cmath>
#include <cstdint>

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

absl::Status CheckArgs(Op op, DType dtype, const RowOpArgs& args) {
  if (args.x == nullptr) return absl::InvalidArgumentError("x is null");
  if (args.y == nullptr) return absl::InvalidArgumentError("y is null");
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  for (const void* p : {args.x, static_cast<const void*>(args.y), args.gamma, args.beta}) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % element != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pointer ", absl::Hex(reinterpret_cast<uintptr_t>(p)), " is not aligned to the ", element, "-byte ", DTypeName(dtype)));
    }
  }
  if (op == Op::kLayerNorm && !(std::isfinite(args.epsilon) && args.epsilon > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("epsilon=", args.epsilon, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchConfig> Launch(Op op, DType dtype, Shape shape, const RowOpArgs& args,
                                    const LaunchConfig& config, const DeviceInfo& device,
                                    cudaStream_t stream) {
  if (absl::Status s = CheckArgs(op, dtype, args); !s.ok()) return s;
  if (absl::Status s = internal::CheckCurrentDevice(device); !s.ok()) return s;

  LaunchConfig effective = config;
  const bool layer_norm = op == Op::kLayerNorm;
  effective.pack_size = NarrowPackSize(
      config.pack_size, dtype, shape.cols,
      CommonAlignment({args.x, args.y, layer_norm ? args.gamma : nullptr,
                       layer_norm ? args.beta : nullptr}));
  if (absl::Status s = ValidateConfig(op, dtype, shape, effective, device); !s.ok()) {
    return s;
  }

  internal::KernelRequest request;
  request.device = device.ordinal;
  request.sm_count = device.sm_count;
  request.max_smem_per_block_optin = device.max_smem_per_block_optin;
  request.rows = shape.rows;
  request.cols = shape.cols;
  request.x = args.x;
  request.y = args.y;
  if (layer_norm) {
    request.gamma = args.gamma;
    request.beta = args.beta;
    request.mean = args.mean;
    request.inv_std = args.inv_std;
    request.epsilon = static_cast<float>(args.epsilon);
  }
  request.config = effective;
  request.cols_per_thread = WarpColsPerThread(effective, shape.cols);
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
