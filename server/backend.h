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
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/device_identity.h"
#include "kernels/device_info.h"
#include "kernels/op_args.h"
#include "server/client_memory.h"
#include "server/config_cache.h"
#include "server/peer_credentials.h"
#include "server/run_request.h"
#include "server/run_result.h"
#include "server/run_stream.h"
#include "tuner/config_lookup.h"

namespace kt::server {

// A device as GetStatus describes it, with its health and counters.
struct BackendDevice {
  kernels::DeviceInfo info;
  kernels::DeviceIdentity identity;  // empty strings when unknown
  std::string failure;               // empty while it serves
  const ConfigCache* config_cache = nullptr;
  int64_t runs = 0;
  int64_t runs_in_flight = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "gpu" or "cpu".
  virtual std::string name() const = 0;
  // What this backend means for the configs, for the start line and
  // GetStatus; empty when nothing needs saying.
  virtual std::string note() const { return ""; }

  // Runs go to one of device_count() places (the CPU backend is one): the
  // service gives each its own workers, so a busy device holds only its own.
  virtual int device_count() const { return 1; }
  // Where a validated, resolved request runs (an index below
  // device_count()), or why nowhere: tensors on two devices or on one the
  // request does not name (InvalidArgument), a device that failed
  // (Unavailable).
  virtual absl::StatusOr<int> Route(const RunRequest& request) { return 0; }
  // The device's name in logs and metrics: its CUDA ordinal, "cpu".
  virtual std::string device_label(int device_index) const { return "cpu"; }
  // Runs it there. Thread-safe.
  virtual absl::StatusOr<RunResult> Execute(int device_index, const RunRequest& request) = 0;

  // The config cache of the device `device` names (a UUID or ordinal, as
  // RunRequest.device; empty = the first), null when this backend launches
  // no configs; InvalidArgument for a device it does not serve.
  virtual absl::StatusOr<const ConfigCache*> ConfigCacheFor(absl::string_view device) const {
    return nullptr;
  }
  // The devices served (empty on the CPU).
  virtual std::vector<BackendDevice> devices() const { return {}; }
  // Ordinals of the devices that failed: the service releases their
  // registrations and mappings.
  virtual std::vector<int> failed_devices() const { return {}; }
  // Kernel-time counters of every device, brought up to date first.
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
  // A stream of device `device_index` (of `priority`) whose Runs return before their
  // kernels end (run_stream.h), or null when this backend runs Runs
  // synchronously only. Can fail (null) when the device cannot make one.
  virtual std::unique_ptr<RunStream> OpenRunStream(int device_index, RunPriority priority) {
    return nullptr;
  }
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_BACKEND_H_
