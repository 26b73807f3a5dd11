// Which physical GPU a CUDA ordinal names: the UUID nvidia-smi prints
// ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") and the PCI bus id. Ordinals
// depend on each process's CUDA_VISIBLE_DEVICES; these do not, so a client
// and the daemon agree on a device through them. Needs only the CUDA
// runtime (no kernels), so the client library can link it too.
#ifndef KERNTUNE_KERNELS_DEVICE_IDENTITY_H_
#define KERNTUNE_KERNELS_DEVICE_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kt::kernels {

struct DeviceIdentity {
  std::string uuid;        // "GPU-...", lower-case hex as nvidia-smi -L prints it
  std::string pci_bus_id;  // "0000:1B:00.0" (cudaDeviceGetPCIBusId)
};

// nvidia-smi's form of a 16-byte device UUID (cudaDeviceProp::uuid):
// "GPU-" + 8-4-4-4-12 lower-case hex digits.
std::string FormatGpuUuid(const uint8_t (&bytes)[16]);

// The identity of CUDA device `ordinal` as this process numbers it, read
// once and cached. Unavailable when the runtime cannot describe it.
absl::StatusOr<DeviceIdentity> GetDeviceIdentity(int ordinal);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_DEVICE_IDENTITY_H_
