// Host conversions for float16 / bfloat16: exhaustive round trips and
// round-to-nearest-even at the edges; the quantized codes (fp8 e4m3fn,
// fp8 e5m2, int8): every code, every midpoint between neighbours, the
// saturation and NaN rules, and CUDA's own host conversion as an oracle.
#include "kernels/host_dtype.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

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

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kQuietNaN = std::numeric_limits<double>::quiet_NaN();

TEST(HostDTypeTest, EveryQuantCodeRoundTrips) {
  for (QuantDType dtype : kAllQuantDTypes) {
    for (int code = 0; code < 256; ++code) {
      SCOPED_TRACE(::testing::Message() << QuantDTypeName(dtype) << " code " << code);
      const double value = DecodeQuant(dtype, static_cast<uint8_t>(code));
      if (std::isnan(value)) {
        EXPECT_TRUE(std::isnan(DecodeQuant(dtype, EncodeQuant(dtype, value))));
      } else if (std::isinf(value)) {
        // e5m2's infinities: SATFINITE never writes them.
        EXPECT_EQ(dtype, QuantDType::kFp8E5M2);
        EXPECT_EQ(EncodeQuant(dtype, value), value > 0 ? 0x7b : 0xfb);
      } else {
        EXPECT_EQ(EncodeQuant(dtype, value), code);
      }
    }
  }
}

TEST(HostDTypeTest, QuantCodesOfKnownValues) {
  const struct {
    QuantDType dtype;
    double value;
    uint8_t code;
  } cases[] = {
      {QuantDType::kFp8E4M3, 448.0, 0x7e},   {QuantDType::kFp8E4M3, -448.0, 0xfe},
      {QuantDType::kFp8E4M3, 1.0, 0x38},     {QuantDType::kFp8E4M3, -2.0, 0xc0},
      {QuantDType::kFp8E4M3, 0x1p-6, 0x08},  {QuantDType::kFp8E4M3, 0x1p-9, 0x01},
      {QuantDType::kFp8E4M3, 0.0, 0x00},     {QuantDType::kFp8E4M3, -0.0, 0x80},
      {QuantDType::kFp8E5M2, 57344.0, 0x7b}, {QuantDType::kFp8E5M2, 1.0, 0x3c},
      {QuantDType::kFp8E5M2, -1.5, 0xbe},    {QuantDType::kFp8E5M2, 0x1p-14, 0x04},
      {QuantDType::kFp8E5M2, 0x1p-16, 0x01}, {QuantDType::kInt8, 127.0, 0x7f},
      {QuantDType::kInt8, -128.0, 0x80},     {QuantDType::kInt8, -1.0, 0xff},
      {QuantDType::kInt8, 3.0, 0x03},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(EncodeQuant(c.dtype, c.value), c.code) << QuantDTypeName(c.dtype) << " " << c.value;
    EXPECT_EQ(DecodeQuant(c.dtype, c.code), c.value) << QuantDTypeName(c.dtype);
  }
  EXPECT_EQ(DecodeQuant(QuantDType::kFp8E4M3, 0x7e), QuantMax(QuantDType::kFp8E4M3));
  EXPECT_EQ(DecodeQuant(QuantDType::kFp8E5M2, 0x7b), QuantMax(QuantDType::kFp8E5M2));
  EXPECT_EQ(DecodeQuant(QuantDType::kInt8, 0x7f), QuantMax(QuantDType::kInt8));
}

// The finite values of a code type in increasing order, with their codes
// (+0 only: -0 is the same value).
std::vector<std::pair<double, uint8_t>> FiniteValuesInOrder(QuantDType dtype) {
  std::vector<std::pair<double, uint8_t>> values;
  for (int code = 0; code < 256; ++code) {
    const double v = DecodeQuant(dtype, static_cast<uint8_t>(code));
    if (std::isfinite(v) && !(v == 0 && std::signbit(v))) {
      values.push_back({v, static_cast<uint8_t>(code)});
    }
  }
  std::sort(values.begin(), values.end());
  return values;
}

// Between every two neighbouring values: the midpoint goes to the one whose
// code is even (its last mantissa bit, or int8's value, 0), a hair either
// side to the nearer one.
TEST(HostDTypeTest, QuantCodesRoundToNearestEvenBetweenEveryNeighbour) {
  for (QuantDType dtype : kAllQuantDTypes) {
    const std::vector<std::pair<double, uint8_t>> values = FiniteValuesInOrder(dtype);
    ASSERT_EQ(values.size(), dtype == QuantDType::kFp8E4M3   ? 253u
                             : dtype == QuantDType::kFp8E5M2 ? 247u
                                                             : 256u);
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const auto [a, code_a] = values[i];
      const auto [b, code_b] = values[i + 1];
      const double mid = (a + b) / 2;
      SCOPED_TRACE(::testing::Message()
                   << QuantDTypeName(dtype) << " between " << a << " and " << b);
      // Values, not codes: a negative value rounded to zero is -0.
      const auto rounded = [&](double v) { return DecodeQuant(dtype, EncodeQuant(dtype, v)); };
      EXPECT_EQ(rounded(mid), code_a % 2 == 0 ? a : b);
      EXPECT_EQ(rounded(std::nextafter(mid, a)), a);
      EXPECT_EQ(rounded(std::nextafter(mid, b)), b);
    }
  }
  // Hand-checked ties: e4m3 steps by 1/8 at 1, e5m2 by 1/4, int8 by 1.
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, 1.0625), 0x38);   // 1 | 1.125: to 1
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, 1.1875), 0x3a);   // 1.125 | 1.25: to 1.25
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, 0x1p-10), 0x00);  // 0 | smallest subnormal
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E5M2, 1.125), 0x3c);
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E5M2, 1.375), 0x3e);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, 0.5), 0);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, 1.5), 2);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, 2.5), 2);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, -2.5), 0xfe);
}

TEST(HostDTypeTest, QuantCodesSaturateAndKeepNaN) {
  for (double big : {464.0, 1e30, kInfinity}) {
    EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, big), 0x7e) << big;
    EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, -big), 0xfe) << big;
  }
  for (double big : {61440.0, 1e30, kInfinity}) {
    EXPECT_EQ(EncodeQuant(QuantDType::kFp8E5M2, big), 0x7b) << big;
    EXPECT_EQ(EncodeQuant(QuantDType::kFp8E5M2, -big), 0xfb) << big;
  }
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, 127.5), 127);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, 1e300), 127);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, kInfinity), 127);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, -128.5), 0x80);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, -kInfinity), 0x80);
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, kQuietNaN), 0x7f);
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E4M3, -kQuietNaN), 0xff);
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E5M2, kQuietNaN), 0x7e);
  EXPECT_EQ(EncodeQuant(QuantDType::kFp8E5M2, -kQuietNaN), 0xfe);
  EXPECT_EQ(EncodeQuant(QuantDType::kInt8, kQuietNaN), 0);
  EXPECT_TRUE(std::isnan(DecodeQuant(QuantDType::kFp8E4M3, 0xff)));
  EXPECT_TRUE(std::isnan(DecodeQuant(QuantDType::kFp8E5M2, 0x7d)));
  EXPECT_EQ(DecodeQuant(QuantDType::kFp8E5M2, 0xfc), -kInfinity);
}

// CUDA's host conversion (what __nv_cvt_float_to_fp8 does on the device)
// agrees on every float code point's neighbourhood and on random doubles.
TEST(HostDTypeTest, Fp8CodesMatchCudasConversion) {
  const std::pair<QuantDType, __nv_fp8_interpretation_t> formats[] = {
      {QuantDType::kFp8E4M3, __NV_E4M3}, {QuantDType::kFp8E5M2, __NV_E5M2}};
  std::mt19937_64 rng(44);
  std::uniform_int_distribution<int> exponent(-24, 20);
  std::uniform_real_distribution<double> significand(-2.0, 2.0);
  std::vector<double> values = {0.0,       -0.0,       kInfinity, -kInfinity,
                                kQuietNaN, -kQuietNaN, 1e300,     -1e-300};
  for (int i = 0; i < 200000; ++i) values.push_back(std::ldexp(significand(rng), exponent(rng)));
  for (const auto& [dtype, interpretation] : formats) {
    for (const auto& [v, code] : FiniteValuesInOrder(dtype)) {
      for (double near : {v, std::nextafter(v, -kInfinity), std::nextafter(v, kInfinity)})
        values.push_back(near);
    }
    for (double v : values) {
      const uint8_t cuda = __nv_cvt_double_to_fp8(v, __NV_SATFINITE, interpretation);
      ASSERT_EQ(EncodeQuant(dtype, v), cuda) << QuantDTypeName(dtype) << " " << v;
    }
  }
}

}  // namespace
}  // namespace kt::kernels
