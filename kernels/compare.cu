// On-device comparison of kernel outputs with float references (verify.h):
// checking a 2^28-element output costs one pass, not a copy to the host.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/row_common.cuh"
#include "kernels/verify.h"

namespace kt::kernels {
namespace {

// LayerNormInputs with the pointers typed.
template <typename T>
struct TypedLayerNormInputs {
  const T* x;
  const T* gamma;
  const float* mean;
  const float* inv_std;
  int64_t cols;
};

template <typename T>
__global__ void CompareKernel(const T* __restrict__ out, const float* __restrict__ ref,
                              int64_t n, double rtol, double atol,
                              TypedLayerNormInputs<T> layer_norm,
                              unsigned long long* bad_count,
                              unsigned long long* first_bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float got = internal::ToFloat(out[i]);
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
        const double gamma =
            layer_norm.gamma != nullptr ? internal::ToFloat(layer_norm.gamma[i % layer_norm.cols])
                                        : 1.0;
        slack = kLayerNormRoundings * 0x1p-24 *
                (fabs(internal::ToFloat(layer_norm.x[i])) + fabs(layer_norm.mean[row])) *
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

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

absl::StatusOr<DeviceCompareResult> CompareOnDevice(DType dtype, const void* out,
                                                    const float* ref, int64_t n,
                                                    Tolerance tolerance, cudaStream_t stream,
                                                    const LayerNormInputs* layer_norm) {
  absl::StatusOr<DeviceBuffer> counters = DeviceBuffer::Allocate(2 * sizeof(unsigned long long));
  if (!counters.ok()) return counters.status();
  auto* bad = static_cast<unsigned long long*>(counters->data());
  const unsigned long long init[2] = {0ull, ~0ull};
  if (absl::Status s = CudaStatus(
          cudaMemcpyAsync(bad, init, sizeof(init), cudaMemcpyHostToDevice, stream), "memcpy");
      !s.ok()) {
    return s;
  }
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(blocks, 1));
  // Launches the comparison with `out` (and LayerNorm's inputs) as T.
  const auto compare = [&](auto typed_zero) {
    using T = decltype(typed_zero);
    TypedLayerNormInputs<T> typed{nullptr, nullptr, nullptr, nullptr, 1};
    if (layer_norm != nullptr) {
      typed = {static_cast<const T*>(layer_norm->x), static_cast<const T*>(layer_norm->gamma),
               layer_norm->mean, layer_norm->inv_std, layer_norm->cols};
    }
    CompareKernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(out), ref, n,
                                                 tolerance.rtol, tolerance.atol, typed, bad,
                                                 bad + 1);
  };
  switch (dtype) {
    case DType::kFloat32:
      compare(float{});
      break;
    case DType::kFloat16:
      compare(__half{});
      break;
    case DType::kBFloat16:
      compare(__nv_bfloat16{});
      break;
  }
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

}  // namespace kt::kernels
