// Host-side conversions between float/double and the 16-bit storage dtypes
// (IEEE binary16 and bfloat16), round-to-nearest-even, NaN and Inf kept; and
// the one-byte codes of the quantizing ops (fp8 e4m3fn, fp8 e5m2, int8).
// Used by the CPU reference, tests and benchmarks; no CUDA headers needed.
#ifndef KERNTUNE_KERNELS_HOST_DTYPE_H_
#define KERNTUNE_KERNELS_HOST_DTYPE_H_

#include <cstdint>

#include "kernels/types.h"

namespace kt::kernels {

uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);
uint16_t FloatToBFloat16Bits(float value);
float BFloat16BitsToFloat(uint16_t bits);

// Element `index` of a storage-dtype buffer, as double.
double LoadAsDouble(DType dtype, const void* data, int64_t index);
// Rounds `value` to the storage dtype (through float) and stores it.
void StoreFromDouble(DType dtype, void* data, int64_t index, double value);

// The code of `value` (QuantDType), rounded once from the exact value:
// round-to-nearest-even; beyond the largest finite code (+-QuantMax, and
// int8's -128) saturated to it, +-inf included (fp8: as
// __nv_cvt_float_to_fp8 with __NV_SATFINITE, PTX cvt.rn.satfinite); NaN
// gives the fp8 NaN code with NaN's sign (e4m3 0x7f / 0xff, e5m2 0x7e /
// 0xfe, as cuda_fp8.h's host conversion and PyTorch), int8 0.
uint8_t EncodeQuant(QuantDType dtype, double value);
// The value a code stands for (fp8 NaN codes: NaN; e5m2 0x7c / 0xfc: +-inf).
double DecodeQuant(QuantDType dtype, uint8_t code);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_HOST_DTYPE_H_
