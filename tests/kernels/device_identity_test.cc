// Device identity: the UUID in nvidia-smi's form (no GPU needed), and the
// runtime's answer for a device that does not exist.
#include "kernels/device_identity.h"

#include "gtest/gtest.h"
#include "kernels/device_info.h"

namespace kt::kernels {
namespace {

TEST(DeviceIdentityTest, FormatsTheUuidLikeNvidiaSmi) {
  const uint8_t bytes[16] = {0x5b, 0x7f, 0x6b, 0x8a, 0x01, 0x23, 0x45, 0x67,
                             0x89, 0xab, 0xcd, 0xef, 0x00, 0x10, 0xfe, 0xff};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-5b7f6b8a-0123-4567-89ab-cdef0010feff");
  const uint8_t zeros[16] = {};
  EXPECT_EQ(FormatGpuUuid(zeros), "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(FormatGpuUuid(bytes).size(), 40u);  // "GPU-" + 32 hex digits + 4 dashes
}

TEST(DeviceIdentityTest, ADeviceThatDoesNotExistIsUnavailable) {
  const int missing = CudaDeviceCount() + 7;
  EXPECT_EQ(GetDeviceIdentity(missing).status().code(), absl::StatusCode::kUnavailable);
}

const std::vector<VisibleDevice> kTwoGpus = {
    {0, "GPU-5b7f6b8a-0123-4567-89ab-cdef0010feff"},
    {1, "GPU-5b7f6b8a-aaaa-4567-89ab-cdef0010feff"},
};

TEST(SelectDevicesTest, AllOrNothingNamesEveryVisibleDevice) {
  EXPECT_EQ(SelectDevices("all", kTwoGpus).value(), (std::vector<int>{0, 1}));
  EXPECT_EQ(SelectDevices("", kTwoGpus).value(), (std::vector<int>{0, 1}));
  EXPECT_TRUE(SelectDevices("all", {}).value().empty());
}

TEST(SelectDevicesTest, OrdinalsAndUuidsInTheOrderNamedWithoutRepeats) {
  EXPECT_EQ(SelectDevices("1", kTwoGpus).value(), std::vector<int>{1});
  EXPECT_EQ(SelectDevices("1,0,1", kTwoGpus).value(), (std::vector<int>{1, 0}));
  EXPECT_EQ(SelectDevices("GPU-5b7f6b8a-aaaa-4567-89ab-cdef0010feff", kTwoGpus).value(),
            std::vector<int>{1});
  // A unique prefix, in either case, as nvidia-smi takes it.
  EXPECT_EQ(SelectDevices(" gpu-5B7F6B8A-01 , 1", kTwoGpus).value(), (std::vector<int>{0, 1}));
}

TEST(SelectDevicesTest, AnEntryThatNamesNoDeviceOrSeveralIsRefusedWithTheVisibleOnes) {
  for (const char* spec : {"2", "-1", "GPU-00000000", "GPU-5b7f6b8", "GPU-5b7f6b8c", "gpu0",
                           "GPU-5b7f"}) {
    const absl::Status status = SelectDevices(spec, kTwoGpus).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(status.message().find("GPU-5b7f6b8a-0123"), std::string::npos)
        << spec << ": " << status.message();
  }
  EXPECT_EQ(SelectDevices("0,,1", kTwoGpus).status().code(), absl::StatusCode::kInvalidArgument);
  // Both GPUs start with "GPU-5b7f6b8a": ambiguous, and says so.
  EXPECT_NE(SelectDevices("GPU-5b7f6b8a", kTwoGpus).status().message().find("more than one"),
            std::string::npos);
}

}  // namespace
}  // namespace kt::kernels
