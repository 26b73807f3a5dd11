// Device UUID and PCI bus id (device_identity.h).
#include "kernels/device_identity.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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

namespace {

// The shortest UUID prefix accepted after "GPU-": 8 hex digits, 2^32 values.
constexpr size_t kMinUuidPrefix = 8;

std::string DescribeVisible(const std::vector<VisibleDevice>& visible) {
  if (visible.empty()) return "no CUDA device is visible";
  return absl::StrCat("devices: ", absl::StrJoin(visible, ", ", [](std::string* out,
                                                                    const VisibleDevice& d) {
                        absl::StrAppend(out, d.ordinal, d.uuid.empty() ? "" : " (",
                                        d.uuid, d.uuid.empty() ? "" : ")");
                      }));
}

absl::StatusOr<int> SelectOne(absl::string_view entry, const std::vector<VisibleDevice>& visible) {
  int ordinal = 0;
  if (absl::SimpleAtoi(entry, &ordinal)) {
    for (const VisibleDevice& device : visible) {
      if (device.ordinal == ordinal) return ordinal;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("no CUDA device ", entry, "; ", DescribeVisible(visible)));
  }
  const std::string uuid = absl::AsciiStrToLower(entry);
  if (!absl::StartsWith(uuid, "gpu-") || uuid.size() < 4 + kMinUuidPrefix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", entry, "' is neither a CUDA ordinal nor a GPU UUID (\"GPU-\" and at "
        "least ", kMinUuidPrefix, " hex digits, as nvidia-smi -L prints); ",
        DescribeVisible(visible)));
  }
  const VisibleDevice* found = nullptr;
  for (const VisibleDevice& device : visible) {
    if (!absl::StartsWith(absl::AsciiStrToLower(device.uuid), uuid)) continue;
    if (found != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", entry, "' matches more than one GPU; ", DescribeVisible(visible)));
    }
    found = &device;
  }
  if (found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no GPU ", entry, "; ", DescribeVisible(visible)));
  }
  return found->ordinal;
}

}  // namespace

absl::StatusOr<std::vector<int>> SelectDevices(absl::string_view spec,
                                               const std::vector<VisibleDevice>& visible) {
  spec = absl::StripAsciiWhitespace(spec);
  std::vector<int> selected;
  if (spec.empty() || spec == "all") {
    for (const VisibleDevice& device : visible) selected.push_back(device.ordinal);
    return selected;
  }
  for (absl::string_view entry : absl::StrSplit(spec, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", spec, "' has an empty entry"));
    }
    absl::StatusOr<int> ordinal = SelectOne(entry, visible);
    if (!ordinal.ok()) return ordinal.status();
    if (std::find(selected.begin(), selected.end(), *ordinal) == selected.end()) {
      selected.push_back(*ordinal);
    }
  }
  return selected;
}

std::vector<VisibleDevice> VisibleDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::vector<VisibleDevice> visible;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    absl::StatusOr<DeviceIdentity> identity = GetDeviceIdentity(ordinal);
    visible.push_back({ordinal, identity.ok() ? identity->uuid : ""});
  }
  return visible;
}

}  // namespace kt::kernels
