// IpcAllocation and IpcEvent (cuda_ipc.h). Host code over the CUDA runtime.
#include "client/cuda_ipc.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/device_identity.h"

namespace kt::client {
namespace {

// Makes `device` current for a scope and restores the previous one, so the
// helpers never change the caller's current device behind its back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

absl::Status CheckRange(size_t offset, size_t bytes, size_t size) {
  if (offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + bytes,
                                              ") are outside the allocation of ", size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // reset the last (non-sticky) error so later calls start clean
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

int VisibleCudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::string> CudaDeviceUuid(int device) {
  absl::StatusOr<kernels::DeviceIdentity> identity = kernels::GetDeviceIdentity(device);
  if (!identity.ok()) return identity.status();
  return identity->uuid;
}

absl::StatusOr<IpcAllocation> IpcAllocation::Allocate(int device, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("IPC allocation size must be > 0");
  DeviceScope scope(device);
  if (!scope.status().ok()) return scope.status();
  IpcAllocation allocation;
  allocation.device_ = device;
  if (absl::Status s = CudaStatus(cudaMalloc(&allocation.data_, bytes),
                                  absl::StrCat("cudaMalloc(", bytes, ")").c_str());
      !s.ok()) {
    return s;
  }
  allocation.size_ = bytes;
  cudaIpcMemHandle_t handle;
  if (absl::Status s = CudaStatus(cudaIpcGetMemHandle(&handle, allocation.data_),
                                  "cudaIpcGetMemHandle");
      !s.ok()) {
    return s;
  }
  allocation.handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return allocation;
}

IpcAllocation::IpcAllocation(IpcAllocation&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      device_(other.device_),
      handle_(std::move(other.handle_)) {}

IpcAllocation& IpcAllocation::operator=(IpcAllocation&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = other.device_;
    handle_ = std::move(other.handle_);
  }
  return *this;
}

IpcAllocation::~IpcAllocation() { Reset(); }

void IpcAllocation::Reset() {
  if (data_ != nullptr) {
    DeviceScope scope(device_);
    cudaFree(data_);
  }
  data_ = nullptr;
  size_ = 0;
  handle_.clear();
}

absl::Status IpcAllocation::CopyIn(size_t offset, const void* host, size_t bytes) const {
  if (absl::Status s = CheckRange(offset, bytes, size_); !s.ok()) return s;
  DeviceScope scope(device_);
  if (!scope.status().ok()) return scope.status();
  if (absl::Status s = CudaStatus(cudaMemcpy(static_cast<uint8_t*>(data_) + offset, host, bytes,
                                             cudaMemcpyHostToDevice),
                                  "cudaMemcpy to the device");
      !s.ok()) {
    return s;
  }
  // From pageable memory cudaMemcpy may return before the DMA lands; the
  // daemon reads from another process, with no stream order to save us.
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

absl::Status IpcAllocation::CopyOut(size_t offset, void* host, size_t bytes) const {
  if (absl::Status s = CheckRange(offset, bytes, size_); !s.ok()) return s;
  // On the allocation's device: another current device would get a context
  // of its own just for this copy.
  DeviceScope scope(device_);
  if (!scope.status().ok()) return scope.status();
  return CudaStatus(
      cudaMemcpy(host, static_cast<const uint8_t*>(data_) + offset, bytes, cudaMemcpyDeviceToHost),
      "cudaMemcpy from the device");
}

absl::Status IpcAllocation::Fill(size_t offset, uint8_t value, size_t bytes) const {
  if (absl::Status s = CheckRange(offset, bytes, size_); !s.ok()) return s;
  DeviceScope scope(device_);
  if (!scope.status().ok()) return scope.status();
  if (absl::Status s = CudaStatus(cudaMemset(static_cast<uint8_t*>(data_) + offset, value, bytes),
                                  "cudaMemset");
      !s.ok()) {
    return s;
  }
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // as in CopyIn
}

absl::StatusOr<IpcEvent> IpcEvent::Create(int device) {
  DeviceScope scope(device);
  if (!scope.status().ok()) return scope.status();
  IpcEvent event;
  event.device_ = device;
  if (absl::Status s = CudaStatus(
          cudaEventCreateWithFlags(&event.event_, cudaEventInterprocess | cudaEventDisableTiming),
          "cudaEventCreateWithFlags(interprocess)");
      !s.ok()) {
    return s;
  }
  cudaIpcEventHandle_t handle;
  if (absl::Status s = CudaStatus(cudaIpcGetEventHandle(&handle, event.event_),
                                  "cudaIpcGetEventHandle");
      !s.ok()) {
    return s;
  }
  event.handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return event;
}

IpcEvent::IpcEvent(IpcEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)),
      device_(other.device_),
      handle_(std::move(other.handle_)) {}

IpcEvent& IpcEvent::operator=(IpcEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
    handle_ = std::move(other.handle_);
  }
  return *this;
}

IpcEvent::~IpcEvent() { Reset(); }

void IpcEvent::Reset() {
  if (event_ != nullptr) {
    DeviceScope scope(device_);
    cudaEventDestroy(event_);
  }
  event_ = nullptr;
  handle_.clear();
}

}  // namespace kt::client
