// --gpu_wait names: every mode round-trips, anything else names the flag.
#include "server/gpu_wait.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kt::server {
namespace {

TEST(GpuWaitTest, EveryModeRoundTripsThroughItsName) {
  for (GpuWait wait : {GpuWait::kSpin, GpuWait::kYield, GpuWait::kHybrid, GpuWait::kBlock}) {
    absl::StatusOr<GpuWait> parsed = ParseGpuWait(GpuWaitName(wait));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, wait);
  }
}

TEST(GpuWaitTest, AnUnknownNameIsInvalidAndNamesTheFlag) {
  absl::StatusOr<GpuWait> parsed = ParseGpuWait("sleepy");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(parsed.status().message()),
              ::testing::HasSubstr("--gpu_wait=sleepy"));
  EXPECT_FALSE(ParseGpuWait("").ok());
  EXPECT_FALSE(ParseGpuWait("Spin").ok());
}

}  // namespace
}  // namespace kt::server
