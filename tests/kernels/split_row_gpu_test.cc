// GPU suite for split rows (CTest label "gpu"): every split config the rules
// accept, of the three impls (split_row's clusters: each split; split_grid
// and split_two_pass: a set of splits up to every SM and beyond), each block
// size and pack, not only the tuner's candidates, for every op and dtype, on
// few long rows including slices with a remainder, on odd cols (rows off
// the pack grid) and on many rows, checked against the fp64 CPU reference
// on fresh random data with the outputs poisoned before each launch;
// split_row's bulk copy (one and two slice buffers) over many rows. Fails
// (does not skip) without a GPU; skips on a GPU without thread-block
// clusters (pre-Hopper).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "kernels/verify.h"
#include "tests/kernels/gpu_sweep.h"

namespace kt::kernels {
namespace {

std::atomic<int64_t> g_launches{0};

class LaunchCountReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::printf("[coverage] %lld checked split-row launches\n",
                static_cast<long long>(g_launches.load()));
  }
};
const auto* const g_report = ::testing::AddGlobalTestEnvironment(new LaunchCountReport);

using gpu_testing::FreshSeed;
using gpu_testing::kMaxFailuresReported;

constexpr int kSplits[] = {2, 4, 8, 16};
// split_grid: small, odd, a cluster's limit and beyond; plus, per shape, one
// and two blocks per SM (GridSplitsFor).
constexpr int kGridSplits[] = {2, 3, 16, 33};
// split_two_pass: odd and even, up to many blocks per SM (the rules drop
// those whose slices exceed 8 packs per thread or rows * split > 4096).
constexpr int kTwoPassSplits[] = {2, 3, 16, 33, 128, 300};

LaunchConfig Split(int block, int pack, int split, Impl impl = Impl::kSplitRow) {
  LaunchConfig c{impl, block, pack, 32, 1, 0};
  c.split = split;
  return c;
}

// Few rows, so the masked softmax gets one query per row (mask_rows = rows).
AttentionOptions FewRowsAttention(int64_t rows) {
  AttentionOptions attention;
  attention.mask_rows = rows;
  return attention;
}

class SplitRowGpuTest : public gpu_testing::GpuTest,
                        public ::testing::WithParamInterface<std::tuple<Op, DType>> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (HasFatalFailure()) return;
    if (device_.cc_major < 9) {
      GTEST_SKIP() << device_.name << " (compute capability " << device_.cc_major << "."
                   << device_.cc_minor << ") has no thread-block clusters";
    }
  }

  Op op() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }

  // split_grid's splits for a shape: kGridSplits and one and two blocks of
  // each row per SM.
  std::vector<int> GridSplitsFor(Shape shape) const {
    std::vector<int> splits(std::begin(kGridSplits), std::end(kGridSplits));
    for (int per_sm : {1, 2}) {
      const int64_t split = per_sm * static_cast<int64_t>(device_.sm_count) / shape.rows;
      if (split >= 2 && split <= kMaxGridSplit &&
          std::find(splits.begin(), splits.end(), split) == splits.end()) {
        splits.push_back(static_cast<int>(split));
      }
    }
    return splits;
  }

  // Every split config ValidateConfig accepts for the shape: all splits of
  // the three impls, block sizes and pack sizes (the narrow packs are what Launch
  // falls back to for misaligned pointers).
  std::vector<LaunchConfig> AllSplitConfigs(Shape shape) const {
    std::vector<LaunchConfig> configs;
    const auto add = [&](Impl impl, int split) {
      for (int block : kBlockImplBlockSizes) {
        for (int pack : kPackSizes) {
          const LaunchConfig c = Split(block, pack, split, impl);
          if (ValidateConfig(op(), dtype(), shape, c, device_).ok()) configs.push_back(c);
        }
      }
    };
    for (int split : kSplits) add(Impl::kSplitRow, split);
    for (int split : GridSplitsFor(shape)) add(Impl::kSplitGrid, split);
    for (int split : kTwoPassSplits) add(Impl::kSplitTwoPass, split);
    const std::vector<LaunchConfig> regs = RegsConfigs(shape);
    configs.insert(configs.end(), regs.begin(), regs.end());
    return configs;
  }

  // Every split_regs config ValidateConfig accepts for the shape (none but
  // for softmax and log-softmax).
  std::vector<LaunchConfig> RegsConfigs(Shape shape) const {
    std::vector<LaunchConfig> configs;
    const int pack = 16 / static_cast<int>(DTypeSize(dtype()));
    for (int split : kSplits) {
      for (int block : kSplitRegsBlockSizes) {
        const LaunchConfig c = Split(block, pack, split, Impl::kSplitRegs);
        if (ValidateConfig(op(), dtype(), shape, c, device_).ok()) configs.push_back(c);
      }
    }
    return configs;
  }

  // Launches `config` on poisoned outputs and checks them. Returns a failure
  // description, or "" when the launch was right.
  std::string LaunchAndCheck(DeviceProblem& problem, const LaunchConfig& config,
                             const RowOpArgs& args, bool check_stats) {
    if (absl::Status s = PoisonOutputs(problem, stream_); !s.ok()) return s.ToString();
    absl::StatusOr<LaunchConfig> launched =
        Launch(problem.op, problem.dtype, problem.shape, args, config, device_, stream_);
    if (!launched.ok()) return launched.status().ToString();
    if (launched->impl != config.impl || launched->split != config.split) {
      return absl::StrCat("launched ", ConfigKey(*launched), " instead");
    }
    if (cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess) {
      return absl::StrCat("kernel failed: ", cudaGetErrorString(err));
    }
    absl::StatusOr<CheckReport> report = CheckOutputs(problem, check_stats, stream_);
    if (!report.ok()) return report.status().ToString();
    ++g_launches;
    return report->passed ? "" : report->detail;
  }

  // A fresh random problem of `shape` (one query per row for the masked
  // softmax) on the device, outputs poisoned.
  absl::StatusOr<DeviceProblem> FreshProblem(Shape shape, bool with_affine = true) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, with_affine, 0, 0,
                    FewRowsAttention(shape.rows));
    if (!host.ok()) return host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    if (!problem.ok()) return problem.status();
    if (absl::Status s = PoisonOutputs(*problem, stream_); !s.ok()) return s;
    return problem;
  }

  // Copies x into y, runs `config` with y as its input too (y == x) and
  // checks the outputs.
  void LaunchInPlaceAndCheck(DeviceProblem& problem, const LaunchConfig& config,
                             bool check_stats) {
    ASSERT_EQ(cudaMemcpy(problem.y.data(), problem.x.data(), problem.x.bytes(),
                         cudaMemcpyDeviceToDevice),
              cudaSuccess);
    RowOpArgs args = problem.Args();
    args.x = args.y;
    absl::StatusOr<LaunchConfig> launched =
        Launch(op(), dtype(), problem.shape, args, config, device_, stream_);
    ASSERT_TRUE(launched.ok()) << launched.status();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    absl::StatusOr<CheckReport> report = CheckOutputs(problem, check_stats, stream_);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->passed) << "in place rows=" << problem.shape.rows
                                << " cols=" << problem.shape.cols << " " << ConfigKey(config)
                                << ": " << report->detail;
    ++g_launches;
  }

  // Launch refuses `config` (InvalidArgument, naming `mentions`).
  void ExpectLaunchRefused(Shape shape, const RowOpArgs& args, const LaunchConfig& config,
                           const std::string& mentions) {
    absl::StatusOr<LaunchConfig> launched =
        Launch(op(), dtype(), shape, args, config, device_, stream_);
    ASSERT_FALSE(launched.ok()) << ConfigKey(config);
    EXPECT_EQ(launched.status().code(), absl::StatusCode::kInvalidArgument) << launched.status();
    EXPECT_NE(launched.status().message().find(mentions), absl::string_view::npos)
        << launched.status();
  }

  // Runs `configs` on one uploaded problem, reporting the first failures.
  void Sweep(DeviceProblem& problem, const std::vector<LaunchConfig>& configs, bool with_stats,
             const std::string& what) {
    int failures = 0;
    for (const LaunchConfig& config : configs) {
      const std::string failure =
          LaunchAndCheck(problem, config, problem.Args(with_stats), with_stats);
      if (failure.empty()) continue;
      if (++failures <= kMaxFailuresReported) {
        ADD_FAILURE() << OpName(problem.op) << " " << DTypeName(problem.dtype)
                      << " rows=" << problem.shape.rows << " cols=" << problem.shape.cols << " "
                      << what << " " << ConfigKey(config) << ": " << failure;
      }
    }
  }

  // MakeProblem + Upload + every split config of the shape.
  void SweepProblem(Shape shape, InputPattern pattern, bool with_affine, bool with_stats,
                    const AttentionOptions& attention, const std::string& what) {
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), pattern, with_affine, 0, 0, attention);
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    const std::vector<LaunchConfig> configs = AllSplitConfigs(shape);
    ASSERT_FALSE(configs.empty()) << "no split config for rows=" << shape.rows
                                  << " cols=" << shape.cols;
    Sweep(*problem, configs, with_stats, what);
  }

  // The split_row configs whose load is the bulk copy (16-byte packs) at
  // the smallest and largest split and block size: each config is checked
  // against the fp64 reference over the whole problem on the CPU, so many
  // rows get these few rather than AllSplitConfigs.
  std::vector<LaunchConfig> BulkConfigs(Shape shape) const {
    std::vector<LaunchConfig> configs;
    const int64_t element = static_cast<int64_t>(DTypeSize(dtype()));
    for (int split : {2, 8}) {
      for (int block : {256, 1024}) {
        for (int pack : kPackSizes) {
          const LaunchConfig c = Split(block, pack, split);
          if (pack * element == 16 && ValidateConfig(op(), dtype(), shape, c, device_).ok()) {
            configs.push_back(c);
          }
        }
      }
    }
    return configs;
  }
};

// Few rows (a single cluster up to several waves of them), long rows whose
// slices divide evenly and one (32768 + 8) that leaves a remainder pack for
// the first blocks, up to 262144 columns where a slice still fits shared
// memory. Per-row outputs (mean, inv_std, row_scale) are checked too.
TEST_P(SplitRowGpuTest, EveryConfigMatchesTheReference) {
  for (int64_t cols : {int64_t{16384}, int64_t{32768 + 8}, int64_t{131072}, int64_t{262144}}) {
    for (int64_t rows : {1, 3, 8, 64}) {
      SCOPED_TRACE(absl::StrCat("rows=", rows, " cols=", cols));
      SweepProblem({rows, cols}, InputPattern::kNormal, /*with_affine=*/true,
                   /*with_stats=*/true, FewRowsAttention(rows), "normal");
    }
  }
}

// Odd remainders: cols not a multiple of 16-byte packs (full packs around a
// scalar head and tail for split_row of the ops whose operands follow x,
// narrower packs otherwise) and pack counts that leave every possible
// remainder of the split.
TEST_P(SplitRowGpuTest, RemaindersMatchTheReference) {
  for (int64_t cols : {int64_t{16384 + 1}, int64_t{16384 + 2}, int64_t{16384 + 4},
                       int64_t{16384 + 8 * 15}, int64_t{65536 + 8 * 7}}) {
    SCOPED_TRACE(absl::StrCat("cols=", cols));
    SweepProblem({3, cols}, InputPattern::kNormal, true, true, FewRowsAttention(3), "remainder");
  }
}

// Rows off the pack grid (odd cols: row r starts at element r * cols, so
// each row has its own head, tail and maybe one whole pack fewer), cols
// whose packs no split divides, a single row, many rows (clusters looping
// over SMs in waves) and the LLM vocabularies. Every split config the rules
// accept, each split, block and pack: split_row takes every pack at odd
// cols for softmax, log-softmax and ReduceScale.
TEST_P(SplitRowGpuTest, OddColsAndManyRowsMatchTheReference) {
  for (Shape shape : {Shape{5, 33}, Shape{7, 16384 + 1}, Shape{1, 50257}, Shape{3, 50257},
                      Shape{300, 50257}, Shape{2, 128256}, Shape{3, 151936 + 7}}) {
    SCOPED_TRACE(absl::StrCat("rows=", shape.rows, " cols=", shape.cols));
    SweepProblem(shape, InputPattern::kNormal, /*with_affine=*/true, /*with_stats=*/true,
                 FewRowsAttention(shape.rows), "odd/many");
  }
}

// split_row's bulk copy (16-byte packs of an input read unchanged: every op
// but the masked softmax) over many rows, where each cluster of the
// persistent grid serves several rows and its chunk barriers go through
// several phases: one slice buffer (fewer than 1024 rows, or slices over
// 113 KiB: float16 at split 2 of 128256 columns, float32 at split 4) or two
// (the next row copied in while this one finishes); rows on the 16-byte
// grid and off it (50257: head and tail through ordinary loads beside the
// copy); the LLM vocabularies. Every split_row config of each shape, so the narrower packs
// (and the masked softmax) check the ordinary loads on the same problems.
TEST_P(SplitRowGpuTest, BulkCopyOverManyRowsMatchesTheReference) {
  // 1024 rows take two buffers where two slices fit; 96 rows one; 50257
  // columns leave rows that start off the 16-byte boundary.
  std::set<int64_t> buffers_seen;  // slices per block of the bulk configs
  for (Shape shape : {Shape{1024, 32000}, Shape{1024, 50257}, Shape{96, 151936}}) {
    SCOPED_TRACE(absl::StrCat("rows=", shape.rows, " cols=", shape.cols));
    const std::vector<LaunchConfig> configs = BulkConfigs(shape);
    for (const LaunchConfig& c : configs) {
      if (op() == Op::kScaledMaskedSoftmax) break;
      const int64_t slice_bytes = (shape.cols / c.pack_size + c.split - 1) / c.split * 16;
      buffers_seen.insert(SharedMemoryBytes(op(), dtype(), shape, c) / slice_bytes);
    }
    if (configs.empty()) continue;  // the norms at odd cols take no split_row
    absl::StatusOr<DeviceProblem> problem = FreshProblem(shape);
    ASSERT_TRUE(problem.ok()) << problem.status();
    Sweep(*problem, configs, /*with_stats=*/true, "bulk/many rows");
  }
  if (op() != Op::kScaledMaskedSoftmax) {
    EXPECT_EQ(buffers_seen, (std::set<int64_t>{1, 2}));
  }
}

// split_regs over many rows: each cluster of the persistent grid serves
// several rows, so its chunk barriers and its exchange's two slot sets go
// through many phases; the LLM vocabularies at every split and block size
// whose slice fits the registers (Slicing's remainder packs at 151936 / 16),
// odd ones whose rows start at every offset from the pack grid (a head and
// a tail, the last block a pack short on some rows: 50257 and 151939), then
// the heuristic's config in place (y == x).
TEST_P(SplitRowGpuTest, SplitRegsOverManyRowsMatchesTheReference) {
  if (op() != Op::kSoftmax && op() != Op::kLogSoftmax) GTEST_SKIP() << "softmax only";
  for (Shape shape : {Shape{300, 128256}, Shape{264, 151936}, Shape{1024, 65536},
                      Shape{300, 50257}, Shape{264, 151939}}) {
    SCOPED_TRACE(absl::StrCat("rows=", shape.rows, " cols=", shape.cols));
    const std::vector<LaunchConfig> configs = RegsConfigs(shape);
    ASSERT_FALSE(configs.empty());
    absl::StatusOr<DeviceProblem> problem = FreshProblem(shape);
    ASSERT_TRUE(problem.ok()) << problem.status();
    Sweep(*problem, configs, /*with_stats=*/false, "split_regs/many rows");

    absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op(), dtype(), shape, device_);
    ASSERT_TRUE(heuristic.ok()) << heuristic.status();
    if (heuristic->impl != Impl::kSplitRegs) continue;  // 65536 float16 fits a block
    LaunchInPlaceAndCheck(*problem, *heuristic, /*check_stats=*/false);
    if (HasFatalFailure()) return;
  }
}

// -inf rows with one finite value, constant (ReduceScale: zero) rows, huge
// magnitudes, a NaN, all -inf, a large offset: the cross-block merges must
// keep the row kernels' semantics (an all -inf row gives NaN, a NaN anywhere
// gives NaN). Statistics of pathological rows are compared through y alone.
TEST_P(SplitRowGpuTest, SpecialValuesMatchTheReference) {
  for (int64_t cols : {int64_t{16384}, int64_t{32768 + 8}, int64_t{50257}, int64_t{131072}}) {
    SCOPED_TRACE(absl::StrCat("cols=", cols));
    SweepProblem({12, cols}, InputPattern::kSpecialValues, true, /*with_stats=*/false,
                 FewRowsAttention(12), "special");
  }
}

// y == x: every block caches its slice before the exchange (split_grid's
// slot in y included) and writes only that slice, so in-place works for
// every op (ReduceScale's in-place quantization included).
TEST_P(SplitRowGpuTest, InPlace) {
  // 1024 rows: split_row's bulk copy fetches a cluster's next row while it
  // writes this one (BulkConfigs only: a check of so many rows is slow).
  for (Shape shape : {Shape{1, 32768 + 8}, Shape{8, 32768 + 8}, Shape{1024, 32768 + 8},
                      Shape{1, 50257}, Shape{8, 50257}, Shape{1, 131072}, Shape{8, 131072}}) {
    const int64_t rows = shape.rows;
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, true, 0, 0,
                    FewRowsAttention(rows));
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    for (const LaunchConfig& config :
         rows >= 1024 ? BulkConfigs(host->shape) : AllSplitConfigs(host->shape)) {
      LaunchInPlaceAndCheck(*problem, config, /*check_stats=*/true);
      if (HasFatalFailure()) return;
    }
  }
}

// LayerNorm and RMSNorm without gamma/beta, with and without their per-row
// outputs.
TEST_P(SplitRowGpuTest, NormsWithoutAffine) {
  if (op() != Op::kLayerNorm && op() != Op::kRmsNorm) GTEST_SKIP() << "norms only";
  for (bool with_stats : {true, false}) {
    for (int64_t cols : {int64_t{32768 + 8}, int64_t{131072}}) {
      SCOPED_TRACE(absl::StrCat("cols=", cols, " with_stats=", with_stats));
      SweepProblem({8, cols}, InputPattern::kNormal, /*with_affine=*/false, with_stats, {},
                   "no affine");
    }
  }
}

// The masked softmax's variants: causal only, mask and causal, an explicit
// scale, and query rows shared by several (batch, head) rows (mask_rows <
// rows, so row % mask_rows picks the mask row).
TEST_P(SplitRowGpuTest, MaskedSoftmaxVariants) {
  if (op() != Op::kScaledMaskedSoftmax) GTEST_SKIP() << "scaled_masked_softmax only";
  struct Variant {
    const char* name;
    int64_t rows;
    AttentionOptions attention;
  };
  const Variant variants[] = {
      {"causal", 8, {0, /*with_mask=*/false, /*causal=*/true, 8}},
      {"mask+causal", 8, {0, true, true, 8}},
      {"scale 0.5", 8, {0.5, true, false, 8}},
      {"4 queries x 4 heads", 16, {0, true, false, 4}},
      {"2 queries causal x 3 heads", 6, {0, true, true, 2}},
  };
  for (const Variant& v : variants) {
    for (int64_t cols : {int64_t{32768 + 8}, int64_t{131072}}) {
      SCOPED_TRACE(absl::StrCat(v.name, " cols=", cols));
      SweepProblem({v.rows, cols}, InputPattern::kNormal, false, false, v.attention, v.name);
      SweepProblem({v.rows, cols}, InputPattern::kSpecialValues, false, false, v.attention, v.name);
    }
  }
}

// The rules' own choices: the heuristic takes two-pass split rows for 1..24
// rows of 131072, the enumeration offers the three impls for few rows (grid
// splits while two blocks of each row per SM can be resident, not at 64
// rows), and all run correctly.
TEST_P(SplitRowGpuTest, HeuristicAndCandidatesRunCorrectly) {
  for (int64_t rows : {1, 2, 5, 8, 16, 24, 64}) {
    const Shape shape{rows, 131072};
    absl::StatusOr<HostProblem> host =
        MakeProblem(op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, true, 0, 0,
                    FewRowsAttention(rows));
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
    ASSERT_TRUE(problem.ok()) << problem.status();
    std::vector<LaunchConfig> configs;
    absl::StatusOr<std::vector<LaunchConfig>> enumerated =
        EnumerateConfigs(op(), dtype(), shape, device_);
    ASSERT_TRUE(enumerated.ok()) << enumerated.status();
    std::set<Impl> impls;
    for (const LaunchConfig& c : *enumerated) {
      if (!HasSplit(c.impl)) continue;
      configs.push_back(c);
      impls.insert(c.impl);
    }
    EXPECT_TRUE(impls.count(Impl::kSplitRow)) << "rows=" << rows << ": no split_row candidate";
    EXPECT_TRUE(impls.count(Impl::kSplitTwoPass))
        << "rows=" << rows << ": no split_two_pass candidate";
    if (rows <= 8) {
      EXPECT_TRUE(impls.count(Impl::kSplitGrid)) << "rows=" << rows << ": no split_grid candidate";
    }
    if (rows <= 24) {
      absl::StatusOr<LaunchConfig> heuristic = HeuristicConfig(op(), dtype(), shape, device_);
      ASSERT_TRUE(heuristic.ok()) << heuristic.status();
      EXPECT_EQ(heuristic->impl, Impl::kSplitTwoPass) << ConfigKey(*heuristic);
      if (HasSplit(heuristic->impl)) configs.push_back(*heuristic);
    }
    Sweep(*problem, configs, true, "rules");
  }
}

// Odd cols with pointers off the 16-byte grid: Launch narrows split_row's
// pack to what the pointers allow (x and y share their offset here), and
// each row's head still starts its packs on that grid.
TEST_P(SplitRowGpuTest, OddColsWithMisalignedPointersNarrowThePack) {
  if (PackMustDivideLength(op(), Impl::kSplitRow)) {
    GTEST_SKIP() << "ops whose operands all follow x (softmax, log-softmax, ReduceScale)";
  }
  const Shape shape{5, 50257};
  absl::StatusOr<HostProblem> host = MakeProblem(
      op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false, 0, 0, FewRowsAttention(5));
  ASSERT_TRUE(host.ok()) << host.status();
  absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
  ASSERT_TRUE(problem.ok()) << problem.status();
  CheckMisalignedOperandsNarrowThePack(op(), dtype(), shape, *problem, Narrowing::kExactly,
                                       [](int widest) {
                                         std::vector<LaunchConfig> configs;
                                         for (int split : kSplits) {
                                           configs.push_back(Split(256, widest, split));
                                         }
                                         return configs;
                                       });
}

// Pointers off the 16-byte grid make Launch narrow the pack of a split
// config instead of issuing misaligned vector accesses.
TEST_P(SplitRowGpuTest, MisalignedPointersFallBackToNarrowerPacks) {
  const Shape shape{3, 32768 + 8};
  absl::StatusOr<HostProblem> host = MakeProblem(
      op(), dtype(), shape, FreshSeed(), InputPattern::kNormal, false, 0, 0, FewRowsAttention(3));
  ASSERT_TRUE(host.ok()) << host.status();
  absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
  ASSERT_TRUE(problem.ok()) << problem.status();
  CheckMisalignedOperandsNarrowThePack(
      op(), dtype(), shape, *problem, Narrowing::kAtMost, [this, &shape](int widest) {
        std::vector<LaunchConfig> configs;
        for (int split : kSplits) configs.push_back(Split(256, widest, split));
        for (int split : GridSplitsFor(shape)) {
          configs.push_back(Split(256, widest, split, Impl::kSplitGrid));
        }
        // 4097 packs of 1 over 33 or 64 blocks stay within 256 threads x 8.
        for (int split : {33, 64}) {
          configs.push_back(Split(256, widest, split, Impl::kSplitTwoPass));
        }
        return configs;
      });
}

// The occupancy of a cluster launch is real (the CUDA calculator, with the
// non-portable opt-in for 16) and matches what Launch accepts.
TEST_P(SplitRowGpuTest, OccupancyIsQueriedPerCluster) {
  const Shape shape{8, 131072};
  for (int split : kSplits) {
    for (int block : kBlockImplBlockSizes) {
      const LaunchConfig c = Split(block, 16 / static_cast<int>(DTypeSize(dtype())), split);
      // Slices beyond the per-block limit are refused before any query.
      if (SharedMemoryBytes(op(), dtype(), shape, c) + 1024 > device_.max_smem_per_block_optin) {
        continue;
      }
      absl::StatusOr<int> active = ActiveBlocksPerSm(op(), dtype(), shape, c, device_);
      ASSERT_TRUE(active.ok()) << ConfigKey(c) << ": " << active.status();
      EXPECT_EQ(*active > 0, ValidateConfig(op(), dtype(), shape, c, device_).ok()) << ConfigKey(c);
      EXPECT_LE(*active, device_.max_threads_per_sm / block) << ConfigKey(c);
    }
  }
}

// split_grid's occupancy is 0 when its rows * split blocks cannot all be
// resident (its grid barriers need them all), so such a config is refused by
// the rules instead of failing at launch: for each block size, the largest
// split the rules accept launches (cooperatively: a grid that is not
// resident would fail) and is correct, and the next one is refused.
TEST_P(SplitRowGpuTest, GridSplitsStopAtTheResidentGrid) {
  const Shape shape{8, 131072};
  absl::StatusOr<DeviceProblem> problem = FreshProblem(shape);
  ASSERT_TRUE(problem.ok()) << problem.status();
  const int widest = 16 / static_cast<int>(DTypeSize(dtype()));
  for (int block : kBlockImplBlockSizes) {
    int largest = 0;
    for (int split = 2; split <= kMaxGridSplit; ++split) {
      const LaunchConfig c = Split(block, widest, split, Impl::kSplitGrid);
      const absl::Status valid = ValidateConfig(op(), dtype(), shape, c, device_);
      if (!valid.ok()) {
        // The smallest splits may leave slices too big for shared memory.
        if (largest == 0 && valid.message().find("shared memory") != absl::string_view::npos) {
          continue;
        }
        EXPECT_TRUE(valid.message().find("resident") != absl::string_view::npos)
            << ConfigKey(c) << ": " << valid;
        break;
      }
      absl::StatusOr<int> active = ActiveBlocksPerSm(op(), dtype(), shape, c, device_);
      ASSERT_TRUE(active.ok()) << ConfigKey(c) << ": " << active.status();
      EXPECT_LE(shape.rows * split, static_cast<int64_t>(*active) * device_.sm_count)
          << ConfigKey(c);
      largest = split;
    }
    ASSERT_GE(largest, 2) << "block " << block;
    const LaunchConfig c = Split(block, widest, largest, Impl::kSplitGrid);
    const std::string failure = LaunchAndCheck(*problem, c, problem->Args(true), true);
    EXPECT_EQ(failure, "") << ConfigKey(c);
  }
}

// An illegal split config is refused before anything is launched: the
// poisoned output stays untouched.
TEST_P(SplitRowGpuTest, IllegalConfigIsNeverLaunched) {
  absl::StatusOr<HostProblem> host = MakeProblem(
      op(), dtype(), {2, 32}, FreshSeed(), InputPattern::kNormal, true, 0, 0, FewRowsAttention(2));
  ASSERT_TRUE(host.ok()) << host.status();
  absl::StatusOr<DeviceProblem> problem = Upload(*host, /*stream=*/nullptr);
  ASSERT_TRUE(problem.ok()) << problem.status();
  ASSERT_TRUE(PoisonOutputs(*problem, stream_).ok());
  // 32 columns in 16-byte packs are fewer packs than 16 blocks.
  const int widest = 16 / static_cast<int>(DTypeSize(dtype()));
  for (const LaunchConfig& c :
       {Split(128, widest, 16), Split(128, 1, 3), Split(128, 1, 32),
        Split(128, widest, 16, Impl::kSplitGrid), Split(128, 1, 1, Impl::kSplitGrid),
        Split(128, 1, kMaxGridSplit + 1, Impl::kSplitGrid),
        Split(128, widest, 16, Impl::kSplitTwoPass), Split(128, 1, 1, Impl::kSplitTwoPass),
        Split(128, 1, kMaxTwoPassBlocks, Impl::kSplitTwoPass)}) {
    ExpectLaunchRefused(host->shape, problem->Args(), c, "split=");
  }
  gpu_testing::ExpectOutputUntouched(*problem, stream_);
}

// split_two_pass without its workspace (or with too small a one) is refused
// before anything is launched.
TEST_P(SplitRowGpuTest, TwoPassWithoutWorkspaceIsNeverLaunched) {
  const Shape shape{2, 32768};
  absl::StatusOr<DeviceProblem> problem = FreshProblem(shape);
  ASSERT_TRUE(problem.ok()) << problem.status();
  const LaunchConfig c = Split(256, 16 / static_cast<int>(DTypeSize(dtype())), 16,
                               Impl::kSplitTwoPass);
  for (int64_t bytes : {int64_t{0}, WorkspaceBytes(shape, c) - 16}) {
    RowOpArgs args = problem->Args();
    if (bytes == 0) args.workspace = nullptr;
    args.workspace_bytes = bytes;
    ExpectLaunchRefused(shape, args, c, "workspace");
  }
  gpu_testing::ExpectOutputUntouched(*problem, stream_);
}

// Back-to-back two-pass launches on one stream share the workspace: each
// launch's first kernel waits for the previous second kernel, so a stream of
// different problems (their partials in the same slots) stays correct.
TEST_P(SplitRowGpuTest, TwoPassLaunchesShareTheWorkspaceInStreamOrder) {
  const Shape shape{8, 131072};
  std::vector<DeviceProblem> problems;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<DeviceProblem> problem = FreshProblem(shape);
    ASSERT_TRUE(problem.ok()) << problem.status();
    problems.push_back(*std::move(problem));
  }
  const LaunchConfig c = Split(256, 16 / static_cast<int>(DTypeSize(dtype())), 16,
                               Impl::kSplitTwoPass);
  for (int round = 0; round < 4; ++round) {
    for (const DeviceProblem& problem : problems) {
      RowOpArgs args = problem.Args();
      args.workspace = problems[0].workspace.data();  // one workspace for all
      absl::StatusOr<LaunchConfig> launched =
          Launch(op(), dtype(), shape, args, c, device_, stream_);
      ASSERT_TRUE(launched.ok()) << launched.status();
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  for (const DeviceProblem& problem : problems) {
    absl::StatusOr<CheckReport> report = CheckOutputs(problem, true, stream_);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->passed) << ConfigKey(c) << ": " << report->detail;
    ++g_launches;
  }
}

// The split families serve the six basic ops; the fused norms are
// register-resident only (row_ops_gpu_test.cc).
INSTANTIATE_TEST_SUITE_P(AllOpsAndDTypes, SplitRowGpuTest,
                         ::testing::Combine(::testing::ValuesIn(kBasicOps),
                                            ::testing::ValuesIn(kAllDTypes)),
                         gpu_testing::OpDTypeParamName);

}  // namespace
}  // namespace kt::kernels
