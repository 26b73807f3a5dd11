// One GPU's executor (device_executor.h).
#include "server/device_executor.h"

#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <deque>
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

absl::StatusOr<DeviceExecutor::Started> DeviceExecutor::Start(Lane& lane,
                                                                const RunRequest& request,
                                                                ExecuteTiming& timing) {
  const StageClock::time_point start = StageClock::now();
  absl::StatusOr<tuner::ConfigChoice> choice =
      cache_->LookupForRun(request.op, request.dtype, request.shape);
  if (!choice.ok()) return choice.status();
  timing.lookup_us = MicrosSince(start, StageClock::now());

  absl::StatusOr<std::shared_ptr<IpcEvent>> done_event = AttachEvents(lane.stream, request);
  if (!done_event.ok()) return done_event.status();
  Started started;
  started.staging = std::make_unique<OperandStaging>(lane.stream);
  kernels::RowOpArgs args;
  if (absl::Status s = started.staging->Stage(request, args); !s.ok()) return s;
  args.params = request.params;
  args.workspace = lane.workspace;
  args.workspace_bytes = kernels::kMaxWorkspaceBytes;
  // With done_event and nothing to copy back, the Run is answered once
  // queued: the client orders its work after done_event.
  started.answer_early = *done_event != nullptr && !started.staging->stages_outputs();

  started.timed = request.time_kernel ? &LanePool::NextTiming(lane) : nullptr;
  absl::StatusOr<kernels::LaunchConfig> launched =
      Launch(request, args, choice->config, lane, started.timed, timing);
  if (!launched.ok()) return launched.status();
  choice->config = *launched;
  started.result.config = *choice;
  if (absl::Status s = started.staging->QueueCopiesBack(request, started.result); !s.ok()) {
    return s;
  }
  if (*done_event != nullptr) {
    if (absl::Status s = CudaError(cudaEventRecord((*done_event)->get(), lane.stream),
                                   "recording done_event");
        !s.ok()) {
      return s;
    }
  }
  timing.launch_us = MicrosSince(start, StageClock::now());
  return started;
}

absl::StatusOr<RunResult> DeviceExecutor::ExecuteOn(Lane& lane, const RunRequest& request,
                                                    ExecuteTiming& timing) {
  absl::StatusOr<Started> started = Start(lane, request, timing);
  if (!started.ok()) return started.status();
  RunResult& result = started->result;
  if (started->answer_early) {
    if (absl::Status s = HoldUntilPassed(lane, started->timed, request); !s.ok()) return s;
    result.answered_early = true;  // its kernel time, if timed, is read later
    return std::move(result);
  }

  const StageClock::time_point queued = StageClock::now();
  if (absl::Status s = CudaError(cudaStreamSynchronize(lane.stream), "running the kernel");
      !s.ok()) {
    return s;
  }
  timing.gpu_wait_us = MicrosSince(queued, StageClock::now());
  // The stream is idle: earlier early answers' memory can go too.
  lane.in_flight.clear();
  if (started->timed != nullptr) {
    result.kernel_time_us = lanes_->ReadFinishedTimes(lane, started->timed);
    if (result.kernel_time_us < 0) {
      return absl::InternalError("cudaEventElapsedTime failed on a finished launch");
    }
  }
  if (absl::Status s = started->staging->WriteToClientHost(request); !s.ok()) return s;
  return std::move(result);
}

// A RunStream on its own lane (run_stream.h). Runs are answered in
// submission order once the stream has passed them. A batch (the Runs of
// one Flush) that ends the stream needs no mark: the stream itself says
// when it is done. Only when more work follows does the batch get a mark,
// an event recorded before that work: one event per batch at most, none
// for a lone Run (recording one costs ~1.6 us on an H100 host). Only the
// poller that owns the stream calls it, so nothing here is locked.
class DeviceExecutor::Stream final : public RunStream {
 public:
  explicit Stream(DeviceExecutor& executor) : executor_(executor) {}
  ~Stream() override;

  absl::Status Init(RunPriority priority) {
    if (absl::Status s = CudaError(cudaSetDevice(executor_.device_.ordinal), "cudaSetDevice");
        !s.ok()) {
      return s;
    }
    absl::StatusOr<int> stream_priority = RunStreamPriority(priority);
    if (!stream_priority.ok()) return stream_priority.status();
    return CreateLane(lane_, *stream_priority);
  }

  void Submit(const RunRequest& request, Done done) override;
  void Flush() override;
  int Poll() override;

 private:
  struct InFlight {
    const RunRequest* request;  // null once answered
    Started started;
    ExecuteTiming timing;
    StageClock::time_point queued;
    Done done;  // empty once answered (early)
    // Its client memory, held after an early answer until the GPU passed.
    std::vector<std::shared_ptr<const ClientMemory>> memory;
    // Set once work follows its batch; until then the stream's own state
    // tells when it is done.
    cudaEvent_t mark = nullptr;
  };
  // Answers every Run in flight with `status` (the stream is broken).
  void FailAll(const absl::Status& status);
  // Marks the tail batch before more work goes on the stream.
  void MarkTailBatch();
  cudaEvent_t NewMark();

  DeviceExecutor& executor_;
  Lane lane_;
  std::deque<InFlight> in_flight_;
  size_t unflushed_ = 0;  // the newest Runs, since the last Flush
  size_t tail_batch_ = 0;  // the Runs of the last Flush, unmarked
  std::vector<cudaEvent_t> spare_marks_;
};

DeviceExecutor::Stream::~Stream() {
  cudaSetDevice(executor_.device_.ordinal);
  if (!in_flight_.empty()) {
    Flush();
    if (lane_.stream != nullptr) cudaStreamSynchronize(lane_.stream);
    Poll();
  }
  FailAll(absl::UnavailableError("the stream closed with this Run in flight"));
  for (cudaEvent_t mark : spare_marks_) cudaEventDestroy(mark);
  DestroyLane(lane_);
}

cudaEvent_t DeviceExecutor::Stream::NewMark() {
  if (!spare_marks_.empty()) {
    cudaEvent_t mark = spare_marks_.back();
    spare_marks_.pop_back();
    return mark;
  }
  cudaEvent_t mark = nullptr;
  if (cudaEventCreateWithFlags(&mark, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  return mark;
}

void DeviceExecutor::Stream::Submit(const RunRequest& request, Done done) {
  if (executor_.failed_.load(std::memory_order_acquire)) {
    return done(absl::UnavailableError(absl::StrCat(
        "CUDA device ", executor_.device_.ordinal, " failed: ", executor_.failure())));
  }
  if (absl::Status s = CudaError(cudaSetDevice(executor_.device_.ordinal), "cudaSetDevice");
      !s.ok()) {
    return done(s);
  }
  MarkTailBatch();
  InFlight run{&request, {}, {}, {}, std::move(done), {}, nullptr};
  absl::StatusOr<Started> started = executor_.Start(lane_, request, run.timing);
  if (!started.ok()) {
    // Launch errors leave the lane usable unless they are sticky.
    return run.done(executor_.CheckSticky(cudaStreamQuery(lane_.stream), started.status()));
  }
  run.started = *std::move(started);
  run.queued = StageClock::now();
  if (run.started.answer_early) {
    run.started.result.answered_early = true;
    run.started.result.timing = run.timing;
    // The request may go with its answer: what the GPU still uses stays.
    run.memory = request.memory;
    run.request = nullptr;
    RunResult answer = run.started.result;
    Done answered = std::move(run.done);
    answered(std::move(answer));
  }
  in_flight_.push_back(std::move(run));
  ++unflushed_;
}

void DeviceExecutor::Stream::MarkTailBatch() {
  if (tail_batch_ == 0) return;
  // Submit marks the tail batch before it adds anything: it ends the deque.
  const size_t first = in_flight_.size() - tail_batch_;
  tail_batch_ = 0;
  cudaEvent_t mark = NewMark();
  if (mark != nullptr && cudaEventRecord(mark, lane_.stream) == cudaSuccess) {
    for (size_t i = first; i < in_flight_.size(); ++i) in_flight_[i].mark = mark;
    return;
  }
  if (mark != nullptr) spare_marks_.push_back(mark);
  // No mark: the batch is answered once the stream is idle, later than it
  // could be, never wrongly.
}

void DeviceExecutor::Stream::Flush() {
  // With nothing new the tail batch stays as it is (unmarked).
  if (unflushed_ == 0) return;
  tail_batch_ = unflushed_;
  unflushed_ = 0;
}

int DeviceExecutor::Stream::Poll() {
  if (in_flight_.empty()) return 0;
  if (cudaSetDevice(executor_.device_.ordinal) != cudaSuccess) {
    return static_cast<int>(in_flight_.size());
  }
  cudaEvent_t passed_mark = nullptr;
  bool stream_idle = false;
  while (!in_flight_.empty() && in_flight_.size() > unflushed_) {
    InFlight& run = in_flight_.front();
    const bool passed = run.mark != nullptr ? run.mark == passed_mark : stream_idle;
    if (!passed) {
      // An unmarked Run is in the stream's last batch (or lost its mark):
      // the stream's state is its own.
      const cudaError_t state =
          run.mark != nullptr ? cudaEventQuery(run.mark) : cudaStreamQuery(lane_.stream);
      if (state == cudaErrorNotReady) break;
      if (state != cudaSuccess) {
        FailAll(executor_.CheckSticky(state, CudaError(state, "running the kernel")));
        return 0;
      }
      if (run.mark != nullptr) {
        passed_mark = run.mark;
      } else {
        stream_idle = true;
      }
    }
    absl::Status status;
    RunResult result = std::move(run.started.result);
    result.timing = run.timing;
    result.timing.gpu_wait_us = MicrosSince(run.queued, StageClock::now());
    if (run.started.timed != nullptr) {
      result.kernel_time_us = executor_.lanes_->ReadTime(lane_, *run.started.timed);
      if (result.kernel_time_us < 0) {
        status = absl::InternalError("cudaEventElapsedTime failed on a finished launch");
      }
    }
    if (status.ok() && run.request != nullptr) {
      status = run.started.staging->WriteToClientHost(*run.request);
    }
    Done done = std::move(run.done);
    const cudaEvent_t mark = run.mark;
    in_flight_.pop_front();
    tail_batch_ = std::min(tail_batch_, in_flight_.size() - unflushed_);
    // The mark is free again once no Run still points at it.
    if (mark != nullptr && (in_flight_.empty() || in_flight_.front().mark != mark)) {
      spare_marks_.push_back(mark);
    }
    if (done) {
      if (status.ok()) {
        done(std::move(result));
      } else {
        done(status);
      }
    }
  }
  return static_cast<int>(in_flight_.size());
}

void DeviceExecutor::Stream::FailAll(const absl::Status& status) {
  while (!in_flight_.empty()) {
    InFlight& run = in_flight_.front();
    Done done = std::move(run.done);
    if (run.mark != nullptr && (in_flight_.size() == 1 || in_flight_[1].mark != run.mark)) {
      spare_marks_.push_back(run.mark);
    }
    in_flight_.pop_front();
    if (done) done(status);
  }
  unflushed_ = 0;
  tail_batch_ = 0;
}

std::unique_ptr<RunStream> DeviceExecutor::OpenRunStream(RunPriority priority) {
  if (failed_.load(std::memory_order_acquire)) return nullptr;
  auto stream = std::make_unique<Stream>(*this);
  if (absl::Status s = stream->Init(priority); !s.ok()) {
    LogWarning(absl::StrCat("CUDA device ", device_.ordinal,
                            ": no stream for a submission queue (its Runs go the synchronous "
                            "way): ",
                            s.message()));
    return nullptr;
  }
  return stream;
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
