// Backend: where a validated Run executes. The CPU fallback runs the fp64
// reference; the GPU backend launches the tuned kernel.
#ifndef KERNTUNE_SERVER_BACKEND_H_
#define KERNTUNE_SERVER_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/device_identity.h"
#include "kernels/device_info.h"
#include "kernels/op_args.h"
#include "server/client_memory.h"
#include "server/config_cache.h"
#include "server/peer_credentials.h"
#include "server/run_request.h"
#include "tuner/config_lookup.h"

namespace kt::server {

// Where a GPU backend spent one Execute, in microseconds (RunTiming's GPU
// stages); all zero on the CPU.
struct ExecuteTiming {
  double lane_wait_us = 0;
  double launch_us = 0;
  // Parts of launch_us.
  double lookup_us = 0;
  double timing_events_us = 0;
  double kernel_launch_us = 0;
  double gpu_wait_us = 0;
};

struct RunResult {
  // The bytes of the outputs returned inline, by kernels::Operand
  // (inline_output()): rows * cols * inner elements of the request's dtype
  // for the output, rows float32 values for each per-row output (inv_std
  // holds RMSNorm's 1/rms, row_scale ReduceScale's scales). Empty for
  // outputs written to client memory.
  std::array<std::string, kernels::kOperandCount> inline_outputs;
  // Empty on the CPU backend (no launch config there).
  std::optional<tuner::ConfigChoice> config;
  double kernel_time_us = 0;
  ExecuteTiming timing;
  // Answered once queued (done_event), before the GPU finished.
  bool answered_early = false;

  std::string& inline_output(kernels::Operand operand) {
    return inline_outputs[static_cast<size_t>(operand)];
  }
};

// A device as GetStatus describes it.
struct BackendDevice {
  kernels::DeviceInfo info;
  kernels::DeviceIdentity identity;  // empty strings when unknown
};

// Counters since the backend was created (GetStatus.stats).
struct BackendStats {
  int64_t kernels_timed = 0;
  double kernel_us = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "gpu" or "cpu".
  virtual std::string name() const = 0;
  // What this backend means for the configs, for the start line and
  // GetStatus; empty when nothing needs saying.
  virtual std::string note() const { return ""; }
  // Runs a request that ValidateRunRequest accepted. Thread-safe.
  virtual absl::StatusOr<RunResult> Execute(const RunRequest& request) = 0;
  // The config cache when this backend launches configs, else null.
  virtual const ConfigCache* config_cache() const { return nullptr; }
  // The devices this backend can see (empty on the CPU).
  virtual std::vector<BackendDevice> devices() const { return {}; }
  // Kernel-time counters, brought up to date first. Thread-safe.
  virtual BackendStats stats() { return {}; }

  // CUDA IPC: opening a memory handle (an allocation's base) of device
  // `device_ordinal` with its real size. The CPU backend cannot.
  virtual bool supports_cuda_ipc() const { return false; }
  virtual absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle, int device_ordinal) {
    return absl::FailedPreconditionError(
        "this daemon runs the CPU backend, which cannot open CUDA IPC handles; send "
        "host_shm buffers or inline tensors");
  }
  // Called every second: close cached IPC events of exited clients and
  // release memory that finished asynchronous Runs held.
  virtual void Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) {}
  virtual int64_t open_ipc_events() const { return 0; }
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_BACKEND_H_
