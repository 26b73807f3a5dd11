// Internal: the legality rules, candidate lists and defaults of the
// kSplitRow and kAxis implementations, kept beside their kernels
// (split_row_config.cc, axis_config.cc) and called by launch_config.cc, which
// owns the public functions and the rules common to every impl.
#ifndef KERNTUNE_KERNELS_CONFIG_RULES_H_
#define KERNTUNE_KERNELS_CONFIG_RULES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device_info.h"
#include "kernels/launch_config.h"
#include "kernels/types.h"

namespace kt::kernels::internal {

// --- kSplitRow, kSplitGrid and kSplitTwoPass (split_row_config.cc) ---
// The knobs' own rules (InvalidArgument naming the knob), beyond the common
// ones launch_config.cc checks (pack size range and width, grid_waves range).
absl::Status CheckSplitRowKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                                const DeviceInfo& device);
absl::Status CheckSplitGridKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                                 const DeviceInfo& device);
absl::Status CheckSplitTwoPassKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                                    const DeviceInfo& device);
absl::Status CheckSplitRegsKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                                 const DeviceInfo& device);
// kSplitRegs's one shared-memory buffer: the largest slice, in x's dtype.
int64_t SplitRegsSharedMemoryBytes(DType dtype, Shape shape, const LaunchConfig& config);
// Whether `op`'s kernels read x unchanged (no scale, no mask: every op but
// the masked softmax), so kSplitRow may copy its rows' raw bytes. Must agree
// with kLoadsRowUnchanged of the op's load functor (split_row_dispatch.cuh
// asserts it).
constexpr bool ReadsRowUnchanged(Op op) { return op != Op::kScaledMaskedSoftmax; }
// kSplitRow loads through Hopper's bulk copy (SplitRowKernel) when the op
// reads x unchanged and a pack is 16 bytes: then every slice of every row
// starts on a 16-byte boundary and is whole 16-byte packs, as the copy needs.
constexpr bool SplitRowBulkCopies(Op op, int64_t pack_bytes) {
  return ReadsRowUnchanged(op) && pack_bytes == 16;
}
// How a kSplitRow or kSplitGrid block caches its slice of a row in dynamic
// shared memory: the largest slice in the cache dtype, once, or twice when
// kSplitRow's bulk copy brings in the block's next row while it finishes
// this one (when two fit and rows are many: split_row_config.cc). The bulk
// copy's grid is persistent over rows either way.
struct SplitRowCache {
  int64_t slice_bytes = 0;
  bool bulk_copy = false;
  int buffers = 1;
  int64_t bytes() const { return slice_bytes * buffers; }
};
SplitRowCache SplitRowCacheOf(Op op, DType dtype, Shape shape, const LaunchConfig& config);
// kSplitRow and kSplitGrid cache a slice of the row per block:
// SplitRowCacheOf(...).bytes().
int64_t SplitRowSharedMemoryBytes(Op op, DType dtype, Shape shape, const LaunchConfig& config);
// Appends the split configs of the three impls worth timing for the problem
// (for many rows only the clusters', kSplitRow and kSplitRegs, from 32000
// columns; none for short rows); legality is checked by the caller.
void AppendSplitRowCandidates(Op op, DType dtype, Shape shape, const DeviceInfo& device,
                              std::vector<LaunchConfig>& candidates);
// The default (of one of the split impls) when split rows should serve the
// problem (few long rows; many softmax rows too long for one block's shared
// memory), else nullopt. The caller validates it and falls
// back if it is illegal.
std::optional<LaunchConfig> SplitRowHeuristic(Op op, DType dtype, Shape shape,
                                              const DeviceInfo& device,
                                              int64_t alignment_bytes);

// --- kAxis (axis_config.cc) ---
absl::Status CheckAxisKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                            const DeviceInfo& device);
int64_t AxisSharedMemoryBytes(Op op, DType dtype, Shape shape, const LaunchConfig& config);
void AppendAxisCandidates(Op op, DType dtype, Shape shape, const DeviceInfo& device,
                          std::vector<LaunchConfig>& candidates);
absl::StatusOr<LaunchConfig> AxisHeuristic(Op op, DType dtype, Shape shape,
                                           const DeviceInfo& device, int64_t alignment_bytes);

}  // namespace kt::kernels::internal

#endif  // KERNTUNE_KERNELS_CONFIG_RULES_H_
