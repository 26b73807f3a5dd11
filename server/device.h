// One GPU as the daemon serves it: what the GPU backend routes Runs to. The
// real one is DeviceExecutor (device_executor.h); tests stand in fakes, so
// routing, isolation and failures are tested without a GPU.
#ifndef KERNTUNE_SERVER_DEVICE_H_
#define KERNTUNE_SERVER_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/device_identity.h"
#include "kernels/device_info.h"
#include "server/client_memory.h"
#include "server/config_cache.h"
#include "server/peer_credentials.h"
#include "server/run_request.h"
#include "server/run_result.h"
#include "server/run_stream.h"

namespace kt::server {

class Device {
 public:
  virtual ~Device() = default;
  virtual const kernels::DeviceInfo& info() const = 0;
  // Empty strings when the runtime could not say.
  virtual const kernels::DeviceIdentity& identity() const = 0;
  // The configs of this device's SKU; each device owns its cache, so
  // lookups on different devices share no lock.
  virtual const ConfigCache& config_cache() const = 0;

  // Runs a validated, resolved request whose device tensors are on this
  // device. Thread-safe. A failure that leaves the device unusable (a
  // sticky CUDA error) sets failure() and is returned as Unavailable.
  virtual absl::StatusOr<RunResult> Execute(const RunRequest& request) = 0;
  // Opens a client's allocation on this device from its cudaIpcMemHandle_t
  // bytes, with its real size.
  virtual absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenCudaIpcMemory(
      const std::string& handle) = 0;
  // Every second: closes events of exited clients, reads finished kernel
  // times, releases memory that answered Runs held.
  virtual void Housekeep(absl::Time now,
                         absl::FunctionRef<bool(const PeerProcess&)> is_alive) = 0;
  virtual BackendStats stats() = 0;
  virtual int64_t open_ipc_events() const = 0;
  // Why the device can no longer run anything, or empty while it can. Once
  // set, it stays until the daemon restarts.
  virtual std::string failure() const = 0;
  // A stream whose Runs return before their kernels end (run_stream.h),
  // or null when this device runs Runs synchronously only.
  virtual std::unique_ptr<RunStream> OpenRunStream(RunPriority priority) { return nullptr; }
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_DEVICE_H_
