// One GPU's executor (device_executor.h).
#include "server/device_executor.h"

#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"
#include "server/cuda_status.h"
#include "server/log.h"
#include "server/operand_staging.h"
#include "server/stage_clock.h"

namespace kt::server {
namespace {

// Client device memory opened with cudaIpcOpenMemHandle.
class CudaIpcMemory final : public ClientMemory {
 public:
  CudaIpcMemory(char* base, int64_t size, int device)
      : ClientMemory(base, size, MemorySpace::kDevice, device) {}
  ~CudaIpcMemory() override {
    // May run on any thread (the reaper, a handler): set the device first.
    if (cudaSetDevice(device()) == cudaSuccess) cudaIpcCloseMemHandle(base());
  }
};

// cuMemGetAddressRange through the runtime's driver entry point, so the
// daemon needs no link-time dependency on libcuda.
absl::StatusOr<int64_t> AllocationSize(void* pointer) {
  using GetAddressRange = CUresult(CUDAAPI*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetAddressRange get_range = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return GetAddressRange{nullptr};
    }
    return reinterpret_cast<GetAddressRange>(function);
  }();
  if (get_range == nullptr) return absl::InternalError("cuMemGetAddressRange is not available");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (get_range(&base, &size, reinterpret_cast<CUdeviceptr>(pointer)) != CUDA_SUCCESS) {
    return absl::InternalError("cuMemGetAddressRange failed on an opened IPC allocation");
  }
  if (base != reinterpret_cast<CUdeviceptr>(pointer)) {
    return absl::InternalError("an opened IPC mapping does not start at its allocation's base");
  }
  return static_cast<int64_t>(size);
}

// Errors after which the context is lost: every later call on the device
// fails the same way until the process ends (the CUDA runtime API's
// description of each says so).
bool IsSticky(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

// Sets the device's scheduling flag to yield, keeping its other flags: it
// decides how the runtime's own waits behave (cudaStreamSynchronize,
// pageable copies). gpu_backend.h says why yield.
absl::Status ScheduleYield() {
  unsigned flags = 0;
  if (absl::Status s = CudaError(cudaGetDeviceFlags(&flags), "cudaGetDeviceFlags"); !s.ok()) {
    return s;
  }
  flags = (flags & ~static_cast<unsigned>(cudaDeviceScheduleMask)) | cudaDeviceScheduleYield;
  return CudaError(cudaSetDeviceFlags(flags), "cudaSetDeviceFlags");
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceExecutor>> DeviceExecutor::Create(
    int ordinal, int lanes, const ConfigCacheFactory& make_cache) {
  absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
  if (!device.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", ordinal, ": ", device.status().message()));
  }
  // Unknown identity stays empty: the device is still served by ordinal.
  absl::StatusOr<kernels::DeviceIdentity> identity = kernels::GetDeviceIdentity(ordinal);
  if (absl::Status s = CudaError(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
  if (absl::Status s = ScheduleYield(); !s.ok()) return s;
  // Create the primary context now rather than on the first request.
  if (absl::Status s = CudaError(cudaFree(nullptr), "creating the CUDA context"); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<LanePool>> pool = LanePool::Create(lanes);
  if (!pool.ok()) return pool.status();
  absl::StatusOr<std::unique_ptr<ConfigCache>> cache = make_cache(*device);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<DeviceExecutor>(new DeviceExecutor(
      *std::move(device), identity.ok() ? *std::move(identity) : kernels::DeviceIdentity{},
      *std::move(pool), *std::move(cache)));
}

DeviceExecutor::~DeviceExecutor() {
  // The lanes are destroyed after this body, on this device.
  cudaSetDevice(device_.ordinal);
}

std::string DeviceExecutor::failure() const {
  if (!failed_.load(std::memory_order_acquire)) return "";
  absl::MutexLock lock(&failure_mu_);
  return failure_;
}

absl::Status DeviceExecutor::CheckSticky(cudaError_t state, absl::Status status) {
  if (!IsSticky(state)) return status;
  bool first = false;
  {
    absl::MutexLock lock(&failure_mu_);
    if (failure_.empty()) {
      failure_ = absl::StrCat(cudaGetErrorName(state), " (", cudaGetErrorString(state), ")");
      first = true;
    }
  }
  failed_.store(true, std::memory_order_release);
  if (first) {
    LogError(absl::StrFormat(
        "CUDA device %d (%s) failed: %s; its Runs are refused from now on, its registrations "
        "released; the other devices keep serving",
        device_.ordinal, identity_.uuid, failure()));
  }
  return absl::UnavailableError(absl::StrCat("CUDA device ", device_.ordinal, " (",
                                             identity_.uuid, ") failed: ", status.message()));
}

absl::StatusOr<RunResult> DeviceExecutor::Execute(const RunRequest& request) {
  const StageClock::time_point start = StageClock::now();
  if (failed_.load(std::memory_order_acquire)) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", device_.ordinal, " failed: ", failure()));
  }
  // The executing thread (a gRPC handler thread) sets its own device; the
  // kernel library never switches devices behind its back.
  if (absl::Status s = CudaError(cudaSetDevice(device_.ordinal), "cudaSetDevice"); !s.ok()) {
    return s;
  }
  LanePool::Lease lease(*lanes_);
  ExecuteTiming timing;
  timing.lane_wait_us = MicrosSince(start, StageClock::now());
  absl::StatusOr<RunResult> result = ExecuteOn(lease.lane(), request, timing);
  if (!result.ok()) {
    // Leave the lane idle for the next request; a Run answered before it
    // finished (done_event) holds its memory in the lane. A sticky error
    // shows here whichever call first returned it.
    return CheckSticky(cudaStreamSynchronize(lease.lane().stream), result.status());
  }
  result->timing = timing;
  return result;
}

absl::StatusOr<std::shared_ptr<IpcEvent>> DeviceExecutor::AttachEvents(
    cudaStream_t stream, const RunRequest& request) {
  if (!request.wait_event.empty()) {
    absl::StatusOr<std::shared_ptr<IpcEvent>> wait =
        events_.Open(request.wait_event, request.caller);
    if (!wait.ok()) return wait.status();
    if (absl::Status s = CudaError(cudaStreamWaitEvent(stream, (*wait)->get(), 0),
                                   "waiting on wait_event");
        !s.ok()) {
      return s;
    }
  }
  if (request.done_event.empty()) return nullptr;
  return events_.Open(request.done_event, request.caller);
}

absl::StatusOr<kernels::LaunchConfig> DeviceExecutor::Launch(
    const RunRequest& request, const kernels::RowOpArgs& args,
    const kernels::LaunchConfig& config, Lane& lane, TimedLaunch* timed, ExecuteTiming& timing) {
  const StageClock::time_point before_start_event = StageClock::now();
  if (timed != nullptr) {
    if (absl::Status s = CudaError(cudaEventRecord(timed->start, lane.stream), "cudaEventRecord");
        !s.ok()) {
      return s;
    }
  }
  const StageClock::time_point before_launch = StageClock::now();
  absl::StatusOr<kernels::LaunchConfig> launched = kernels::Launch(
      request.op, request.dtype, request.shape, args, config, device_, lane.stream);
  if (!launched.ok()) return launched.status();
  const StageClock::time_point after_launch = StageClock::now();
  if (timed != nullptr) {
    if (absl::Status s = CudaError(cudaEventRecord(timed->stop, lane.stream), "cudaEventRecord");
        !s.ok()) {
      return s;
    }
    LanePool::Recorded(lane);
  }
  timing.kernel_launch_us = MicrosSince(before_launch, after_launch);
  timing.timing_events_us =
      MicrosSince(before_start_event, before_launch) + MicrosSince(after_launch, StageClock::now());
  return launched;
}

absl::Status DeviceExecutor::HoldUntilPassed(Lane& lane, const TimedLaunch* timed,
                                             const RunRequest& request) {
  if (timed != nullptr) {
    lane.last_stop = timed->stop;
  } else {
    if (absl::Status s = CudaError(cudaEventRecord(lane.passed, lane.stream), "cudaEventRecord");
        !s.ok()) {
      return s;
    }
    lane.last_stop = lane.passed;
  }
  lane.in_flight.insert(lane.in_flight.end(), request.memory.begin(), request.memory.end());
  return absl::OkStatus();
}

absl::StatusOr<RunResult> DeviceExecutor::ExecuteOn(Lane& lane, const RunRequest& request,
                                                    ExecuteTiming& timing) {
  const StageClock::time_point start = StageClock::now();
  absl::StatusOr<tuner::ConfigChoice> choice =
      cache_->Lookup(request.op, request.dtype, request.shape);
  if (!choice.ok()) return choice.status();
  timing.lookup_us = MicrosSince(start, StageClock::now());

  absl::StatusOr<std::shared_ptr<IpcEvent>> done_event = AttachEvents(lane.stream, request);
  if (!done_event.ok()) return done_event.status();
  OperandStaging staging(lane.stream);
  kernels::RowOpArgs args;
  if (absl::Status s = staging.Stage(request, args); !s.ok()) return s;
  args.params = request.params;
  args.workspace = lane.workspace;
  args.workspace_bytes = kernels::kMaxWorkspaceBytes;
  // With done_event and nothing to copy back, the Run is answered once
  // queued: the client orders its work after done_event.
  const bool answer_early = *done_event != nullptr && !staging.stages_outputs();

  TimedLaunch* timed = request.time_kernel ? &LanePool::NextTiming(lane) : nullptr;
  absl::StatusOr<kernels::LaunchConfig> launched =
      Launch(request, args, choice->config, lane, timed, timing);
  if (!launched.ok()) return launched.status();
  choice->config = *launched;
  RunResult result;
  result.config = *choice;
  if (absl::Status s = staging.QueueCopiesBack(request, result); !s.ok()) return s;
  if (*done_event != nullptr) {
    if (absl::Status s = CudaError(cudaEventRecord((*done_event)->get(), lane.stream),
                                   "recording done_event");
        !s.ok()) {
      return s;
    }
  }
  if (answer_early) {
    if (absl::Status s = HoldUntilPassed(lane, timed, request); !s.ok()) return s;
    timing.launch_us = MicrosSince(start, StageClock::now());
    result.answered_early = true;  // its kernel time, if timed, is read later
    return result;
  }

  const StageClock::time_point queued = StageClock::now();
  timing.launch_us = MicrosSince(start, queued);
  if (absl::Status s = CudaError(cudaStreamSynchronize(lane.stream), "running the kernel");
      !s.ok()) {
    return s;
  }
  timing.gpu_wait_us = MicrosSince(queued, StageClock::now());
  // The stream is idle: earlier early answers' memory can go too.
  lane.in_flight.clear();
  if (timed != nullptr) {
    result.kernel_time_us = lanes_->ReadFinishedTimes(lane, timed);
    if (result.kernel_time_us < 0) {
      return absl::InternalError("cudaEventElapsedTime failed on a finished launch");
    }
  }
  if (absl::Status s = staging.WriteToClientHost(request); !s.ok()) return s;
  return result;
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> DeviceExecutor::OpenCudaIpcMemory(
    const std::string& handle) {
  if (failed_.load(std::memory_order_acquire)) {
    return absl::UnavailableError(
        absl::StrCat("CUDA device ", device_.ordinal, " failed: ", failure()));
  }
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC memory handle has ",
                                                   sizeof(cudaIpcMemHandle_t), " bytes, got ",
                                                   handle.size()));
  }
  if (absl::Status s = CudaError(cudaSetDevice(device_.ordinal), "cudaSetDevice"); !s.ok()) {
    return s;
  }
  cudaIpcMemHandle_t ipc{};
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  void* pointer = nullptr;
  const cudaError_t opened =
      cudaIpcOpenMemHandle(&pointer, ipc, cudaIpcMemLazyEnablePeerAccess);
  if (opened != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it for the next call on this thread
    return absl::InvalidArgumentError(absl::StrCat(
        "cudaIpcOpenMemHandle refused the handle: ", cudaGetErrorName(opened), " (",
        cudaGetErrorString(opened), "); send the handle of a live allocation's base from "
        "another process"));
  }
  // Which GPU the allocation lives on cannot be asked: the driver maps it
  // into this device (over peer access if it is another's) and reports this
  // device for it (bench/results/2026-11-26-h200x2-multi-gpu). The client's
  // ordinal, found by UUID, is trusted; a wrong one costs only its own Runs
  // peer-access speed.
  absl::StatusOr<int64_t> size = AllocationSize(pointer);
  if (!size.ok()) {
    cudaIpcCloseMemHandle(pointer);
    return size.status();
  }
  return std::make_shared<const CudaIpcMemory>(static_cast<char*>(pointer), *size,
                                               device_.ordinal);
}

void DeviceExecutor::Housekeep(absl::Time now,
                               absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  events_.Evict(now, is_alive);
  if (cudaSetDevice(device_.ordinal) != cudaSuccess) return;
  lanes_->Housekeep();
}

BackendStats DeviceExecutor::stats() {
  // The counters either way; without the device the idle lanes' newest
  // times wait for the next read.
  cudaSetDevice(device_.ordinal);
  return lanes_->stats();
}

}  // namespace kt::server
