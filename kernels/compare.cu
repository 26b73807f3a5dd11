// On-device comparison of kernel outputs with their references (verify.h):
// checking a 2^28-element output costs one pass, not a copy to the host.
// Also the device side of Upload's strided rows (RepeatRowsOnDevice).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/row_common.cuh"
#include "kernels/verify.h"

namespace kt::kernels {
namespace {

// RowLayout::Offset on the device: where row `row` starts.
__device__ __forceinline__ int64_t RowOffset(const RowLayout& layout, int64_t row) {
  return layout.group_rows > 0 ? (row / layout.group_rows) * layout.group_stride +
                                     (row % layout.group_rows) * layout.stride
                               : row * layout.stride;
}

// Element i of n checked values, in a buffer laid out as `rows`.
__device__ __forceinline__ int64_t CheckedIndex(const CheckedRows& rows, int64_t i) {
  return RowOffset(rows.layout, i / rows.cols) + i % rows.cols;
}

// LayerNormInputs with the pointers typed.
template <typename T>
struct TypedLayerNormInputs {
  const T* x;
  const T* gamma;
  const float* mean;
  const float* inv_std;
  int64_t cols;
  RowLayout x_layout;  // stride 0: contiguous
};

template <typename T>
__global__ void CompareKernel(const T* __restrict__ out, const float* __restrict__ ref, int64_t n,
                              double rtol, double atol, TypedLayerNormInputs<T> layer_norm,
                              CheckedRows rows, unsigned long long* bad_count,
                              unsigned long long* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float got = internal::ToFloat(out[CheckedIndex(rows, i)]);
    // A reference beyond the output dtype's range must come out as the
    // infinity it rounds to (float16 overflows at 65520).
    const float rounded = internal::ToFloat(internal::FromFloat<T>(ref[i]));
    const float want = isinf(rounded) ? rounded : ref[i];
    bool ok;
    if (isnan(want)) {
      ok = isnan(got);
    } else if (isinf(want)) {
      ok = got == want;
    } else {
      double slack = 0;
      if (layer_norm.x != nullptr) {
        const int64_t row = i / layer_norm.cols;
        const int64_t col = i % layer_norm.cols;
        const double gamma =
            layer_norm.gamma != nullptr ? internal::ToFloat(layer_norm.gamma[col]) : 1.0;
        const int64_t x_at =
            layer_norm.x_layout.stride > 0 ? RowOffset(layer_norm.x_layout, row) + col : i;
        slack = kLayerNormRoundings * 0x1p-24 *
                (fabs(internal::ToFloat(layer_norm.x[x_at])) + fabs(layer_norm.mean[row])) *
                layer_norm.inv_std[row] * fabs(gamma);
        if (!isfinite(slack)) slack = 0;  // a pathological row: the fixed tolerance only
      }
      ok = isfinite(got) && fabs(static_cast<double>(got) - want) <=
                                atol + rtol * fabs(static_cast<double>(want)) + slack;
    }
    if (!ok) {
      atomicAdd(bad_count, 1ull);
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

// RanksWithin over n values of T bits (T: the format's width).
template <typename T>
__global__ void CompareRanksKernel(RankedFormat format, const T* __restrict__ out,
                                   const T* __restrict__ ref, int64_t n, int64_t steps,
                                   CheckedRows rows, unsigned long long* bad_count,
                                   unsigned long long* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    if (!RanksWithin(format, out[CheckedIndex(rows, i)], ref[i], steps)) {
      atomicAdd(bad_count, 1ull);
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

// Rows [stored_rows, rows) from rows r % stored_rows, in place.
template <typename T>
__global__ void RepeatRowsKernel(T* data, CheckedRows rows_at, int64_t stored_rows, int64_t rows) {
  const int64_t cols = rows_at.cols;
  const int64_t n = (rows - stored_rows) * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t row = stored_rows + i / cols;
    const int64_t col = i % cols;
    data[RowOffset(rows_at.layout, row) + col] =
        data[RowOffset(rows_at.layout, row % stored_rows) + col];
  }
}

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

constexpr int kThreads = 256;

// Grid-stride blocks for n elements.
unsigned GridFor(int64_t n) {
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  return static_cast<unsigned>(std::max<int64_t>(blocks, 1));
}

// Runs `launch(bad_count, first_bad)` on fresh counters and reads them back.
template <typename Launch>
absl::StatusOr<DeviceCompareResult> CountOnDevice(cudaStream_t stream, Launch launch) {
  absl::StatusOr<DeviceBuffer> counters = DeviceBuffer::Allocate(2 * sizeof(unsigned long long));
  if (!counters.ok()) return counters.status();
  auto* bad = static_cast<unsigned long long*>(counters->data());
  const unsigned long long init[2] = {0ull, ~0ull};
  if (absl::Status s = CudaStatus(
          cudaMemcpyAsync(bad, init, sizeof(init), cudaMemcpyHostToDevice, stream), "memcpy");
      !s.ok()) {
    return s;
  }
  launch(bad, bad + 1);
  if (absl::Status s = CudaStatus(cudaPeekAtLastError(), "compare kernel"); !s.ok()) return s;
  unsigned long long result[2];
  if (absl::Status s = CudaStatus(
          cudaMemcpyAsync(result, bad, sizeof(result), cudaMemcpyDeviceToHost, stream), "memcpy");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "compare sync"); !s.ok()) {
    return s;
  }
  DeviceCompareResult r;
  r.bad = static_cast<int64_t>(result[0]);
  r.first_bad = r.bad > 0 ? static_cast<int64_t>(result[1]) : -1;
  return r;
}

// n contiguous elements, when no layout is given.
CheckedRows RowsOrContiguous(const CheckedRows* rows, int64_t n) {
  if (rows != nullptr) return *rows;
  const int64_t cols = std::max<int64_t>(n, 1);
  return CheckedRows{cols, RowLayout{cols, 0, 0}};
}

}  // namespace

absl::StatusOr<DeviceCompareResult> CompareOnDevice(DType dtype, const void* out, const float* ref,
                                                    int64_t n, Tolerance tolerance,
                                                    cudaStream_t stream,
                                                    const LayerNormInputs* layer_norm,
                                                    const CheckedRows* rows) {
  const CheckedRows rows_at = RowsOrContiguous(rows, n);
  // Launches the comparison with `out` (and LayerNorm's inputs) as T.
  const auto compare = [&](auto typed_zero, unsigned long long* bad, unsigned long long* first) {
    using T = decltype(typed_zero);
    TypedLayerNormInputs<T> typed{nullptr, nullptr, nullptr, nullptr, 1, RowLayout{0, 0, 0}};
    if (layer_norm != nullptr) {
      typed = {static_cast<const T*>(layer_norm->x),
               static_cast<const T*>(layer_norm->gamma),
               layer_norm->mean,
               layer_norm->inv_std,
               layer_norm->cols,
               layer_norm->x_layout};
    }
    CompareKernel<<<GridFor(n), kThreads, 0, stream>>>(static_cast<const T*>(out), ref, n,
                                                       tolerance.rtol, tolerance.atol, typed,
                                                       rows_at, bad, first);
  };
  return CountOnDevice(stream, [&](unsigned long long* bad, unsigned long long* first) {
    switch (dtype) {
      case DType::kFloat32:
        compare(float{}, bad, first);
        break;
      case DType::kFloat16:
        compare(__half{}, bad, first);
        break;
      case DType::kBFloat16:
        compare(__nv_bfloat16{}, bad, first);
        break;
    }
  });
}

absl::StatusOr<DeviceCompareResult> CompareRanksOnDevice(RankedFormat format, const void* out,
                                                         const void* ref, int64_t n, int64_t steps,
                                                         cudaStream_t stream,
                                                         const CheckedRows* rows) {
  const CheckedRows rows_at = RowsOrContiguous(rows, n);
  const auto compare = [&](auto typed_zero, unsigned long long* bad, unsigned long long* first) {
    using T = decltype(typed_zero);
    CompareRanksKernel<<<GridFor(n), kThreads, 0, stream>>>(format, static_cast<const T*>(out),
                                                            static_cast<const T*>(ref), n, steps,
                                                            rows_at, bad, first);
  };
  return CountOnDevice(stream, [&](unsigned long long* bad, unsigned long long* first) {
    switch (format) {
      case RankedFormat::kFloat32:
        compare(uint32_t{}, bad, first);
        break;
      case RankedFormat::kFloat16:
      case RankedFormat::kBFloat16:
        compare(uint16_t{}, bad, first);
        break;
      case RankedFormat::kFp8E4M3:
      case RankedFormat::kFp8E5M2:
      case RankedFormat::kInt8:
        compare(uint8_t{}, bad, first);
        break;
    }
  });
}

absl::Status RepeatRowsOnDevice(void* data, const CheckedRows& rows_at, int64_t stored_rows,
                                int64_t rows, size_t element_bytes, cudaStream_t stream) {
  if (stored_rows < 1 || rows <= stored_rows) return absl::OkStatus();
  const unsigned grid = GridFor((rows - stored_rows) * rows_at.cols);
  switch (element_bytes) {
    case 1:
      RepeatRowsKernel<<<grid, kThreads, 0, stream>>>(static_cast<uint8_t*>(data), rows_at,
                                                      stored_rows, rows);
      break;
    case 2:
      RepeatRowsKernel<<<grid, kThreads, 0, stream>>>(static_cast<uint16_t*>(data), rows_at,
                                                      stored_rows, rows);
      break;
    case 4:
      RepeatRowsKernel<<<grid, kThreads, 0, stream>>>(static_cast<uint32_t*>(data), rows_at,
                                                      stored_rows, rows);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("element_bytes=", element_bytes, " must be 1, 2 or 4"));
  }
  return CudaStatus(cudaPeekAtLastError(), "repeat rows");
}

}  // namespace kt::kernels
