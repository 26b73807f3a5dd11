// kAxis's rules (config_rules.h): the knobs of the middle-axis softmax
// (axis_kernels.cuh, layout in axis_plan.h), its search space and default.
//
// Knobs: block_size one of 128, 256, 512, 1024; thread_group_width the
// threads along the reduced axis, a power of two in [1, block_size] (the
// other block_size / thread_group_width threads run along inner);
// pack_size the inner elements per thread (it must divide inner, checked by
// launch_config.cc); rows_per_access and split 1. The cached instance follows
// from (dim, thread_group_width, pack_size): AxisCachedRows.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/axis_plan.h"
#include "kernels/config_rules.h"

namespace kt::kernels::internal {
namespace {

constexpr int kAxisBlockSizes[] = {128, 256, 512, 1024};
constexpr int kMaxAxisBlock = 1024;

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t NextPowerOfTwo(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Smallest power-of-two group width whose cached instance covers dim (the
// line read once, from registers); 0 when none up to a 1024-thread block does.
int CachingGroupWidth(int64_t dim, int pack) {
  for (int tgw = 1; tgw <= kMaxAxisBlock; tgw *= 2) {
    if (AxisCachedRows(dim, tgw, pack) > 0) return tgw;
  }
  return 0;
}

// The group widths worth timing: the narrowest that caches the line, two
// wider ones (more threads, fewer cached rows each), and one narrower (the
// two-pass kernel with half the threads). Lines too long to cache: widths
// from two warps to a full block.
std::vector<int> GroupWidthChoices(int64_t dim, int pack) {
  const int64_t useful = std::min<int64_t>(kMaxAxisBlock, NextPowerOfTwo(dim));
  const int cache = CachingGroupWidth(dim, pack);
  std::vector<int> widths;
  if (cache == 0) {
    for (int tgw : {64, 256, 1024}) {
      if (tgw <= useful) widths.push_back(tgw);
    }
    return widths;
  }
  if (cache > 1) widths.push_back(cache / 2);
  for (int tgw = cache; tgw <= 4 * cache && tgw <= kMaxAxisBlock; tgw *= 2) {
    if (tgw == cache || tgw <= useful) widths.push_back(tgw);
  }
  return widths;
}

}  // namespace

absl::Status CheckAxisKnobs(Op op, DType, Shape, const LaunchConfig& c,
                            const DeviceInfo& device) {
  if (!SupportsInnerAxis(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " has no axis kernel; impl axis serves softmax and log_softmax"));
  }
  if (std::find(std::begin(kAxisBlockSizes), std::end(kAxisBlockSizes), c.block_size) ==
      std::end(kAxisBlockSizes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size=", c.block_size, " must be 128, 256, 512 or 1024 for axis"));
  }
  if (device.max_threads_per_block > 0 && c.block_size > device.max_threads_per_block) {
    return absl::InvalidArgumentError(absl::StrCat("block_size=", c.block_size, " exceeds ",
                                                   device.name, "'s ",
                                                   device.max_threads_per_block,
                                                   " threads per block"));
  }
  if (!IsPowerOfTwo(c.thread_group_width) || c.thread_group_width > c.block_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "thread_group_width=", c.thread_group_width, " must be a power of two in [1, block_size=",
        c.block_size, "] for axis (the threads along the reduced axis)"));
  }
  if (c.rows_per_access != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows_per_access=", c.rows_per_access, " must be 1 for axis"));
  }
  return absl::OkStatus();
}

int64_t AxisSharedMemoryBytes(Op, DType, Shape, const LaunchConfig& c) {
  if (!IsPowerOfTwo(c.thread_group_width) || !IsPowerOfTwo(c.block_size) ||
      c.thread_group_width > c.block_size || c.pack_size < 1) {
    return 0;  // refused by CheckAxisKnobs
  }
  return AxisSharedBytes(c.block_size, c.thread_group_width, c.pack_size);
}

void AppendAxisCandidates(Op op, DType dtype, Shape shape, const DeviceInfo& device,
                          std::vector<LaunchConfig>& candidates) {
  const size_t first = candidates.size();
  const int max_pack = WidestPack(dtype, shape.inner);
  // The widest pack, and half of it (twice the threads for few columns).
  for (int pack : {max_pack, max_pack / 2}) {
    if (pack < 1) continue;
    const int64_t columns = shape.rows * (shape.inner / pack);
    for (int tgw : GroupWidthChoices(shape.cols, pack)) {
      const int smallest_block = std::max(kAxisBlockSizes[0], tgw);
      for (int block : kAxisBlockSizes) {
        if (block < tgw) continue;
        const int64_t block_columns = block / tgw;
        // Wider blocks than the smallest only while they add columns a warp
        // can use (up to 32, or 128 threads' worth for narrow groups) and
        // the problem has them.
        if (block != smallest_block &&
            (block_columns > std::max(32, 128 / tgw) ||
             block_columns > NextPowerOfTwo(columns))) {
          continue;
        }
        for (int waves : {0, 1}) {
          candidates.push_back({Impl::kAxis, block, pack, tgw, 1, waves});
        }
      }
    }
  }
  // The default is always in the space (the tuner compares against it).
  if (absl::StatusOr<LaunchConfig> heuristic = AxisHeuristic(op, dtype, shape, device, 16);
      heuristic.ok() &&
      std::find(candidates.begin() + first, candidates.end(), *heuristic) == candidates.end()) {
    candidates.push_back(*heuristic);
  }
}

// Paddle's GetBlockSize puts threads along inner first and along dim only
// when inner is short; here the group along dim is sized so the line fits
// in registers (read once), then widened until the grid has work for every
// SM, and the block adds columns for 256-byte rows per warp (two 128-byte
// lines): float32 [128,128,16,16] axis 0 (dim 128, inner 32768) gets
// b256/p4/g16 (8 rows cached per thread, 131072 threads), [512,896,4,12]
// axis 1 (dim 896, inner 48) b512/p4/g128 (7 of 8 rows cached, 786432
// threads). Untimed here: the tuner measures the alternatives.
absl::StatusOr<LaunchConfig> AxisHeuristic(Op op, DType dtype, Shape shape,
                                           const DeviceInfo& device, int64_t alignment_bytes) {
  if (!SupportsInnerAxis(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " has no axis kernel; impl axis serves softmax and log_softmax"));
  }
  const int pack = WidestPack(dtype, shape.inner, alignment_bytes);
  const int64_t columns = shape.rows * (shape.inner / pack);
  const int64_t useful = std::min<int64_t>(kMaxAxisBlock, NextPowerOfTwo(shape.cols));
  const int64_t sms = std::max(device.sm_count, 1);
  int tgw = CachingGroupWidth(shape.cols, pack);
  if (tgw > 0) {
    // 512 threads per SM, each with its cached rows' loads in flight.
    while (tgw < useful && columns * tgw < sms * 512) tgw *= 2;
  } else {
    // Two passes, four packs in flight per thread: aim at a full wave.
    const int64_t wave = sms * std::max(device.max_threads_per_sm, 1024);
    tgw = 1;
    while (tgw < useful && columns * tgw < wave) tgw *= 2;
  }
  const int64_t bytes = static_cast<int64_t>(pack) * static_cast<int64_t>(DTypeSize(dtype));
  const int64_t block_columns =
      std::min<int64_t>(std::max<int64_t>(1, 256 / bytes), NextPowerOfTwo(columns));
  const int64_t block = std::clamp<int64_t>(tgw * block_columns, std::max(128, tgw),
                                            std::max(512, tgw));
  return LaunchConfig{Impl::kAxis, static_cast<int>(block), pack, tgw, 1, 0};
}

}  // namespace kt::kernels::internal
