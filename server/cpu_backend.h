// The CPU fallback backend: kernels::RunReference on host buffers, so the
// daemon, its clients and their tests run on machines without a GPU.
#ifndef KERNTUNE_SERVER_CPU_BACKEND_H_
#define KERNTUNE_SERVER_CPU_BACKEND_H_

#include "server/backend.h"

namespace kt::server {

class CpuBackend final : public Backend {
 public:
  // `threads` for the reference (0 = hardware concurrency).
  explicit CpuBackend(int threads = 0) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  // y in the storage dtype: the fp64 reference rounded once.
  absl::StatusOr<RunResult> Execute(const RunRequest& request) override;

 private:
  int threads_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CPU_BACKEND_H_
