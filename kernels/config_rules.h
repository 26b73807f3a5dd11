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
// kSplitRow and kSplitGrid cache a slice of the row per block.
int64_t SplitRowSharedMemoryBytes(Op op, DType dtype, Shape shape, const LaunchConfig& config);
// Appends the split configs of the three impls worth timing for the problem
// (none when rows are many or short); legality is checked by the caller.
void AppendSplitRowCandidates(Op op, DType dtype, Shape shape, const DeviceInfo& device,
                              std::vector<LaunchConfig>& candidates);
// The default (of one of the split impls) when split rows should serve the
// problem (few long rows), else nullopt. The caller validates it and falls
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
