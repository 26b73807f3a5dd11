// The shipped config files: every *.json of the directory by name, bad files
// named and left out, only the device SKU's entries kept, and the default
// directory of a program run from its build tree.
#include "proto/shipped_configs.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "kernels/version.h"
#include "tests/proto/test_skus.h"
#include "tests/testing/scoped_temp_dir.h"
#include "tuner/backend.h"

namespace kt::proto {
namespace {

using ::kt::proto::testing::A100Sku;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The H100 the kernel library describes without a device.
db::GpuSku DescribedH100Sku() { return tuner::SkuOf(kernels::DescribedH100()); }

// A file of `sku` with the heuristic config of softmax at each of `cols`.
std::string FileOf(const db::GpuSku& sku, const std::vector<int64_t>& cols,
                   const std::string& kernel_version = kernels::kKernelLibraryVersion) {
  const kernels::DeviceInfo device = *kernels::DescribeSku(
      sku.name, sku.cc_major, sku.cc_minor, sku.sm_count, sku.total_memory_bytes);
  std::vector<db::BestConfig> rows;
  for (int64_t c : cols) {
    const kernels::LaunchConfig config = *kernels::HeuristicConfig(
        kernels::Op::kSoftmax, kernels::DType::kFloat16, {4096, c}, device);
    db::BestConfig row;
    row.point = {0, "softmax", "float16", 4096, c};
    row.config = tuner::ConfigRecordOf(config);
    row.median_us = 10;
    row.env.kernel_version = kernel_version;
    row.updated_at = 1714564800;
    rows.push_back(row);
  }
  return *ConfigFileToJson(*MakeConfigFile(sku, rows, absl::FromUnixSeconds(1714564800)));
}

void Write(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

TEST(ShippedConfigsTest, ReadsEveryJsonFileByNameAndNamesTheBadOnes) {
  kt::testing::ScopedTempDir dir;
  Write(dir.File("h100.json"), FileOf(DescribedH100Sku(), {1024, 2048}));
  Write(dir.File("a100.json"), FileOf(A100Sku(), {1024}));
  Write(dir.File("broken.json"), "{\"format\": ");
  Write(dir.File("README.md"), "not a config file, and not read");
  const std::vector<ShippedConfigFile> files = ReadShippedConfigs(dir.path());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_THAT(files[0].path, HasSubstr("a100.json"));
  EXPECT_THAT(files[1].path, HasSubstr("broken.json"));
  EXPECT_THAT(files[2].path, HasSubstr("h100.json"));
  EXPECT_FALSE(files[1].contents.ok());

  const std::vector<std::string> problems = DescribeProblems(files);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("broken.json: not valid JSON: line 1, column 12"));
  EXPECT_THAT(problems[0], HasSubstr("none of it is used"));

  const ShippedEntries h100 = ShippedEntriesFor(files, DescribedH100Sku());
  EXPECT_THAT(h100.files, ElementsAre(dir.File("h100.json")));
  ASSERT_EQ(h100.entries.size(), 2u);
  EXPECT_EQ(h100.entries[0].origin, tuner::EntryOrigin::kShipped);
  EXPECT_EQ(h100.entries[0].shape, (kernels::Shape{4096, 1024, 1}));
  EXPECT_TRUE(h100.entries[0].current());
}

TEST(ShippedConfigsTest, StaleEntriesAreKeptForTheTableToCount) {
  kt::testing::ScopedTempDir dir;
  Write(dir.File("h100.json"), FileOf(DescribedH100Sku(), {1024}, "0.1.0+k1"));
  const ShippedEntries shipped =
      ShippedEntriesFor(ReadShippedConfigs(dir.path()), DescribedH100Sku());
  ASSERT_EQ(shipped.entries.size(), 1u);
  EXPECT_FALSE(shipped.entries[0].current());
  tuner::ConfigTable table;
  table.Add(shipped.entries[0]);
  EXPECT_EQ(table.stale().shipped, 1);
  EXPECT_TRUE(table.Entries().empty());
}

TEST(ShippedConfigsTest, AMissingDirectoryHasNoFiles) {
  EXPECT_TRUE(ReadShippedConfigs("/nonexistent/kerntune/configs").empty());
  EXPECT_TRUE(ReadShippedConfigs("").empty());
}

TEST(ShippedConfigsTest, ABuildTreeProgramUsesTheSourceTreesConfigs) {
  // This test runs from the build tree: no share/kerntune/configs beside it.
  EXPECT_TRUE(absl::EndsWith(DefaultShippedConfigDir(), "/deploy/configs"))
      << DefaultShippedConfigDir();
}

// The files the repository ships (deploy/configs) are whole and current:
// every entry parses, validates on its SKU and was measured with the
// running kernel library. After a change of kernels/version.h they must be
// tuned and exported again on the GPUs (deploy/configs/README.md).
TEST(ShippedConfigsTest, TheRepositorysFilesAreWholeAndCurrent) {
  const std::vector<ShippedConfigFile> files = ReadShippedConfigs(DefaultShippedConfigDir());
  EXPECT_THAT(DescribeProblems(files), ::testing::IsEmpty());
  std::vector<std::string> skus;
  for (const ShippedConfigFile& file : files) {
    ASSERT_TRUE(file.contents.ok()) << file.path << ": " << file.contents.status();
    skus.push_back(file.contents->sku.name);
    const ShippedEntries shipped = ShippedEntriesFor(files, file.contents->sku);
    ASSERT_FALSE(shipped.entries.empty()) << file.path;
    for (const tuner::TunedEntry& entry : shipped.entries) {
      EXPECT_TRUE(entry.current())
          << file.path << " was tuned with kernel library " << entry.kernel_version << ", not "
          << kernels::kKernelLibraryVersion << ": tune and export it again on that GPU";
    }
  }
  EXPECT_THAT(skus, ::testing::UnorderedElementsAre("NVIDIA H100 80GB HBM3", "NVIDIA H200"));
}

}  // namespace
}  // namespace kt::proto
