// Bit-exact host conversions for the 16-bit storage dtypes and the one-byte
// quantized codes (host_dtype.h).
#include "kernels/host_dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

// Round half to even of a finite double, exactly (v - floor(v) is exact in
// double; from 2^52 on every double is an integer).
double RoundHalfEven(double v) {
  const double floor = std::floor(v);
  const double fraction = v - floor;
  if (fraction > 0.5) return floor + 1;
  if (fraction < 0.5) return floor;
  return std::fmod(floor, 2.0) == 0 ? floor : floor + 1;
}

// An OCP fp8 format: a sign bit, the exponent biased by `bias`, then
// `mantissa_bits` mantissa bits; subnormals at the lowest exponent.
struct Fp8Format {
  int mantissa_bits;
  int bias;
  uint8_t max_code;  // the largest finite magnitude's code
  uint8_t nan_code;  // what a NaN becomes (CUDA's and PyTorch's choice)
  bool IsNaN(uint8_t magnitude) const {
    // e4m3fn: only S.1111.111; e5m2: the IEEE way, exponent 31 and a mantissa.
    return mantissa_bits == 3 ? magnitude == 0x7f : magnitude > 0x7c;
  }
};
// 0x7e = 1.75 * 2^8 = 448; 0x7b = 1.75 * 2^15 = 57344. e5m2's NaN is
// float16's quiet NaN cut to its top byte, as cuda_fp8.h and PyTorch write it.
constexpr Fp8Format kE4M3{3, 7, 0x7e, 0x7f};
constexpr Fp8Format kE5M2{2, 15, 0x7b, 0x7e};

double DecodeFp8(const Fp8Format& f, uint8_t code) {
  const uint8_t magnitude = code & 0x7f;
  const double sign = code & 0x80 ? -1.0 : 1.0;
  if (f.IsNaN(magnitude)) return std::numeric_limits<double>::quiet_NaN();
  if (f.mantissa_bits == 2 && magnitude == 0x7c) {
    return sign * std::numeric_limits<double>::infinity();
  }
  const int exponent_field = magnitude >> f.mantissa_bits;
  const int mantissa = magnitude & ((1 << f.mantissa_bits) - 1);
  const int e = std::max(exponent_field, 1) - f.bias;
  const double significand = (exponent_field > 0 ? (1 << f.mantissa_bits) : 0) + mantissa;
  return sign * std::ldexp(significand, e - f.mantissa_bits);
}

uint8_t EncodeFp8(const Fp8Format& f, double value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value)) return sign | f.nan_code;
  const double magnitude = std::fabs(value);
  // SATFINITE: beyond the largest finite value (+-inf too) is that value.
  if (magnitude >= DecodeFp8(f, f.max_code)) return sign | f.max_code;
  if (magnitude == 0) return sign;
  // The quantum of magnitude's binade (subnormals share the lowest normal
  // binade's); the exponent from frexp is exact where log2 may not be.
  int exponent = 0;
  std::frexp(magnitude, &exponent);
  const int min_exponent = 1 - f.bias;
  const int e = std::max(exponent - 1, min_exponent);
  const double steps = RoundHalfEven(std::ldexp(magnitude, f.mantissa_bits - e));
  // steps is in [0, 2^(m+1)]: its top value carries into the next binade,
  // which the sum below does by itself; subnormals (e = min_exponent,
  // steps < 2^m) come out as the bare mantissa.
  const int code =
      ((e + f.bias) << f.mantissa_bits) + static_cast<int>(steps) - (1 << f.mantissa_bits);
  return sign | static_cast<uint8_t>(std::min<int>(code, f.max_code));
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

uint8_t EncodeQuant(QuantDType dtype, double value) {
  switch (dtype) {
    case QuantDType::kFp8E4M3:
      return EncodeFp8(kE4M3, value);
    case QuantDType::kFp8E5M2:
      return EncodeFp8(kE5M2, value);
    case QuantDType::kInt8: {
      if (std::isnan(value)) return 0;
      // Clamped before the conversion: an int conversion of an out-of-range
      // double is undefined.
      const double clamped =
          std::clamp(RoundHalfEven(std::clamp(value, -129.0, 128.0)), -128.0, 127.0);
      return static_cast<uint8_t>(static_cast<int8_t>(clamped));
    }
  }
  return 0;
}

double DecodeQuant(QuantDType dtype, uint8_t code) {
  switch (dtype) {
    case QuantDType::kFp8E4M3:
      return DecodeFp8(kE4M3, code);
    case QuantDType::kFp8E5M2:
      return DecodeFp8(kE5M2, code);
    case QuantDType::kInt8:
      return static_cast<int8_t>(code);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace kt::kernels
