// Values for end-to-end requests, shared by the daemon's and the client's
// tests: proto enums in the kernel library's terms, and random tensors.
#ifndef KERNTUNE_TESTS_SERVER_REQUEST_VALUES_H_
#define KERNTUNE_TESTS_SERVER_REQUEST_VALUES_H_

#include <cstdint>
#include <random>
#include <string>

#include "kerntune/v1/kerntune.pb.h"
#include "kernels/types.h"

namespace kt::server::testing {

kernels::DType ToKernels(kerntune::v1::DType dtype);
kernels::Op ToKernels(kerntune::v1::Op op);
kernels::QuantDType ToKernels(kerntune::v1::QuantDType dtype);
kernels::ScaleMode ToKernels(kerntune::v1::ScaleMode mode);

// n normal(mean, 2) values stored in `dtype`, as raw bytes.
std::string RandomTensor(kernels::DType dtype, int64_t n, std::mt19937_64& rng, double mean);

}  // namespace kt::server::testing

#endif  // KERNTUNE_TESTS_SERVER_REQUEST_VALUES_H_
