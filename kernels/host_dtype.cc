// Bit-exact host conversions for the 16-bit storage dtypes (host_dtype.h).
#include "kernels/host_dtype.h"

#include <cmath>
#include <cstring>

namespace kt::kernels {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // Inf or NaN (keep NaN quiet and non-zero)
    return sign | (abs_bits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  }
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: Inf
  if (abs_bits < 0x38800000u) {
    // Subnormal half (or zero): value / 2^-24, rounded to nearest even.
    const float scaled = BitsToFloat(abs_bits) * 16777216.0f;  // 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to even.
  const uint32_t rebased = abs_bits - ((127u - 15u) << 23);
  const uint32_t round = 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + round) >> 13);
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) / 16777216.0f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16Bits(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  }
  const uint32_t round = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round) >> 16);
}

float BFloat16BitsToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

double LoadAsDouble(DType dtype, const void* data, int64_t index) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(data)[index];
    case DType::kFloat16:
      return HalfBitsToFloat(static_cast<const uint16_t*>(data)[index]);
    case DType::kBFloat16:
      return BFloat16BitsToFloat(static_cast<const uint16_t*>(data)[index]);
  }
  return NAN;
}

void StoreFromDouble(DType dtype, void* data, int64_t index, double value) {
  const float narrowed = static_cast<float>(value);
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(data)[index] = narrowed;
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(data)[index] = FloatToHalfBits(narrowed);
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(data)[index] = FloatToBFloat16Bits(narrowed);
      return;
  }
}

}  // namespace kt::kernels
