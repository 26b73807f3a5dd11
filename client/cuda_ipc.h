// The GPU side of a kerntuned client: device memory and events that the
// daemon can open from its own process (cudaMalloc + cudaIpcGetMemHandle,
// cudaEventInterprocess + cudaIpcGetEventHandle). Kept apart from
// daemon_client.h so that the client library itself needs no CUDA.
#ifndef KERNTUNE_CLIENT_CUDA_IPC_H_
#define KERNTUNE_CLIENT_CUDA_IPC_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kt::client {

// CUDA devices this process can see (0 when there is no driver or device).
int VisibleCudaDevices();

// The UUID of this process's CUDA device `device`, as nvidia-smi prints it
// ("GPU-..."), for DaemonClient::DeviceOrdinalFor.
absl::StatusOr<std::string> CudaDeviceUuid(int device);

// One cudaMalloc allocation and the IPC handle of its base. Move-only;
// freed on destruction (after the daemon unregistered or stopped using it:
// freeing memory another process still maps is the client's bug).
class IpcAllocation {
 public:
  static absl::StatusOr<IpcAllocation> Allocate(int device, size_t bytes);

  IpcAllocation() = default;
  IpcAllocation(IpcAllocation&& other) noexcept;
  IpcAllocation& operator=(IpcAllocation&& other) noexcept;
  IpcAllocation(const IpcAllocation&) = delete;
  IpcAllocation& operator=(const IpcAllocation&) = delete;
  ~IpcAllocation();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int device() const { return device_; }
  // The 64 bytes of the cudaIpcMemHandle_t, as the proto carries them.
  const std::string& handle() const { return handle_; }

  // Copies and fills at a byte offset (bounds checked), complete on the
  // device when they return, so the daemon may read at once.
  absl::Status CopyIn(size_t offset, const void* host, size_t bytes) const;
  absl::Status CopyOut(size_t offset, void* host, size_t bytes) const;
  absl::Status Fill(size_t offset, uint8_t value, size_t bytes) const;

 private:
  void Reset();

  void* data_ = nullptr;
  size_t size_ = 0;
  int device_ = 0;
  std::string handle_;
};

// An event created with cudaEventInterprocess | cudaEventDisableTiming (what
// RunRequest.wait_event / done_event need) and its IPC handle. Move-only.
class IpcEvent {
 public:
  static absl::StatusOr<IpcEvent> Create(int device);

  IpcEvent() = default;
  IpcEvent(IpcEvent&& other) noexcept;
  IpcEvent& operator=(IpcEvent&& other) noexcept;
  IpcEvent(const IpcEvent&) = delete;
  IpcEvent& operator=(const IpcEvent&) = delete;
  ~IpcEvent();

  cudaEvent_t event() const { return event_; }
  int device() const { return device_; }
  // The 64 bytes of the cudaIpcEventHandle_t.
  const std::string& handle() const { return handle_; }

 private:
  void Reset();

  cudaEvent_t event_ = nullptr;
  int device_ = 0;
  std::string handle_;
};

// InternalError naming `what` and the CUDA error; OK for cudaSuccess.
absl::Status CudaStatus(cudaError_t error, const char* what);

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_CUDA_IPC_H_
