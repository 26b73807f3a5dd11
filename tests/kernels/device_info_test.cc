// Described devices: the H100 constants and SKU descriptions by architecture.
#include "kernels/device_info.h"

#include "gtest/gtest.h"

namespace kt::kernels {
namespace {

TEST(DeviceInfoTest, DescribeSkuMatchesTheDescribedH100) {
  const DeviceInfo h100 = DescribedH100();
  absl::StatusOr<DeviceInfo> described =
      DescribeSku(h100.name, 9, 0, h100.sm_count, h100.total_memory_bytes);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_FALSE(described->has_gpu());
  EXPECT_EQ(described->max_smem_per_block_optin, h100.max_smem_per_block_optin);
  EXPECT_EQ(described->max_smem_per_sm, h100.max_smem_per_sm);
  EXPECT_EQ(described->max_threads_per_sm, h100.max_threads_per_sm);
  EXPECT_EQ(described->sm_count, 132);
}

TEST(DeviceInfoTest, DescribeSkuKnowsAmpereAndRefusesTheUnknown) {
  absl::StatusOr<DeviceInfo> a100 = DescribeSku("NVIDIA A100-SXM4-80GB", 8, 0, 108, 85899345920);
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->max_smem_per_block_optin, 163 * 1024);
  absl::StatusOr<DeviceInfo> unknown = DescribeSku("Future GPU", 42, 0, 10, 1);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(DescribeSku("H100", 9, 0, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kt::kernels
