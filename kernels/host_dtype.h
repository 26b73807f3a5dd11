// Host-side conversions between float/double and the 16-bit storage dtypes
// (IEEE binary16 and bfloat16), round-to-nearest-even, NaN and Inf kept.
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

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_HOST_DTYPE_H_
