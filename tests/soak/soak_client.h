// One kt_soak client process: until SIGTERM, random valid Runs (inline,
// registered shared memory, and with --cuda registered and one-off CUDA IPC
// allocations; over gRPC and through the submission queue) each checked
// against the fp64 reference, malformed Runs and registrations that must
// get their error code, and registrations and unregistrations. It reports
// on `report_fd` (soak_counts.h). The driver kills it with SIGKILL at any
// moment.
#ifndef KERNTUNE_TESTS_SOAK_SOAK_CLIENT_H_
#define KERNTUNE_TESTS_SOAK_SOAK_CLIENT_H_

#include <cstdint>
#include <string>

namespace kt::soak {

struct ClientOptions {
  std::string target;  // "unix:PATH"
  uint64_t seed = 1;
  // CUDA IPC memory on this process's `cuda_device` beside shared memory.
  bool cuda = false;
  int cuda_device = 0;
  int report_fd = 1;
};

// Exit code: 0 after SIGTERM, 1 when it could not start (no daemon, no GPU).
int RunClient(const ClientOptions& options);

}  // namespace kt::soak

#endif  // KERNTUNE_TESTS_SOAK_SOAK_CLIENT_H_
