// Values for end-to-end requests (see request_values.h).
#include "tests/server/request_values.h"

#include "kernels/host_dtype.h"

namespace kt::server::testing {

namespace pb = ::kerntune::v1;

kernels::DType ToKernels(pb::DType dtype) {
  switch (dtype) {
    case pb::DTYPE_FLOAT16:
      return kernels::DType::kFloat16;
    case pb::DTYPE_BFLOAT16:
      return kernels::DType::kBFloat16;
    default:
      return kernels::DType::kFloat32;
  }
}

kernels::Op ToKernels(pb::Op op) {
  switch (op) {
    case pb::OP_LOG_SOFTMAX:
      return kernels::Op::kLogSoftmax;
    case pb::OP_LAYER_NORM:
      return kernels::Op::kLayerNorm;
    case pb::OP_RMS_NORM:
      return kernels::Op::kRmsNorm;
    case pb::OP_REDUCE_SCALE:
      return kernels::Op::kReduceScale;
    case pb::OP_SCALED_MASKED_SOFTMAX:
      return kernels::Op::kScaledMaskedSoftmax;
    default:
      return kernels::Op::kSoftmax;
  }
}

std::string RandomTensor(kernels::DType dtype, int64_t n, std::mt19937_64& rng, double mean) {
  std::normal_distribution<double> normal(mean, 2.0);
  std::string bytes(n * kernels::DTypeSize(dtype), '\0');
  for (int64_t i = 0; i < n; ++i) kernels::StoreFromDouble(dtype, bytes.data(), i, normal(rng));
  return bytes;
}

}  // namespace kt::server::testing
