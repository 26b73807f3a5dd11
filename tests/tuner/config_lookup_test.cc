// The config lookup's table on a described H100: rows this kerntune cannot
// read are refused, stale entries counted and never served, and the source
// names are the proto enum's.
#include "tuner/config_lookup.h"

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

}  // namespace
}  // namespace kt::tuner
