// Values for end-to-end requests (see request_values.h).
#include "tests/server/request_values.h"

#include "kernels/host_dtype.h"
#include "proto/convert.h"

namespace kt::server::testing {

namespace pb = ::kerntune::v1;

// The shared proto conversions; the tests pass only valid enums.
kernels::DType ToKernels(pb::DType dtype) {
  return proto::DTypeFromProto(dtype, "dtype").value();
}

kernels::Op ToKernels(pb::Op op) { return proto::OpFromProto(op, "op").value(); }

kernels::QuantDType ToKernels(pb::QuantDType dtype) {
  return proto::QuantDTypeFromProto(dtype, "quant.dtype").value();
}

kernels::ScaleMode ToKernels(pb::ScaleMode mode) {
  return proto::ScaleModeFromProto(mode, "quant.scale_mode").value();
}

std::string RandomTensor(kernels::DType dtype, int64_t n, std::mt19937_64& rng, double mean) {
  std::normal_distribution<double> normal(mean, 2.0);
  std::string bytes(n * kernels::DTypeSize(dtype), '\0');
  for (int64_t i = 0; i < n; ++i) kernels::StoreFromDouble(dtype, bytes.data(), i, normal(rng));
  return bytes;
}

}  // namespace kt::server::testing
