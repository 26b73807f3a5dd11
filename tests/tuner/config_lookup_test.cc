// The config lookup's table on a described H100: rows this kerntune cannot
// read are refused, stale entries counted and never served, and the source
// names are the proto enum's.
#include "tuner/config_lookup.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/version.h"

namespace kt::tuner {
namespace {

using ::testing::HasSubstr;

db::BestConfig Row(const std::string& op, const std::string& key,
                   const std::string& kernel_version = kernels::kKernelLibraryVersion) {
  db::BestConfig row;
  row.point = {0, op, "float16", 4096, 1024};
  row.config.key = key;
  row.median_us = 8;
  row.env.kernel_version = kernel_version;
  return row;
}

TEST(ConfigLookupTest, RowsThisKerntuneCannotReadAreRefused) {
  EXPECT_TRUE(EntryFromRow(Row("softmax", "block_uncached/b256/p1/g32/r1/w0"),
                           EntryOrigin::kLocal)
                  .ok());
  EXPECT_FALSE(EntryFromRow(Row("softermax", "block_uncached/b256/p1/g32/r1/w0"),
                            EntryOrigin::kLocal)
                   .ok());
  EXPECT_FALSE(EntryFromRow(Row("softmax", "quantum/b256"), EntryOrigin::kShipped).ok());
}

TEST(ConfigLookupTest, StaleEntriesAreCountedByOriginAndVersionAndNeverServed) {
  ConfigTable table;
  EXPECT_EQ(DescribeStale(table.stale()), "");
  table.Add(*EntryFromRow(Row("softmax", "block_uncached/b256/p1/g32/r1/w0", ""),
                          EntryOrigin::kLocal));
  table.Add(*EntryFromRow(Row("layer_norm", "block_uncached/b256/p1/g32/r1/w0", "0.1.0+k2"),
                          EntryOrigin::kShipped));
  EXPECT_TRUE(table.Entries().empty());
  EXPECT_EQ(table.stale().local, 1);
  EXPECT_EQ(table.stale().shipped, 1);
  EXPECT_THAT(DescribeStale(table.stale()),
              HasSubstr("skipped 2 tuned entries (1 local, 1 shipped) measured with kernel "
                        "library unknown, 0.1.0+k2 (current "));
  const absl::StatusOr<ConfigChoice> choice = table.Lookup(
      kernels::Op::kSoftmax, kernels::DType::kFloat16, {4096, 1024}, kernels::DescribedH100());
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, ConfigSource::kHeuristic);
}

TEST(ConfigLookupTest, SourcesAreNamedAsTheProtoEnum) {
  EXPECT_EQ(ConfigSourceName(ConfigSource::kTuned), "tuned");
  EXPECT_EQ(ConfigSourceName(ConfigSource::kShipped), "shipped");
  EXPECT_EQ(ConfigSourceName(ConfigSource::kNearestTuned), "nearest_tuned");
  EXPECT_EQ(ConfigSourceName(ConfigSource::kHeuristic), "heuristic");
}

// Batch-invariant mode: one config per cols, whatever the rows, never a
// split family, legal at every rows; for every op and dtype over row
// lengths from 1 to 262144, and softmax over a middle axis.
TEST(ConfigLookupTest, BatchInvariantConfigsDoNotDependOnRows) {
  const kernels::DeviceInfo device = kernels::DescribedH100();
  const ConfigTable table;
  const int64_t all_rows[] = {1, 2, 3, 5, 64, 1000, 8192, 65536};
  int checked = 0;
  for (kernels::Op op : kernels::kAllOps) {
    for (kernels::DType dtype : kernels::kAllDTypes) {
      for (int64_t cols : {1, 7, 32, 100, 1000, 1024, 2048, 4096, 5000, 8192, 16384, 32768,
                           131072, 262144}) {
        for (int64_t inner : {1, 4, 64}) {
          if (inner > 1 && !kernels::SupportsInnerAxis(op)) continue;
          // Shapes no kernel runs at all are not this mode's to serve.
          if (!table.Lookup(op, dtype, {ConfigTable::kInvariantRows, cols, inner}, device)
                   .ok()) {
            continue;
          }
          std::optional<kernels::LaunchConfig> first;
          for (int64_t rows : all_rows) {
            const kernels::Shape shape{rows, cols, inner};
            absl::StatusOr<ConfigChoice> choice =
                table.LookupBatchInvariant(op, dtype, shape, device);
            ASSERT_TRUE(choice.ok()) << kernels::OpName(op) << " " << cols << " " << inner
                                     << ": " << choice.status();
            EXPECT_FALSE(kernels::HasSplit(choice->config.impl));
            EXPECT_TRUE(kernels::ValidateConfig(op, dtype, shape, choice->config, device).ok())
                << kernels::OpName(op) << " " << rows << "x" << cols << "x" << inner << " "
                << kernels::ConfigKey(choice->config);
            if (!first) first = choice->config;
            EXPECT_EQ(choice->config, *first)
                << kernels::OpName(op) << " " << rows << "x" << cols << "x" << inner;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(ConfigLookupTest, BatchInvariantModeServesTheEntryTunedAtTheMostRows) {
  const kernels::DeviceInfo device = kernels::DescribedH100();
  const kernels::Op op = kernels::Op::kSoftmax;
  const kernels::DType dtype = kernels::DType::kFloat16;
  const int64_t cols = 65536;
  auto entry = [&](int64_t rows, const kernels::LaunchConfig& config, EntryOrigin origin) {
    TunedEntry e;
    e.op = op;
    e.dtype = dtype;
    e.shape = {rows, cols, 1};
    e.config = config;
    e.kernel_version = kernels::kKernelLibraryVersion;
    e.origin = origin;
    return e;
  };
  // A split config tuned for one row, row-parallel ones at 64 and 8192 rows.
  auto split = kernels::EnumerateConfigs(op, dtype, {1, cols, 1}, device);
  ASSERT_TRUE(split.ok());
  const auto split_config = std::find_if(split->begin(), split->end(), [](const auto& c) {
    return kernels::HasSplit(c.impl);
  });
  ASSERT_NE(split_config, split->end());
  auto parallel = kernels::EnumerateConfigs(op, dtype, {8192, cols, 1}, device);
  ASSERT_TRUE(parallel.ok());
  std::vector<kernels::LaunchConfig> row_parallel;
  for (const auto& c : *parallel) {
    if (!kernels::HasSplit(c.impl)) row_parallel.push_back(c);
  }
  ASSERT_GE(row_parallel.size(), 3u);
  ConfigTable table;
  table.Add(entry(1, *split_config, EntryOrigin::kLocal));
  table.Add(entry(64, row_parallel[0], EntryOrigin::kLocal));
  table.Add(entry(8192, row_parallel[1], EntryOrigin::kLocal));
  table.Add(entry(16384, row_parallel[2], EntryOrigin::kShipped));  // local comes first
  for (int64_t rows : {1, 64, 100, 8192}) {
    absl::StatusOr<ConfigChoice> choice =
        table.LookupBatchInvariant(op, dtype, {rows, cols, 1}, device);
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->config, row_parallel[1]) << rows;
    EXPECT_EQ(choice->source,
              rows == 8192 ? ConfigSource::kTuned : ConfigSource::kNearestTuned);
  }
  // The ordinary lookup still serves the split entry at one row.
  EXPECT_EQ(table.Lookup(op, dtype, {1, cols, 1}, device)->config, *split_config);
  // Grouped rows (QK-norm): a config that serves them.
  absl::StatusOr<ConfigChoice> grouped = table.LookupBatchInvariant(
      kernels::Op::kRmsNorm, dtype, {4, 128, 1}, device, kernels::RowPlacement::kGrouped);
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_TRUE(kernels::ServesRowPlacement(kernels::Op::kRmsNorm, dtype, {4, 128, 1},
                                          grouped->config, kernels::RowPlacement::kGrouped));
}

}  // namespace
}  // namespace kt::tuner
