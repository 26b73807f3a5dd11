// CUDA events of client processes (RunRequest.wait_event / done_event),
// opened with cudaIpcOpenEventHandle once per handle and cached by its
// bytes, like one-off IPC memory (ipc_cache.h): dropped after a minute
// unused or once every process that sent it has exited.
#ifndef KERNTUNE_SERVER_IPC_EVENTS_H_
#define KERNTUNE_SERVER_IPC_EVENTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/ipc_cache.h"
#include "server/peer_credentials.h"

namespace kt::server {

// One opened event, destroyed with its last reference.
class IpcEvent {
 public:
  IpcEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  ~IpcEvent();
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
  int device_;
};

class IpcEventCache {
 public:
  // Events are opened on CUDA device `device` (the caller's thread has set
  // it).
  explicit IpcEventCache(int device) : device_(device) {}

  // The event of `handle` (64 bytes, checked by validation), sent by
  // `caller`: FailedPrecondition without a caller (events need the Unix
  // socket), InvalidArgument when CUDA refuses the handle.
  absl::StatusOr<std::shared_ptr<IpcEvent>> Open(const std::string& handle,
                                                 const std::optional<PeerProcess>& caller);
  // Drops events idle for a minute or whose senders have all exited.
  void Evict(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive);
  int64_t size() const { return static_cast<int64_t>(events_.size()); }

 private:
  const int device_;
  IpcCache<IpcEvent> events_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_IPC_EVENTS_H_
