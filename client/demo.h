// `kerntune demo`: runs one op on random data on this machine — on the GPU
// with the heuristic config when there is one, else on the CPU reference
// backend — checks the result and prints what ran and how fast.
#ifndef KERNTUNE_CLIENT_DEMO_H_
#define KERNTUNE_CLIENT_DEMO_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/types.h"

namespace kt::client {

struct DemoOptions {
  kernels::Op op = kernels::Op::kSoftmax;
  kernels::DType dtype = kernels::DType::kFloat16;
  kernels::Shape shape{4096, 1024};
  bool force_cpu = false;
};

absl::Status RunDemo(const DemoOptions& options);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_DEMO_H_
