// Client processes' CUDA events (ipc_events.h).
#include "server/ipc_events.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kt::server {

IpcEvent::~IpcEvent() {
  // May run on any thread (the reaper, a handler): set the device first.
  if (cudaSetDevice(device_) == cudaSuccess) cudaEventDestroy(event_);
}

absl::StatusOr<std::shared_ptr<IpcEvent>> IpcEventCache::Open(
    const std::string& handle, const std::optional<PeerProcess>& caller) {
  if (!caller.has_value()) {
    return absl::FailedPreconditionError("CUDA IPC events need the Unix socket");
  }
  return events_.GetOrOpen(
      handle, *caller, absl::Now(), [&]() -> absl::StatusOr<std::shared_ptr<IpcEvent>> {
        cudaIpcEventHandle_t ipc{};
        std::memcpy(&ipc, handle.data(), sizeof(ipc));
        cudaEvent_t event = nullptr;
        const cudaError_t opened = cudaIpcOpenEventHandle(&event, ipc);
        if (opened != cudaSuccess) {
          cudaGetLastError();  // not sticky; clear it for the next call on this thread
          return absl::InvalidArgumentError(absl::StrCat(
              "cudaIpcOpenEventHandle refused the event handle: ", cudaGetErrorName(opened),
              "; create the event with cudaEventInterprocess | cudaEventDisableTiming"));
        }
        return std::make_shared<IpcEvent>(event, device_);
      });
}

void IpcEventCache::Evict(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  events_.Evict(now, absl::Seconds(60), is_alive);
}

}  // namespace kt::server
