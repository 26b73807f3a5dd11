// Which physical GPU a CUDA ordinal names: the UUID nvidia-smi prints
// ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") and the PCI bus id. Ordinals
// depend on each process's CUDA_VISIBLE_DEVICES; these do not, so a client
// and the daemon agree on a device through them. Needs only the CUDA
// runtime (no kernels), so the client library can link it too.
#ifndef KERNTUNE_KERNELS_DEVICE_IDENTITY_H_
#define KERNTUNE_KERNELS_DEVICE_IDENTITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

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

// One visible device, as a selection sees it.
struct VisibleDevice {
  int ordinal = 0;
  std::string uuid;  // empty when unknown
};

// The devices a `--devices` value names, in the order named, without
// repeats: "all" (or empty) = every visible device; otherwise a comma list
// of CUDA ordinals ("0,1") and UUIDs ("GPU-5b7f...", a unique prefix of at
// least 8 characters after "GPU-" is enough, as nvidia-smi accepts).
// InvalidArgument naming the entry that matches no visible device, or more
// than one, and listing the visible ones (callers put the flag or field in
// front).
absl::StatusOr<std::vector<int>> SelectDevices(absl::string_view spec,
                                               const std::vector<VisibleDevice>& visible);

// Every device this process sees, with its UUID when the runtime gives it.
std::vector<VisibleDevice> VisibleDevices();

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_DEVICE_IDENTITY_H_
