// Host conversions for float16 / bfloat16: exhaustive round trips and
// round-to-nearest-even at the edges.
#include "kernels/host_dtype.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace kt::kernels {
namespace {

TEST(HostDTypeTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = HalfBitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(value)))) << bits;
      continue;
    }
    EXPECT_EQ(FloatToHalfBits(value), bits) << "half bits " << bits;
  }
}

TEST(HostDTypeTest, EveryBFloat16RoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = BFloat16BitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(value)))) << bits;
      continue;
    }
    EXPECT_EQ(FloatToBFloat16Bits(value), bits) << "bfloat16 bits " << bits;
  }
}

TEST(HostDTypeTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.0f + 0x1p-11f)), 1.0f);  // tie -> even
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfBitsToFloat(FloatToHalfBits(65520.0f))));  // rounds up
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(65519.0f)), 65504.0f);
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(0x1p-24f)), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(0x1p-26f)), 0.0f);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(-std::numeric_limits<float>::infinity()), 0xfc00);
}

TEST(HostDTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  const float big = BFloat16BitsToFloat(FloatToBFloat16Bits(1e30f));
  EXPECT_LE(std::fabs(big - 1e30f), 1e30f * 0x1p-9f);  // within half a bfloat16 step
}

TEST(HostDTypeTest, LoadStoreByDType) {
  uint16_t half[2];
  StoreFromDouble(DType::kFloat16, half, 1, 0.5);
  EXPECT_EQ(LoadAsDouble(DType::kFloat16, half, 1), 0.5);
  float f[1];
  StoreFromDouble(DType::kFloat32, f, 0, 1.0 / 3.0);
  EXPECT_EQ(LoadAsDouble(DType::kFloat32, f, 0), static_cast<double>(1.0f / 3.0f));
}

}  // namespace
}  // namespace kt::kernels
