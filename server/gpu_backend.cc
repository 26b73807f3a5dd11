// GPU backend (see gpu_backend.h).
#include "server/gpu_backend.h"

#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/device_identity.h"
#include "server/device_executor.h"

namespace kt::server {

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(
    const std::vector<int>& ordinals, int lanes, const ConfigCacheFactory& make_cache,
    std::vector<Unusable>* unusable) {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::string> reasons;
  for (int ordinal : ordinals) {
    absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor =
        DeviceExecutor::Create(ordinal, lanes, make_cache);
    if (!executor.ok()) {
      unusable->push_back({ordinal, std::string(executor.status().message())});
      reasons.push_back(absl::StrCat("CUDA device ", ordinal, ": ", executor.status().message()));
      continue;
    }
    devices.push_back(*std::move(executor));
  }
  if (devices.empty()) {
    return absl::FailedPreconditionError(
        reasons.empty() ? "no CUDA device selected" : absl::StrJoin(reasons, "; "));
  }
  return std::make_unique<GpuBackend>(std::move(devices));
}

namespace {

std::vector<kernels::VisibleDevice> Selectable(
    const std::vector<std::unique_ptr<Device>>& devices) {
  std::vector<kernels::VisibleDevice> served;
  for (const std::unique_ptr<Device>& device : devices) {
    served.push_back({device->info().ordinal, device->identity().uuid});
  }
  return served;
}

}  // namespace

GpuBackend::GpuBackend(std::vector<std::unique_ptr<Device>> devices)
    : devices_(std::move(devices)),
      selectable_(Selectable(devices_)),
      load_(new Load[devices_.size()]) {}

int GpuBackend::IndexOf(int ordinal) const {
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (devices_[i]->info().ordinal == ordinal) return static_cast<int>(i);
  }
  return -1;
}

std::string GpuBackend::Describe(int index) const {
  const Device& device = *devices_[index];
  const std::string& uuid = device.identity().uuid;
  return absl::StrCat("CUDA device ", device.info().ordinal, uuid.empty() ? "" : " (", uuid,
                      uuid.empty() ? "" : ")");
}

absl::Status GpuBackend::Unavailable(int index) const {
  return absl::UnavailableError(absl::StrCat(
      Describe(index), " is unavailable since it failed: ", devices_[index]->failure(),
      "; the daemon's other devices keep serving (kerntune status lists them)"));
}

absl::StatusOr<int> GpuBackend::Find(absl::string_view selector, absl::string_view field) const {
  absl::StatusOr<std::vector<int>> named = kernels::SelectDevices(selector, selectable_);
  if (!named.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", selector, ": ", named.status().message(),
                     " (those this daemon serves)"));
  }
  if (named->size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, "=", selector, " names ",
                                                   named->size(), " devices; name one"));
  }
  return IndexOf(named->front());
}

absl::StatusOr<int> GpuBackend::LeastLoaded() {
  const int count = device_count();
  const int first = static_cast<int>(next_tie_.fetch_add(1, std::memory_order_relaxed) % count);
  int best = -1;
  int64_t best_load = 0;
  for (int k = 0; k < count; ++k) {
    const int index = (first + k) % count;
    if (!devices_[index]->failure().empty()) continue;
    const int64_t load = load_[index].in_flight.load(std::memory_order_relaxed);
    if (best < 0 || load < best_load) {
      best = index;
      best_load = load;
    }
  }
  if (best < 0) {
    return absl::UnavailableError(
        "every device of this daemon has failed (kerntune status says why); restart it");
  }
  return best;
}

absl::StatusOr<int> GpuBackend::Route(const RunRequest& request) {
  int index = -1;
  for (const std::shared_ptr<const ClientMemory>& memory : request.memory) {
    if (memory->space() != MemorySpace::kDevice) continue;
    const int on = IndexOf(memory->device());
    if (on < 0) return absl::InternalError("a Run's tensor is on a device not served");
    if (index >= 0 && on != index) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the Run's tensors live on two devices, ", Describe(index), " and ", Describe(on),
          "; a Run runs on one device and kerntuned never copies between devices: put every "
          "tensor of the Run on one GPU"));
    }
    index = on;
  }
  if (index >= 0) {
    if (!request.device.empty()) {
      absl::StatusOr<int> named = Find(request.device, "device");
      if (!named.ok()) return named.status();
      if (*named != index) {
        return absl::InvalidArgumentError(
            absl::StrCat("device=", request.device, " names ", Describe(*named),
                         ", but the Run's tensors live on ", Describe(index),
                         "; leave device empty for Runs on device tensors"));
      }
    }
  } else if (!request.device.empty()) {
    absl::StatusOr<int> named = Find(request.device, "device");
    if (!named.ok()) return named.status();
    index = *named;
  } else {
    return LeastLoaded();
  }
  if (!devices_[index]->failure().empty()) return Unavailable(index);
  return index;
}

std::string GpuBackend::device_label(int device_index) const {
  return absl::StrCat(devices_[device_index]->info().ordinal);
}

absl::StatusOr<RunResult> GpuBackend::Execute(int device_index, const RunRequest& request) {
  Device& device = *devices_[device_index];
  Load& load = load_[device_index];
  load.in_flight.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<RunResult> result = device.Execute(request);
  load.in_flight.fetch_sub(1, std::memory_order_relaxed);
  if (!result.ok()) return result;
  load.runs.fetch_add(1, std::memory_order_relaxed);
  result->device_ordinal = device.info().ordinal;
  result->device_uuid = device.identity().uuid;
  return result;
}

// A device's stream with the router's bookkeeping, as Execute keeps it: the
// device's load while a Run is in flight, and which device ran it.
class GpuBackend::RoutedStream final : public RunStream {
 public:
  RoutedStream(const Device& device, Load& load, std::unique_ptr<RunStream> stream)
      : device_(device), load_(load), stream_(std::move(stream)) {}

  void Submit(const RunRequest& request, Done done) override {
    load_.in_flight.fetch_add(1, std::memory_order_relaxed);
    stream_->Submit(request, [this, done = std::move(done)](
                                 absl::StatusOr<RunResult> result) mutable {
      load_.in_flight.fetch_sub(1, std::memory_order_relaxed);
      if (result.ok()) {
        load_.runs.fetch_add(1, std::memory_order_relaxed);
        result->device_ordinal = device_.info().ordinal;
        result->device_uuid = device_.identity().uuid;
      }
      done(std::move(result));
    });
  }
  void Flush() override { stream_->Flush(); }
  int Poll() override { return stream_->Poll(); }

 private:
  const Device& device_;
  Load& load_;
  const std::unique_ptr<RunStream> stream_;
};

std::unique_ptr<RunStream> GpuBackend::OpenRunStream(int device_index, RunPriority priority) {
  std::unique_ptr<RunStream> stream = devices_[device_index]->OpenRunStream(priority);
  if (stream == nullptr) return nullptr;
  return std::make_unique<RoutedStream>(*devices_[device_index], load_[device_index],
                                        std::move(stream));
}

absl::StatusOr<const ConfigCache*> GpuBackend::ConfigCacheFor(absl::string_view device) const {
  if (device.empty()) return &devices_.front()->config_cache();
  absl::StatusOr<int> index = Find(device, "device");
  if (!index.ok()) return index.status();
  return &devices_[*index]->config_cache();
}

std::vector<BackendDevice> GpuBackend::devices() const {
  std::vector<BackendDevice> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Device& device = *devices_[i];
    out.push_back({device.info(), device.identity(), device.failure(), &device.config_cache(),
                   load_[i].runs.load(std::memory_order_relaxed),
                   load_[i].in_flight.load(std::memory_order_relaxed)});
  }
  return out;
}

std::vector<int> GpuBackend::failed_devices() const {
  std::vector<int> failed;
  for (const std::unique_ptr<Device>& device : devices_) {
    if (!device->failure().empty()) failed.push_back(device->info().ordinal);
  }
  return failed;
}

BackendStats GpuBackend::stats() {
  BackendStats total;
  for (const std::unique_ptr<Device>& device : devices_) {
    const BackendStats stats = device->stats();
    total.kernels_timed += stats.kernels_timed;
    total.kernel_us += stats.kernel_us;
  }
  return total;
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> GpuBackend::OpenCudaIpcMemory(
    const std::string& handle, int device_ordinal) {
  const int index = IndexOf(device_ordinal);
  if (index < 0) {
    std::vector<std::string> served;
    for (size_t i = 0; i < devices_.size(); ++i) served.push_back(Describe(static_cast<int>(i)));
    return absl::InvalidArgumentError(absl::StrCat("device_ordinal=", device_ordinal,
                                                   ": this daemon serves ",
                                                   absl::StrJoin(served, ", ")));
  }
  if (!devices_[index]->failure().empty()) return Unavailable(index);
  return devices_[index]->OpenCudaIpcMemory(handle);
}

void GpuBackend::Housekeep(absl::Time now,
                           absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  for (const std::unique_ptr<Device>& device : devices_) device->Housekeep(now, is_alive);
}

int64_t GpuBackend::open_ipc_events() const {
  int64_t total = 0;
  for (const std::unique_ptr<Device>& device : devices_) total += device->open_ipc_events();
  return total;
}

}  // namespace kt::server
