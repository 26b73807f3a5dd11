// Device UUID and PCI bus id (device_identity.h).
#include "kernels/device_identity.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kt::kernels {

std::string FormatGpuUuid(const uint8_t (&bytes)[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    // 8-4-4-4-12 hex digits: dashes before bytes 4, 6, 8 and 10.
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xf];
  }
  return out;
}

namespace {

absl::StatusOr<DeviceIdentity> QueryIdentity(int ordinal) {
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("cudaGetDeviceProperties(", ordinal,
                                               "): ", cudaGetErrorString(err)));
  }
  DeviceIdentity identity;
  uint8_t bytes[16];
  static_assert(sizeof(prop.uuid.bytes) == sizeof(bytes));
  std::memcpy(bytes, prop.uuid.bytes, sizeof(bytes));
  identity.uuid = FormatGpuUuid(bytes);
  char bus_id[32] = {};  // "dddd:bb:dd.f" and room to spare
  err = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("cudaDeviceGetPCIBusId(", ordinal,
                                               "): ", cudaGetErrorString(err)));
  }
  identity.pci_bus_id = bus_id;
  return identity;
}

}  // namespace

absl::StatusOr<DeviceIdentity> GetDeviceIdentity(int ordinal) {
  // cudaGetDeviceProperties reads every attribute: ask once per device.
  static std::mutex mu;
  static auto* cache = new std::map<int, DeviceIdentity>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(ordinal); it != cache->end()) return it->second;
  absl::StatusOr<DeviceIdentity> identity = QueryIdentity(ordinal);
  if (identity.ok()) cache->emplace(ordinal, *identity);
  return identity;
}

}  // namespace kt::kernels
