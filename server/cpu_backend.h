// The CPU fallback backend: kernels::RunReference on host buffers, so the
// daemon, its clients and their tests run on machines without a GPU.
#ifndef KERNTUNE_SERVER_CPU_BACKEND_H_
#define KERNTUNE_SERVER_CPU_BACKEND_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/backend.h"

namespace kt::server {

class CpuBackend final : public Backend {
 public:
  // `threads` for the reference (0 = hardware concurrency).
  explicit CpuBackend(int threads = 0) : threads_(threads) {}
  std::string name() const override { return "cpu"; }
  // Users of a GPU node should not wonder why their tuned configs are
  // not used.
  std::string note() const override {
    return "the fp64 reference on the CPU; GPU tuned configs, local or shipped, are not used";
  }
  // y in the storage dtype: the fp64 reference rounded once (the *_quant
  // ops: its codes, and its dynamic scales in row_scale); the add ops'
  // residual written back to client memory. A static scale is used as
  // given: the daemon refuses a readable one that is not finite and > 0
  // (run_request.h); the reference's division by it decides the rest.
  // One place to run: device_index is always 0.
  absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) override;
  // kernels_timed and kernel_us count the reference's runs and wall time.
  BackendStats stats() override;

 private:
  int threads_;
  absl::Mutex mu_;
  BackendStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CPU_BACKEND_H_
