// The split impls' rules (config_rules.h): which kSplitRow and kSplitRegs
// (clusters), kSplitGrid (grid barriers) and kSplitTwoPass (two kernels)
// configs are legal, the ones worth timing, and when split rows are the
// default.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/config_rules.h"

namespace kt::kernels::internal {
namespace {

// Cluster sizes: powers of two up to Hopper's non-portable maximum of 16
// (8 is the portable limit). Must match RunSplitRowOp (split_row_dispatch.cuh).
constexpr int kSplitRowSplits[] = {2, 4, 8, 16};

// Split rows pay for a cluster barrier (or a second kernel) per row; below
// this many columns one block per row already has the row in one SM's
// reach, so the default does not split.
constexpr int64_t kSplitRowMinCols = 16384;
// The tuner times split configs from this many columns: at few rows x 4096
// one block per row leaves most SMs idle, and on the H100 float32 LayerNorm
// at 1 and 8 rows x 4096 chose split_two_pass at split 8
// (bench/results/2026-11-22-h100-narrow-and-few-rows/).
constexpr int64_t kSplitCandidateMinCols = 4096;

// kSplitRow's candidates for many rows too from this many columns (Llama
// 2's vocabulary): a 16-bit row is then 62.5 KiB or more, so block_smem
// holds at most three rows per SM and block_uncached reads each row twice,
// while a cluster's bulk copy keeps whole slices in flight (issue 26: LLM
// vocabularies at 2048 rows). The default takes kSplitRegs there for
// float32 softmaxes only (SplitRegsHeuristic).
constexpr int64_t kSplitRowManyRowsMinCols = 32000;

// The default gives each thread at most this many packs of its slice. On
// the H100 (bench/results/2026-11-21-h100-split-grid/) the tuned cluster
// configs at 1 and 8 rows x 131072 kept 4 to 8 packs per thread; at split 16
// the block this picks beat the one for 2 packs (an earlier default) at 31
// of 36 points, 1.28x on geometric mean (0.86-2.37x).
constexpr int64_t kDefaultPacksPerThread = 8;

// kSplitRow's bulk copy keeps two slices (this row's and the next one's,
// SplitRowCache) when both fit a block's shared memory: 227 KiB on every
// cluster-capable GPU so far (sm_90, sm_100), less 1 KiB for the kernel's
// static storage. A constant, not the device's figure, so that a config
// names the same kernel behaviour on every GPU it is tuned or served on.
constexpr int64_t kTwoSliceMaxBytes = 227 * 1024 - 1024;
// ... and when there are enough rows for each cluster to serve several:
// the next row's copy is what the second slice is for, and with fewer rows
// it would only halve the blocks per SM. An H100 holds at most 132 * 8 /
// split clusters of 256 threads (528 of 2 blocks), so from 1024 rows each
// cluster serves about two rows or more.
constexpr int64_t kTwoSliceMinRows = 1024;

bool SupportsClusters(const DeviceInfo& device) { return device.cc_major >= 9; }

// kSplitRegs serves the ops whose statistics it merges once per row
// (SoftmaxMath's Row::RebasedTo).
bool SplitRegsServes(Op op) { return op == Op::kSoftmax || op == Op::kLogSoftmax; }
// ... in 16-byte packs: its rows arrive by the bulk copy.
int SplitRegsPack(DType dtype) { return 16 / static_cast<int>(DTypeSize(dtype)); }
// Cooperative launches (grid barriers): every GPU CUDA 13 supports.
bool SupportsGridBarriers(const DeviceInfo& device) { return device.cc_major >= 7; }

// kSplitGrid publishes each block's partial in the first bytes of its slice
// of y (split_row::GridSlots): at most 12 bytes, so 16 leave room.
constexpr int64_t kGridSlotBytes = 16;

// kSplitGrid's candidates put this many blocks of a row on each SM (the
// split being blocks per SM * SMs / rows): one block per SM, or more,
// smaller slices for latency hiding.
constexpr int kGridBlocksPerSm[] = {1, 2, 4};

// kSplitTwoPass's candidate splits, as long as rows * split stays within
// kTwoPassMaxCandidateBlocksPerSm blocks per SM: the fastest configs of the
// H100 prototype (1 and 8 rows x 131072) used 16 to 66 blocks per row; the
// small splits are for tens of rows.
constexpr int kTwoPassSplits[] = {2, 4, 8, 16, 32, 64, 128};
constexpr int kTwoPassMaxCandidateBlocksPerSm = 4;

// kSplitTwoPass's default: 32 blocks per row of 256 threads (more blocks
// per row when the slice needs them; 16 when rows * 32 would pass
// kTwoPassMaxCandidateBlocksPerSm blocks per SM, SplitRowHeuristic). On
// the H100 (bench/results/2026-11-21-h100-two-pass/, the prototype with the
// warp merges), that config was within 8% of the fastest of each point
// (softmax, LayerNorm, RMSNorm; float32, float16; 1 and 8 rows x 131072),
// which used 16 to 66 blocks per row, and the two-pass kernels beat the
// tuned cluster configs at all 12 points.
constexpr int kTwoPassDefaultSplit = 32;

// The cluster default in more than one wave, when no split fits one, up to
// this many waves of clusters. At 64 rows x 131072 float32 on the H100
// (bench/results/2026-11-21-h100-two-pass/), ReduceScale takes split 8 of
// 512 threads (1.29 waves), 1.37x faster than one block per row. Softmax,
// LayerNorm and RMSNorm have no default block within 1.5 waves (their
// registers fit 1-2 blocks per SM) and keep one block per row, where tuned
// clusters of 256 threads are 1.28-1.44x faster.
constexpr double kMaxClusterWaves = 1.5;
constexpr int kTwoPassDefaultBlock = 256;

int64_t CacheElementBytes(Op op, DType dtype) {
  // The masked softmax caches x * scale + mask in float (MaskedScaleLoad).
  return op == Op::kScaledMaskedSoftmax ? static_cast<int64_t>(sizeof(float))
                                        : static_cast<int64_t>(DTypeSize(dtype));
}

// Packs of the largest block's slice (the first cols/pack % split blocks
// take one more pack than the rest).
int64_t PacksPerBlock(int64_t cols, int pack, int split) {
  const int64_t num_packs = cols / pack;
  return (num_packs + split - 1) / split;
}

// Few rows: one block per row would leave SMs idle (the default's rule), or
// leave a ragged second wave (the tuner also times the band up to twice the
// SM count, where splitting may still win).
bool FewLongRows(Shape shape, int64_t max_rows, int64_t min_cols = kSplitRowMinCols) {
  return shape.inner == 1 && shape.cols >= min_cols && shape.rows < max_rows;
}

// Knobs the split impls share: block size, the row-kernel knobs that must
// stay neutral, and a whole pack per block.
absl::Status CheckCommonSplitKnobs(DType dtype, Shape shape, const LaunchConfig& c) {
  const absl::string_view impl = ImplName(c.impl);
  if (std::find(std::begin(kBlockImplBlockSizes), std::end(kBlockImplBlockSizes), c.block_size) ==
      std::end(kBlockImplBlockSizes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size=", c.block_size, " must be 128, 256, 512 or 1024 for ", impl));
  }
  if (c.thread_group_width != 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("thread_group_width=", c.thread_group_width, " must be 32 for ", impl));
  }
  if (c.rows_per_access != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows_per_access=", c.rows_per_access, " must be 1 for ", impl));
  }
  if (c.grid_waves != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid_waves=", c.grid_waves, " must be 0 for ", impl, " (split blocks per row)"));
  }
  // Every block of the row needs at least one whole pack of it.
  const int64_t num_packs = shape.cols / c.pack_size;
  if (num_packs < c.split) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split=", c.split, " exceeds the ", num_packs, " packs of pack_size=", c.pack_size,
        " in cols=", shape.cols, ": every block of the row needs at least one"));
  }
  return absl::OkStatus();
}

// The block size the defaults take for a slice: the smallest that gives
// each thread at most kDefaultPacksPerThread packs (1024 at most).
int DefaultSplitBlock(int64_t slice_packs) {
  for (int candidate : kBlockImplBlockSizes) {
    if (candidate * kDefaultPacksPerThread >= slice_packs) return candidate;
  }
  return kBlockImplBlockSizes[std::size(kBlockImplBlockSizes) - 1];
}

// Block sizes worth timing for a slice: those that give every thread at
// least one pack (128 always).
bool WorthTiming(int block, int64_t slice_packs) {
  return block == kBlockImplBlockSizes[0] || block <= slice_packs;
}

// The cluster impls' (kSplitRow, kSplitRegs) own rules: a GPU with
// clusters and a cluster size of kSplitRowSplits.
absl::Status CheckClusterKnobs(const LaunchConfig& c, const DeviceInfo& device) {
  const absl::string_view impl = ImplName(c.impl);
  if (!SupportsClusters(device)) {
    return absl::InvalidArgumentError(
        absl::StrCat("impl=", impl, " needs thread-block clusters (compute capability 9.0+); ",
                     device.name, " is ", device.cc_major, ".", device.cc_minor));
  }
  if (std::find(std::begin(kSplitRowSplits), std::end(kSplitRowSplits), c.split) ==
      std::end(kSplitRowSplits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split=", c.split, " must be 2, 4, 8 or 16 for ", impl));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSplitRowKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& c,
                                const DeviceInfo& device) {
  if (absl::Status s = CheckClusterKnobs(c, device); !s.ok()) return s;
  return CheckCommonSplitKnobs(dtype, shape, c);
}

absl::Status CheckSplitRegsKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& c,
                                 const DeviceInfo& device) {
  if (absl::Status s = CheckClusterKnobs(c, device); !s.ok()) return s;
  if (!SplitRegsServes(op)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "impl=split_regs serves softmax and log_softmax only, not ", OpName(op)));
  }
  if (std::find(std::begin(kSplitRegsBlockSizes), std::end(kSplitRegsBlockSizes),
                c.block_size) == std::end(kSplitRegsBlockSizes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size=", c.block_size, " must be 512 or 1024 for split_regs"));
  }
  if (c.pack_size != SplitRegsPack(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pack_size=", c.pack_size, " must be ", SplitRegsPack(dtype), " (16 bytes of ",
        DTypeName(dtype), ") for split_regs: its rows arrive by the bulk copy"));
  }
  if (absl::Status s = CheckCommonSplitKnobs(dtype, shape, c); !s.ok()) return s;
  const int64_t slice_packs = PacksPerBlock(shape.cols, c.pack_size, c.split);
  const int per_thread = SplitRegsPacksPerThread(c.block_size, c.pack_size);
  if (slice_packs > static_cast<int64_t>(per_thread) * c.block_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split=", c.split, " leaves ", slice_packs, " packs per block at cols=", shape.cols,
        ", pack_size=", c.pack_size, "; split_regs holds at most ", per_thread,
        " per thread (", per_thread * c.block_size, " for block_size=", c.block_size,
        "): raise split"));
  }
  return absl::OkStatus();
}

int64_t SplitRegsSharedMemoryBytes(DType dtype, Shape shape, const LaunchConfig& c) {
  if (c.split < 1 || c.pack_size < 1) return 0;
  return PacksPerBlock(shape.cols, c.pack_size, c.split) * c.pack_size *
         static_cast<int64_t>(DTypeSize(dtype));
}

absl::Status CheckSplitTwoPassKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& c,
                                    const DeviceInfo& device) {
  if (std::find(std::begin(kTwoPassBlockSizes), std::end(kTwoPassBlockSizes), c.block_size) ==
      std::end(kTwoPassBlockSizes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size=", c.block_size, " must be 128, 256 or 512 for split_two_pass"));
  }
  if (c.split < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("split=", c.split, " must be >= 2 for split_two_pass"));
  }
  if (shape.rows * c.split > kMaxTwoPassBlocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows=", shape.rows, " x split=", c.split, " exceeds split_two_pass's ",
        kMaxTwoPassBlocks, " blocks (the workspace holds one partial per block)"));
  }
  if (absl::Status s = CheckCommonSplitKnobs(dtype, shape, c); !s.ok()) return s;
  // Each thread holds its packs of the slice in registers.
  const int64_t slice_packs = PacksPerBlock(shape.cols, c.pack_size, c.split);
  if (slice_packs > static_cast<int64_t>(kMaxTwoPassPacksPerThread) * c.block_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split=", c.split, " leaves ", slice_packs, " packs per block at cols=", shape.cols,
        ", pack_size=", c.pack_size, "; split_two_pass holds at most ",
        kMaxTwoPassPacksPerThread, " per thread (", kMaxTwoPassPacksPerThread * c.block_size,
        " for block_size=", c.block_size, "): raise split or block_size"));
  }
  return absl::OkStatus();
}

absl::Status CheckSplitGridKnobs(Op op, DType dtype, Shape shape, const LaunchConfig& c,
                                 const DeviceInfo& device) {
  if (!SupportsGridBarriers(device)) {
    return absl::InvalidArgumentError(
        absl::StrCat("impl=split_grid needs cooperative launches (compute capability 7.0+); ",
                     device.name, " is ", device.cc_major, ".", device.cc_minor));
  }
  if (c.split < 2 || c.split > kMaxGridSplit) {
    return absl::InvalidArgumentError(
        absl::StrCat("split=", c.split, " must be in [2, ", kMaxGridSplit, "] for split_grid"));
  }
  if (absl::Status s = CheckCommonSplitKnobs(dtype, shape, c); !s.ok()) return s;
  // The smallest slice (cols / pack / split whole packs) holds the block's
  // partial while the row is exchanged.
  const int64_t smallest_slice_bytes =
      shape.cols / c.pack_size / c.split * c.pack_size * static_cast<int64_t>(DTypeSize(dtype));
  if (smallest_slice_bytes < kGridSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split=", c.split, " leaves ", smallest_slice_bytes, " bytes of cols=", shape.cols,
        " per block; split_grid needs ", kGridSlotBytes, " for the exchange"));
  }
  // All rows * split blocks must be resident at once (the occupancy query
  // checks this exactly on the GPU; this is the bound any GPU obeys).
  const int64_t most_resident =
      static_cast<int64_t>(device.sm_count) * (device.max_threads_per_sm / c.block_size);
  if (shape.rows * c.split > most_resident) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows=", shape.rows, " x split=", c.split, " blocks of ", c.block_size,
        " threads cannot all be resident on ", device.name, " (at most ", most_resident,
        "); split_grid needs every block of the grid at once"));
  }
  return absl::OkStatus();
}

SplitRowCache SplitRowCacheOf(Op op, DType dtype, Shape shape, const LaunchConfig& c) {
  SplitRowCache cache;
  if (c.split < 1 || c.pack_size < 1) return cache;
  cache.slice_bytes =
      PacksPerBlock(shape.cols, c.pack_size, c.split) * c.pack_size * CacheElementBytes(op, dtype);
  cache.bulk_copy =
      c.impl == Impl::kSplitRow &&
      SplitRowBulkCopies(op, c.pack_size * static_cast<int64_t>(DTypeSize(dtype)));
  if (cache.bulk_copy && 2 * cache.slice_bytes <= kTwoSliceMaxBytes &&
      shape.rows >= kTwoSliceMinRows) {
    cache.buffers = 2;
  }
  return cache;
}

int64_t SplitRowSharedMemoryBytes(Op op, DType dtype, Shape shape, const LaunchConfig& c) {
  return SplitRowCacheOf(op, dtype, shape, c).bytes();
}

void AppendSplitRowCandidates(Op op, DType dtype, Shape shape, const DeviceInfo& device,
                              std::vector<LaunchConfig>& candidates) {
  const bool few_long_rows =
      FewLongRows(shape, 2 * static_cast<int64_t>(device.sm_count), kSplitCandidateMinCols);
  // Clusters only: the grid and two-pass impls need every block resident or
  // a workspace slot per block, which many rows rule out.
  const bool many_long_rows = shape.inner == 1 && shape.cols >= kSplitRowManyRowsMinCols;
  if (!few_long_rows && !many_long_rows) return;
  // The widest pack only: narrower ones only add loads per byte, and Launch
  // narrows by itself where pointers demand it. Block sizes that give every
  // thread at least one pack of the slice. At most 16 cluster configs, 12
  // grid ones and 21 two-pass ones.
  const auto append = [&](Impl impl, int split) {
    const int pack = WidestPackFor(op, impl, dtype, shape);
    const int64_t slice_packs = PacksPerBlock(shape.cols, pack, split);
    for (int block : kBlockImplBlockSizes) {
      if (impl == Impl::kSplitTwoPass &&
          std::find(std::begin(kTwoPassBlockSizes), std::end(kTwoPassBlockSizes), block) ==
              std::end(kTwoPassBlockSizes)) {
        continue;
      }
      if (!WorthTiming(block, slice_packs)) continue;
      LaunchConfig c{impl, block, pack, 32, 1, 0};
      c.split = split;
      candidates.push_back(c);
    }
  };
  if (SupportsClusters(device)) {
    for (int split : kSplitRowSplits) append(Impl::kSplitRow, split);
    // Every block size and split whose slice fits the registers (the
    // caller's ValidateConfig drops the others): at most 8 configs.
    if (SplitRegsServes(op)) {
      for (int split : kSplitRowSplits) {
        for (int block : kSplitRegsBlockSizes) {
          LaunchConfig c{Impl::kSplitRegs, block, SplitRegsPack(dtype), 32, 1, 0};
          c.split = split;
          candidates.push_back(c);
        }
      }
    }
  }
  if (!few_long_rows) return;
  if (SupportsGridBarriers(device)) {
    int previous = 0;
    for (int per_sm : kGridBlocksPerSm) {
      const int64_t split = std::min<int64_t>(
          kMaxGridSplit, static_cast<int64_t>(per_sm) * device.sm_count / shape.rows);
      if (split < 2 || split == previous) continue;
      append(Impl::kSplitGrid, static_cast<int>(split));
      previous = static_cast<int>(split);
    }
  }
  for (int split : kTwoPassSplits) {
    if (shape.rows * split <=
        static_cast<int64_t>(kTwoPassMaxCandidateBlocksPerSm) * device.sm_count) {
      append(Impl::kSplitTwoPass, split);
    }
  }
}

// Softmax and log-softmax over at least as many rows as SMs, in 16-byte
// packs (any cols: a scalar head and tail around each row's packs), where
// one block per row falls short: 16-bit rows too long for one block's
// shared memory (block_smem cannot cache them, block_uncached reads them
// twice), float32 rows from kSplitRowManyRowsMinCols columns (125 KB and
// more, so block_smem holds one row per SM). There kSplitRegs at the
// smallest split up to 8 whose slice fits the registers, 1024 threads for
// 16-bit dtypes; float32 tries 512 threads first, then 1024. On the H100:
//  - at 2048 x 128256 and 151936 (bench/results/2026-11-26-h100-split-regs-
//    float32/), 16-bit at split 4 89-92% of copy, where the best kSplitRow
//    config reached 70-78%; float32 512 threads at split 8 97% (1024 at
//    split 4: 93%) and 1024 at split 8 95% where 512 threads need 16;
//  - at 2048 x 32000-57344 float32 (2026-11-27-h100-split-regs-odd-cols/),
//    the fastest split_regs config 1.14-1.22x the block kernels' default;
//    16-bit rows of 57344-100000 columns ran 0.97-1.08x the best block_smem
//    config, and 5% slower at 65536 with 1024 threads, so they keep
//    block_smem.
// Slices under 40 KB run 57-73%: 16-bit at split 8, float32 at 16.
namespace {
std::optional<LaunchConfig> SplitRegsHeuristic(Op op, DType dtype, Shape shape,
                                               const DeviceInfo& device,
                                               int64_t alignment_bytes) {
  const int pack = SplitRegsPack(dtype);
  const int64_t row_bytes = shape.cols * static_cast<int64_t>(DTypeSize(dtype));
  const bool one_block_falls_short = dtype == DType::kFloat32
                                         ? shape.cols >= kSplitRowManyRowsMinCols
                                         : row_bytes > device.max_smem_per_block_optin;
  if (!SupportsClusters(device) || !SplitRegsServes(op) || shape.inner != 1 ||
      shape.rows < device.sm_count || !one_block_falls_short ||
      WidestPackFor(op, Impl::kSplitRegs, dtype, shape, alignment_bytes) != pack) {
    return std::nullopt;
  }
  constexpr int kMaxSplit = 8;
  for (int block = dtype == DType::kFloat32 ? 512 : 1024; block <= 1024; block *= 2) {
    for (int split : kSplitRowSplits) {
      if (split > kMaxSplit) break;
      LaunchConfig c{Impl::kSplitRegs, block, pack, 32, 1, 0};
      c.split = split;
      if (ValidateConfig(op, dtype, shape, c, device).ok()) return c;
    }
  }
  return std::nullopt;
}
}  // namespace

// Rows fewer than SMs and at least kSplitRowMinCols columns.
// While rows * 16 blocks stay within kTwoPassMaxCandidateBlocksPerSm per
// SM: kSplitTwoPass, split 32 where rows * 32 stay within it too, else 16
// (more if the slice does not fit 256 threads' registers), with 256 threads
// (128 for slices shorter than 256 packs, or when 256 would need a second
// wave). On the H100 that is up to 16 rows at split 32 and 33 at 16. There
// (bench/results/2026-11-26-h100-llm-tuned/), at 16 rows x 32000-151936,
// the tuned two-pass configs beat the clusters this rule took from 9 rows
// before by 1.4-2.2x (every softmax and log-softmax point). At 12-32 rows x
// 32768 / 131072 (softmax, LayerNorm, RMSNorm; three dtypes) this default
// beat the best cluster config at 104 of 108 points; it trailed by 1-5%
// only at LayerNorm float32 x 131072 from 20 rows.
// Otherwise, on Hopper, the cluster split that keeps the most SMs busy in a
// single wave of clusters (rows * split blocks, all resident at once), the
// smallest such split on ties; when no split fits one wave (big float
// slices, tens of rows), the one with the fewest waves up to
// kMaxClusterWaves. Before Hopper, kSplitGrid with one block of each row per
// SM (split = SMs / rows). Measured on the H100, clusters won every point of
// rows 1 and 8 x 131072 but one, by 1.1-1.6x against the one-block-per-SM
// grid: a grid barrier costs more than a cluster's. The slice must fit
// shared memory. Nothing when no split keeps more SMs busy than one block
// per row would.
std::optional<LaunchConfig> SplitRowHeuristic(Op op, DType dtype, Shape shape,
                                              const DeviceInfo& device,
                                              int64_t alignment_bytes) {
  if (std::optional<LaunchConfig> regs = SplitRegsHeuristic(op, dtype, shape, device, alignment_bytes)) {
    return regs;
  }
  if (!FewLongRows(shape, device.sm_count)) return std::nullopt;
  const int pack = WidestPack(dtype, shape.cols, alignment_bytes);
  const int64_t max_blocks =
      kTwoPassMaxCandidateBlocksPerSm * static_cast<int64_t>(device.sm_count);
  int first_split = kTwoPassDefaultSplit;
  if (shape.rows * first_split > max_blocks) first_split /= 2;
  if (shape.rows * first_split <= max_blocks) {
    // Longer rows raise the split before the block size (512 threads of 8
    // packs and the norms' weights spill registers); slices shorter than 256
    // packs take 128 threads, so that every thread has a pack.
    const auto fits = [&](const LaunchConfig& c, int64_t slice_packs) {
      return slice_packs <= static_cast<int64_t>(kMaxTwoPassPacksPerThread) * c.block_size &&
             ValidateConfig(op, dtype, shape, c, device).ok();
    };
    const int smallest = kTwoPassBlockSizes[0];
    const int largest = kTwoPassBlockSizes[std::size(kTwoPassBlockSizes) - 1];
    for (int block : {kTwoPassDefaultBlock, largest}) {
      for (int split = first_split; shape.rows * split <= kMaxTwoPassBlocks; split *= 2) {
        const int64_t slice_packs = PacksPerBlock(shape.cols, pack, split);
        LaunchConfig c{Impl::kSplitTwoPass, slice_packs < block ? smallest : block, pack, 32, 1, 0};
        c.split = split;
        if (!fits(c, slice_packs)) continue;
        // Every thread keeps 8 packs of registers (and the norms 16 more of
        // weights), so a 256-thread block of 16-bit norms fits once per SM on
        // the H100: a second wave of blocks cost 1.3-1.4x at 8 rows, where
        // 128 threads fit twice. Take 128 when it avoids a second wave.
        const absl::StatusOr<int> active = ActiveBlocksPerSm(op, dtype, shape, c, device);
        if (c.block_size > smallest && active.ok() &&
            shape.rows * split > static_cast<int64_t>(*active) * device.sm_count) {
          LaunchConfig narrower = c;
          narrower.block_size = smallest;
          if (fits(narrower, slice_packs)) return narrower;
        }
        return c;
      }
    }
  }
  if (!SupportsClusters(device)) {
    const int64_t split = std::min<int64_t>(kMaxGridSplit, device.sm_count / shape.rows);
    if (!SupportsGridBarriers(device) || split < 2) return std::nullopt;
    LaunchConfig c{Impl::kSplitGrid, DefaultSplitBlock(PacksPerBlock(shape.cols, pack, split)),
                   pack, 32, 1, 0};
    c.split = static_cast<int>(split);
    return c;
  }
  const int cluster_pack = WidestPackFor(op, Impl::kSplitRow, dtype, shape, alignment_bytes);
  std::optional<LaunchConfig> best;
  int64_t best_busy_sms = shape.rows;  // one block per row
  std::optional<LaunchConfig> fewest_waves;
  double least_waves = kMaxClusterWaves;
  for (int split : kSplitRowSplits) {
    const int block = DefaultSplitBlock(PacksPerBlock(shape.cols, cluster_pack, split));
    LaunchConfig c{Impl::kSplitRow, block, cluster_pack, 32, 1, 0};
    c.split = split;
    if (!ValidateConfig(op, dtype, shape, c, device).ok()) continue;  // slice too big
    absl::StatusOr<int> active = ActiveBlocksPerSm(op, dtype, shape, c, device);
    if (!active.ok() || *active == 0) continue;
    const int64_t blocks = shape.rows * split;
    const int64_t resident = static_cast<int64_t>(*active) * device.sm_count;
    if (blocks > resident) {  // more than one wave
      const double waves = static_cast<double>(blocks) / static_cast<double>(resident);
      if (waves <= least_waves) {
        fewest_waves = c;
        least_waves = waves;
      }
      continue;
    }
    const int64_t busy_sms = std::min<int64_t>(blocks, device.sm_count);
    if (busy_sms > best_busy_sms) {
      best = c;
      best_busy_sms = busy_sms;
    }
  }
  return best.has_value() ? best : fewest_waves;
}

}  // namespace kt::kernels::internal
