// One GPU's executor (device_executor.h).
#include "server/device_executor.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/driver_api.h"
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

// cuMemGetAddressRange (kernels/driver_api.h).
absl::StatusOr<int64_t> AllocationSize(void* pointer) {
  using GetAddressRange = CUresult(CUDAAPI*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const auto get_range =
      kernels::DriverFunction<GetAddressRange>("cuMemGetAddressRange");
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

// Makes `ordinal` the calling thread's current device. Asking costs less
// than setting (0.06 against 0.1-0.2 us on the lent H100 hosts), and a
// poller's thread mostly stays on one device.
absl::Status UseDevice(int ordinal) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal) return absl::OkStatus();
  return CudaError(cudaSetDevice(ordinal), "cudaSetDevice");
}

// cuStreamWriteValue32 (kernels/driver_api.h); null when the driver lacks it.
using StreamWriteValue32Fn = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
StreamWriteValue32Fn StreamWriteValue32() {
  static const auto write = kernels::DriverFunction<StreamWriteValue32Fn>("cuStreamWriteValue32");
  return write;
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
  if (absl::Status s = UseDevice(device_.ordinal); !s.ok()) return s;
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
// submission order once the stream has passed them. Each batch (the Runs of
// one Flush) ends with a stream memory write of the batch's number into a
// pinned host word, so Poll learns what the GPU passed from one load and
// makes no CUDA call. A stream query costs 1.3-1.7 us of driver time on the
// lent H100 hosts, and a poller that asked one after another answered a
// small Run that much later (bench/results/2026-11-27-h100-queue-completion-word).
// A failed kernel stops the stream before its batch's write: a stream
// that has passed nothing for kStallCheck is asked for its error. Only the
// poller that owns the stream calls it, so nothing here is locked.
class DeviceExecutor::Stream final : public RunStream {
 public:
  explicit Stream(DeviceExecutor& executor) : executor_(executor) {}
  ~Stream() override;

  absl::Status Init(RunPriority priority);

  void Submit(const RunRequest& request, Done done) override;
  void Flush() override;
  int Poll() override;

 private:
  // How long a stream with Runs in flight may pass nothing before Poll asks
  // it whether it failed: a small Run passes in microseconds, and a failed
  // one is answered this late at most.
  static constexpr std::chrono::microseconds kStallCheck{100};

  struct InFlight {
    const RunRequest* request;  // null once answered
    Started started;
    ExecuteTiming timing;
    StageClock::time_point queued;
    Done done;  // empty once answered (early)
    // Its client memory, held after an early answer until the GPU passed.
    std::vector<std::shared_ptr<const ClientMemory>> memory;
    uint32_t batch = 0;  // its Flush's number; 0 until flushed
  };
  // The number of the newest batch the GPU has passed.
  uint32_t passed_batch() const { return __atomic_load_n(passed_word_, __ATOMIC_ACQUIRE); }
  // Answers every Run in flight with `status` (the stream is broken).
  void FailAll(const absl::Status& status);

  DeviceExecutor& executor_;
  Lane lane_;
  // Pinned, mapped host memory: the GPU writes each batch's number here
  // once it has passed the batch (numbers wrap; compared as differences).
  uint32_t* passed_word_ = nullptr;
  CUdeviceptr passed_address_ = 0;
  uint32_t flushed_batch_ = 0;  // the newest batch's number
  std::deque<InFlight> in_flight_;
  size_t unflushed_ = 0;  // the newest Runs, since the last Flush
  // When the stream last passed a batch or got one while idle.
  StageClock::time_point progress_;
};

absl::Status DeviceExecutor::Stream::Init(RunPriority priority) {
  if (absl::Status s = UseDevice(executor_.device_.ordinal); !s.ok()) return s;
  absl::StatusOr<int> stream_priority = RunStreamPriority(priority);
  if (!stream_priority.ok()) return stream_priority.status();
  if (absl::Status s = CreateLane(lane_, *stream_priority); !s.ok()) return s;
  if (StreamWriteValue32() == nullptr) {
    return absl::UnavailableError("cuStreamWriteValue32 is not available");
  }
  void* word = nullptr;
  if (absl::Status s = CudaError(cudaHostAlloc(&word, sizeof(uint32_t),
                                               cudaHostAllocMapped | cudaHostAllocPortable),
                                 "cudaHostAlloc (a stream's completion word)");
      !s.ok()) {
    return s;
  }
  passed_word_ = static_cast<uint32_t*>(word);
  *passed_word_ = 0;
  void* address = nullptr;
  if (absl::Status s = CudaError(cudaHostGetDevicePointer(&address, word, 0),
                                 "cudaHostGetDevicePointer");
      !s.ok()) {
    return s;
  }
  passed_address_ = reinterpret_cast<CUdeviceptr>(address);
  // One write now: a driver without stream memory operations refuses the
  // stream here (its Runs go the synchronous way), not at a Run.
  if (StreamWriteValue32()(reinterpret_cast<CUstream>(lane_.stream), passed_address_, 0,
                           CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
    return absl::UnavailableError("cuStreamWriteValue32 failed on a new stream");
  }
  return CudaError(cudaStreamSynchronize(lane_.stream), "writing a stream's completion word");
}

DeviceExecutor::Stream::~Stream() {
  cudaSetDevice(executor_.device_.ordinal);
  if (!in_flight_.empty()) {
    Flush();
    if (lane_.stream != nullptr) cudaStreamSynchronize(lane_.stream);
    Poll();
  }
  FailAll(absl::UnavailableError("the stream closed with this Run in flight"));
  DestroyLane(lane_);  // waits for the stream: the word is written no more
  if (passed_word_ != nullptr) cudaFreeHost(passed_word_);
}

void DeviceExecutor::Stream::Submit(const RunRequest& request, Done done) {
  if (executor_.failed_.load(std::memory_order_acquire)) {
    return done(absl::UnavailableError(absl::StrCat(
        "CUDA device ", executor_.device_.ordinal, " failed: ", executor_.failure())));
  }
  if (absl::Status s = UseDevice(executor_.device_.ordinal); !s.ok()) return done(s);
  InFlight run{&request, {}, {}, {}, std::move(done), {}, 0};
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

void DeviceExecutor::Stream::Flush() {
  if (unflushed_ == 0) return;
  const uint32_t batch = flushed_batch_ + 1;
  const CUresult written =
      StreamWriteValue32()(reinterpret_cast<CUstream>(lane_.stream), passed_address_, batch,
                           CU_STREAM_WRITE_VALUE_DEFAULT);
  if (in_flight_.size() == unflushed_) progress_ = StageClock::now();  // it was idle
  flushed_batch_ = batch;
  for (size_t i = in_flight_.size() - unflushed_; i < in_flight_.size(); ++i) {
    in_flight_[i].batch = batch;
  }
  unflushed_ = 0;
  if (written == CUDA_SUCCESS) return;
  // No write on the stream: wait for it here and write the word instead
  // (the batch is answered late, never wrongly), unless the stream failed.
  const cudaError_t state = cudaStreamSynchronize(lane_.stream);
  if (state != cudaSuccess) {
    FailAll(executor_.CheckSticky(state, CudaError(state, "running the kernel")));
    return;
  }
  __atomic_store_n(passed_word_, batch, __ATOMIC_RELEASE);
}

int DeviceExecutor::Stream::Poll() {
  if (in_flight_.size() == unflushed_) return static_cast<int>(in_flight_.size());
  const uint32_t passed = passed_batch();
  if (static_cast<int32_t>(passed - in_flight_.front().batch) < 0) {
    if (StageClock::now() - progress_ < kStallCheck) {
      return static_cast<int>(in_flight_.size());
    }
    progress_ = StageClock::now();
    // Asked on its device. Still running: the word will say when it is
    // done. Idle with the word behind (a write that never landed): every
    // flushed batch has passed, so the word is set here.
    const cudaError_t state = UseDevice(executor_.device_.ordinal).ok()
                                  ? cudaStreamQuery(lane_.stream)
                                  : cudaErrorNotReady;
    if (state == cudaSuccess) {
      if (static_cast<int32_t>(passed_batch() - in_flight_.front().batch) < 0) {
        __atomic_store_n(passed_word_, flushed_batch_, __ATOMIC_RELEASE);
      }
    } else if (state != cudaErrorNotReady) {
      FailAll(executor_.CheckSticky(state, CudaError(state, "running the kernel")));
      return 0;
    }
    return static_cast<int>(in_flight_.size());
  }
  progress_ = StageClock::now();
  while (in_flight_.size() > unflushed_ &&
         static_cast<int32_t>(passed - in_flight_.front().batch) >= 0) {
    InFlight& run = in_flight_.front();
    // Timing events and staged buffers are its device's; a Run on client
    // device memory, untimed, needs no CUDA call here.
    const bool on_device = (run.started.timed == nullptr && !run.started.staging->stages_any()) ||
                           UseDevice(executor_.device_.ordinal).ok();
    absl::Status status;
    RunResult result = std::move(run.started.result);
    result.timing = run.timing;
    result.timing.gpu_wait_us = MicrosSince(run.queued, progress_);
    if (run.started.timed != nullptr) {
      result.kernel_time_us =
          on_device ? executor_.lanes_->ReadTime(lane_, *run.started.timed) : -1;
      if (result.kernel_time_us < 0) {
        status = absl::InternalError("cudaEventElapsedTime failed on a finished launch");
      }
    }
    if (status.ok() && run.request != nullptr) {
      status = run.started.staging->WriteToClientHost(*run.request);
    }
    Done done = std::move(run.done);
    in_flight_.pop_front();
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
    in_flight_.pop_front();
    if (done) done(status);
  }
  unflushed_ = 0;
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
