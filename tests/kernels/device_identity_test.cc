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

}  // namespace
}  // namespace kt::kernels
