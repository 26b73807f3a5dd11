// Internal contract between the host side of the kernel library (launch.cc,
// launch_config.cc) and the per-op/dtype CUDA translation units in
// kernels/instances/. Not part of the public API.
#ifndef KERNTUNE_KERNELS_KERNEL_REQUEST_H_
#define KERNTUNE_KERNELS_KERNEL_REQUEST_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::kernels::internal {

// A fully validated launch: the device's facts, the problem and its
// operands as the caller gave them, and the config with its derived kernel
// instance (cols_per_thread for kWarp).
struct KernelRequest {
  int device = 0;
  int sm_count = 0;
  int64_t max_smem_per_block_optin = 0;
  // kSplitTwoPass: whether the second kernel may be a programmatic
  // dependent launch (sm_90+).
  bool programmatic_launch = false;
  Shape shape;  // kAxis: (rows = outer, cols = dim, inner)
  RowOpArgs args;
  LaunchConfig config;
  int cols_per_thread = 0;  // kWarp only: WarpColsPerThread(config, cols)
};

// The request for launching (or sizing) `config` on `shape`; `args` may be
// empty when only the occupancy is asked.
KernelRequest MakeKernelRequest(DType dtype, Shape shape, const RowOpArgs& args,
                                const LaunchConfig& config, const DeviceInfo& device);

enum class KernelAction {
  kLaunch,          // launch on the stream
  kQueryOccupancy,  // only report resident blocks per SM for the instance
};

// Runs (or sizes) the kernel instance `request` selects. Returns
// cudaErrorInvalidConfiguration for a knob combination with no compiled
// instance (callers validate first, so this means a bug), and otherwise the
// CUDA error of the launch or the occupancy query.
using RowOpEntry = cudaError_t (*)(const KernelRequest& request,
                                   KernelAction action, cudaStream_t stream,
                                   int* active_blocks_per_sm);

// One entry per (op, dtype, implementation family), each defined in its own
// translation unit under kernels/instances/ so they compile in parallel.
template <Op op, DType dtype>
cudaError_t RunWarpRowOp(const KernelRequest&, KernelAction, cudaStream_t,
                         int*);
template <Op op, DType dtype>
cudaError_t RunBlockRowOp(const KernelRequest&, KernelAction, cudaStream_t,
                          int*);
template <Op op, DType dtype>
cudaError_t RunBlockRegsRowOp(const KernelRequest&, KernelAction, cudaStream_t, int*);
// LayerNorm and RMSNorm only.
template <Op op, DType dtype>
cudaError_t RunBlockRereadRowOp(const KernelRequest&, KernelAction, cudaStream_t, int*);
template <Op op, DType dtype>
cudaError_t RunSplitRowOp(const KernelRequest&, KernelAction, cudaStream_t,
                          int*);
template <Op op, DType dtype>
cudaError_t RunSplitTwoPassOp(const KernelRequest&, KernelAction, cudaStream_t,
                              int*);
// Softmax and log-softmax only.
template <Op op, DType dtype>
cudaError_t RunSplitRegsOp(const KernelRequest&, KernelAction, cudaStream_t, int*);
// Softmax and log-softmax only.
template <Op op, DType dtype>
cudaError_t RunAxisOp(const KernelRequest&, KernelAction, cudaStream_t, int*);

// Selects the entry for (op, dtype, impl): the single place that maps the
// runtime enums onto the compiled families. Null for a combination with no
// family (kAxis of an op that reduces the last axis only).
RowOpEntry SelectEntry(Op op, DType dtype, Impl impl);

// OK when `device` is a real GPU and the calling thread's current CUDA
// device. The library never switches devices behind the caller's back.
absl::Status CheckCurrentDevice(const DeviceInfo& device);

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_KERNEL_REQUEST_H_
