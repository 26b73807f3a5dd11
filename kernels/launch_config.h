// LaunchConfig: the tunable knobs of one kernel launch, as plain data; the
// rules that say which configs are legal for a problem, the enumerable
// config space (the tuner's search space) and the heuristic default.
#ifndef KERNTUNE_KERNELS_LAUNCH_CONFIG_H_
#define KERNTUNE_KERNELS_LAUNCH_CONFIG_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/device_info.h"
#include "kernels/op_args.h"
#include "kernels/types.h"

namespace kt::kernels {

enum class Impl {
  // A thread group of `thread_group_width` lanes (1..32, inside one warp)
  // owns a row and keeps it in registers. Rows up to kMaxWarpCols.
  kWarp,
  // One block per row; the row is cached in shared memory in its storage
  // dtype, so global memory is read once. Rows up to the shared-memory limit.
  // Any cols at full pack width where PackMustDivideLength allows.
  kBlockSmem,
  // One block per row, re-reading the row from global memory (twice for
  // softmax thanks to an online max/sum, twice for LayerNorm). No size limit.
  kBlockUncached,
  // `split` blocks (a thread-block cluster) share one row, each caching its
  // slice in shared memory and exchanging partial statistics through
  // distributed shared memory: for few, very long rows, where one block per
  // row would leave most SMs idle. Takes any cols at full pack width where
  // PackMustDivideLength allows (a scalar head and tail around each row's
  // whole packs), as kBlockSmem and kBlockUncached do.
  kSplitRow,
  // Softmax / log-softmax along a middle axis (Shape::inner > 1): columns of
  // pack_size consecutive inner elements (outer and inner flattened), blockDim
  // = (block_size / thread_group_width columns across inner,
  // thread_group_width threads along the reduced axis), so a warp's lanes
  // run along inner (contiguous) first. Lines of up to 16 entries per thread
  // stay in registers and are read once, longer ones twice; a block
  // reduction only when thread_group_width > 1 (axis_plan.h).
  kAxis,
  // `split` blocks share one row like kSplitRow, but they need not form a
  // cluster: the partial statistics go through global memory across grid
  // barriers (a cooperative launch, all rows * split blocks resident), so a
  // row may span every SM. For a handful of very long rows.
  kSplitGrid,
  // `split` blocks share one row without any barrier: a first kernel writes
  // each block's partial statistic to a workspace (RowOpArgs::workspace), a
  // second merges its row's partials and writes the block's slice, which it
  // loaded into registers (at most kMaxTwoPassPacksPerThread packs per
  // thread) before waiting for the first. On Hopper the second kernel is a
  // programmatic dependent launch, so that load overlaps the first kernel.
  kSplitTwoPass,
  // One block per row like kBlockSmem, but each thread keeps its packs of
  // the row in registers (at most BlockRegsPacksPerThread(pack_size)), and
  // the norms keep their weights there across rows: every load of a row is
  // issued before the one block reduction, and nothing is re-read. For rows
  // up to block_size * kBlockRegsValuesPerThread elements, where a few rows
  // leave each block alone on its SM and memory latency, not bandwidth,
  // sets the time.
  kBlockRegs,
  // Softmax and log-softmax: `split` blocks (a thread-block cluster) share a
  // row like kSplitRow, but each keeps its slice in registers (at most
  // SplitRegsPacksPerThread packs per thread, 16-byte packs; any cols, as
  // kSplitRow), refilled by a bulk copy through shared memory while the last row
  // is finished, and the row's statistics are merged once per row, warp to
  // warp, through distributed shared memory. For many rows too long for one
  // block (LLM vocabularies): at 2048 x 128256 / 151936 on the H100, 16-bit
  // 89-92% of copy and float32 95-97%, where kSplitRow reached 70-78%.
  kSplitRegs,
  // LayerNorm and RMSNorm: one block per row like kBlockUncached (no row
  // loop), read twice, but every pack of a thread's row is in flight at
  // once (at most BlockRereadPacksPerThread(pack_size); a compile-time
  // count, the fewest instantiated that cover the row, RunBlockRereadRowOp),
  // and only while the statistic is gathered; the second read, after the
  // block reduction, finds the row in L1. The first read asks L1 and L2 to
  // keep the row (evict_last), the second to drop it (evict_first), and
  // its L2 lines go back to normal priority before the block ends.
  // torch.compile's Inductor kernels take this shape. Tuned on the H100 it
  // wins 20-22 of the 192 norm points of the standard grid, up to 1.033x
  // the shipped configs it replaced at 8192 rows, and loses elsewhere (e.g.
  // to block_regs at 4096 columns): a tuner candidate, never a default
  // (bench/results/2026-11-27-h100-norms-block-reread-retune/). Rows up to
  // block_size * kBlockRereadValuesPerThread elements, whole packs.
  kBlockReread,
};

// "warp", "block_smem", "block_uncached", "split_row", "axis", "split_grid",
// "split_two_pass", "block_regs", "split_regs", "block_reread"
absl::string_view ImplName(Impl impl);
absl::StatusOr<Impl> ParseImpl(absl::string_view name);

struct LaunchConfig {
  Impl impl = Impl::kWarp;
  // Threads per block. Warp: a multiple of 32 up to 1024 (the block holds
  // block_size / thread_group_width thread groups). Block impls: one of
  // kBlockImplBlockSizes (a template parameter of the CUB block reduction).
  // Axis: 128, 256, 512 or 1024.
  int block_size = 128;
  // Elements per vector access: 1, 2, 4 or 8, at most 16 bytes, dividing
  // cols (inner for kAxis) unless PackMustDivideLength says otherwise.
  // Launch narrows it when a pointer is not aligned to the full pack.
  int pack_size = 1;
  // Lanes per row for kWarp: 1, 2, 4, 8, 16 or 32. Must be 32 for block impls
  // (where it has no meaning) so that equal configs compare equal. kAxis:
  // threads along the reduced axis, a power of two in [1, block_size].
  int thread_group_width = 32;
  // Rows each thread group handles per step for kWarp: 1 or 2 (2 only when
  // thread_group_width < 32). Must be 1 for block impls.
  int rows_per_access = 1;
  // Grid size policy: 0 = one block per unit of work (a block per row, or per
  // block_size/thread_group_width*rows_per_access rows); k > 0 = at most k
  // waves of resident blocks (k * active blocks per SM * SM count), blocks
  // looping over the remaining rows.
  int grid_waves = 0;
  // Blocks sharing one row: the cluster size of kSplitRow and kSplitRegs
  // (2, 4, 8 or 16), the
  // blocks per row of kSplitGrid (2..kMaxGridSplit) and of kSplitTwoPass
  // (2.., rows * split <= kMaxTwoPassBlocks); 1 for every other impl.
  int split = 1;

  friend bool operator==(const LaunchConfig& a, const LaunchConfig& b) {
    return a.impl == b.impl && a.block_size == b.block_size &&
           a.pack_size == b.pack_size &&
           a.thread_group_width == b.thread_group_width &&
           a.rows_per_access == b.rows_per_access &&
           a.grid_waves == b.grid_waves && a.split == b.split;
  }
  friend bool operator!=(const LaunchConfig& a, const LaunchConfig& b) {
    return !(a == b);
  }
};

// "warp/b128/p8/g32/r1/w0" style key: stable, used in logs, the CLI and the
// database; the split impls add the split: "split_row/b256/p8/g32/r1/w0/s8".
// ParseLaunchConfig is its inverse (a missing /s field means split 1).
std::string ConfigKey(const LaunchConfig& config);
absl::StatusOr<LaunchConfig> ParseLaunchConfig(absl::string_view key);

inline constexpr int kBlockImplBlockSizes[] = {128, 256, 512, 1024};
// The block impls' loops that only load index a row's packs in 32 bits
// (ForEachFetchedPack: 64-bit index arithmetic was a quarter of their
// instructions), so a row holds fewer packs than this, leaving room for any
// index plus a step.
inline constexpr int64_t kMaxBlockRowPacks = int64_t{1} << 30;
// kBlockRegs: row elements each thread holds in registers (16 floats, plus
// the norms' weights: at 1024 threads the budget is 64 registers), so one
// kernel instance per pack size holds 16 / pack packs.
inline constexpr int kBlockRegsValuesPerThread = 16;
constexpr int BlockRegsPacksPerThread(int pack) { return kBlockRegsValuesPerThread / pack; }
// kBlockReread: row elements each thread has in flight (its raw packs, held
// only until they are summed): 12288-column rows at 512 threads, the
// fastest block there.
inline constexpr int kBlockRereadValuesPerThread = 32;
constexpr int BlockRereadPacksPerThread(int pack) { return kBlockRereadValuesPerThread / pack; }
// kBlockReread launches one block per row, up to the grid's x limit.
inline constexpr int64_t kMaxGridBlocks = 2147483647;  // 2^31 - 1
// The ops kBlockReread serves: those it was measured to pay for.
constexpr bool BlockRereadServes(Op op) { return op == Op::kLayerNorm || op == Op::kRmsNorm; }
// kSplitRegs: block sizes (a template parameter), and the row elements a
// block holds in registers: up to 40960 floats (40 a thread at 1024
// threads, their 64-register budget) in at most 8 packs a thread, since
// every pack costs registers of its own (float32's 10 packs at 1024 threads
// spilled 56 bytes, 20 at 512 spilled 40). One kernel instance per block
// size holds SplitRegsPacksPerThread packs a thread: 16-bit 5 at 1024
// threads and 8 at 512, float32 8 at either.
inline constexpr int kSplitRegsBlockSizes[] = {512, 1024};
inline constexpr int kSplitRegsValuesPerBlock = 40960;
inline constexpr int kSplitRegsMaxPacksPerThread = 8;
constexpr int SplitRegsPacksPerThread(int block, int pack) {
  return std::min(kSplitRegsValuesPerBlock / block / pack, kSplitRegsMaxPacksPerThread);
}
// The most blocks kSplitGrid spreads one row over.
inline constexpr int kMaxGridSplit = 1024;
// kSplitTwoPass: block sizes (a template parameter), the packs each thread
// holds in registers (must match split_row::kTwoPassPacksPerThread), and the
// most blocks of one launch, which bounds the workspace (kMaxWorkspaceBytes).
inline constexpr int kTwoPassBlockSizes[] = {128, 256, 512};
inline constexpr int kMaxTwoPassPacksPerThread = 8;
inline constexpr int64_t kMaxTwoPassBlocks = 4096;
// Bytes of workspace per kSplitTwoPass block: one partial statistic.
inline constexpr int64_t kTwoPassSlotBytes = 16;
// Enough workspace for any config (RowOpArgs::workspace): a caller that
// keeps one buffer of this size per stream never needs to ask
// WorkspaceBytes.
inline constexpr int64_t kMaxWorkspaceBytes = kMaxTwoPassBlocks * kTwoPassSlotBytes;
// Whether every operand of `op` shares x's layout (softmax, log-softmax,
// ReduceScale: no weights indexed by column, no mask). Must agree with
// kTakesAnyCols of the op's load and store functors (the dispatchers assert
// it).
constexpr bool OperandsFollowRowLayout(Op op) {
  return op == Op::kSoftmax || op == Op::kLogSoftmax || op == Op::kReduceScale;
}
// Whether pack_size must divide the packed length (PackedLength) for `op`
// under `impl`. kSplitRow, kSplitRegs, kBlockSmem and kBlockUncached take
// any cols for the ops whose operands follow x's layout: their kernels
// start each row's packs where x's pack grid does and move the elements
// before the first whole pack and after the last one (fewer than a pack
// each) one at a time (RowEdges), so a row of odd length (an LLM vocabulary
// of 50257) keeps full-width access for all but those. kWarp, kBlockRegs
// and the other split impls still need whole packs.
constexpr bool PackMustDivideLength(Op op, Impl impl) {
  const bool moves_edges = impl == Impl::kSplitRow || impl == Impl::kSplitRegs ||
                           impl == Impl::kBlockSmem || impl == Impl::kBlockUncached;
  return !moves_edges || !OperandsFollowRowLayout(op);
}
// kSplitRow, kSplitGrid, kSplitTwoPass and kSplitRegs: the impls with a
// `split`.
inline constexpr bool HasSplit(Impl impl) {
  return impl == Impl::kSplitRow || impl == Impl::kSplitGrid || impl == Impl::kSplitTwoPass ||
         impl == Impl::kSplitRegs;
}
inline constexpr int kWarpBlockSizes[] = {64, 128, 256, 512};
inline constexpr int kGridWavesChoices[] = {0, 1, 4};
inline constexpr int kPackSizes[] = {1, 2, 4, 8};
inline constexpr int kThreadGroupWidths[] = {1, 2, 4, 8, 16, 32};
// Register-cached elements per thread the full-warp path is compiled for,
// beyond one pack per thread. Each value is one kernel instance per pack size,
// so this list is kept short: powers of two plus 12, 24 and 48 cover every
// cols up to 2048 with at most a third of the lanes' slots masked.
inline constexpr int kWarpColsPerThread[] = {2, 4, 8, 12, 16, 24, 32, 48, 64};
// Whether packs of `pack_bytes` have a full-warp instance of `cpt`: all of
// kWarpColsPerThread for 16-byte packs, only its powers of two for narrower
// packs, which serve the rows whose length or alignment rules out 16 bytes.
// There at most half a lane's slots are masked, and no tuning run on an H100
// or H200 ever chose 12, 24 or 48 with a narrower pack; the 36 instances per
// op and dtype that would take cost a tenth of the library's compile.
constexpr bool WarpHasColsPerThread(int cpt, int64_t pack_bytes) {
  return pack_bytes == 16 || (cpt & (cpt - 1)) == 0;
}
inline constexpr int kMaxWarpColsPerThread = 64;
// The fused norms (IsFusedNorm) run in 16-byte packs only, and their warp
// instances hold at least this many columns a lane (rows of 512 to 2048
// columns; shorter ones take kBlockRegs): LLM hidden sizes are multiples of
// 16 bytes, and each instance they never take costs compile time (the
// quantizing store is large).
inline constexpr int kFusedWarpMinColsPerThread = 16;
inline constexpr int64_t kMaxWarpCols = 32 * kMaxWarpColsPerThread;  // 2048

// The most packs a lane of a kWarp group narrower than a warp holds: two
// for 16-byte packs (each such pack size has a two-pack kernel instance),
// else one.
constexpr int NarrowGroupPacksPerLane(int64_t pack_bytes) { return pack_bytes == 16 ? 2 : 1; }

// Elements each lane of a kWarp config caches for a row of `cols`: the kernel
// instance it selects. 0 when no instance fits (cols too long for the config).
// Groups narrower than a warp hold one pack per lane, or two when the pack
// is 16 bytes of `dtype` and one would not cover the row.
int WarpColsPerThread(const LaunchConfig& config, DType dtype, int64_t cols);

// Device scratch memory a launch of `config` needs (RowOpArgs::workspace):
// rows * split * kTwoPassSlotBytes for kSplitTwoPass, 0 for every other impl.
int64_t WorkspaceBytes(Shape shape, const LaunchConfig& config);

// Dynamic shared memory one block of `config` needs for the problem (bytes).
int64_t SharedMemoryBytes(Op op, DType dtype, Shape shape,
                          const LaunchConfig& config);

// Resident blocks per SM for this config's kernel instance: the CUDA
// occupancy calculator on a real device, an estimate from thread and
// shared-memory limits on a described one. 0 means it cannot launch.
absl::StatusOr<int> ActiveBlocksPerSm(Op op, DType dtype, Shape shape,
                                      const LaunchConfig& config,
                                      const DeviceInfo& device);

// OK when `config` can run `op` on `shape` on `device`; otherwise
// InvalidArgument naming the knob, its value and the rule it breaks (or
// ResourceExhausted when shared memory or occupancy rule it out).
absl::Status ValidateConfig(Op op, DType dtype, Shape shape,
                            const LaunchConfig& config,
                            const DeviceInfo& device);

// Every config ValidateConfig accepts for the problem, in a stable order,
// among those that serve `rows` (ServesRowPlacement). This is the tuner's
// search space; the heuristic config is always in it.
absl::StatusOr<std::vector<LaunchConfig>> EnumerateConfigs(
    Op op, DType dtype, Shape shape, const DeviceInfo& device,
    RowPlacement rows = RowPlacement::kContiguous);

// Whether `config` serves rows placed as `rows` (op_args.h): contiguous
// rows, any; strided rows, the families whose load and store functors place
// every row (not the split and middle-axis kernels, which index a
// contiguous tensor themselves) with packs dividing cols; grouped rows
// (rms_norm over per-head views), whole 16-byte packs in warp groups of at
// most two packs a lane (kMaxGroupedPacksPerLane), the instances compiled
// for them.
bool ServesRowPlacement(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                        RowPlacement rows);
inline constexpr int kMaxGroupedPacksPerLane = 2;

// The default config: OneFlow's dispatch rules extended with 16-byte packs
// and the longer register-cached rows. Always valid for the problem.
// `alignment_bytes`: what the operands' addresses are aligned to (16 when
// they are allocations' bases), which caps the pack size.
// `rows`: for rows laid out by strides or groups (op_args.h's RowLayout),
// a config that serves them (ServesRowPlacement). The fused norms (IsFusedNorm) take a
// whole warp of 16-byte packs up to kMaxWarpCols columns, else the smallest
// kBlockRegs block that holds the row.
absl::StatusOr<LaunchConfig> HeuristicConfig(Op op, DType dtype, Shape shape,
                                             const DeviceInfo& device,
                                             int64_t alignment_bytes = 16,
                                             RowPlacement rows = RowPlacement::kContiguous);

// Largest pack size <= `pack_size` that divides `vector_length` (cols, or
// inner for kAxis) and keeps every access aligned given the pointers'
// `alignment_bytes` (the gcd of their addresses' low bits).
int NarrowPackSize(int pack_size, DType dtype, int64_t vector_length,
                   int64_t alignment_bytes);
// The widest pack (16 bytes at most) that divides `vector_length` at that
// alignment: the pack every default takes.
int WidestPack(DType dtype, int64_t vector_length, int64_t alignment_bytes = 16);
// The widest pack `impl` takes for `op` on `shape` at that alignment: as
// WidestPack of the packed length, or, where the pack need not divide it
// (PackMustDivideLength), the widest the alignment allows.
int WidestPackFor(Op op, Impl impl, DType dtype, Shape shape, int64_t alignment_bytes = 16);

// `config` for operands aligned only to `alignment_bytes`, validated
// (ValidateConfig): its pack narrowed (NarrowPackSize), and a warp group
// narrower than a warp widened so that its lanes still cover the row. When
// that narrowed config cannot run the problem (a narrower pack can push a
// register-resident row past its limit) though `config` itself can, the
// heuristic config at that alignment; when `config` is illegal, its error.
// Launch runs what this returns; the tuner's configs assume 16-byte aligned
// bases.
// `rows` strided or grouped: a config that does not serve them
// (ServesRowPlacement) becomes the heuristic for such rows, and the pack
// always divides cols.
absl::StatusOr<LaunchConfig> ConfigForAlignment(Op op, DType dtype, Shape shape,
                                                const LaunchConfig& config,
                                                int64_t alignment_bytes,
                                                const DeviceInfo& device,
                                                RowPlacement rows = RowPlacement::kContiguous);

// The length packs divide: shape.inner for kAxis, shape.cols otherwise.
int64_t PackedLength(Shape shape, Impl impl);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_LAUNCH_CONFIG_H_
