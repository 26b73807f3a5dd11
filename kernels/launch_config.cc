// Which launch configs are legal, the config space, and the default
// (launch_config.h).
#include "kernels/launch_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/config_rules.h"
#include "kernels/kernel_request.h"

namespace kt::kernels {
namespace {

template <typename Container>
bool Contains(const Container& values, int value) {
  return std::find(std::begin(values), std::end(values), value) != std::end(values);
}

int NextPowerOfTwo(int64_t value) {
  int result = 1;
  while (result < value) result *= 2;
  return result;
}

// Per-block shared memory the runtime and the kernels' static reduction storage
// take besides the row cache, for limits on a described device (a real one
// reports exact figures through the occupancy calculator).
constexpr int64_t kStaticSmemAllowance = 1024;
constexpr int64_t kReservedSmemPerBlock = 1024;  // sm_80+ system reservation

int EstimateActiveBlocks(const LaunchConfig& config, int64_t smem_bytes,
                         const DeviceInfo& device) {
  int blocks = std::min(device.max_blocks_per_sm,
                        device.max_threads_per_sm / config.block_size);
  if (smem_bytes > 0) {
    const int64_t per_block = smem_bytes + kStaticSmemAllowance + kReservedSmemPerBlock;
    if (smem_bytes + kStaticSmemAllowance > device.max_smem_per_block_optin) return 0;
    blocks = std::min<int64_t>(blocks, device.max_smem_per_sm / per_block);
  }
  return blocks;
}

absl::Status CheckShape(Op op, DType dtype, Shape shape) {
  if (shape.rows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("rows=", shape.rows, " must be >= 1"));
  }
  if (shape.cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cols=", shape.cols, " must be >= 1"));
  }
  if (shape.inner < 1) {
    return absl::InvalidArgumentError(absl::StrCat("inner=", shape.inner, " must be >= 1"));
  }
  if (shape.inner > 1 && !SupportsInnerAxis(op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(op), " reduces the last axis only; inner=", shape.inner, " must be 1"));
  }
  const int64_t max_elements =
      std::numeric_limits<int64_t>::max() / static_cast<int64_t>(DTypeSize(dtype));
  if (shape.rows > max_elements / shape.cols ||
      shape.rows * shape.cols > max_elements / shape.inner) {
    return absl::InvalidArgumentError(absl::StrCat("rows=", shape.rows, " x cols=", shape.cols,
                                                   " x inner=", shape.inner,
                                                   " overflows a 64-bit byte count"));
  }
  return absl::OkStatus();
}

absl::Status CheckWarpKnobs(DType dtype, Shape shape, const LaunchConfig& c) {
  if (!Contains(kThreadGroupWidths, c.thread_group_width)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "thread_group_width=", c.thread_group_width, " must be 1, 2, 4, 8, 16 or 32"));
  }
  if (c.block_size < 32 || c.block_size > 1024 || c.block_size % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size=", c.block_size, " must be a multiple of 32 in [32, 1024] for warp"));
  }
  if (c.rows_per_access != 1 && c.rows_per_access != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows_per_access=", c.rows_per_access, " must be 1 or 2"));
  }
  if (c.rows_per_access == 2 && c.thread_group_width == 32) {
    return absl::InvalidArgumentError(
        "rows_per_access=2 needs thread_group_width < 32 (no such kernel instance)");
  }
  if (WarpColsPerThread(c, dtype, shape.cols) == 0) {
    const int64_t per_lane =
        NarrowGroupPacksPerLane(c.pack_size * static_cast<int64_t>(DTypeSize(dtype))) *
        static_cast<int64_t>(c.pack_size);
    const int64_t limit =
        c.thread_group_width < 32 ? per_lane * c.thread_group_width : kMaxWarpCols;
    return absl::InvalidArgumentError(absl::StrCat(
        "cols=", shape.cols, " exceeds the warp implementation's limit of ", limit,
        " for thread_group_width=", c.thread_group_width, ", pack_size=", c.pack_size));
  }
  return absl::OkStatus();
}

absl::Status CheckBlockKnobs(Shape shape, const LaunchConfig& c) {
  if (shape.cols / c.pack_size >= kMaxBlockRowPacks) {
    return absl::InvalidArgumentError(
        absl::StrCat("cols=", shape.cols, " at pack_size=", c.pack_size, " is ", kMaxBlockRowPacks,
                     " packs or more, past ", ImplName(c.impl), "'s 32-bit pack indices"));
  }
  if (!Contains(kBlockImplBlockSizes, c.block_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size=", c.block_size, " must be 128, 256, 512 or 1024 for ", ImplName(c.impl)));
  }
  if (c.thread_group_width != 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "thread_group_width=", c.thread_group_width, " must be 32 for ", ImplName(c.impl)));
  }
  if (c.rows_per_access != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows_per_access=", c.rows_per_access, " must be 1 for ", ImplName(c.impl)));
  }
  return absl::OkStatus();
}

// Whether a kBlockRegs block of `block` threads holds a row of `cols` in
// registers.
bool BlockRegsFits(int64_t cols, int pack, int block) {
  return cols / pack <= static_cast<int64_t>(BlockRegsPacksPerThread(pack)) * block;
}

absl::Status CheckBlockRegsFits(Shape shape, const LaunchConfig& c) {
  if (BlockRegsFits(shape.cols, c.pack_size, c.block_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "cols=", shape.cols, " exceeds block_regs's limit of ",
      static_cast<int64_t>(c.block_size) * kBlockRegsValuesPerThread, " for block_size=",
      c.block_size, " (", kBlockRegsValuesPerThread, " elements per thread)"));
}

// Whether a kBlockReread block of `block` threads has room for a row of
// `cols` in flight.
bool BlockRereadFits(int64_t cols, int pack, int block) {
  return cols / pack <= static_cast<int64_t>(BlockRereadPacksPerThread(pack)) * block;
}

absl::Status CheckBlockRereadKnobs(Op op, Shape shape, const LaunchConfig& c) {
  if (!BlockRereadServes(op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "impl=block_reread serves layer_norm and rms_norm only, not ", OpName(op)));
  }
  if (absl::Status s = CheckBlockKnobs(shape, c); !s.ok()) return s;
  // One block per row, no row loop (BlockRereadRowKernel).
  if (c.grid_waves != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid_waves=", c.grid_waves, " must be 0 for block_reread (one block per row)"));
  }
  if (shape.rows > kMaxGridBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows=", shape.rows, " exceeds block_reread's limit of ", kMaxGridBlocks,
                     " (one block per row)"));
  }
  if (BlockRereadFits(shape.cols, c.pack_size, c.block_size)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "cols=", shape.cols, " exceeds block_reread's limit of ",
      static_cast<int64_t>(c.block_size) * kBlockRereadValuesPerThread, " for block_size=",
      c.block_size, " (", kBlockRereadValuesPerThread, " elements per thread)"));
}

// The fused norms (residual add, quantized output) run in the
// register-resident families only, and in whole warps of 16-byte packs
// (the instances dispatch.cuh compiles for them).
absl::Status CheckFusedNormKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& c) {
  if (c.impl != Impl::kWarp && c.impl != Impl::kBlockRegs) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(op), " runs with impl warp or block_regs only, not ", ImplName(c.impl)));
  }
  if (c.pack_size * DTypeSize(dtype) != 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(op), " runs in 16-byte packs: pack_size=", 16 / DTypeSize(dtype), " for ",
        DTypeName(dtype), ", not ", c.pack_size,
        " (its operands and rows must be 16-byte aligned)"));
  }
  if (c.impl == Impl::kWarp &&
      (c.thread_group_width != 32 ||
       WarpColsPerThread(c, dtype, shape.cols) < kFusedWarpMinColsPerThread)) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(op), " with impl warp needs thread_group_width=32 and rows of ",
        32 * kFusedWarpMinColsPerThread, " to ", kMaxWarpCols,
        " columns (shorter ones take block_regs); got thread_group_width=",
        c.thread_group_width, ", cols=", shape.cols));
  }
  return absl::OkStatus();
}

// Block sizes worth having every thread busy on a row of `num_packs` packs.
std::vector<int> UsefulBlockSizes(int64_t num_packs) {
  std::vector<int> sizes;
  for (int block : kBlockImplBlockSizes) {
    if (block == kBlockImplBlockSizes[0] || block <= num_packs) sizes.push_back(block);
  }
  return sizes;
}

// The warp and block configs worth timing for a last-axis problem: every
// pack each impl takes (any pack up to 16 bytes where PackMustDivideLength
// allows, else those dividing cols).
// The fused norms' candidates (CheckFusedNormKnobs): 16-byte packs, whole
// warps or register-resident blocks.
void AppendFusedNormCandidates(DType dtype, Shape shape, std::vector<LaunchConfig>& candidates) {
  const int pack = 16 / static_cast<int>(DTypeSize(dtype));
  if (shape.cols % pack != 0) return;
  if (shape.cols <= kMaxWarpCols) {
    for (int block : kWarpBlockSizes) {
      for (int waves : kGridWavesChoices) {
        candidates.push_back({Impl::kWarp, block, pack, 32, 1, waves});
      }
    }
  }
  for (int block : UsefulBlockSizes(shape.cols / pack)) {
    if (!BlockRegsFits(shape.cols, pack, block)) continue;
    for (int waves : kGridWavesChoices) {
      candidates.push_back({Impl::kBlockRegs, block, pack, 32, 1, waves});
    }
  }
}

void AppendRowCandidates(Op op, DType dtype, Shape shape, std::vector<LaunchConfig>& candidates) {
  if (IsFusedNorm(op)) {
    AppendFusedNormCandidates(dtype, shape, candidates);
    return;
  }
  for (int pack : kPackSizes) {
    if (pack * DTypeSize(dtype) > 16) continue;
    const bool divides = shape.cols % pack == 0;
    if (divides && shape.cols <= kMaxWarpCols) {
      // The narrowest group that covers the row with one pack per lane; wider
      // groups would only idle lanes.
      const int group = std::min<int>(32, NextPowerOfTwo((shape.cols + pack - 1) / pack));
      std::vector<int> groups = {group};
      // Half as many lanes with two 16-byte packs each (WarpColsPerThread):
      // more bytes in flight per thread for narrow rows.
      if (group >= 2 && NarrowGroupPacksPerLane(pack * DTypeSize(dtype)) == 2 &&
          shape.cols <= int64_t{pack} * group) {
        groups.push_back(group / 2);
      }
      for (int width : groups) {
        for (int rows_per_access : {1, 2}) {
          if (rows_per_access == 2 && width == 32) continue;
          for (int block : kWarpBlockSizes) {
            for (int waves : kGridWavesChoices) {
              candidates.push_back({Impl::kWarp, block, pack, width, rows_per_access, waves});
            }
          }
        }
      }
    }
    for (Impl impl : {Impl::kBlockSmem, Impl::kBlockUncached, Impl::kBlockRegs}) {
      if (!divides && PackMustDivideLength(op, impl)) continue;
      for (int block : UsefulBlockSizes(shape.cols / pack)) {
        if (impl == Impl::kBlockRegs && !BlockRegsFits(shape.cols, pack, block)) continue;
        for (int waves : kGridWavesChoices) {
          candidates.push_back({impl, block, pack, 32, 1, waves});
        }
      }
    }
    // kBlockReread in 8- and 16-byte packs (narrower ones only where Launch
    // narrows a pack for a pointer's alignment), a block per row.
    if (BlockRereadServes(op) && divides && pack * DTypeSize(dtype) >= 8) {
      for (int block : UsefulBlockSizes(shape.cols / pack)) {
        if (BlockRereadFits(shape.cols, pack, block)) {
          candidates.push_back({Impl::kBlockReread, block, pack, 32, 1, 0});
        }
      }
    }
  }
}

}  // namespace

bool ServesRowPlacement(Op op, DType dtype, Shape shape, const LaunchConfig& c,
                        RowPlacement rows) {
  switch (rows) {
    case RowPlacement::kContiguous:
      return true;
    case RowPlacement::kStrided:
      return (c.impl == Impl::kWarp || c.impl == Impl::kBlockSmem ||
              c.impl == Impl::kBlockUncached || c.impl == Impl::kBlockRegs ||
              c.impl == Impl::kBlockReread) &&
             c.pack_size > 0 && shape.cols % c.pack_size == 0;
    case RowPlacement::kGrouped:
      return op == Op::kRmsNorm && c.impl == Impl::kWarp &&
             c.pack_size * DTypeSize(dtype) == 16 && c.rows_per_access == 1 &&
             shape.cols % c.pack_size == 0 &&
             WarpColsPerThread(c, dtype, shape.cols) <= kMaxGroupedPacksPerLane * c.pack_size;
  }
  return false;
}

absl::string_view ImplName(Impl impl) {
  switch (impl) {
    case Impl::kWarp:
      return "warp";
    case Impl::kBlockSmem:
      return "block_smem";
    case Impl::kBlockUncached:
      return "block_uncached";
    case Impl::kSplitRow:
      return "split_row";
    case Impl::kAxis:
      return "axis";
    case Impl::kSplitGrid:
      return "split_grid";
    case Impl::kSplitTwoPass:
      return "split_two_pass";
    case Impl::kBlockRegs:
      return "block_regs";
    case Impl::kSplitRegs:
      return "split_regs";
    case Impl::kBlockReread:
      return "block_reread";
  }
  return "unknown";
}

absl::StatusOr<Impl> ParseImpl(absl::string_view name) {
  for (Impl impl : {Impl::kWarp, Impl::kBlockSmem, Impl::kBlockUncached, Impl::kSplitRow,
                    Impl::kAxis, Impl::kSplitGrid, Impl::kSplitTwoPass, Impl::kBlockRegs,
                    Impl::kSplitRegs, Impl::kBlockReread}) {
    if (name == ImplName(impl)) return impl;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("impl=\"", name,
                   "\" is not one of warp, block_smem, block_uncached, split_row, axis, "
                   "split_grid, split_two_pass, block_regs, split_regs, block_reread"));
}

std::string ConfigKey(const LaunchConfig& c) {
  std::string key =
      absl::StrCat(ImplName(c.impl), "/b", c.block_size, "/p", c.pack_size, "/g",
                   c.thread_group_width, "/r", c.rows_per_access, "/w", c.grid_waves);
  // Keys of the other impls stay as they were before split existed.
  if (c.split != 1) absl::StrAppend(&key, "/s", c.split);
  return key;
}

absl::StatusOr<LaunchConfig> ParseLaunchConfig(absl::string_view key) {
  const std::vector<absl::string_view> parts = absl::StrSplit(key, '/');
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config \"", key, "\" is not of the form impl/b<block>/p<pack>/g<group>/r<rows>/w<waves>[/s<split>]: ",
        why));
  };
  if (parts.size() != 6 && parts.size() != 7) return bad("expected 6 or 7 fields");
  LaunchConfig c;
  absl::StatusOr<Impl> impl = ParseImpl(parts[0]);
  if (!impl.ok()) return bad(impl.status().message());
  c.impl = *impl;
  const char prefixes[] = {'b', 'p', 'g', 'r', 'w', 's'};
  int* fields[] = {&c.block_size,      &c.pack_size,  &c.thread_group_width,
                   &c.rows_per_access, &c.grid_waves, &c.split};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const absl::string_view part = parts[i + 1];
    if (part.empty() || part[0] != prefixes[i] || !absl::SimpleAtoi(part.substr(1), fields[i])) {
      return bad(absl::StrCat("field \"", part, "\" should be ", std::string(1, prefixes[i]),
                              "<integer>"));
    }
  }
  return c;
}

int WarpColsPerThread(const LaunchConfig& c, DType dtype, int64_t cols) {
  if (c.impl != Impl::kWarp || c.pack_size < 1 || c.thread_group_width < 1) return 0;
  const int64_t pack = c.pack_size;
  if (c.thread_group_width < 32) {
    // One pack per lane; or two, for 16-byte packs, which halves the group
    // (narrow rows: 32 float32 columns on 4 lanes, not 8).
    const int most = NarrowGroupPacksPerLane(pack * static_cast<int64_t>(DTypeSize(dtype)));
    for (int packs = 1; packs <= most; ++packs) {
      if (cols <= packs * pack * c.thread_group_width) return packs * c.pack_size;
    }
    return 0;
  }
  const int64_t packs_per_lane = (cols + 32 * pack - 1) / (32 * pack);
  const int64_t needed = packs_per_lane * pack;
  if (needed <= pack) return c.pack_size;
  const int64_t pack_bytes = pack * static_cast<int64_t>(DTypeSize(dtype));
  for (int cpt : kWarpColsPerThread) {
    if (cpt % pack == 0 && cpt >= 2 * pack && cpt >= needed &&
        WarpHasColsPerThread(cpt, pack_bytes)) {
      return cpt;
    }
  }
  return 0;
}

int64_t WorkspaceBytes(Shape shape, const LaunchConfig& config) {
  if (config.impl != Impl::kSplitTwoPass || shape.rows < 1 || config.split < 1) return 0;
  const int64_t per_row = config.split * kTwoPassSlotBytes;
  if (shape.rows > std::numeric_limits<int64_t>::max() / per_row) {
    return std::numeric_limits<int64_t>::max();  // an illegal config anyway
  }
  return shape.rows * per_row;
}

int64_t SharedMemoryBytes(Op op, DType dtype, Shape shape, const LaunchConfig& config) {
  switch (config.impl) {
    case Impl::kBlockSmem:
      // The masked softmax caches x * scale + mask, in float.
      return shape.cols * (op == Op::kScaledMaskedSoftmax
                               ? static_cast<int64_t>(sizeof(float))
                               : static_cast<int64_t>(DTypeSize(dtype)));
    case Impl::kSplitRow:
    case Impl::kSplitGrid:
      return internal::SplitRowSharedMemoryBytes(op, dtype, shape, config);
    case Impl::kAxis:
      return internal::AxisSharedMemoryBytes(op, dtype, shape, config);
    case Impl::kSplitRegs:
      return internal::SplitRegsSharedMemoryBytes(dtype, shape, config);
    case Impl::kWarp:
    case Impl::kBlockUncached:
    case Impl::kSplitTwoPass:  // registers only
    case Impl::kBlockRegs:
    case Impl::kBlockReread:
      break;
  }
  return 0;
}

int NarrowPackSize(int pack_size, DType dtype, int64_t vector_length, int64_t alignment_bytes) {
  const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
  int pack = pack_size;
  while (pack > 1 &&
         (vector_length % pack != 0 || alignment_bytes % (pack * element) != 0)) {
    pack /= 2;
  }
  return pack;
}

int WidestPack(DType dtype, int64_t vector_length, int64_t alignment_bytes) {
  return NarrowPackSize(16 / static_cast<int>(DTypeSize(dtype)), dtype, vector_length,
                        alignment_bytes);
}

int WidestPackFor(Op op, Impl impl, DType dtype, Shape shape, int64_t alignment_bytes) {
  // The widest pack is a length every narrower one divides.
  const int64_t length = PackMustDivideLength(op, impl)
                             ? PackedLength(shape, impl)
                             : 16 / static_cast<int64_t>(DTypeSize(dtype));
  return WidestPack(dtype, length, alignment_bytes);
}

absl::StatusOr<LaunchConfig> ConfigForAlignment(Op op, DType dtype, Shape shape,
                                                const LaunchConfig& config,
                                                int64_t alignment_bytes,
                                                const DeviceInfo& device, RowPlacement rows) {
  if (!ServesRowPlacement(op, dtype, shape, config, rows)) {
    if (absl::Status s = ValidateConfig(op, dtype, shape, config, device); !s.ok()) return s;
    return HeuristicConfig(op, dtype, shape, device, alignment_bytes, rows);
  }
  LaunchConfig narrowed = config;
  // Where the pack need not divide the row, only the alignment narrows it
  // (the config's own pack is a length every narrower one divides). Strided
  // rows start wherever their layout says, so there the pack divides cols
  // (the kernels' edges assume rows that follow each other).
  const int64_t length = PackMustDivideLength(op, config.impl) || rows != RowPlacement::kContiguous
                             ? PackedLength(shape, config.impl)
                             : config.pack_size;
  narrowed.pack_size = NarrowPackSize(config.pack_size, dtype, length, alignment_bytes);
  if (narrowed.pack_size != config.pack_size && config.impl == Impl::kWarp &&
      config.thread_group_width < 32) {
    // Each lane now holds a narrower pack: more lanes per row.
    narrowed.thread_group_width = std::min(
        32, config.thread_group_width * (config.pack_size / narrowed.pack_size));
    if (narrowed.thread_group_width == 32) narrowed.rows_per_access = 1;
  }
  absl::Status narrowed_ok = ValidateConfig(op, dtype, shape, narrowed, device);
  if (narrowed_ok.ok() && !ServesRowPlacement(op, dtype, shape, narrowed, rows)) {
    narrowed_ok = absl::InvalidArgumentError(
        "the pack the operands' alignment allows does not serve these rows");
  }
  if (narrowed_ok.ok() || narrowed == config) {
    if (!narrowed_ok.ok()) return narrowed_ok;
    return narrowed;
  }
  // The narrowed config cannot run: the heuristic at this alignment, unless
  // the config itself is illegal, which is refused as such.
  if (absl::Status s = ValidateConfig(op, dtype, shape, config, device); !s.ok()) return s;
  return HeuristicConfig(op, dtype, shape, device, alignment_bytes, rows);
}

int64_t PackedLength(Shape shape, Impl impl) {
  return impl == Impl::kAxis ? shape.inner : shape.cols;
}

absl::StatusOr<int> ActiveBlocksPerSm(Op op, DType dtype, Shape shape,
                                      const LaunchConfig& config, const DeviceInfo& device) {
  const int64_t smem = SharedMemoryBytes(op, dtype, shape, config);
  if (!device.has_gpu()) return EstimateActiveBlocks(config, smem, device);
  if (absl::Status s = internal::CheckCurrentDevice(device); !s.ok()) return s;
  const internal::KernelRequest request =
      internal::MakeKernelRequest(dtype, shape, RowOpArgs{}, config, device);
  const internal::RowOpEntry entry = internal::SelectEntry(op, dtype, config.impl);
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " has no ", ImplName(config.impl), " kernel"));
  }
  int active = 0;
  const cudaError_t err =
      entry(request, internal::KernelAction::kQueryOccupancy, nullptr, &active);
  if (err == cudaErrorInvalidConfiguration) {
    return absl::InternalError(absl::StrCat("no compiled kernel instance for ",
                                            ConfigKey(config), " at cols=", shape.cols));
  }
  if (err != cudaSuccess) {
    return absl::InternalError(absl::StrCat("occupancy query for ", ConfigKey(config),
                                            " failed: ", cudaGetErrorString(err)));
  }
  return active;
}

absl::Status ValidateConfig(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                            const DeviceInfo& device) {
  if (absl::Status s = CheckShape(op, dtype, shape); !s.ok()) return s;
  if (!Contains(kPackSizes, config.pack_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pack_size=", config.pack_size, " must be 1, 2, 4 or 8"));
  }
  const size_t pack_bytes = config.pack_size * DTypeSize(dtype);
  if (pack_bytes > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pack_size=", config.pack_size, " is ", pack_bytes, " bytes per access for ",
        DTypeName(dtype), "; the limit is 16"));
  }
  const int64_t packed_length = PackedLength(shape, config.impl);
  if (PackMustDivideLength(op, config.impl) && packed_length % config.pack_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pack_size=", config.pack_size, " does not divide ",
                     config.impl == Impl::kAxis ? "inner=" : "cols=", packed_length));
  }
  if (config.grid_waves < 0 || config.grid_waves > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid_waves=", config.grid_waves, " must be in [0, 1024]"));
  }
  if (!HasSplit(config.impl) && config.split != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("split=", config.split, " must be 1 for ", ImplName(config.impl)));
  }
  // The middle-axis layout has its own kernel; the row kernels need inner 1.
  if ((shape.inner > 1) != (config.impl == Impl::kAxis)) {
    return absl::InvalidArgumentError(
        shape.inner > 1
            ? absl::StrCat(ImplName(config.impl), " serves the last axis only; inner=",
                           shape.inner, " needs impl axis")
            : std::string("impl axis serves inner > 1; inner=1 uses the row impls"));
  }
  if (IsFusedNorm(op)) {
    if (absl::Status s = CheckFusedNormKnobs(op, dtype, shape, config); !s.ok()) return s;
  }
  absl::Status knobs;
  switch (config.impl) {
    case Impl::kWarp:
      knobs = CheckWarpKnobs(dtype, shape, config);
      break;
    case Impl::kBlockSmem:
    case Impl::kBlockUncached:
      knobs = CheckBlockKnobs(shape, config);
      break;
    case Impl::kBlockRegs:
      knobs = CheckBlockKnobs(shape, config);
      if (knobs.ok()) knobs = CheckBlockRegsFits(shape, config);
      break;
    case Impl::kBlockReread:
      knobs = CheckBlockRereadKnobs(op, shape, config);
      break;
    case Impl::kSplitRow:
      knobs = internal::CheckSplitRowKnobs(op, dtype, shape, config, device);
      break;
    case Impl::kSplitGrid:
      knobs = internal::CheckSplitGridKnobs(op, dtype, shape, config, device);
      break;
    case Impl::kSplitTwoPass:
      knobs = internal::CheckSplitTwoPassKnobs(op, dtype, shape, config, device);
      break;
    case Impl::kSplitRegs:
      knobs = internal::CheckSplitRegsKnobs(op, dtype, shape, config, device);
      break;
    case Impl::kAxis:
      knobs = internal::CheckAxisKnobs(op, dtype, shape, config, device);
      break;
  }
  if (!knobs.ok()) return knobs;

  const int64_t smem = SharedMemoryBytes(op, dtype, shape, config);
  if (smem + kStaticSmemAllowance > device.max_smem_per_block_optin) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ImplName(config.impl), " needs ", smem, " bytes of shared memory per block for cols=",
        shape.cols, " (", DTypeName(dtype), "); ", device.name, " allows ",
        device.max_smem_per_block_optin, " per block"));
  }
  absl::StatusOr<int> active = ActiveBlocksPerSm(op, dtype, shape, config, device);
  if (!active.ok()) return active.status();
  if (*active == 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ConfigKey(config), " cannot be resident on ", device.name, " at cols=", shape.cols,
        " (occupancy 0: shared memory ", smem, " bytes, block_size ", config.block_size, ")",
        config.impl == Impl::kSplitGrid
            ? absl::StrCat("; split_grid needs all rows x split = ", shape.rows * config.split,
                           " blocks resident at once")
            : ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LaunchConfig>> EnumerateConfigs(Op op, DType dtype, Shape shape,
                                                           const DeviceInfo& device,
                                                           RowPlacement rows) {
  if (absl::Status s = CheckShape(op, dtype, shape); !s.ok()) return s;
  std::vector<LaunchConfig> candidates;
  if (shape.inner > 1) {
    internal::AppendAxisCandidates(op, dtype, shape, device, candidates);
  } else {
    AppendRowCandidates(op, dtype, shape, candidates);
    if (!IsFusedNorm(op)) {
      internal::AppendSplitRowCandidates(op, dtype, shape, device, candidates);
    }
  }
  std::vector<LaunchConfig> legal;
  for (const LaunchConfig& config : candidates) {
    if (!ServesRowPlacement(op, dtype, shape, config, rows)) continue;
    const absl::Status status = ValidateConfig(op, dtype, shape, config, device);
    if (status.ok()) {
      legal.push_back(config);
    } else if (status.code() != absl::StatusCode::kInvalidArgument &&
               status.code() != absl::StatusCode::kResourceExhausted) {
      return status;  // not "illegal here" but "cannot tell": e.g. wrong device
    }
  }
  return legal;
}

namespace {

// The fused norms' default: a whole warp per row up to kMaxWarpCols
// columns (16-byte packs), else a register-resident block, the smallest
// that holds the row.
absl::StatusOr<LaunchConfig> FusedNormHeuristic(Op op, DType dtype, Shape shape,
                                                const DeviceInfo& device,
                                                int64_t alignment_bytes) {
  const int pack = 16 / static_cast<int>(DTypeSize(dtype));
  if (WidestPack(dtype, shape.cols, alignment_bytes) != pack) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(op), " runs in 16-byte packs: cols=", shape.cols, " must be a multiple of ", pack,
        " and its operands and rows 16-byte aligned (they are aligned to ", alignment_bytes,
        " bytes)"));
  }
  if (shape.cols <= kMaxWarpCols) {
    const LaunchConfig c{Impl::kWarp, 128, pack, 32, 1, 0};
    if (ValidateConfig(op, dtype, shape, c, device).ok()) return c;
  }
  for (int block : kBlockImplBlockSizes) {
    if (!BlockRegsFits(shape.cols, pack, block)) continue;
    const LaunchConfig c{Impl::kBlockRegs, block, pack, 32, 1, 0};
    if (ValidateConfig(op, dtype, shape, c, device).ok()) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      OpName(op), " holds a row in registers: cols=", shape.cols, " exceeds its limit of ",
      int64_t{1024} * kBlockRegsValuesPerThread, " columns"));
}

}  // namespace

absl::StatusOr<LaunchConfig> HeuristicConfig(Op op, DType dtype, Shape shape,
                                             const DeviceInfo& device,
                                             int64_t alignment_bytes, RowPlacement rows) {
  if (absl::Status s = CheckShape(op, dtype, shape); !s.ok()) return s;
  if (IsFusedNorm(op)) return FusedNormHeuristic(op, dtype, shape, device, alignment_bytes);
  if (rows != RowPlacement::kContiguous) {
    // As for contiguous rows where that config serves these; else, for
    // strided rows, a block family with a pack dividing cols.
    absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, shape, device, alignment_bytes);
    if (c.ok() && ServesRowPlacement(op, dtype, shape, *c, rows)) return c;
    if (rows == RowPlacement::kGrouped) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grouped rows (per-head views) run rms_norm in warp groups of 16-byte packs, at most ",
          kMaxGroupedPacksPerLane, " a lane: cols=", shape.cols, " (", DTypeName(dtype),
          ") must be a multiple of 16 bytes, at most ",
          32 * kMaxGroupedPacksPerLane * 16 / static_cast<int64_t>(DTypeSize(dtype)),
          ", with operands and strides 16-byte aligned (here aligned to ", alignment_bytes,
          " bytes)"));
    }
    const int pack = WidestPack(dtype, shape.cols, alignment_bytes);
    for (Impl impl : {Impl::kBlockRegs, Impl::kBlockSmem, Impl::kBlockUncached}) {
      int block = kBlockImplBlockSizes[0];
      for (int candidate : kBlockImplBlockSizes) {
        if (candidate <= shape.cols / pack / 8) block = candidate;
      }
      if (impl == Impl::kBlockRegs) {
        if (shape.rows >= device.sm_count) continue;
        for (int candidate : kBlockImplBlockSizes) {
          if (BlockRegsFits(shape.cols, pack, candidate)) {
            block = candidate;
            break;
          }
        }
      }
      const LaunchConfig strided{impl, block, pack, 32, 1, 0};
      if (ValidateConfig(op, dtype, shape, strided, device).ok()) return strided;
    }
    return absl::InternalError(absl::StrCat("no launchable config for strided rows of ",
                                            OpName(op), " ", DTypeName(dtype),
                                            " cols=", shape.cols, " on ", device.name));
  }
  if (shape.inner > 1) {
    absl::StatusOr<LaunchConfig> axis = internal::AxisHeuristic(op, dtype, shape, device, alignment_bytes);
    if (!axis.ok()) return axis.status();
    if (absl::Status s = ValidateConfig(op, dtype, shape, *axis, device); !s.ok()) {
      return absl::InternalError(absl::StrCat("the axis heuristic chose ", ConfigKey(*axis),
                                              ", which is not valid: ", s.message()));
    }
    return axis;
  }
  if (std::optional<LaunchConfig> split = internal::SplitRowHeuristic(op, dtype, shape, device, alignment_bytes);
      split.has_value() && ValidateConfig(op, dtype, shape, *split, device).ok()) {
    return *split;
  }
  // Widest vector access the row length and the operands' alignment allow
  // (the register-resident impls; the block ones below may take more).
  const int pack = WidestPack(dtype, shape.cols, alignment_bytes);
  const int64_t num_packs = shape.cols / pack;

  // Short rows: registers. OneFlow stops at 1024 columns; measured on an
  // H200 (bench/results/2026-11-21-h200), float16 rows of 2048 run at 3813
  // GB/s from registers (64 per lane) against 2333 GB/s through shared
  // memory, so the register path goes to kMaxWarpCols.
  if (shape.cols <= kMaxWarpCols) {
    LaunchConfig c;
    c.impl = Impl::kWarp;
    c.block_size = 128;
    c.pack_size = pack;
    c.thread_group_width = std::min<int>(32, NextPowerOfTwo(num_packs));
    c.rows_per_access = 1;
    c.grid_waves = 0;
    // Narrow rows keep more bytes in flight per lane. On the H100
    // (bench/results/2026-11-22-h100-narrow-and-few-rows/), over 40 main-grid
    // and attention points of 16 to 128 columns, two 16-byte packs per lane
    // on half the group came within 2% of the tuned configs (geometric
    // mean), 3.5% ahead of one pack on two rows per step; the masked
    // softmax, whose load reads the mask too, did best with one pack on one
    // row.
    if (c.thread_group_width < 32 && op != Op::kScaledMaskedSoftmax) {
      if (c.thread_group_width >= 2 && NarrowGroupPacksPerLane(pack * DTypeSize(dtype)) == 2) {
        c.thread_group_width /= 2;
      } else {
        c.rows_per_access = 2;
      }
    }
    if (ValidateConfig(op, dtype, shape, c, device).ok()) return c;
  }

  // Fewer rows than SMs: each block is alone on its SM, and a row held in
  // registers (one load round trip, no re-read) at 16 elements a thread,
  // the smallest block that holds it. At 1 to 64 rows x 4096 on the H100,
  // L2 flushed, that config came within 3% of the best block_regs config,
  // which beat the best config of every other impl by 3-26%, except for the
  // float32 softmax, whose accurate exp made it 8% slower than the
  // shared-memory kernel (bench/results/2026-11-22-h100-block-regs/); its
  // kin (log-softmax, the masked softmax) share that exp and stay with the
  // block_smem rule.
  const bool accurate_exp = dtype == DType::kFloat32 &&
                            (op == Op::kSoftmax || op == Op::kLogSoftmax ||
                             op == Op::kScaledMaskedSoftmax);
  if (shape.rows < device.sm_count && !accurate_exp) {
    for (int block : kBlockImplBlockSizes) {
      if (!BlockRegsFits(shape.cols, pack, block)) continue;
      const LaunchConfig c{Impl::kBlockRegs, block, pack, 32, 1, 0};
      if (ValidateConfig(op, dtype, shape, c, device).ok()) return c;
      break;
    }
  }

  // Longer rows: one block per row, the shared-memory cache while it fits.
  // Small blocks win: on the H200 sweep the best block kept about 8 packs per
  // thread (float16 4096: b128 3461 GB/s vs b512 2804; 16384: b128 3520 vs
  // b1024 2330), since many small resident blocks overlap one row's
  // reductions with other rows' loads.
  // Fewer rows than SMs leave SMs idle whatever the block, so there a row
  // takes more threads, about two packs each: at 1 to 64 rows x 4096 on the
  // H100 the tuned block configs kept two to four.
  const int64_t packs_per_thread = shape.rows < device.sm_count ? 2 : 8;
  for (Impl impl : {Impl::kBlockSmem, Impl::kBlockUncached}) {
    // Rows off the pack grid (odd cols) keep the full pack where the op
    // allows (PackMustDivideLength): at 2048 x 50257 on an H100 block_smem
    // at the full pack runs 2368-2445 GB/s against 1869-2145 at pack 1
    // (bench/results/2026-11-26-h100-odd-cols-vector-stores).
    const int block_pack = WidestPackFor(op, impl, dtype, shape, alignment_bytes);
    int block = kBlockImplBlockSizes[0];
    for (int candidate : kBlockImplBlockSizes) {
      if (candidate <= shape.cols / block_pack / packs_per_thread) block = candidate;
    }
    const LaunchConfig c{impl, block, block_pack, 32, 1, 0};
    if (ValidateConfig(op, dtype, shape, c, device).ok()) return c;
  }
  return absl::InternalError(absl::StrCat("no launchable config for ", OpName(op), " ",
                                          DTypeName(dtype), " rows=", shape.rows,
                                          " cols=", shape.cols, " on ", device.name));
}

}  // namespace kt::kernels
