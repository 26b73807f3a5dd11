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

// LayerNormInputs with the pointers typed; x null: no slack.
template <typename T>
struct TypedLayerNormInputs {
  const T* x;
  const T* gamma;
  const float* mean;
  const float* inv_std;
  int64_t cols;
  RowLayout x_layout;  // stride 0: contiguous

  // LayerNormSlack for element i of the dense (rows, cols) reference.
  __device__ double Slack(int64_t i) const {
    if (x == nullptr) return 0;
    const int64_t row = i / cols;
    const int64_t col = i % cols;
    const double g = gamma != nullptr ? internal::ToFloat(gamma[col]) : 1.0;
    const int64_t x_at = x_layout.stride > 0 ? RowOffset(x_layout, row) + col : i;
    return LayerNormSlack(internal::ToFloat(x[x_at]), mean[row], inv_std[row], g);
  }
};

template <typename T>
TypedLayerNormInputs<T> Typed(const LayerNormInputs* layer_norm) {
  if (layer_norm == nullptr) return {nullptr, nullptr, nullptr, nullptr, 1, RowLayout{0, 0, 0}};
  return {static_cast<const T*>(layer_norm->x), static_cast<const T*>(layer_norm->gamma),
          layer_norm->mean,  layer_norm->inv_std, layer_norm->cols, layer_norm->x_layout};
}

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
      ok = isfinite(got) && fabs(static_cast<double>(got) - want) <=
                                atol + rtol * fabs(static_cast<double>(want)) +
                                    layer_norm.Slack(i);
    }
    if (!ok) {
      atomicAdd(bad_count, 1ull);
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

// CodeWithin over n one-byte codes of rows `cols` long; T: the storage
// dtype of LayerNorm's inputs.
template <typename T>
__global__ void CompareCodesKernel(RankedFormat format, const uint8_t* __restrict__ out,
                                   const uint8_t* __restrict__ ref,
                                   const float* __restrict__ y_ref, int64_t n, int64_t cols,
                                   int64_t steps, CodeScales scales, double rtol, double atol,
                                   TypedLayerNormInputs<T> layer_norm, CheckedRows rows,
                                   unsigned long long* bad_count, unsigned long long* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float scale = scales.Of(i / cols, i % cols);
    if (!CodeWithin(format, out[CheckedIndex(rows, i)], ref[i], steps, scale, y_ref[i], rtol,
                    atol, layer_norm.Slack(i))) {
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

// f(T{}) with T the storage type of `dtype`.
template <typename F>
void WithStorageType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(float{});
      break;
    case DType::kFloat16:
      f(__half{});
      break;
    case DType::kBFloat16:
      f(__nv_bfloat16{});
      break;
  }
}

}  // namespace

absl::StatusOr<DeviceCompareResult> CompareOnDevice(DType dtype, const void* out, const float* ref,
                                                    int64_t n, Tolerance tolerance,
                                                    cudaStream_t stream,
                                                    const LayerNormInputs* layer_norm,
                                                    const CheckedRows* rows) {
  const CheckedRows rows_at = RowsOrContiguous(rows, n);
  return CountOnDevice(stream, [&](unsigned long long* bad, unsigned long long* first) {
    // `out` and LayerNorm's inputs as T.
    WithStorageType(dtype, [&](auto typed_zero) {
      using T = decltype(typed_zero);
      CompareKernel<<<GridFor(n), kThreads, 0, stream>>>(
          static_cast<const T*>(out), ref, n, tolerance.rtol, tolerance.atol,
          Typed<T>(layer_norm), rows_at, bad, first);
    });
  });
}

absl::StatusOr<DeviceCompareResult> CompareCodesOnDevice(
    RankedFormat format, DType dtype, const void* out, const void* code_ref, const float* y_ref,
    int64_t n, int64_t cols, const CodeScales& scales, Tolerance tolerance, cudaStream_t stream,
    const LayerNormInputs* layer_norm, const CheckedRows* rows) {
  const CheckedRows rows_at = RowsOrContiguous(rows, n);
  return CountOnDevice(stream, [&](unsigned long long* bad, unsigned long long* first) {
    WithStorageType(dtype, [&](auto typed_zero) {
      using T = decltype(typed_zero);
      CompareCodesKernel<<<GridFor(n), kThreads, 0, stream>>>(
          format, static_cast<const uint8_t*>(out), static_cast<const uint8_t*>(code_ref), y_ref,
          n, std::max<int64_t>(cols, 1), kCodeSteps, scales, tolerance.rtol, tolerance.atol,
          Typed<T>(layer_norm), rows_at, bad, first);
    });
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
