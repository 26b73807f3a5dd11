// How a Run's tensor references reach client memory: CUDA IPC allocations
// opened once per handle and cached (registrations and one-off references
// share them, since CUDA opens a handle once per process), and the
// resolver a Run uses over them and the caller's registrations.
#ifndef KERNTUNE_SERVER_CLIENT_TENSORS_H_
#define KERNTUNE_SERVER_CLIENT_TENSORS_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/op_args.h"
#include "server/backend.h"
#include "server/buffer_registry.h"
#include "server/client_memory.h"
#include "server/ipc_cache.h"
#include "server/peer_credentials.h"
#include "server/run_request.h"

namespace kt::server {

// FailedPrecondition for `what` over TCP: buffers and CUDA IPC belong to
// processes, known from the Unix socket's peer credentials.
absl::Status NeedsUnixSocket(absl::string_view what);

// OK when `caller` may make the daemon open client memory for `what`: it
// came over the Unix socket (else NeedsUnixSocket) and the socket's policy
// let it pass memory references (else PermissionDenied saying why).
absl::Status MayOpenClientMemory(const std::optional<PeerProcess>& caller,
                                 absl::string_view what);

// Writes a backend's private copy `copy` of an output (view.bytes, laid
// out as in client memory) to the client host memory of its view. A
// strided output or residual goes row by row: the gaps between its rows
// are other tensors' elements (k and v beside q in a fused qkv tensor,
// which another Run may be normalizing at the same time) and are never
// written. DataLoss when the client's memory went away under the copy.
absl::Status WriteOutputToClientHost(const RunRequest& run, kernels::Operand operand,
                                     const char* copy);

class CudaIpcMemoryCache {
 public:
  // The backend opens the handles; a mapping unused for `idle` closes; at
  // most `max_mappings` are open at once.
  CudaIpcMemoryCache(Backend& backend, absl::Duration idle, int max_mappings)
      : backend_(backend), idle_(idle), memory_(static_cast<size_t>(max_mappings)) {}

  // The allocation of `handle` on the daemon's device `device_ordinal`,
  // opened on first use. InvalidArgument when the handle's allocation is on
  // another device.
  absl::StatusOr<std::shared_ptr<const ClientMemory>> Open(const std::string& handle,
                                                           int device_ordinal,
                                                           const PeerProcess& caller);
  // Closes idle mappings and those of exited processes; returns how many.
  int Evict(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive);
  // Drops every mapping of device `device_ordinal` (it failed); returns how
  // many.
  int EvictDevice(int device_ordinal);
  void Clear() { memory_.Clear(); }
  size_t size() const { return memory_.size(); }
  // Mappings of CUDA device `device_ordinal`.
  int64_t size_on(int device_ordinal) const;

 private:
  Backend& backend_;
  const absl::Duration idle_;
  IpcCache<const ClientMemory> memory_;
};

// Resolves one Run's references for its caller: the caller's own
// registrations (each looked up, its lease renewed and the Run counted once
// per Run, however many of its tensors it holds), and CUDA IPC handles.
class ClientTensorResolver final : public TensorResolver {
 public:
  ClientTensorResolver(BufferRegistry& registry, CudaIpcMemoryCache& cuda_ipc,
                       const std::optional<PeerProcess>& caller)
      : registry_(registry), cuda_ipc_(cuda_ipc), caller_(caller) {}

  absl::StatusOr<Opened> RegisteredBuffer(const std::string& buffer_id) override;
  absl::StatusOr<Opened> CudaIpcAllocation(const std::string& handle,
                                           int device_ordinal) override;

 private:
  BufferRegistry& registry_;
  CudaIpcMemoryCache& cuda_ipc_;
  const std::optional<PeerProcess>& caller_;
  // The buffers this Run already looked up, by their ids in the request
  // being resolved (a few at most: one per operand).
  absl::InlinedVector<std::pair<absl::string_view, Opened>, kernels::kOperandCount> used_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CLIENT_TENSORS_H_
