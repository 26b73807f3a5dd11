// Public launch path (launch.h): argument checks, the config for the
// operands' alignment, then the compiled kernel family for (op, dtype, impl).
#include "kernels/launch.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/kernel_request.h"

namespace kt::kernels {
namespace {

// Bytes of one element of `operand` as the kernels access it.
int64_t ElementBytes(Op op, DType dtype, Operand operand) {
  if (IsRowStat(operand) || operand == Operand::kQuantScale) return sizeof(float);
  if (operand == Operand::kOutput) return OutputElementBytes(op, dtype);
  return static_cast<int64_t>(DTypeSize(dtype));
}

// Largest power of two dividing every operand's address and, for rows laid
// out by strides or groups, every row's start (capped at 16 bytes, the
// widest access), in bytes of the storage dtype: a one-byte code aligned
// to 4 bytes is 4 elements, 8 bytes of a 16-bit dtype. The pack size falls
// back to it. Contiguous rows need only their base aligned: the kernels
// that take any cols move each row's edges (RowEdges), the others need a
// pack dividing cols anyway.
int64_t CommonAlignment(Op op, DType dtype, Shape shape, const RowOpArgs& args,
                        RowPlacement rows) {
  const bool contiguous = rows == RowPlacement::kContiguous;
  const int64_t dtype_bytes = static_cast<int64_t>(DTypeSize(dtype));
  int64_t alignment = 16;
  for (Operand operand : kAllOperands) {
    // Written, or read, one float at a time.
    if (IsRowStat(operand) || operand == Operand::kQuantScale) continue;
    int64_t own = 16;
    const auto narrow_to = [&](uint64_t value) {
      while (own > 1 && value % own != 0) own /= 2;
    };
    narrow_to(reinterpret_cast<uintptr_t>(args.operand(operand)));
    const int64_t element = ElementBytes(op, dtype, operand);
    if (!contiguous && args.operand(operand) != nullptr) {
      const RowLayout layout = RowLayoutOf(operand, args.params, shape);
      narrow_to(static_cast<uint64_t>(layout.stride * element));
      if (layout.group_rows > 0) narrow_to(static_cast<uint64_t>(layout.group_stride * element));
    }
    alignment = std::min(alignment, std::min<int64_t>(16, own / std::min(own, element) *
                                                             dtype_bytes));
  }
  return alignment;
}

// Every tensor must at least be aligned to its element.
absl::Status CheckElementAlignment(Op op, DType dtype, const RowOpArgs& args) {
  for (Operand operand : kAllOperands) {
    const auto address = reinterpret_cast<uintptr_t>(args.operand(operand));
    const int64_t element = ElementBytes(op, dtype, operand);
    if (address % element != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          OperandName(operand), " at ", absl::Hex(address), " is not aligned to its ", element,
          "-byte element"));
    }
  }
  return absl::OkStatus();
}

// The device properties a config's validation reads.
struct DeviceLimits {
  int ordinal, cc_major, cc_minor, sm_count, max_threads_per_block, max_threads_per_sm,
      max_blocks_per_sm, regs_per_sm;
  int64_t l2_bytes, max_smem_per_block_optin, max_smem_per_sm;
  explicit DeviceLimits(const DeviceInfo& d)
      : ordinal(d.ordinal), cc_major(d.cc_major), cc_minor(d.cc_minor), sm_count(d.sm_count),
        max_threads_per_block(d.max_threads_per_block),
        max_threads_per_sm(d.max_threads_per_sm), max_blocks_per_sm(d.max_blocks_per_sm),
        regs_per_sm(d.regs_per_sm), l2_bytes(d.l2_bytes),
        max_smem_per_block_optin(d.max_smem_per_block_optin),
        max_smem_per_sm(d.max_smem_per_sm) {}
  friend bool operator==(const DeviceLimits& a, const DeviceLimits& b) {
    return a.ordinal == b.ordinal && a.cc_major == b.cc_major && a.cc_minor == b.cc_minor &&
           a.sm_count == b.sm_count && a.max_threads_per_block == b.max_threads_per_block &&
           a.max_threads_per_sm == b.max_threads_per_sm &&
           a.max_blocks_per_sm == b.max_blocks_per_sm && a.regs_per_sm == b.regs_per_sm &&
           a.l2_bytes == b.l2_bytes && a.max_smem_per_block_optin == b.max_smem_per_block_optin &&
           a.max_smem_per_sm == b.max_smem_per_sm;
  }
};

// ConfigForAlignment, remembered for the thread's last launch. A client
// that sends one Run again and again (an inference loop, a queue's repeated
// descriptor) launches the same point each time, and validating the config
// cost 0.3 us of the launch on the lent H100 hosts. The answer depends on
// nothing but the key, so a repeat is served from it.
absl::StatusOr<LaunchConfig> ConfigForAlignmentOnce(Op op, DType dtype, Shape shape,
                                                    const LaunchConfig& config,
                                                    int64_t alignment, RowPlacement rows,
                                                    const DeviceInfo& device) {
  struct Memo {
    Op op;
    DType dtype;
    Shape shape;
    LaunchConfig config;
    int64_t alignment;
    RowPlacement rows;
    DeviceLimits device;
    LaunchConfig effective;
  };
  thread_local std::optional<Memo> last;
  const DeviceLimits limits(device);
  if (last && last->op == op && last->dtype == dtype && last->shape == shape &&
      last->config == config && last->alignment == alignment &&
      last->rows == rows && last->device == limits) {
    return last->effective;
  }
  absl::StatusOr<LaunchConfig> effective =
      ConfigForAlignment(op, dtype, shape, config, alignment, device, rows);
  if (effective.ok()) {
    last = Memo{op, dtype, shape, config, alignment, rows, limits, *effective};
  }
  return effective;
}

}  // namespace

absl::StatusOr<LaunchConfig> Launch(Op op, DType dtype, Shape shape, const RowOpArgs& args,
                                    const LaunchConfig& config, const DeviceInfo& device,
                                    cudaStream_t stream) {
  if (absl::Status s = ValidateOpArgs(op, dtype, shape, args); !s.ok()) return s;
  if (absl::Status s = CheckElementAlignment(op, dtype, args); !s.ok()) return s;
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

  // Validates the config as the operands' alignment and rows adapt it.
  const RowPlacement rows = PlacementOf(args.params, shape);
  absl::StatusOr<LaunchConfig> aligned = ConfigForAlignmentOnce(
      op, dtype, shape, config, CommonAlignment(op, dtype, shape, args, rows), rows, device);
  if (!aligned.ok()) return aligned.status();
  const LaunchConfig& effective = *aligned;
  // A group's lanes exchange its max by warp shuffles: group_size / pack
  // lanes, at most a warp (fused_functors.cuh, QuantStore).
  if (QuantizesOutput(op) && args.params.scale_mode == ScaleMode::kPerGroup &&
      args.params.group_size > int64_t{32} * effective.pack_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "per_group scales of group_size=", args.params.group_size, " need packs of at least ",
        args.params.group_size / 32, " elements; the operands' alignment allows ",
        effective.pack_size, " (align x, y, the residual and the weights to 16 bytes)"));
  }
  const internal::KernelRequest request =
      internal::MakeKernelRequest(dtype, shape, args, effective, device);
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
