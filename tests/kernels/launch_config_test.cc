// Config rules on a described H100 (no GPU needed): what is legal, what is
// refused and why, the enumerated space and the heuristic default.
#include "kernels/launch_config.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/axis_plan.h"
#include "kernels/launch.h"
#include "kernels/op_args.h"

namespace kt::kernels {
namespace {

const DeviceInfo& H100() {
  static const DeviceInfo device = DescribedH100();
  return device;
}

// A described A100 (compute capability 8.0, 108 SMs): no clusters.
const DeviceInfo& A100() {
  static const DeviceInfo device = [] {
    absl::StatusOr<DeviceInfo> a100 =
        DescribeSku("NVIDIA A100-SXM4-80GB", 8, 0, 108, int64_t{80} << 30);
    if (!a100.ok()) {
      ADD_FAILURE() << a100.status();
      return DescribedH100();
    }
    return *a100;
  }();
  return device;
}

LaunchConfig Warp(int block, int pack, int group, int rows = 1, int waves = 0) {
  return {Impl::kWarp, block, pack, group, rows, waves};
}

LaunchConfig Block(Impl impl, int block, int pack, int waves = 0) {
  return {impl, block, pack, 32, 1, waves};
}

LaunchConfig Split(int block, int pack, int split) {
  LaunchConfig c{Impl::kSplitRow, block, pack, 32, 1, 0};
  c.split = split;
  return c;
}

LaunchConfig GridSplit(int block, int pack, int split) {
  LaunchConfig c{Impl::kSplitGrid, block, pack, 32, 1, 0};
  c.split = split;
  return c;
}

LaunchConfig TwoPass(int block, int pack, int split) {
  LaunchConfig c{Impl::kSplitTwoPass, block, pack, 32, 1, 0};
  c.split = split;
  return c;
}

// The heuristic's config for the problem as its key, or the error it gave.
std::string HeuristicKey(Op op, DType dtype, Shape shape, const DeviceInfo& device) {
  absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, shape, device);
  return c.ok() ? ConfigKey(*c) : c.status().ToString();
}

void ExpectRefused(Op op, DType dtype, Shape shape, const LaunchConfig& config,
                   absl::StatusCode code, const std::string& mentions) {
  const absl::Status s = ValidateConfig(op, dtype, shape, config, H100());
  EXPECT_EQ(s.code(), code) << ConfigKey(config) << ": " << s;
  EXPECT_NE(s.message().find(mentions), absl::string_view::npos)
      << "message \"" << s.message() << "\" should mention \"" << mentions << "\"";
}

// The knobs the split impls pin (CheckCommonSplitKnobs): each refused by
// name on a float16 8 x 131072 problem, starting from a legal `base`.
void ExpectSplitKnobsRefused(const LaunchConfig& base) {
  const Shape shape{8, 131072};
  ASSERT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, shape, base, H100()).ok())
      << ConfigKey(base);
  const std::pair<int LaunchConfig::*, int> bad_knobs[] = {
      {&LaunchConfig::block_size, 384},
      {&LaunchConfig::thread_group_width, 16},
      {&LaunchConfig::rows_per_access, 2},
      {&LaunchConfig::grid_waves, 1},
  };
  const char* const names[] = {"block_size=384", "thread_group_width=16", "rows_per_access=2",
                               "grid_waves=1"};
  for (size_t i = 0; i < std::size(bad_knobs); ++i) {
    LaunchConfig c = base;
    c.*bad_knobs[i].first = bad_knobs[i].second;
    ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, c, absl::StatusCode::kInvalidArgument,
                  names[i]);
  }
}

TEST(LaunchConfigTest, ConfigKeyRoundTrips) {
  const LaunchConfig c = Warp(256, 8, 16, 2, 4);
  EXPECT_EQ(ConfigKey(c), "warp/b256/p8/g16/r2/w4");
  absl::StatusOr<LaunchConfig> parsed = ParseLaunchConfig(ConfigKey(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, c);
  EXPECT_FALSE(ParseLaunchConfig("warp/b256/p8").ok());
  EXPECT_FALSE(ParseLaunchConfig("tile/b256/p8/g16/r2/w4").ok());
  EXPECT_FALSE(ParseLaunchConfig("warp/x256/p8/g16/r2/w4").ok());
  EXPECT_FALSE(ParseLaunchConfig("warp/b2x6/p8/g16/r2/w4").ok());
}

TEST(LaunchConfigTest, WarpColsPerThreadPicksTheSmallestInstance) {
  constexpr DType f32 = DType::kFloat32;
  EXPECT_EQ(WarpColsPerThread(Warp(128, 1, 1), f32, 1), 1);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 8), f32, 32), 4);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 1, 32), f32, 33), 2);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 32), f32, 640), 24);  // needs 20
  EXPECT_EQ(WarpColsPerThread(Warp(128, 8, 32), f32, 1024), 32);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 8, 32), f32, 2048), 64);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 8, 32), f32, 2056), 0);
  EXPECT_EQ(WarpColsPerThread(Block(Impl::kBlockSmem, 128, 8), f32, 64), 0);
}

TEST(LaunchConfigTest, ConfigForAlignmentKeepsTheRowCovered) {
  const DeviceInfo h100 = DescribedH100();
  // A 16-bit row of 32 on 4 lanes of two 8-element packs, on operands
  // aligned to 8 bytes: 4-element packs on 8 lanes.
  absl::StatusOr<LaunchConfig> narrowed = ConfigForAlignment(
      Op::kSoftmax, DType::kFloat16, {4096, 32}, Warp(128, 8, 4), 8, h100);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(ConfigKey(*narrowed), "warp/b128/p4/g8/r1/w0");
  // Aligned to the element only: one element per lane on all 32 lanes.
  narrowed = ConfigForAlignment(Op::kSoftmax, DType::kFloat16, {4096, 32}, Warp(128, 8, 4), 2,
                                h100);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(ConfigKey(*narrowed), "warp/b128/p1/g32/r1/w0");
  // Aligned operands keep the config as it is.
  narrowed = ConfigForAlignment(Op::kSoftmax, DType::kFloat16, {4096, 32}, Warp(128, 8, 4), 16,
                                h100);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(ConfigKey(*narrowed), "warp/b128/p8/g4/r1/w0");
  // A two-pass split whose slice no longer fits the registers at pack 1
  // falls back to the heuristic at that alignment, which is valid.
  LaunchConfig two_pass{Impl::kSplitTwoPass, 256, 8, 32, 1, 0};
  two_pass.split = 32;
  const Shape long_row{1, 131072};
  ASSERT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, long_row, two_pass, h100).ok());
  narrowed = ConfigForAlignment(Op::kSoftmax, DType::kFloat16, long_row, two_pass, 2, h100);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  EXPECT_EQ(narrowed->pack_size, 1);
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, long_row, *narrowed, h100).ok())
      << ConfigKey(*narrowed);
}

TEST(LaunchConfigTest, OnlySixteenBytePacksHaveTheInBetweenWarpInstances) {
  // 640 columns need 20 per lane: 16-byte packs have 24, narrower ones the
  // next power of two.
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 32), DType::kFloat32, 640), 24);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 2, 32), DType::kFloat32, 640), 32);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 8, 32), DType::kFloat16, 1536), 48);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 32), DType::kFloat16, 1536), 64);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 1, 32), DType::kBFloat16, 384), 16);
  EXPECT_TRUE(WarpHasColsPerThread(12, 16));
  EXPECT_FALSE(WarpHasColsPerThread(12, 8));
  EXPECT_TRUE(WarpHasColsPerThread(16, 2));
}

TEST(LaunchConfigTest, NarrowGroupsTakeTwoPacksPerLaneOnlyFor16BytePacks) {
  // 16-byte packs: one per lane while it covers the row, else two.
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 8), DType::kFloat32, 33), 8);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 4), DType::kFloat32, 32), 8);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 4), DType::kFloat32, 33), 0);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 8, 2), DType::kFloat16, 32), 16);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 8, 16), DType::kBFloat16, 256), 16);
  // Narrower packs keep one per lane (no two-pack instance is compiled).
  EXPECT_EQ(WarpColsPerThread(Warp(128, 2, 8), DType::kFloat32, 17), 0);
  EXPECT_EQ(WarpColsPerThread(Warp(128, 4, 4), DType::kFloat16, 17), 0);
  EXPECT_TRUE(ValidateConfig(Op::kRmsNorm, DType::kFloat32, {49152, 32}, Warp(64, 4, 4),
                             H100())
                  .ok());
  ExpectRefused(Op::kRmsNorm, DType::kFloat32, {49152, 36}, Warp(64, 4, 4),
                absl::StatusCode::kInvalidArgument, "limit of 32");
  // The candidates of a narrow row hold both layouts, at 64 to 512 threads.
  absl::StatusOr<std::vector<LaunchConfig>> configs =
      EnumerateConfigs(Op::kSoftmax, DType::kFloat32, {32768, 16}, H100());
  ASSERT_TRUE(configs.ok()) << configs.status();
  std::set<int> widths, blocks;
  for (const LaunchConfig& c : *configs) {
    if (c.impl != Impl::kWarp || c.pack_size != 4) continue;
    widths.insert(c.thread_group_width);
    blocks.insert(c.block_size);
  }
  EXPECT_EQ(widths, (std::set<int>{2, 4}));
  EXPECT_EQ(blocks, (std::set<int>{64, 128, 256, 512}));
}

TEST(LaunchConfigTest, NarrowPackSizeFallsBackForOddColsAndMisalignment) {
  EXPECT_EQ(NarrowPackSize(8, DType::kFloat16, 1024, 16), 8);
  EXPECT_EQ(NarrowPackSize(8, DType::kFloat16, 1020, 16), 4);
  EXPECT_EQ(NarrowPackSize(8, DType::kFloat16, 1023, 16), 1);
  EXPECT_EQ(NarrowPackSize(8, DType::kFloat16, 1024, 2), 1);
  EXPECT_EQ(NarrowPackSize(4, DType::kFloat32, 1024, 8), 2);
}

TEST(LaunchConfigTest, RefusesIllegalKnobsWithTheKnobNamed) {
  const Shape shape{64, 1024};
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Warp(128, 8, 32),
                absl::StatusCode::kInvalidArgument, "16");  // 32-byte access
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Warp(128, 3, 32),
                absl::StatusCode::kInvalidArgument, "pack_size=3");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {64, 1022}, Warp(128, 4, 32),
                absl::StatusCode::kInvalidArgument, "does not divide cols=1022");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Warp(100, 8, 32),
                absl::StatusCode::kInvalidArgument, "block_size=100");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Warp(128, 8, 12),
                absl::StatusCode::kInvalidArgument, "thread_group_width=12");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Warp(128, 8, 32, 2),
                absl::StatusCode::kInvalidArgument, "rows_per_access=2");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {64, 4096}, Warp(128, 8, 32),
                absl::StatusCode::kInvalidArgument, "cols=4096");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Block(Impl::kBlockSmem, 384, 8),
                absl::StatusCode::kInvalidArgument, "block_size=384");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, {Impl::kBlockSmem, 128, 8, 16, 1, 0},
                absl::StatusCode::kInvalidArgument, "thread_group_width=16");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Warp(128, 8, 32, 1, -1),
                absl::StatusCode::kInvalidArgument, "grid_waves=-1");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {0, 1024}, Warp(128, 8, 32),
                absl::StatusCode::kInvalidArgument, "rows=0");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {4, 0}, Warp(128, 8, 32),
                absl::StatusCode::kInvalidArgument, "cols=0");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {int64_t{1} << 40, int64_t{1} << 30},
                Warp(128, 8, 32), absl::StatusCode::kInvalidArgument, "overflows");
  // The block impls index a row's packs in 32 bits.
  ExpectRefused(Op::kRmsNorm, DType::kFloat32, {1, kMaxBlockRowPacks},
                Block(Impl::kBlockUncached, 1024, 1), absl::StatusCode::kInvalidArgument,
                "32-bit pack indices");
  EXPECT_TRUE(ValidateConfig(Op::kRmsNorm, DType::kFloat32, {1, kMaxBlockRowPacks},
                             Block(Impl::kBlockUncached, 1024, 4), H100())
                  .ok());
}

TEST(LaunchConfigTest, SharedMemoryLimitIsEnforced) {
  // 227 KiB per block on an H100, less the static allowance: float32 rows
  // of 58112 columns need 232448 bytes and do not fit; 57856 do.
  ExpectRefused(Op::kSoftmax, DType::kFloat32, {8, 58112}, Block(Impl::kBlockSmem, 1024, 4),
                absl::StatusCode::kResourceExhausted, "shared memory");
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat32, {8, 57856},
                             Block(Impl::kBlockSmem, 1024, 4), H100())
                  .ok());
  // The storage dtype is cached, so 16-bit rows may be twice as long.
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, {8, 115712},
                             Block(Impl::kBlockSmem, 1024, 8), H100())
                  .ok());
  // Uncached has no limit.
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat32, {1, 1 << 22},
                             Block(Impl::kBlockUncached, 1024, 4), H100())
                  .ok());
}

TEST(LaunchConfigTest, MaskedSoftmaxCachesFloatLogits) {
  const LaunchConfig smem = Block(Impl::kBlockSmem, 256, 8);
  for (DType dtype : kAllDTypes) {
    EXPECT_EQ(SharedMemoryBytes(Op::kScaledMaskedSoftmax, dtype, {4, 1000}, smem), 4000);
    EXPECT_EQ(SharedMemoryBytes(Op::kRmsNorm, dtype, {4, 1000}, smem),
              1000 * static_cast<int64_t>(DTypeSize(dtype)));
    EXPECT_EQ(SharedMemoryBytes(Op::kReduceScale, dtype, {4, 1000}, smem),
              1000 * static_cast<int64_t>(DTypeSize(dtype)));
    EXPECT_EQ(SharedMemoryBytes(Op::kScaledMaskedSoftmax, dtype, {4, 1000},
                                Block(Impl::kBlockUncached, 256, 8)),
              0);
  }
  // float16 rows of 65536 fit the storage-dtype cache (128 KiB), not the
  // float one (256 KiB).
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, {8, 65536},
                             Block(Impl::kBlockSmem, 1024, 8), H100())
                  .ok());
  ExpectRefused(Op::kScaledMaskedSoftmax, DType::kFloat16, {8, 65536},
                Block(Impl::kBlockSmem, 1024, 8), absl::StatusCode::kResourceExhausted,
                "shared memory");
}

TEST(LaunchConfigTest, NewOpsReduceTheLastAxisOnly) {
  for (Op op : {Op::kRmsNorm, Op::kReduceScale, Op::kScaledMaskedSoftmax}) {
    const absl::Status s = ValidateConfig(op, DType::kFloat16, {4, 64, 8},
                                          LaunchConfig{Impl::kAxis, 128, 1, 32, 1, 0}, H100());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << OpName(op) << ": " << s;
    EXPECT_NE(s.message().find("inner=8"), absl::string_view::npos) << s;
    EXPECT_FALSE(EnumerateConfigs(op, DType::kFloat16, {4, 64, 8}, H100()).ok());
    EXPECT_FALSE(HeuristicConfig(op, DType::kFloat16, {4, 64, 8}, H100()).ok());
  }
}

TEST(LaunchConfigTest, EnumerationIsLegalUniqueAndCoversEachImplWhereItFits) {
  for (Op op : kBasicOps) {
    for (DType dtype : kAllDTypes) {
      for (int64_t cols : {1, 2, 31, 32, 33, 127, 1023, 1024, 1025, 2048, 2049, 4096, 32768,
                           65536, 131072}) {
        const Shape shape{3, cols};
        absl::StatusOr<std::vector<LaunchConfig>> configs =
            EnumerateConfigs(op, dtype, shape, H100());
        ASSERT_TRUE(configs.ok()) << configs.status();
        ASSERT_FALSE(configs->empty()) << "cols=" << cols;
        std::set<std::string> keys;
        std::set<Impl> impls;
        for (const LaunchConfig& c : *configs) {
          EXPECT_TRUE(ValidateConfig(op, dtype, shape, c, H100()).ok()) << ConfigKey(c);
          EXPECT_TRUE(keys.insert(ConfigKey(c)).second) << "duplicate " << ConfigKey(c);
          impls.insert(c.impl);
        }
        EXPECT_EQ(impls.count(Impl::kWarp) > 0, cols <= kMaxWarpCols) << "cols=" << cols;
        // The row cache: the storage dtype, float logits for the masked
        // softmax.
        const int64_t cache_bytes =
            SharedMemoryBytes(op, dtype, shape, Block(Impl::kBlockSmem, 128, 1));
        EXPECT_EQ(impls.count(Impl::kBlockSmem) > 0, cache_bytes <= 200 * 1024)
            << OpName(op) << " " << DTypeName(dtype) << " cols=" << cols;
        EXPECT_TRUE(impls.count(Impl::kBlockUncached)) << "cols=" << cols;
        // 16 elements a thread at 1024 threads, whatever the pack.
        EXPECT_EQ(impls.count(Impl::kBlockRegs) > 0, cols <= 1024 * kBlockRegsValuesPerThread)
            << "cols=" << cols;
        absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op, dtype, shape, H100());
        ASSERT_TRUE(heuristic.ok()) << heuristic.status();
        EXPECT_TRUE(keys.count(ConfigKey(*heuristic)))
            << "heuristic " << ConfigKey(*heuristic) << " not enumerated at cols=" << cols;
      }
    }
  }
}

TEST(LaunchConfigTest, HeuristicFollowsTheSeedRules) {
  // Short rows: a sub-warp group per row, two 16-byte packs per lane.
  absl::StatusOr<LaunchConfig> c =
      HeuristicConfig(Op::kSoftmax, DType::kFloat16, {49152, 32}, H100());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ConfigKey(*c), "warp/b128/p8/g2/r1/w0");
  c = HeuristicConfig(Op::kLayerNorm, DType::kFloat32, {49152, 64}, H100());
  EXPECT_EQ(ConfigKey(*c), "warp/b128/p4/g8/r1/w0");
  // Narrower packs (30 columns: 8 bytes) keep one per lane, two rows a step.
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat32, {49152, 30}, H100());
  EXPECT_EQ(ConfigKey(*c), "warp/b128/p2/g16/r2/w0");
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat32, {49152, 1024}, H100());
  EXPECT_EQ(ConfigKey(*c), "warp/b128/p4/g32/r1/w0");
  // Odd columns fall back to scalar access.
  c = HeuristicConfig(Op::kLayerNorm, DType::kBFloat16, {49152, 1023}, H100());
  EXPECT_EQ(ConfigKey(*c), "warp/b128/p1/g32/r1/w0");
  // Up to 2048 columns the row stays in registers (64 per lane).
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat16, {49152, 2048}, H100());
  EXPECT_EQ(ConfigKey(*c), "warp/b128/p8/g32/r1/w0");
  // Long rows: shared memory while it fits, about 8 packs per thread.
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat16, {49152, 4096}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_smem/b128/p8/g32/r1/w0");
  c = HeuristicConfig(Op::kLayerNorm, DType::kFloat16, {49152, 32768}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_smem/b512/p8/g32/r1/w0");
  c = HeuristicConfig(Op::kLayerNorm, DType::kFloat32, {49152, 131072}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_uncached/b1024/p4/g32/r1/w0");
  // ... but softmax rows past a block's shared memory go to a cluster's
  // registers.
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat32, {49152, 131072}, H100());
  EXPECT_EQ(ConfigKey(*c), "split_regs/b512/p4/g32/r1/w0/s8");
  // Fewer rows than SMs: the row in registers, 16 elements a thread.
  c = HeuristicConfig(Op::kLayerNorm, DType::kFloat32, {8, 4096}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_regs/b256/p4/g32/r1/w0");
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat16, {131, 4096}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_regs/b256/p8/g32/r1/w0");
  c = HeuristicConfig(Op::kRmsNorm, DType::kBFloat16, {64, 8192}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_regs/b512/p8/g32/r1/w0");
  // ... except the float32 softmaxes (accurate exp): shared memory, about 2
  // packs per thread.
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat32, {8, 4096}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_smem/b512/p4/g32/r1/w0");
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat16, {132, 4096}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_smem/b128/p8/g32/r1/w0");
}

// The new ops follow the same row rules; the masked softmax's float cache
// moves its switch to the uncached kernel to half the float16 row length.
TEST(LaunchConfigTest, HeuristicForTheNewOps) {
  for (Op op : {Op::kRmsNorm, Op::kReduceScale, Op::kScaledMaskedSoftmax}) {
    SCOPED_TRACE(OpName(op));
    absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, DType::kFloat16, {49152, 32}, H100());
    ASSERT_TRUE(c.ok()) << c.status();
    // The masked softmax's load also reads the mask: one pack per lane.
    EXPECT_EQ(ConfigKey(*c), op == Op::kScaledMaskedSoftmax ? "warp/b128/p8/g4/r1/w0"
                                                             : "warp/b128/p8/g2/r1/w0");
    c = HeuristicConfig(op, DType::kBFloat16, {49152, 2048}, H100());
    EXPECT_EQ(ConfigKey(*c), "warp/b128/p8/g32/r1/w0");
    // Odd cols: ReduceScale's operands follow x, so it keeps 16-byte packs
    // (PackMustDivideLength); the others fall back to scalar access.
    c = HeuristicConfig(op, DType::kFloat32, {49152, 4095}, H100());
    EXPECT_EQ(ConfigKey(*c), op == Op::kReduceScale ? "block_smem/b128/p4/g32/r1/w0"
                                                     : "block_smem/b256/p1/g32/r1/w0");
  }
  absl::StatusOr<LaunchConfig> c =
      HeuristicConfig(Op::kRmsNorm, DType::kFloat16, {4096, 65536}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_smem/b1024/p8/g32/r1/w0");
  c = HeuristicConfig(Op::kScaledMaskedSoftmax, DType::kFloat16, {4096, 65536}, H100());
  EXPECT_EQ(ConfigKey(*c), "block_uncached/b1024/p8/g32/r1/w0");
}

TEST(LaunchConfigTest, DescribedDeviceCannotLaunchButCanPlan) {
  absl::StatusOr<int> active = ActiveBlocksPerSm(Op::kSoftmax, DType::kFloat32, {8, 32768},
                                                 Block(Impl::kBlockSmem, 1024, 4), H100());
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(*active, 1);  // 128 KiB of 228 KiB per SM
  active = ActiveBlocksPerSm(Op::kSoftmax, DType::kFloat16, {8, 1024}, Warp(128, 8, 32), H100());
  EXPECT_EQ(*active, 16);  // thread-limited: 2048 / 128
}

// --- The middle-axis impl (kAxis): shapes (outer, dim, inner) with inner > 1.

LaunchConfig Axis(int block, int pack, int group, int waves = 0) {
  return {Impl::kAxis, block, pack, group, 1, waves};
}

// Seed 001: [128,128,16,16] axis 0 and [512,896,4,12] axis 1.
constexpr Shape kAxisSeedA{1, 128, 32768};
constexpr Shape kAxisSeedB{512, 896, 48};

TEST(LaunchConfigTest, AxisRefusesIllegalKnobsWithTheKnobNamed) {
  const Shape shape{8, 100, 48};
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 16), H100()).ok());
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(96, 4, 16),
                absl::StatusCode::kInvalidArgument, "block_size=96");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(2048, 4, 16),
                absl::StatusCode::kInvalidArgument, "block_size=2048");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 3),
                absl::StatusCode::kInvalidArgument, "thread_group_width=3");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 0),
                absl::StatusCode::kInvalidArgument, "thread_group_width=0");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 512),
                absl::StatusCode::kInvalidArgument, "thread_group_width=512");
  ExpectRefused(Op::kLogSoftmax, DType::kFloat16, shape, {Impl::kAxis, 256, 8, 16, 2, 0},
                absl::StatusCode::kInvalidArgument, "rows_per_access=2");
  ExpectRefused(Op::kLogSoftmax, DType::kFloat16, shape, {Impl::kAxis, 256, 8, 16, 1, 0, 2},
                absl::StatusCode::kInvalidArgument, "split=2");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, {8, 100, 6}, Axis(256, 4, 16),
                absl::StatusCode::kInvalidArgument, "does not divide inner=6");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 8, 16),
                absl::StatusCode::kInvalidArgument, "16");  // 32-byte access
  ExpectRefused(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 16, 2000),
                absl::StatusCode::kInvalidArgument, "grid_waves=2000");
  // Every group width up to the block is legal, whatever dim is.
  for (int group = 1; group <= 1024; group *= 2) {
    EXPECT_TRUE(
        ValidateConfig(Op::kSoftmax, DType::kBFloat16, shape, Axis(1024, 8, group), H100()).ok())
        << group;
  }
}

TEST(LaunchConfigTest, RowImplsRefuseInnerAndAxisRefusesInnerOne) {
  const Shape middle{8, 100, 48};
  for (const LaunchConfig& row :
       {Warp(128, 4, 32), Block(Impl::kBlockSmem, 256, 4), Block(Impl::kBlockUncached, 256, 4),
        LaunchConfig{Impl::kSplitRow, 256, 4, 32, 1, 0, 2}}) {
    ExpectRefused(Op::kSoftmax, DType::kFloat32, middle, row, absl::StatusCode::kInvalidArgument,
                  "inner=48");
  }
  ExpectRefused(Op::kSoftmax, DType::kFloat32, {8, 100}, Axis(256, 4, 16),
                absl::StatusCode::kInvalidArgument, "inner=1");
  ExpectRefused(Op::kLogSoftmax, DType::kFloat16, {8, 100, 1}, Axis(128, 1, 1),
                absl::StatusCode::kInvalidArgument, "inner=1");
}

TEST(LaunchConfigTest, OpsOfTheLastAxisRefuseInner) {
  const Shape middle{8, 100, 48};
  for (Op op : {Op::kLayerNorm, Op::kRmsNorm, Op::kReduceScale, Op::kScaledMaskedSoftmax}) {
    ExpectRefused(op, DType::kFloat32, middle, Axis(256, 4, 16),
                  absl::StatusCode::kInvalidArgument, "inner=48 must be 1");
    EXPECT_EQ(EnumerateConfigs(op, DType::kFloat32, middle, H100()).status().code(),
              absl::StatusCode::kInvalidArgument)
        << OpName(op);
    EXPECT_EQ(HeuristicConfig(op, DType::kFloat32, middle, H100()).status().code(),
              absl::StatusCode::kInvalidArgument)
        << OpName(op);
  }
  // Even with inner 1, the axis kernel serves softmax and log-softmax only.
  ExpectRefused(Op::kLayerNorm, DType::kFloat32, {8, 100}, Axis(256, 4, 16),
                absl::StatusCode::kInvalidArgument, "inner=1");
}

TEST(LaunchConfigTest, AxisCachedRowsPicksTheSmallestInstance) {
  using internal::AxisCachedRows;
  EXPECT_EQ(AxisCachedRows(1, 1, 8), 1);
  EXPECT_EQ(AxisCachedRows(2, 1, 4), 2);
  EXPECT_EQ(AxisCachedRows(128, 16, 4), 8);    // seed A's default
  EXPECT_EQ(AxisCachedRows(896, 128, 4), 8);   // seed B's: 7 rows used
  EXPECT_EQ(AxisCachedRows(896, 64, 4), 0);    // 14 rows x 4 > 32 values: two passes
  EXPECT_EQ(AxisCachedRows(896, 64, 2), 16);
  EXPECT_EQ(AxisCachedRows(4099, 256, 1), 0);  // 16 x 256 = 4096 < 4099
  EXPECT_EQ(AxisCachedRows(4099, 512, 1), 16);
  EXPECT_EQ(AxisCachedRows(20000, 1024, 1), 0);
  EXPECT_EQ(AxisCachedRows(33, 8, 8), 0);      // 5 rows x 8 > 32 values
}

TEST(LaunchConfigTest, AxisSharedMemoryIsTheTwoReductionBuffers) {
  const Shape shape{1, 128, 32768};
  // No reduction across threads along dim.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 1)), 0);
  // 16 columns: a warp holds 2 dim lanes, 8 warp rows x 16 columns x 4
  // elements, two buffers of floats.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 4, 16)),
            2 * 8 * 16 * 4 * 4);
  // 64 columns: one dim lane a warp, 4 rows x 64 x 2.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat32, shape, Axis(256, 2, 4)),
            2 * 4 * 64 * 2 * 4);
  // One column: 32 dim lanes a warp, 32 warp rows.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, shape, Axis(1024, 8, 1024)),
            2 * 32 * 1 * 8 * 4);
}

TEST(LaunchConfigTest, AxisEnumerationIsLegalUniqueSmallAndHoldsTheHeuristic) {
  const std::vector<Shape> shapes = {kAxisSeedA, kAxisSeedB, {3, 1, 48},   {1, 2, 2},
                                     {5, 2, 3},  {300, 127, 3}, {2, 4099, 2}, {1, 4099, 48},
                                     {1, 20000, 2}, {1, 1 << 20, 2}, {64, 1000, 48}};
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
    for (DType dtype : kAllDTypes) {
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(::testing::Message() << OpName(op) << " " << DTypeName(dtype) << " ("
                                          << shape.rows << ", " << shape.cols << ", "
                                          << shape.inner << ")");
        absl::StatusOr<std::vector<LaunchConfig>> configs =
            EnumerateConfigs(op, dtype, shape, H100());
        ASSERT_TRUE(configs.ok()) << configs.status();
        ASSERT_FALSE(configs->empty());
        EXPECT_LE(configs->size(), 64u);  // tens, not hundreds
        std::set<std::string> keys;
        bool cached = false;
        for (const LaunchConfig& c : *configs) {
          EXPECT_EQ(c.impl, Impl::kAxis);
          EXPECT_TRUE(ValidateConfig(op, dtype, shape, c, H100()).ok()) << ConfigKey(c);
          EXPECT_TRUE(keys.insert(ConfigKey(c)).second) << "duplicate " << ConfigKey(c);
          cached |= internal::AxisCachedRows(shape.cols, c.thread_group_width, c.pack_size) > 0;
        }
        // Lines up to 16 x 1024 long can be cached in registers.
        EXPECT_EQ(cached, shape.cols <= 16 * 1024);
        absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op, dtype, shape, H100());
        ASSERT_TRUE(heuristic.ok()) << heuristic.status();
        EXPECT_TRUE(keys.count(ConfigKey(*heuristic)))
            << "heuristic " << ConfigKey(*heuristic) << " not enumerated";
      }
    }
  }
}

TEST(LaunchConfigTest, AxisHeuristicCachesTheLineAndFillsTheDevice) {
  // Seed A: 16-byte packs, 8 rows of 16 lanes cached per thread (131072
  // threads), 16 columns of 16 bytes per block row.
  absl::StatusOr<LaunchConfig> c = HeuristicConfig(Op::kLogSoftmax, DType::kFloat32,
                                                   kAxisSeedA, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ConfigKey(*c), "axis/b256/p4/g16/r1/w0");
  // Seed B: 896 = 7 rows x 128 lanes; blocks capped at 512 threads.
  EXPECT_EQ(HeuristicKey(Op::kLogSoftmax, DType::kFloat32, kAxisSeedB, H100()),
            "axis/b512/p4/g128/r1/w0");
  // 16-bit packs of 8 hold 4 rows: twice the lanes along dim.
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat16, kAxisSeedA, H100()),
            "axis/b512/p8/g32/r1/w0");
  // Odd inner: scalar access.
  c = HeuristicConfig(Op::kSoftmax, DType::kBFloat16, {300, 127, 3}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pack_size, 1);
  // Lines too long to cache: the two-pass kernel with a full block along dim.
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat32, {1, 1 << 20, 2}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(internal::AxisCachedRows(1 << 20, c->thread_group_width, c->pack_size), 0);
  EXPECT_EQ(c->thread_group_width, 1024);
}

TEST(LaunchConfigTest, SplitRowConfigKeyRoundTrips) {
  const LaunchConfig c = Split(256, 8, 8);
  EXPECT_EQ(ConfigKey(c), "split_row/b256/p8/g32/r1/w0/s8");
  absl::StatusOr<LaunchConfig> parsed = ParseLaunchConfig(ConfigKey(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, c);
  // A key without the split field means split 1, which split_row refuses.
  parsed = ParseLaunchConfig("split_row/b256/p8/g32/r1/w0");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->split, 1);
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {8, 131072}, *parsed,
                absl::StatusCode::kInvalidArgument, "split=1");
  EXPECT_FALSE(ParseLaunchConfig("split_row/b256/p8/g32/r1/w0/x8").ok());
  EXPECT_FALSE(ParseLaunchConfig("split_row/b256/p8/g32/r1/w0/s8/s8").ok());
  const LaunchConfig grid = GridSplit(128, 4, 132);
  EXPECT_EQ(ConfigKey(grid), "split_grid/b128/p4/g32/r1/w0/s132");
  parsed = ParseLaunchConfig(ConfigKey(grid));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, grid);
}

TEST(LaunchConfigTest, SplitGridRulesNameTheKnob) {
  const Shape shape{8, 131072};
  // Any split from 2 while all rows * split blocks can be resident and each
  // slice keeps 16 bytes for the exchange.
  for (int split : {2, 3, 16, 33, 132}) {
    for (int block : kBlockImplBlockSizes) {
      const LaunchConfig c = GridSplit(block, 8, split);
      const absl::Status s = ValidateConfig(Op::kSoftmax, DType::kFloat16, shape, c, H100());
      // 8 rows x 132 = 1056 blocks: 132 SMs of 2048 threads hold that many
      // blocks of 256 threads, not of 512.
      EXPECT_EQ(s.ok(), !(split == 132 && block >= 512)) << ConfigKey(c) << ": " << s;
    }
  }
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, GridSplit(1024, 8, 132),
                absl::StatusCode::kInvalidArgument, "resident");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, GridSplit(256, 8, 1),
                absl::StatusCode::kInvalidArgument, "split=1");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {1, 1 << 20}, GridSplit(128, 8, kMaxGridSplit + 1),
                absl::StatusCode::kInvalidArgument, "split=1025");
  ExpectSplitKnobsRefused(GridSplit(256, 8, 8));
  // 32 float16 columns in packs of 2 over 16 blocks leave each block 4
  // bytes, too few for the exchange's slot; over 4 blocks, 16 are enough.
  ExpectRefused(Op::kRmsNorm, DType::kFloat16, {1, 32}, GridSplit(128, 2, 16),
                absl::StatusCode::kInvalidArgument, "16 for the exchange");
  EXPECT_TRUE(
      ValidateConfig(Op::kRmsNorm, DType::kFloat16, {1, 32}, GridSplit(128, 2, 4), H100()).ok());
  // Shared memory holds the largest slice, as for clusters.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat32, {1, 131072}, GridSplit(128, 4, 132)),
            (32768 + 131) / 132 * 4 * 4);
  // Cooperative launches need Volta or newer; an A100 has them.
  EXPECT_TRUE(
      ValidateConfig(Op::kSoftmax, DType::kFloat16, shape, GridSplit(256, 8, 13), A100()).ok());
}

TEST(LaunchConfigTest, SplitRowRulesNameTheKnob) {
  const Shape shape{8, 131072};
  for (Op op : kBasicOps) {
    for (DType dtype : kAllDTypes) {
      for (int split : {2, 4, 8, 16}) {
        for (int block : kBlockImplBlockSizes) {
          const LaunchConfig c = Split(block, 4, split);
          const absl::Status s = ValidateConfig(op, dtype, shape, c, H100());
          // Only split 2 of float32 (or of the masked softmax's float cache)
          // needs more than 227 KiB per block.
          const bool float_cache = dtype == DType::kFloat32 || op == Op::kScaledMaskedSoftmax;
          EXPECT_EQ(s.ok(), !(split == 2 && float_cache)) << ConfigKey(c) << ": " << s;
        }
      }
    }
  }
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Split(256, 8, 3),
                absl::StatusCode::kInvalidArgument, "split=3");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Split(256, 8, 32),
                absl::StatusCode::kInvalidArgument, "split=32");
  ExpectSplitKnobsRefused(Split(256, 8, 8));
  // Every block needs a whole pack: 64 columns are 8 packs of 8.
  ExpectRefused(Op::kLayerNorm, DType::kFloat16, {8, 64}, Split(128, 8, 16),
                absl::StatusCode::kInvalidArgument, "split=16");
  EXPECT_TRUE(ValidateConfig(Op::kLayerNorm, DType::kFloat16, {8, 64}, Split(128, 8, 8), H100())
                  .ok());
  // Other impls keep split 1.
  LaunchConfig warp = Warp(128, 8, 32);
  warp.split = 4;
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {8, 1024}, warp,
                absl::StatusCode::kInvalidArgument, "split=4");
  // A slice must fit one block's shared memory: 2^19 float32 columns need
  // 1 MiB per block at split 2, 128 KiB at split 16 ...
  ExpectRefused(Op::kSoftmax, DType::kFloat32, {1, 1 << 19}, Split(1024, 4, 2),
                absl::StatusCode::kResourceExhausted, "shared memory");
  EXPECT_TRUE(
      ValidateConfig(Op::kSoftmax, DType::kFloat32, {1, 1 << 19}, Split(1024, 4, 16), H100())
          .ok());
  // ... and the masked softmax caches float even for 16-bit storage: 2^20
  // columns are 128 KiB per block of float16, 256 KiB of float.
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, {1, 1 << 20}, Split(1024, 8, 16),
                             H100())
                  .ok());
  ExpectRefused(Op::kScaledMaskedSoftmax, DType::kFloat16, {1, 1 << 20}, Split(1024, 8, 16),
                absl::StatusCode::kResourceExhausted, "shared memory");
  // Clusters need Hopper.
  const absl::Status s =
      ValidateConfig(Op::kSoftmax, DType::kFloat16, shape, Split(256, 8, 8), A100());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("compute capability"), absl::string_view::npos) << s;
}

// split_row, block_smem and block_uncached take any cols for the ops whose
// operands all follow x's layout: their rows start their packs where x's
// pack grid does. The register-resident impls and the other splits don't.
TEST(LaunchConfigTest, PacksNeedNotDivideColsWhereOperandsFollowX) {
  const Shape shape{2048, 50257};
  for (Op op : kBasicOps) {
    const bool any_cols = op == Op::kSoftmax || op == Op::kLogSoftmax || op == Op::kReduceScale;
    EXPECT_EQ(OperandsFollowRowLayout(op), any_cols) << OpName(op);
    for (Impl impl : {Impl::kSplitRow, Impl::kBlockSmem, Impl::kBlockUncached}) {
      EXPECT_EQ(PackMustDivideLength(op, impl), !any_cols) << OpName(op) << " " << ImplName(impl);
    }
    for (Impl impl : {Impl::kWarp, Impl::kBlockRegs, Impl::kSplitGrid, Impl::kSplitTwoPass,
                      Impl::kAxis, Impl::kBlockReread}) {
      EXPECT_TRUE(PackMustDivideLength(op, impl)) << OpName(op) << " " << ImplName(impl);
    }
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(absl::StrCat(OpName(op), " ", DTypeName(dtype)));
      const int widest = 16 / static_cast<int>(DTypeSize(dtype));
      for (const LaunchConfig& c :
           {Split(512, widest, 4), Block(Impl::kBlockSmem, 512, widest),
            Block(Impl::kBlockUncached, 512, widest), Block(Impl::kBlockUncached, 128, 2)}) {
        if (any_cols) {
          EXPECT_TRUE(ValidateConfig(op, dtype, shape, c, H100()).ok()) << ConfigKey(c);
        } else {
          ExpectRefused(op, dtype, shape, c, absl::StatusCode::kInvalidArgument,
                        "does not divide cols=50257");
        }
      }
      ExpectRefused(op, dtype, {8, 4097}, Block(Impl::kBlockRegs, 512, widest),
                    absl::StatusCode::kInvalidArgument, "does not divide cols=4097");
    }
  }
  // A row shorter than a pack is all head and tail.
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, {7, 5},
                             Block(Impl::kBlockSmem, 128, 8), H100())
                  .ok());
  // block_smem caches whole packs and edges in no more than the row.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kBFloat16, shape,
                              Block(Impl::kBlockSmem, 512, 8)),
            50257 * 2);
  // The largest slice in whole packs: 6282 packs of 8 over 4 blocks, twice
  // at 2048 rows (the bulk copy's next row).
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, shape, Split(512, 8, 4)),
            2 * 1571 * 8 * 2);
  // Every block still needs a whole pack: 33 columns hold 4 packs of 8
  // (only 3 in a row that starts off the grid, whose last block then
  // holds nothing but the tail).
  EXPECT_TRUE(
      ValidateConfig(Op::kSoftmax, DType::kFloat16, {5, 33}, Split(128, 8, 4), H100()).ok());
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {5, 33}, Split(128, 8, 8),
                absl::StatusCode::kInvalidArgument, "split=8");
}

// Launch narrows a split_row, block_smem or block_uncached pack for the
// operands' alignment only, where the pack need not divide cols.
TEST(LaunchConfigTest, OddColsNarrowForAlignmentOnly) {
  const Shape shape{2048, 50257};
  for (const LaunchConfig& c : {Split(512, 8, 2), Block(Impl::kBlockSmem, 512, 8),
                                Block(Impl::kBlockUncached, 1024, 8)}) {
    SCOPED_TRACE(ConfigKey(c));
    for (const auto& [alignment, pack] :
         {std::pair{16, 8}, std::pair{8, 4}, std::pair{4, 2}, std::pair{2, 1}}) {
      absl::StatusOr<LaunchConfig> narrowed =
          ConfigForAlignment(Op::kSoftmax, DType::kFloat16, shape, c, alignment, H100());
      ASSERT_TRUE(narrowed.ok()) << narrowed.status();
      EXPECT_EQ(narrowed->pack_size, pack) << "alignment " << alignment;
      EXPECT_EQ(narrowed->impl, c.impl);
      EXPECT_EQ(narrowed->block_size, c.block_size);
      EXPECT_EQ(narrowed->split, c.split);
    }
    // LayerNorm's weights are indexed by column: its pack must divide cols.
    absl::StatusOr<LaunchConfig> narrowed =
        ConfigForAlignment(Op::kLayerNorm, DType::kFloat16, shape, c, 16, H100());
    ASSERT_TRUE(narrowed.ok()) << narrowed.status();
    EXPECT_EQ(narrowed->pack_size, 1);
  }
}

// Issue 26: at odd cols (an LLM vocabulary of 50257) the one-block-per-row
// impls keep full 16-byte packs for softmax, log-softmax and ReduceScale,
// both in the tuner's candidates (every pack and useful block) and in the
// default; the other ops keep scalar access there.
TEST(LaunchConfigTest, BlockImplsTakeFullPacksAtOddColsWhereOperandsFollowX) {
  for (Op op : kBasicOps) {
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(absl::StrCat(OpName(op), " ", DTypeName(dtype)));
      const int widest = 16 / static_cast<int>(DTypeSize(dtype));
      for (const Shape shape : {Shape{2048, 50257}, Shape{64, 4097}, Shape{3, 1003}}) {
        absl::StatusOr<std::vector<LaunchConfig>> configs =
            EnumerateConfigs(op, dtype, shape, H100());
        ASSERT_TRUE(configs.ok()) << configs.status();
        std::set<std::string> keys;
        for (const LaunchConfig& c : *configs) {
          keys.insert(ConfigKey(c));
          if (c.impl == Impl::kWarp || c.impl == Impl::kBlockRegs ||
              PackMustDivideLength(op, c.impl)) {
            EXPECT_EQ(c.pack_size, 1) << ConfigKey(c);
          }
        }
        for (int pack = 1; pack <= widest; pack *= 2) {
          for (Impl impl : {Impl::kBlockSmem, Impl::kBlockUncached}) {
            if (impl == Impl::kBlockSmem &&
                !ValidateConfig(op, dtype, shape, Block(impl, 128, pack), H100()).ok()) {
              continue;  // the row cache does not fit
            }
            for (int waves : {0, 1, 4}) {
              const std::string key = ConfigKey(Block(impl, 128, pack, waves));
              EXPECT_EQ(keys.count(key) > 0, pack == 1 || OperandsFollowRowLayout(op))
                  << key << " at cols=" << shape.cols;
            }
          }
        }
      }
      if (!OperandsFollowRowLayout(op)) continue;
      // Every block size at 2048 x 50257: thousands of packs a row.
      absl::StatusOr<std::vector<LaunchConfig>> configs =
          EnumerateConfigs(op, dtype, {2048, 50257}, H100());
      ASSERT_TRUE(configs.ok()) << configs.status();
      std::set<int> blocks;
      for (const LaunchConfig& c : *configs) {
        if (c.impl == Impl::kBlockSmem && c.pack_size == widest) blocks.insert(c.block_size);
      }
      EXPECT_EQ(blocks, (std::set<int>{128, 256, 512, 1024}));
    }
  }
  // The default at 2048 x 50257: shared memory at the full pack, about 8
  // packs a thread (6282 packs of 8: 512 threads; 12564 of 4: 1024).
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kReduceScale}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, {2048, 50257}, H100());
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(ConfigKey(*c), "block_smem/b512/p8/g32/r1/w0") << OpName(op);
      // Operands aligned to 4 bytes only: 2-element packs.
      c = HeuristicConfig(op, dtype, {2048, 50257}, H100(), 4);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(ConfigKey(*c), "block_smem/b1024/p2/g32/r1/w0") << OpName(op);
    }
    // float32 softmaxes take split_regs there (HeuristicSplitsManySoftmaxRowsInRegisters).
    absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, DType::kFloat32, {2048, 50257}, H100());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(ConfigKey(*c), op == Op::kReduceScale ? "block_smem/b1024/p4/g32/r1/w0"
                                                    : "split_regs/b512/p4/g32/r1/w0/s4")
        << OpName(op);
  }
  absl::StatusOr<LaunchConfig> c =
      HeuristicConfig(Op::kLayerNorm, DType::kFloat16, {2048, 50257}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ConfigKey(*c), "block_smem/b1024/p1/g32/r1/w0");
}

TEST(LaunchConfigTest, BlockRegsHoldsTheRowInRegisters) {
  // float16 packs of 8 at 4096 columns: 512 packs, two a thread at 256
  // threads; 128 threads would need four.
  const Shape shape{64, 4096};
  EXPECT_TRUE(ValidateConfig(Op::kLayerNorm, DType::kFloat16, shape,
                             Block(Impl::kBlockRegs, 256, 8), H100())
                  .ok());
  ExpectRefused(Op::kLayerNorm, DType::kFloat16, shape, Block(Impl::kBlockRegs, 128, 8),
                absl::StatusCode::kInvalidArgument, "block_regs's limit of 2048");
  // Smaller packs hold more of them: the limit is in elements.
  EXPECT_TRUE(ValidateConfig(Op::kSoftmax, DType::kFloat16, shape,
                             Block(Impl::kBlockRegs, 256, 2), H100())
                  .ok());
  EXPECT_TRUE(ValidateConfig(Op::kRmsNorm, DType::kFloat32, {1, 16384},
                             Block(Impl::kBlockRegs, 1024, 4), H100())
                  .ok());
  ExpectRefused(Op::kRmsNorm, DType::kFloat32, {1, 16388}, Block(Impl::kBlockRegs, 1024, 4),
                absl::StatusCode::kInvalidArgument, "cols=16388");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, Block(Impl::kBlockRegs, 384, 8),
                absl::StatusCode::kInvalidArgument, "block_size=384");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, {Impl::kBlockRegs, 256, 8, 16, 1, 0},
                absl::StatusCode::kInvalidArgument, "thread_group_width=16");
  EXPECT_EQ(SharedMemoryBytes(Op::kLayerNorm, DType::kFloat16, shape,
                              Block(Impl::kBlockRegs, 256, 8)),
            0);
  const LaunchConfig c = Block(Impl::kBlockRegs, 256, 8, 1);
  EXPECT_EQ(ConfigKey(c), "block_regs/b256/p8/g32/r1/w1");
  absl::StatusOr<LaunchConfig> parsed = ParseLaunchConfig(ConfigKey(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, c);
}

TEST(LaunchConfigTest, BlockRereadServesTheNormsWithTheRowInFlight) {
  // bfloat16 packs of 8 at 12288 columns: 1536 packs, three a thread at
  // 512 threads (32 elements a thread at most); 256 threads would need six.
  const Shape shape{8192, 12288};
  for (Op op : {Op::kLayerNorm, Op::kRmsNorm}) {
    EXPECT_TRUE(ValidateConfig(op, DType::kBFloat16, shape, Block(Impl::kBlockReread, 512, 8),
                               H100())
                    .ok());
    ExpectRefused(op, DType::kBFloat16, shape, Block(Impl::kBlockReread, 256, 8),
                  absl::StatusCode::kInvalidArgument, "block_reread's limit of 8192");
    ExpectRefused(op, DType::kBFloat16, {8, 12292}, Block(Impl::kBlockReread, 512, 8),
                  absl::StatusCode::kInvalidArgument, "does not divide cols=12292");
    // One block per row: no grid-stride loop to cap the grid for, nor to
    // cover more rows than one grid holds.
    LaunchConfig capped = Block(Impl::kBlockReread, 512, 8);
    capped.grid_waves = 2;
    ExpectRefused(op, DType::kBFloat16, shape, capped, absl::StatusCode::kInvalidArgument,
                  "grid_waves=2 must be 0 for block_reread");
    ExpectRefused(op, DType::kBFloat16, {kMaxGridBlocks + 1, 8}, Block(Impl::kBlockReread, 128, 8),
                  absl::StatusCode::kInvalidArgument, "exceeds block_reread's limit of 2147483647");
    EXPECT_TRUE(ValidateConfig(op, DType::kBFloat16, {kMaxGridBlocks, 8},
                               Block(Impl::kBlockReread, 128, 8), H100())
                    .ok());
    // Enumerated in 8- and 16-byte packs, at every block size that fits.
    absl::StatusOr<std::vector<LaunchConfig>> configs =
        EnumerateConfigs(op, DType::kBFloat16, shape, H100());
    ASSERT_TRUE(configs.ok()) << configs.status();
    std::set<std::string> reread;
    for (const LaunchConfig& c : *configs) {
      if (c.impl == Impl::kBlockReread) reread.insert(ConfigKey(c));
    }
    EXPECT_EQ(reread, (std::set<std::string>{
                          "block_reread/b512/p8/g32/r1/w0", "block_reread/b1024/p8/g32/r1/w0",
                          "block_reread/b512/p4/g32/r1/w0", "block_reread/b1024/p4/g32/r1/w0"}));
  }
  ExpectRefused(Op::kSoftmax, DType::kBFloat16, shape, Block(Impl::kBlockReread, 512, 8),
                absl::StatusCode::kInvalidArgument, "serves layer_norm and rms_norm only");
  absl::StatusOr<std::vector<LaunchConfig>> softmax =
      EnumerateConfigs(Op::kSoftmax, DType::kBFloat16, shape, H100());
  ASSERT_TRUE(softmax.ok()) << softmax.status();
  for (const LaunchConfig& c : *softmax) EXPECT_NE(c.impl, Impl::kBlockReread) << ConfigKey(c);
  EXPECT_EQ(SharedMemoryBytes(Op::kRmsNorm, DType::kBFloat16, shape,
                              Block(Impl::kBlockReread, 512, 8)),
            0);
  const LaunchConfig c = Block(Impl::kBlockReread, 512, 8);
  EXPECT_EQ(ConfigKey(c), "block_reread/b512/p8/g32/r1/w0");
  absl::StatusOr<LaunchConfig> parsed = ParseLaunchConfig(ConfigKey(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, c);
}

TEST(LaunchConfigTest, TwoPassConfigKeyRoundTrips) {
  const LaunchConfig c = TwoPass(256, 4, 16);
  EXPECT_EQ(ConfigKey(c), "split_two_pass/b256/p4/g32/r1/w0/s16");
  absl::StatusOr<LaunchConfig> parsed = ParseLaunchConfig(ConfigKey(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, c);
  absl::StatusOr<Impl> impl = ParseImpl("split_two_pass");
  ASSERT_TRUE(impl.ok()) << impl.status();
  EXPECT_EQ(*impl, Impl::kSplitTwoPass);
  EXPECT_TRUE(HasSplit(Impl::kSplitTwoPass));
}

TEST(LaunchConfigTest, TwoPassRulesNameTheKnob) {
  const Shape shape{8, 131072};
  // float16 packs of 8: 16384 packs a row. Legal while every slice fits 8
  // packs per thread and rows * split <= kMaxTwoPassBlocks.
  for (int split : {2, 3, 4, 8, 16, 33, 132, 512}) {
    for (int block : kTwoPassBlockSizes) {
      const LaunchConfig c = TwoPass(block, 8, split);
      const absl::Status s = ValidateConfig(Op::kLayerNorm, DType::kFloat16, shape, c, H100());
      const int64_t slice = (16384 + split - 1) / split;
      const bool fits = slice <= int64_t{kMaxTwoPassPacksPerThread} * block;
      EXPECT_EQ(s.ok(), fits && 8 * split <= kMaxTwoPassBlocks) << ConfigKey(c) << ": " << s;
    }
  }
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, TwoPass(1024, 8, 16),
                absl::StatusCode::kInvalidArgument, "block_size=1024");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, TwoPass(256, 8, 1),
                absl::StatusCode::kInvalidArgument, "split=1");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, shape, TwoPass(128, 8, 8),
                absl::StatusCode::kInvalidArgument, "at most 8 per thread");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {64, 131072}, TwoPass(128, 8, 128),
                absl::StatusCode::kInvalidArgument, "4096 blocks");
  ExpectSplitKnobsRefused(TwoPass(256, 8, 16));
  // No shared memory, one 16-byte slot of workspace per block, none for the
  // other impls.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat32, shape, TwoPass(256, 4, 16)), 0);
  EXPECT_EQ(WorkspaceBytes(shape, TwoPass(256, 4, 16)), 8 * 16 * 16);
  EXPECT_EQ(WorkspaceBytes(shape, Split(256, 4, 16)), 0);
  EXPECT_EQ(WorkspaceBytes({1, 4096}, Warp(128, 8, 32)), 0);
  EXPECT_EQ(WorkspaceBytes({int64_t{1} << 62, 16}, TwoPass(256, 1, 1 << 20)),
            std::numeric_limits<int64_t>::max());
  // No clusters or cooperative launch needed: any GPU (an A100 here).
  EXPECT_TRUE(
      ValidateConfig(Op::kSoftmax, DType::kFloat16, shape, TwoPass(256, 8, 16), A100()).ok());
}

// Every enumerated config's workspace fits kMaxWorkspaceBytes, so callers
// that keep one buffer of that size never need to ask.
TEST(LaunchConfigTest, EveryEnumeratedWorkspaceFitsTheMaximum) {
  for (Op op : kBasicOps) {
    for (DType dtype : kAllDTypes) {
      for (Shape shape : {Shape{1, 131072}, Shape{8, 131072}, Shape{263, 16384},
                          Shape{1, 1 << 22}, Shape{3, 16384 + 2}}) {
        absl::StatusOr<std::vector<LaunchConfig>> configs =
            EnumerateConfigs(op, dtype, shape, H100());
        ASSERT_TRUE(configs.ok()) << configs.status();
        for (const LaunchConfig& c : *configs) {
          EXPECT_LE(WorkspaceBytes(shape, c), kMaxWorkspaceBytes) << ConfigKey(c);
        }
        absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op, dtype, shape, H100());
        ASSERT_TRUE(heuristic.ok()) << heuristic.status();
        EXPECT_LE(WorkspaceBytes(shape, *heuristic), kMaxWorkspaceBytes) << ConfigKey(*heuristic);
      }
    }
  }
}

TEST(LaunchConfigTest, SplitRowSharedMemoryHoldsTheLargestSlice) {
  // 32776 float16 columns are 4097 packs of 8: one of 16 blocks takes 257.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, {1, 32776}, Split(128, 8, 16)),
            257 * 8 * 2);
  // 16-byte packs of an unchanged input take the bulk copy, which keeps a
  // second slice for the next row when two fit 226 KiB and rows are many
  // (1024 and more).
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, {1023, 32776}, Split(128, 8, 16)),
            257 * 8 * 2);
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, {1024, 32776}, Split(128, 8, 16)),
            2 * 257 * 8 * 2);
  // The masked softmax caches x * scale + mask in float, through ordinary
  // loads: one slice.
  EXPECT_EQ(SharedMemoryBytes(Op::kScaledMaskedSoftmax, DType::kFloat16, {1, 32776},
                              Split(128, 8, 16)),
            257 * 8 * 4);
  // Packs narrower than 16 bytes load the ordinary way, and so does
  // split_grid: one slice.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, {1024, 32776}, Split(128, 4, 16)),
            513 * 4 * 2);
  LaunchConfig grid = Split(128, 8, 16);
  grid.impl = Impl::kSplitGrid;
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, {1024, 32776}, grid), 257 * 8 * 2);
  EXPECT_EQ(SharedMemoryBytes(Op::kLayerNorm, DType::kFloat32, {1, 131072}, Split(128, 4, 8)),
            131072 * 4 / 8);
  EXPECT_EQ(SharedMemoryBytes(Op::kLayerNorm, DType::kFloat32, {2048, 131072}, Split(128, 4, 8)),
            2 * 131072 * 4 / 8);
  // Llama 3's vocabulary in float16: 16032 packs; split 2 leaves 125 KiB
  // slices, one at a time; split 4 two of 62.6 KiB, so 1 block per SM; 8
  // two of 31.3 KiB, 3 blocks per SM (the 228 KiB of an H100's SM).
  const Shape llama3{2048, 128256};
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, llama3, Split(256, 8, 2)), 128256);
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, llama3, Split(256, 8, 4)),
            2 * 64128);
  EXPECT_EQ(ActiveBlocksPerSm(Op::kSoftmax, DType::kFloat16, llama3, Split(256, 8, 4), H100())
                .value_or(-1),
            1);
  EXPECT_EQ(ActiveBlocksPerSm(Op::kSoftmax, DType::kFloat16, llama3, Split(256, 8, 8), H100())
                .value_or(-1),
            3);
}

// Split-row configs among the enumerated ones, checking they are legal.
int CountSplitCandidates(Op op, DType dtype, Shape shape, const DeviceInfo& device) {
  absl::StatusOr<std::vector<LaunchConfig>> configs = EnumerateConfigs(op, dtype, shape, device);
  EXPECT_TRUE(configs.ok()) << configs.status();
  if (!configs.ok()) return -1;
  int count = 0;
  for (const LaunchConfig& c : *configs) {
    if (!HasSplit(c.impl)) {
      EXPECT_EQ(c.split, 1) << ConfigKey(c);
      continue;
    }
    ++count;
    EXPECT_GE(c.split, 2) << ConfigKey(c);
    EXPECT_EQ(c.grid_waves, 0) << ConfigKey(c);
  }
  return count;
}

// Split-row configs of `impl` among the enumerated ones.
std::vector<LaunchConfig> SplitCandidatesOf(Op op, DType dtype, Shape shape, Impl impl) {
  absl::StatusOr<std::vector<LaunchConfig>> configs = EnumerateConfigs(op, dtype, shape, H100());
  EXPECT_TRUE(configs.ok()) << configs.status();
  std::vector<LaunchConfig> of_impl;
  if (!configs.ok()) return of_impl;
  for (const LaunchConfig& c : *configs) {
    if (c.impl == impl) of_impl.push_back(c);
  }
  return of_impl;
}

TEST(LaunchConfigTest, SplitRowCandidatesForFewLongRowsAndClustersForManyVeryLongOnes) {
  for (Op op : kBasicOps) {
    for (DType dtype : kAllDTypes) {
      // Few (fewer than twice the 132 SMs) rows of at least 4096 columns.
      for (Shape shape : {Shape{1, 131072}, Shape{8, 131072}, Shape{64, 32768},
                          Shape{263, 16384}, Shape{3, 16384 + 2}, Shape{8, 262144},
                          Shape{64, 4096}}) {
        const int count = CountSplitCandidates(op, dtype, shape, H100());
        EXPECT_GT(count, 0) << OpName(op) << " " << DTypeName(dtype) << " rows=" << shape.rows
                            << " cols=" << shape.cols;
        EXPECT_LE(count, 16 + 12 + 21) << "rows=" << shape.rows << " cols=" << shape.cols;
      }
      // Many rows of at least 32000 columns: clusters only (split_regs for
      // softmax and log-softmax where a slice fits its registers).
      for (Shape shape : {Shape{264, 131072}, Shape{49152, 32768}, Shape{2048, 32000},
                          Shape{2048, 50257}, Shape{2048, 128256}}) {
        const int count = CountSplitCandidates(op, dtype, shape, H100());
        EXPECT_GT(count, 0) << OpName(op) << " " << DTypeName(dtype) << " rows=" << shape.rows
                            << " cols=" << shape.cols;
        const size_t clusters = SplitCandidatesOf(op, dtype, shape, Impl::kSplitRow).size();
        const size_t regs = SplitCandidatesOf(op, dtype, shape, Impl::kSplitRegs).size();
        EXPECT_EQ(static_cast<size_t>(count), clusters + regs)
            << "rows=" << shape.rows << " cols=" << shape.cols;
        EXPECT_LE(clusters, 16u) << "rows=" << shape.rows << " cols=" << shape.cols;
        EXPECT_LE(regs, 8u) << "rows=" << shape.rows << " cols=" << shape.cols;
        EXPECT_EQ(regs > 0, op == Op::kSoftmax || op == Op::kLogSoftmax)
            << OpName(op) << " " << DTypeName(dtype) << " rows=" << shape.rows
            << " cols=" << shape.cols;
      }
      // Many shorter rows, or short ones: none.
      for (Shape shape : {Shape{264, 16384}, Shape{49152, 16384}, Shape{2048, 31999},
                          Shape{1, 4095}, Shape{8, 2048}}) {
        EXPECT_EQ(CountSplitCandidates(op, dtype, shape, H100()), 0)
            << OpName(op) << " " << DTypeName(dtype) << " rows=" << shape.rows
            << " cols=" << shape.cols;
      }
    }
  }
  // No clusters before Hopper, but grid splits: one, two and four blocks per
  // SM of the A100's 108, with a block size from 128 up to a pack per thread.
  absl::StatusOr<std::vector<LaunchConfig>> configs =
      EnumerateConfigs(Op::kSoftmax, DType::kFloat16, {1, 131072}, A100());
  ASSERT_TRUE(configs.ok()) << configs.status();
  std::set<int> grid_splits, two_pass_splits;
  for (const LaunchConfig& c : *configs) {
    EXPECT_NE(c.impl, Impl::kSplitRow) << ConfigKey(c);
    if (c.impl == Impl::kSplitGrid) grid_splits.insert(c.split);
    if (c.impl == Impl::kSplitTwoPass) two_pass_splits.insert(c.split);
  }
  EXPECT_EQ(grid_splits, (std::set<int>{108, 216, 432}));
  // Two-pass splits while rows * split <= 4 blocks per SM (432), and the
  // slice fits 512 threads x 8 packs (16384 packs of 8: split 4 and up).
  EXPECT_EQ(two_pass_splits, (std::set<int>{4, 8, 16, 32, 64, 128}));
}

// Issue 26: the tuner times split_row on 2048 rows of the LLM vocabularies
// with splits 2, 4 and 8 and blocks of 256 to 1024 threads (that many
// packs per slice), at full 16-byte
// packs (the bulk copy), wherever the slice fits a block's shared memory
// (float32 at split 2 needs over 250 KiB).
TEST(LaunchConfigTest, SplitRowCandidatesCoverTheVocabulariesAt2048Rows) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLayerNorm, Op::kRmsNorm}) {
    for (DType dtype : kAllDTypes) {
      for (int64_t cols : {int64_t{32000}, int64_t{50257}, int64_t{128256}, int64_t{151936}}) {
        const Shape shape{2048, cols};
        // The norms' packs must divide cols: no 16-byte pack at 50257.
        if (PackMustDivideLength(op, Impl::kSplitRow) && cols % 8 != 0) continue;
        SCOPED_TRACE(absl::StrCat(OpName(op), " ", DTypeName(dtype), " cols=", cols));
        std::set<std::pair<int, int>> offered;  // (split, block)
        for (const LaunchConfig& c : SplitCandidatesOf(op, dtype, shape, Impl::kSplitRow)) {
          EXPECT_EQ(c.pack_size * static_cast<int64_t>(DTypeSize(dtype)), 16) << ConfigKey(c);
          offered.insert({c.split, c.block_size});
        }
        const int64_t row_bytes = cols * static_cast<int64_t>(DTypeSize(dtype));
        for (int split : {2, 4, 8}) {
          if (row_bytes / split > 226 * 1024) continue;
          for (int block : {256, 512, 1024}) {
            // (Blocks with a pack for every thread: not 1024 at 8000 packs / 8.)
            if (block > row_bytes / 16 / split) continue;
            EXPECT_TRUE(offered.count({split, block})) << "split " << split << " block " << block;
          }
        }
      }
    }
  }
}

// split_regs: the softmaxes only, 16-byte packs (any cols: a scalar head and
// tail), blocks of 512 or 1024 threads, cluster splits, and a slice within
// the block's registers (40 values a thread at 1024 threads); clusters only.
TEST(LaunchConfigTest, SplitRegsRules) {
  const auto regs = [](int block, int pack, int split) {
    LaunchConfig c{Impl::kSplitRegs, block, pack, 32, 1, 0};
    c.split = split;
    return c;
  };
  const Shape vocab{2048, 128256};
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
    EXPECT_TRUE(ValidateConfig(op, DType::kFloat16, vocab, regs(1024, 8, 4), H100()).ok());
    EXPECT_TRUE(ValidateConfig(op, DType::kFloat32, vocab, regs(512, 4, 8), H100()).ok());
  }
  const absl::StatusCode invalid = absl::StatusCode::kInvalidArgument;
  for (Op op : {Op::kLayerNorm, Op::kRmsNorm, Op::kReduceScale, Op::kScaledMaskedSoftmax}) {
    ExpectRefused(op, DType::kFloat16, vocab, regs(1024, 8, 4), invalid,
                  "serves softmax and log_softmax only");
  }
  ExpectRefused(Op::kSoftmax, DType::kFloat16, vocab, regs(1024, 4, 4), invalid,
                "must be 8 (16 bytes of float16)");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, vocab, regs(256, 8, 4), invalid, "512 or 1024");
  ExpectRefused(Op::kSoftmax, DType::kFloat16, vocab, regs(1024, 8, 3), invalid,
                "must be 2, 4, 8 or 16");
  // 151936 / 8 / 2 = 9496 packs per block, past 1024 threads x 5.
  ExpectRefused(Op::kSoftmax, DType::kFloat16, {2048, 151936}, regs(1024, 8, 2), invalid,
                "split_regs holds at most 5 per thread");
  // At most 8 packs a thread: 151936 / 4 / 4 = 9496 float32 packs per
  // block, past 1024 x 8 (and 128256's 8016 past 512 x 8).
  ExpectRefused(Op::kSoftmax, DType::kFloat32, {2048, 151936}, regs(1024, 4, 4), invalid,
                "split_regs holds at most 8 per thread");
  ExpectRefused(Op::kSoftmax, DType::kFloat32, vocab, regs(512, 4, 4), invalid,
                "split_regs holds at most 8 per thread");
  // An odd vocabulary: 50257 / 8 = 6282 whole packs, 1571 per block of 4.
  const Shape odd{2048, 50257};
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
    EXPECT_TRUE(ValidateConfig(op, DType::kFloat16, odd, regs(1024, 8, 2), H100()).ok());
    EXPECT_TRUE(ValidateConfig(op, DType::kFloat32, odd, regs(512, 4, 8), H100()).ok());
  }
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, odd, regs(1024, 8, 4)), 1571 * 16);
  // 50257 / 4 / 2 = 6282 float32 packs per block, past 512 x 8.
  ExpectRefused(Op::kSoftmax, DType::kFloat32, odd, regs(512, 4, 2), invalid,
                "split_regs holds at most 8 per thread");
  EXPECT_EQ(ValidateConfig(Op::kSoftmax, DType::kFloat16, vocab, regs(1024, 8, 4), A100()).code(),
            invalid);
  absl::StatusOr<LaunchConfig> parsed = ParseLaunchConfig("split_regs/b1024/p8/g32/r1/w0/s4");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, regs(1024, 8, 4));
  // One buffer of the largest slice, in x's dtype.
  EXPECT_EQ(SharedMemoryBytes(Op::kSoftmax, DType::kFloat16, {2048, 151936}, regs(1024, 8, 4)),
            4748 * 16);
}

// Many softmax rows in 16-byte packs (odd lengths too), 16-bit ones too long
// for one block's shared memory, float32 ones from 32000 columns: split_regs
// at the smallest split up to 8 that fits, 1024 threads for 16-bit, float32
// 512 threads where they hold the slice, else 1024.
TEST(LaunchConfigTest, HeuristicSplitsManySoftmaxRowsInRegisters) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax}) {
    for (DType dtype : kAllDTypes) {
      for (int64_t cols : {int64_t{128256}, int64_t{128257}, int64_t{151936}}) {
        absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, {2048, cols}, H100());
        ASSERT_TRUE(c.ok()) << c.status();
        const char* expected = dtype != DType::kFloat32 ? "split_regs/b1024/p8/g32/r1/w0/s4"
                               : cols < 151936        ? "split_regs/b512/p4/g32/r1/w0/s8"
                                                      : "split_regs/b1024/p4/g32/r1/w0/s8";
        EXPECT_EQ(ConfigKey(*c), expected)
            << OpName(op) << " " << DTypeName(dtype) << " cols=" << cols;
        // Operands aligned below 16 bytes: no bulk copy, no split_regs.
        c = HeuristicConfig(op, dtype, {2048, cols}, H100(), /*alignment_bytes=*/8);
        ASSERT_TRUE(c.ok()) << c.status();
        EXPECT_NE(c->impl, Impl::kSplitRegs) << ConfigKey(*c);
      }
      // 16-bit rows that fit a block's shared memory, float32 rows from
      // 32000 columns.
      for (Shape shape : {Shape{2048, 31999}, Shape{2048, 32000}, Shape{2048, 50257},
                          Shape{2048, 57344}}) {
        absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, shape, H100());
        ASSERT_TRUE(c.ok()) << c.status();
        const char* expected = shape.cols == 31999 || dtype != DType::kFloat32 ? nullptr
                               : shape.cols == 32000 ? "split_regs/b512/p4/g32/r1/w0/s2"
                                                     : "split_regs/b512/p4/g32/r1/w0/s4";
        if (expected == nullptr) {
          EXPECT_NE(c->impl, Impl::kSplitRegs) << ConfigKey(*c) << " cols=" << shape.cols;
        } else {
          EXPECT_EQ(ConfigKey(*c), expected) << OpName(op) << " cols=" << shape.cols;
        }
      }
    }
  }
  absl::StatusOr<LaunchConfig> c =
      HeuristicConfig(Op::kLayerNorm, DType::kFloat16, {2048, 151936}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->impl, Impl::kSplitRegs) << ConfigKey(*c);
  // A slice that only a cluster of 16 holds (400000 / 8 / 8 packs, past
  // 1024 x 5): not by default, such slices ran 57-72% of copy.
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat16, {2048, 400000}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->impl, Impl::kSplitRegs) << ConfigKey(*c);
}

TEST(LaunchConfigTest, HeuristicSplitsFewLongRows) {
  for (Op op : kBasicOps) {
    for (DType dtype : kAllDTypes) {
      for (int64_t rows = 1; rows <= 40; ++rows) {
        absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, {rows, 131072}, H100());
        ASSERT_TRUE(c.ok()) << c.status();
        // Two kernels while rows * 16 blocks are at most four per SM: 32
        // blocks a row up to 16 rows, 16 up to 33; beyond, a cluster per row.
        EXPECT_EQ(c->impl, rows <= 33 ? Impl::kSplitTwoPass : Impl::kSplitRow)
            << ConfigKey(*c) << " rows=" << rows;
        if (rows <= 33) {
          EXPECT_EQ(c->split, rows <= 16 ? 32 : 16) << ConfigKey(*c) << " rows=" << rows;
        }
      }
      // Many rows: one block per row, but for the softmaxes' rows too long
      // for a block's shared memory (HeuristicSplitsManySoftmaxRowsInRegisters).
      for (Shape shape : {Shape{49152, 131072}, Shape{49152, 32768}, Shape{132, 131072},
                          Shape{1, 8192}}) {
        absl::StatusOr<LaunchConfig> c = HeuristicConfig(op, dtype, shape, H100());
        ASSERT_TRUE(c.ok()) << c.status();
        const bool in_registers =
            (op == Op::kSoftmax || op == Op::kLogSoftmax) &&
            (shape.cols == 131072 || (dtype == DType::kFloat32 && shape.cols == 32768));
        EXPECT_EQ(c->impl == Impl::kSplitRegs, in_registers)
            << ConfigKey(*c) << " rows=" << shape.rows << " cols=" << shape.cols;
        if (!in_registers) {
          EXPECT_FALSE(HasSplit(c->impl))
              << ConfigKey(*c) << " rows=" << shape.rows << " cols=" << shape.cols;
        }
      }
    }
  }
  // Two kernels, 256 threads: 8 rows of 131072 float16 have 512-pack
  // slices at split 32 (2 packs per thread); float32, 1024 (4 per thread).
  absl::StatusOr<LaunchConfig> c =
      HeuristicConfig(Op::kSoftmax, DType::kFloat16, {8, 131072}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ConfigKey(*c), "split_two_pass/b256/p8/g32/r1/w0/s32");
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat32, {1, 131072}, H100()),
            "split_two_pass/b256/p4/g32/r1/w0/s32");
  // 2^21 float32 columns are 524288 packs: split 256 is the first whose
  // slices (2048 packs) fit 256 threads x 8 packs.
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat32, {1, 1 << 21}, H100()),
            "split_two_pass/b256/p4/g32/r1/w0/s256");
  // 64 rows of 131072 float32: no cluster split fits one wave (the slices
  // need too much shared memory), so the fewest waves: split 16 (1024 blocks
  // of 256 threads, 6 x 132 resident by the described H100's shared-memory
  // estimate: 1.3 waves). At 100 rows even that is 2 waves, and one block
  // per row serves. (A real GPU's registers may allow fewer blocks.)
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat32, {64, 131072}, H100()),
            "split_row/b256/p4/g32/r1/w0/s16");
  c = HeuristicConfig(Op::kSoftmax, DType::kFloat32, {100, 131072}, H100());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(HasSplit(c->impl)) << ConfigKey(*c);
  // Clusters beyond 33 rows: 34 rows of float16.
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat16, {34, 131072}, H100()),
            "split_row/b512/p8/g32/r1/w0/s4");
  // 40 rows: split 4 fills the SMs (160 blocks, 3 resident per SM); split 2
  // leaves 52 idle.
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat16, {40, 131072}, H100()),
            "split_row/b512/p8/g32/r1/w0/s4");
  // Two kernels need no clusters: the same default on an A100 while
  // rows * 16 <= four times its 108 SMs; beyond, without clusters, a grid
  // split with one block of each row per SM.
  EXPECT_EQ(HeuristicKey(Op::kSoftmax, DType::kFloat16, {1, 131072}, A100()),
            "split_two_pass/b256/p8/g32/r1/w0/s32");
  EXPECT_EQ(HeuristicKey(Op::kRmsNorm, DType::kFloat32, {4, 131072}, A100()),
            "split_two_pass/b256/p4/g32/r1/w0/s32");
  EXPECT_EQ(HeuristicKey(Op::kRmsNorm, DType::kFloat32, {13, 131072}, A100()),
            "split_two_pass/b256/p4/g32/r1/w0/s32");
  EXPECT_EQ(HeuristicKey(Op::kRmsNorm, DType::kFloat32, {27, 131072}, A100()),
            "split_two_pass/b256/p4/g32/r1/w0/s16");
  EXPECT_EQ(HeuristicKey(Op::kRmsNorm, DType::kFloat16, {28, 131072}, A100()),
            "split_grid/b1024/p8/g32/r1/w0/s3");
}

// Launch checks the operands before it looks at the device: on a described
// device (no GPU) a bad argument is InvalidArgument naming it, and good ones
// get as far as FailedPrecondition (no GPU to run on). Nothing is launched
// or dereferenced, so host addresses stand in for device buffers.
class LaunchArgsTest : public ::testing::Test {
 protected:
  RowOpArgs Args() {
    RowOpArgs args;
    args.x = x_;
    args.y = y_;
    return args;
  }
  absl::Status LaunchOn(Op op, RowOpArgs args, Shape shape = {8, 64}) {
    return Launch(op, DType::kFloat16, shape, args, Warp(128, 8, 8), H100(), nullptr).status();
  }
  void ExpectArgError(Op op, const RowOpArgs& args, const std::string& mentions,
                      Shape shape = {8, 64}) {
    const absl::Status s = LaunchOn(op, args, shape);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << OpName(op) << ": " << s;
    EXPECT_NE(s.message().find(mentions), absl::string_view::npos)
        << "message \"" << s.message() << "\" should mention \"" << mentions << "\"";
  }
  void ExpectAccepted(Op op, const RowOpArgs& args, Shape shape = {8, 64}) {
    const absl::Status s = LaunchOn(op, args, shape);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << OpName(op) << ": " << s;
  }

  alignas(16) uint16_t x_[8 * 64] = {};
  alignas(16) uint16_t y_[8 * 64] = {};
  alignas(16) uint16_t weight_[64] = {};
  alignas(16) uint16_t mask_[8 * 64] = {};
  float stats_[8] = {};
};

// split_two_pass needs rows * split 16-byte slots of workspace, aligned to
// 16, before anything touches the device; configs that need none ignore it.
TEST_F(LaunchArgsTest, TwoPassNeedsAWorkspace) {
  const Shape shape{2, 32768};
  const LaunchConfig two_pass = TwoPass(256, 8, 16);
  const auto launch = [&](const RowOpArgs& args, const LaunchConfig& config) {
    return Launch(Op::kSoftmax, DType::kFloat16, shape, args, config, H100(), nullptr).status();
  };
  const auto expect_refused = [&](const RowOpArgs& args, const std::string& mentions) {
    const absl::Status s = launch(args, two_pass);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(mentions), absl::string_view::npos)
        << "message \"" << s.message() << "\" should mention \"" << mentions << "\"";
  };
  RowOpArgs args = Args();
  expect_refused(args, "needs a workspace of 512 bytes");
  alignas(16) static unsigned char workspace[1024];
  args.workspace = workspace;
  args.workspace_bytes = 511;
  expect_refused(args, "got 511 bytes");
  args.workspace = workspace + 8;
  args.workspace_bytes = 512;
  expect_refused(args, "aligned to 16");
  args.workspace = workspace;
  EXPECT_EQ(launch(args, two_pass).code(), absl::StatusCode::kFailedPrecondition);
  // Other impls need none.
  EXPECT_EQ(launch(Args(), Split(256, 8, 16)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LaunchArgsTest, RmsNormTakesAWeightAndInvRmsOnly) {
  RowOpArgs args = Args();
  args.gamma = weight_;
  args.inv_std = stats_;
  ExpectAccepted(Op::kRmsNorm, args);
  ExpectAccepted(Op::kRmsNorm, Args());
  RowOpArgs bad = args;
  bad.beta = weight_;
  ExpectArgError(Op::kRmsNorm, bad, "rms_norm takes no beta");
  bad = args;
  bad.mean = stats_;
  ExpectArgError(Op::kRmsNorm, bad, "mean");
  bad = args;
  bad.row_scale = stats_;
  ExpectArgError(Op::kRmsNorm, bad, "row_scale");
  bad = args;
  bad.mask = mask_;
  bad.params.mask_rows = 8;
  ExpectArgError(Op::kRmsNorm, bad, "mask");
  bad = args;
  bad.params.epsilon = 0;
  ExpectArgError(Op::kRmsNorm, bad, "epsilon=0");
}

TEST_F(LaunchArgsTest, ReduceScaleTakesRowScaleOnly) {
  RowOpArgs args = Args();
  args.row_scale = stats_;
  ExpectAccepted(Op::kReduceScale, args);
  RowOpArgs in_place = args;
  in_place.x = in_place.y;
  ExpectAccepted(Op::kReduceScale, in_place);
  RowOpArgs bad = args;
  bad.gamma = weight_;
  ExpectArgError(Op::kReduceScale, bad, "reduce_scale takes no gamma");
  bad = args;
  bad.inv_std = stats_;
  ExpectArgError(Op::kReduceScale, bad, "inv_std");
  // Other ops have no row_scale output.
  ExpectArgError(Op::kLayerNorm, args, "row_scale");
  ExpectArgError(Op::kRmsNorm, args, "row_scale");
}

TEST_F(LaunchArgsTest, OnlyTheMaskedSoftmaxTakesAMask) {
  for (Op op : {Op::kSoftmax, Op::kLogSoftmax, Op::kLayerNorm, Op::kReduceScale}) {
    RowOpArgs args = Args();
    args.mask = mask_;
    args.params.mask_rows = 8;
    ExpectArgError(op, args, "takes no mask");
    args = Args();
    args.params.causal = true;
    args.params.mask_rows = 8;
    ExpectArgError(op, args, "takes no mask");
  }
}

TEST_F(LaunchArgsTest, MaskedSoftmaxChecksTheQueryLengthAndScale) {
  const Op op = Op::kScaledMaskedSoftmax;
  ExpectAccepted(op, Args());  // neither mask nor causal: mask_rows unused
  RowOpArgs args = Args();
  args.mask = mask_;
  args.params.mask_rows = 4;
  args.params.scale = 0.125;
  ExpectAccepted(op, args);
  args.params.causal = true;
  ExpectAccepted(op, args);
  args.params.mask_rows = 1;
  ExpectAccepted(op, args);
  args.params.mask_rows = 8;
  ExpectAccepted(op, args);
  args.params.mask_rows = 3;  // does not divide rows = 8
  ExpectArgError(op, args, "mask_rows=3");
  args.params.mask_rows = 0;
  ExpectArgError(op, args, "mask_rows=0");
  RowOpArgs causal_only = Args();
  causal_only.params.causal = true;
  ExpectArgError(op, causal_only, "mask_rows=0");  // causal needs the query length
  causal_only.params.mask_rows = 16;
  ExpectArgError(op, causal_only, "mask_rows=16");
  causal_only.params.mask_rows = 2;
  ExpectAccepted(op, causal_only);
  RowOpArgs bad = Args();
  bad.params.scale = std::numeric_limits<double>::infinity();
  ExpectArgError(op, bad, "scale=");
  bad = Args();
  bad.gamma = weight_;
  ExpectArgError(op, bad, "takes no gamma");
  // A mask off the element grid is refused like any other operand.
  bad = Args();
  bad.mask = reinterpret_cast<const uint8_t*>(mask_) + 1;
  bad.params.mask_rows = 8;
  ExpectArgError(op, bad, "not aligned");
}


// The fused norms run in 16-byte packs in whole warps (rows of 512 to 2048
// columns) or register-resident blocks: every enumerated config is one of
// those and legal, the heuristic among them, and the other families are
// refused by name.
TEST(FusedNormConfigTest, EnumerationHeuristicAndRules) {
  for (Op op : kAllOps) {
    if (!IsFusedNorm(op)) continue;
    for (DType dtype : kAllDTypes) {
      const int pack = 16 / static_cast<int>(DTypeSize(dtype));
      for (int64_t cols : {int64_t{128}, int64_t{1024}, int64_t{4096}, int64_t{16384}}) {
        const Shape shape{64, cols};
        SCOPED_TRACE(absl::StrCat(OpName(op), " ", DTypeName(dtype), " cols=", cols));
        absl::StatusOr<std::vector<LaunchConfig>> configs =
            EnumerateConfigs(op, dtype, shape, H100());
        ASSERT_TRUE(configs.ok()) << configs.status();
        ASSERT_FALSE(configs->empty());
        for (const LaunchConfig& c : *configs) {
          EXPECT_TRUE(c.impl == Impl::kWarp || c.impl == Impl::kBlockRegs) << ConfigKey(c);
          EXPECT_EQ(c.pack_size, pack) << ConfigKey(c);
        }
        absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op, dtype, shape, H100());
        ASSERT_TRUE(heuristic.ok()) << heuristic.status();
        EXPECT_NE(std::find(configs->begin(), configs->end(), *heuristic), configs->end());
        EXPECT_EQ(heuristic->impl, cols >= 512 && cols <= kMaxWarpCols ? Impl::kWarp
                                                                        : Impl::kBlockRegs);
      }
      const Shape shape{64, 4096};
      const LaunchConfig smem{Impl::kBlockSmem, 256, pack, 32, 1, 0};
      EXPECT_NE(std::string(ValidateConfig(op, dtype, shape, smem, H100()).message()).find("runs with impl warp or block_regs only"), std::string::npos)
      << ValidateConfig(op, dtype, shape, smem, H100()).message();
      const LaunchConfig narrow{Impl::kBlockRegs, 512, pack / 2, 32, 1, 0};
      EXPECT_NE(std::string(ValidateConfig(op, dtype, shape, narrow, H100()).message()).find("runs in 16-byte packs"), std::string::npos)
      << ValidateConfig(op, dtype, shape, narrow, H100()).message();
      const LaunchConfig short_warp{Impl::kWarp, 128, pack, 32, 1, 0};
      EXPECT_NE(std::string(ValidateConfig(op, dtype, Shape{64, 128}, short_warp, H100()).message()).find("shorter ones take block_regs"), std::string::npos)
      << ValidateConfig(op, dtype, Shape{64, 128}, short_warp, H100()).message();
      // Past block_regs' reach, or off 16 bytes: refused with the reason.
      EXPECT_NE(std::string(HeuristicConfig(op, dtype, Shape{4, 32768}, H100()).status().message()).find("exceeds its limit of 16384 columns"), std::string::npos)
      << HeuristicConfig(op, dtype, Shape{4, 32768}, H100()).status().message();
      EXPECT_NE(std::string(HeuristicConfig(op, dtype, Shape{4, 4096}, H100(), 4).status().message()).find("runs in 16-byte packs"), std::string::npos)
      << HeuristicConfig(op, dtype, Shape{4, 4096}, H100(), 4).status().message();
    }
  }
}

// Strided rows run in the families whose functors place each row, with
// packs dividing cols; grouped rows (rms_norm's per-head views) in the warp
// instances of 16-byte packs, at most two a lane.
TEST(RowPlacementTest, StridedAndGroupedRowsTakeTheFamiliesThatServeThem) {
  const Shape few_long{4, 65536};
  absl::StatusOr<LaunchConfig> split = HeuristicConfig(Op::kSoftmax, DType::kFloat16, few_long,
                                                       H100());
  ASSERT_TRUE(split.ok());
  ASSERT_TRUE(HasSplit(split->impl)) << ConfigKey(*split);
  EXPECT_FALSE(ServesRowPlacement(Op::kSoftmax, DType::kFloat16, few_long, *split,
                                  RowPlacement::kStrided));
  absl::StatusOr<LaunchConfig> strided = HeuristicConfig(
      Op::kSoftmax, DType::kFloat16, few_long, H100(), 16, RowPlacement::kStrided);
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_TRUE(ServesRowPlacement(Op::kSoftmax, DType::kFloat16, few_long, *strided,
                                 RowPlacement::kStrided))
      << ConfigKey(*strided);
  // A config that does not serve the rows becomes the strided heuristic.
  absl::StatusOr<LaunchConfig> adapted = ConfigForAlignment(
      Op::kSoftmax, DType::kFloat16, few_long, *split, 16, H100(), RowPlacement::kStrided);
  ASSERT_TRUE(adapted.ok()) << adapted.status();
  EXPECT_EQ(*adapted, *strided);
  absl::StatusOr<std::vector<LaunchConfig>> configs = EnumerateConfigs(
      Op::kSoftmax, DType::kFloat16, few_long, H100(), RowPlacement::kStrided);
  ASSERT_TRUE(configs.ok());
  ASSERT_FALSE(configs->empty());
  for (const LaunchConfig& c : *configs) EXPECT_FALSE(HasSplit(c.impl)) << ConfigKey(c);

  for (DType dtype : kAllDTypes) {
    for (int64_t head_dim : {int64_t{64}, int64_t{128}, int64_t{256}}) {
      const Shape heads{7 * 32, head_dim};
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " head_dim ", head_dim));
      absl::StatusOr<LaunchConfig> grouped =
          HeuristicConfig(Op::kRmsNorm, dtype, heads, H100(), 16, RowPlacement::kGrouped);
      ASSERT_TRUE(grouped.ok()) << grouped.status();
      EXPECT_EQ(grouped->impl, Impl::kWarp);
      EXPECT_EQ(grouped->pack_size * DTypeSize(dtype), 16u);
      absl::StatusOr<std::vector<LaunchConfig>> grouped_configs =
          EnumerateConfigs(Op::kRmsNorm, dtype, heads, H100(), RowPlacement::kGrouped);
      ASSERT_TRUE(grouped_configs.ok());
      ASSERT_FALSE(grouped_configs->empty());
      for (const LaunchConfig& c : *grouped_configs) {
        EXPECT_TRUE(ServesRowPlacement(Op::kRmsNorm, dtype, heads, c, RowPlacement::kGrouped))
            << ConfigKey(c);
      }
    }
    // Grouped rows beyond two 16-byte packs a lane of a warp are refused.
    EXPECT_NE(std::string(HeuristicConfig(Op::kRmsNorm, dtype, Shape{64, 4096}, H100(), 16,
                                RowPlacement::kGrouped)
                    .status().message()).find("grouped rows"), std::string::npos)
      << HeuristicConfig(Op::kRmsNorm, dtype, Shape{64, 4096}, H100(), 16,
                                RowPlacement::kGrouped)
                    .status().message();
  }
}

TEST_F(LaunchArgsTest, GroupsAreRmsNormsAndFusedNormsNeedTheirOperands) {
  RowOpArgs grouped = Args();
  grouped.params.group_rows = 2;
  ExpectArgError(Op::kSoftmax, grouped, "grouped rows (per-head views, QK-norm) are for rms_norm");
  RowOpArgs add = Args();
  add.gamma = weight_;
  ExpectArgError(Op::kAddRmsNorm, add, "needs a residual");
  RowOpArgs offset = Args();
  offset.params.weight_offset = 1;
  ExpectArgError(Op::kRmsNorm, offset, "needs a weight");
  RowOpArgs quant = Args();
  quant.params.scale_mode = ScaleMode::kPerGroup;
  quant.params.group_size = 96;
  quant.row_scale = stats_;
  ExpectArgError(Op::kRmsNormQuant, quant, "group_size=96");
  quant.params.scale_mode = ScaleMode::kStatic;
  quant.params.group_size = 0;
  ExpectArgError(Op::kRmsNormQuant, quant, "needs quant_scale");
  quant.quant_scale = stats_ + 4;
  ExpectArgError(Op::kRmsNormQuant, quant, "writes no row_scale");
}

}  // namespace
}  // namespace kt::kernels
