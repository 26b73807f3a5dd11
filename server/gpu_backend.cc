// GPU backend (see gpu_backend.h).
#include "server/gpu_backend.h"

#include <cuda.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/device_identity.h"
#include "kernels/launch.h"

namespace kt::server {
namespace {

using Clock = std::chrono::steady_clock;

// Pairs of timing events per lane: Runs answered early (done_event) may run
// this many launches ahead of the reading of their times.
constexpr size_t kTimingRing = 64;

double MicrosSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

absl::Status CudaError(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

// Stream-ordered device allocation, freed on the same stream.
class StreamBuffer {
 public:
  explicit StreamBuffer(cudaStream_t stream) : stream_(stream) {}
  ~StreamBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  absl::Status Allocate(size_t bytes) {
    return CudaError(cudaMallocAsync(&data_, bytes, stream_), "cudaMallocAsync");
  }
  void* data() const { return data_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

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

// A staged copy of one tensor: the device buffer the kernel uses, filled
// from (inputs) or emptied to (outputs) host bytes.
struct Staged {
  std::unique_ptr<StreamBuffer> device;
  std::string host;  // client shared memory goes through a private copy
};

}  // namespace

// An event of a client process opened with cudaIpcOpenEventHandle.
class GpuBackend::IpcEvent {
 public:
  IpcEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  ~IpcEvent() {
    if (cudaSetDevice(device_) == cudaSuccess) cudaEventDestroy(event_);
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
  int device_;
};

// Borrows a lane from the pool for one request, waiting when all are busy.
// The most recently returned lane comes out first, so a lone client keeps
// one stream (its Runs stay in order on the GPU).
class GpuBackend::LaneLease {
 public:
  explicit LaneLease(GpuBackend& backend) : backend_(backend) {
    {
      absl::MutexLock lock(&backend_.mu_);
      backend_.mu_.Await(absl::Condition(
          +[](std::vector<int>* free) { return !free->empty(); }, &backend_.free_lanes_));
      index_ = backend_.free_lanes_.back();
      backend_.free_lanes_.pop_back();
    }
    // The lane is ours now: no lock needed for its bookkeeping.
    Lane& lane = backend_.lanes_[index_];
    if (lane.pending > 0) backend_.ReadFinishedTimes(lane);
    ReleaseFinished(lane);
  }
  ~LaneLease() {
    absl::MutexLock lock(&backend_.mu_);
    backend_.free_lanes_.push_back(index_);
  }
  Lane& lane() const { return backend_.lanes_[index_]; }

 private:
  GpuBackend& backend_;
  int index_ = 0;
};

void GpuBackend::ReleaseFinished(Lane& lane) {
  if (!lane.in_flight.empty() && cudaEventQuery(lane.last_stop) == cudaSuccess) {
    lane.in_flight.clear();
  }
}

double GpuBackend::ReadFinishedTimes(Lane& lane, const TimedLaunch* want) {
  double wanted_us = -1;
  double read_us = 0;
  int read = 0;
  // Oldest first: a stream finishes its launches in order, so the first
  // one not done ends the scan.
  for (size_t i = 0; i < kTimingRing && lane.pending > 0; ++i) {
    TimedLaunch& launch = lane.timing[(lane.next + i) % kTimingRing];
    if (!launch.pending) continue;
    if (cudaEventQuery(launch.stop) != cudaSuccess) break;
    float ms = 0;
    const cudaError_t got = cudaEventElapsedTime(&ms, launch.start, launch.stop);
    launch.pending = false;
    --lane.pending;
    if (got != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (&launch == want) wanted_us = ms * 1e3;
    read_us += ms * 1e3;
    ++read;
  }
  if (read > 0) {
    absl::MutexLock lock(&stats_mu_);
    stats_.kernels_timed += read;
    stats_.kernel_us += read_us;
  }
  return wanted_us;
}

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(
    int ordinal, const GpuBackendOptions& options, std::unique_ptr<ConfigCache> cache) {
  if (options.streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("streams=", options.streams, " must be >= 1"));
  }
  absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
  if (!device.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", ordinal, ": ", device.status().message()));
  }
  if (absl::Status s = CudaError(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
  // The scheduling flag decides how the runtime's own waits behave
  // (cudaStreamSynchronize, pageable copies): yield (gpu_backend.h says
  // why); other flags are kept.
  unsigned flags = 0;
  if (absl::Status s = CudaError(cudaGetDeviceFlags(&flags), "cudaGetDeviceFlags"); !s.ok()) {
    return s;
  }
  flags = (flags & ~static_cast<unsigned>(cudaDeviceScheduleMask)) | cudaDeviceScheduleYield;
  if (absl::Status s = CudaError(cudaSetDeviceFlags(flags), "cudaSetDeviceFlags"); !s.ok()) {
    return s;
  }
  // Create the primary context now rather than on the first request.
  if (absl::Status s = CudaError(cudaFree(nullptr), "creating the CUDA context"); !s.ok()) {
    return s;
  }
  std::unique_ptr<GpuBackend> backend(new GpuBackend(*device, options, std::move(cache)));
  backend->lanes_.resize(options.streams);  // destroyed by ~GpuBackend even on error
  for (int i = 0; i < options.streams; ++i) {
    Lane& lane = backend->lanes_[i];
    absl::Status s = CudaError(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking),
                               "cudaStreamCreate");
    lane.timing.resize(kTimingRing);
    for (TimedLaunch& launch : lane.timing) {
      if (s.ok()) s = CudaError(cudaEventCreate(&launch.start), "cudaEventCreate");
      if (s.ok()) s = CudaError(cudaEventCreate(&launch.stop), "cudaEventCreate");
    }
    if (s.ok()) {
      s = CudaError(cudaEventCreateWithFlags(&lane.passed, cudaEventDisableTiming),
                    "cudaEventCreate");
    }
    if (s.ok()) {
      s = CudaError(cudaMalloc(&lane.workspace, kernels::kMaxWorkspaceBytes),
                    "cudaMalloc (lane workspace)");
    }
    if (!s.ok()) return s;
    lane.last_stop = lane.timing.back().stop;  // never recorded: complete
    absl::MutexLock lock(&backend->mu_);
    backend->free_lanes_.push_back(i);
  }
  return backend;
}

GpuBackend::~GpuBackend() {
  if (cudaSetDevice(device_.ordinal) != cudaSuccess) return;
  for (const Lane& lane : lanes_) {
    if (lane.stream != nullptr) {
      cudaStreamSynchronize(lane.stream);
      cudaStreamDestroy(lane.stream);
    }
    for (const TimedLaunch& launch : lane.timing) {
      if (launch.start != nullptr) cudaEventDestroy(launch.start);
      if (launch.stop != nullptr) cudaEventDestroy(launch.stop);
    }
    if (lane.passed != nullptr) cudaEventDestroy(lane.passed);
    if (lane.workspace != nullptr) cudaFree(lane.workspace);
  }
}

std::vector<BackendDevice> GpuBackend::devices() const {
  std::vector<BackendDevice> devices;
  for (int ordinal = 0; ordinal < kernels::CudaDeviceCount(); ++ordinal) {
    absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
    if (!device.ok()) continue;
    BackendDevice out{*std::move(device), {}};
    // Unknown identity stays empty: GetStatus still lists the device.
    absl::StatusOr<kernels::DeviceIdentity> identity = kernels::GetDeviceIdentity(ordinal);
    if (identity.ok()) out.identity = *std::move(identity);
    devices.push_back(std::move(out));
  }
  return devices;
}

BackendStats GpuBackend::stats() {
  {
    // Bring the idle lanes' kernel times in (busy lanes read theirs when
    // their holder is done).
    absl::MutexLock lock(&mu_);
    if (cudaSetDevice(device_.ordinal) == cudaSuccess) {
      for (int index : free_lanes_) {
        if (lanes_[index].pending > 0) ReadFinishedTimes(lanes_[index]);
      }
    }
  }
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

absl::StatusOr<RunResult> GpuBackend::Execute(const RunRequest& request) {
  const Clock::time_point start = Clock::now();
  // The executing thread (a gRPC handler thread) sets its own device; the
  // kernel library never switches devices behind its back.
  if (absl::Status s = CudaError(cudaSetDevice(device_.ordinal), "cudaSetDevice"); !s.ok()) {
    return s;
  }
  LaneLease lease(*this);
  ExecuteTiming timing;
  timing.lane_wait_us = MicrosSince(start, Clock::now());
  absl::StatusOr<RunResult> result = ExecuteOn(lease.lane(), request, timing);
  if (!result.ok()) {
    // Leave the lane idle for the next request; a Run answered before it
    // finished (done_event) holds its memory in the lane.
    cudaStreamSynchronize(lease.lane().stream);
    return result;
  }
  result->timing = timing;
  return result;
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> GpuBackend::OpenCudaIpcMemory(
    const std::string& handle, int device_ordinal) {
  if (device_ordinal != device_.ordinal) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_ordinal=", device_ordinal, ": this daemon serves CUDA device ", device_.ordinal));
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
  absl::StatusOr<int64_t> size = AllocationSize(pointer);
  if (!size.ok()) {
    cudaIpcCloseMemHandle(pointer);
    return size.status();
  }
  return std::make_shared<const CudaIpcMemory>(static_cast<char*>(pointer), *size,
                                               device_.ordinal);
}

absl::StatusOr<std::shared_ptr<GpuBackend::IpcEvent>> GpuBackend::OpenEvent(
    const std::string& handle, const RunRequest& request) {
  if (!request.caller.has_value()) {
    return absl::FailedPreconditionError("CUDA IPC events need the Unix socket");
  }
  return events_.GetOrOpen(
      handle, *request.caller, absl::Now(),
      [&]() -> absl::StatusOr<std::shared_ptr<IpcEvent>> {
        cudaIpcEventHandle_t ipc{};
        std::memcpy(&ipc, handle.data(), sizeof(ipc));
        cudaEvent_t event = nullptr;
        const cudaError_t opened = cudaIpcOpenEventHandle(&event, ipc);
        if (opened != cudaSuccess) {
          cudaGetLastError();
          return absl::InvalidArgumentError(absl::StrCat(
              "cudaIpcOpenEventHandle refused the event handle: ", cudaGetErrorName(opened),
              "; create the event with cudaEventInterprocess | cudaEventDisableTiming"));
        }
        return std::make_shared<IpcEvent>(event, device_.ordinal);
      });
}

void GpuBackend::Housekeep(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  events_.Evict(now, absl::Seconds(60), is_alive);
  absl::MutexLock lock(&mu_);
  if (cudaSetDevice(device_.ordinal) != cudaSuccess) return;
  for (int index : free_lanes_) {
    Lane& lane = lanes_[index];
    if (lane.pending > 0) ReadFinishedTimes(lane);
    ReleaseFinished(lane);
  }
}

absl::StatusOr<RunResult> GpuBackend::ExecuteOn(Lane& lane, const RunRequest& request,
                                                ExecuteTiming& timing) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<tuner::ConfigChoice> choice =
      cache_->Lookup(request.op, request.dtype, request.shape);
  if (!choice.ok()) return choice.status();
  timing.lookup_us = MicrosSince(start, Clock::now());
  const cudaStream_t stream = lane.stream;

  std::shared_ptr<IpcEvent> done_event;
  if (!request.wait_event.empty()) {
    absl::StatusOr<std::shared_ptr<IpcEvent>> wait = OpenEvent(request.wait_event, request);
    if (!wait.ok()) return wait.status();
    if (absl::Status s = CudaError(cudaStreamWaitEvent(stream, (*wait)->get(), 0),
                                   "waiting on wait_event");
        !s.ok()) {
      return s;
    }
  }
  if (!request.done_event.empty()) {
    absl::StatusOr<std::shared_ptr<IpcEvent>> done = OpenEvent(request.done_event, request);
    if (!done.ok()) return done.status();
    done_event = *std::move(done);
  }

  // Device memory is used in place; inline and shared-memory tensors are
  // staged through stream-ordered device buffers.
  auto device_input = [&](const TensorView& view, Staged& staged) -> absl::StatusOr<void*> {
    const char* source = view.data;
    switch (view.where) {
      case TensorView::Where::kAbsent:
        return nullptr;
      case TensorView::Where::kDevice:
        return view.data;
      case TensorView::Where::kClientHost:
        staged.host.resize(static_cast<size_t>(view.bytes));
        if (absl::Status s = CopyFromClientHost(staged.host.data(), view.data, view.bytes);
            !s.ok()) {
          return s;
        }
        source = staged.host.data();
        break;
      case TensorView::Where::kInline:
        break;
    }
    staged.device = std::make_unique<StreamBuffer>(stream);
    if (absl::Status s = staged.device->Allocate(static_cast<size_t>(view.bytes)); !s.ok()) {
      return s;
    }
    // Pageable source: the call returns once the bytes are staged, so
    // `source` need not outlive it.
    if (absl::Status s = CudaError(cudaMemcpyAsync(staged.device->data(), source,
                                                   static_cast<size_t>(view.bytes),
                                                   cudaMemcpyHostToDevice, stream),
                                   "copying an input to the device");
        !s.ok()) {
      return s;
    }
    return staged.device->data();
  };
  auto device_output = [&](const TensorView& view, Staged& staged) -> absl::StatusOr<void*> {
    if (view.where == TensorView::Where::kAbsent) return nullptr;
    if (view.where == TensorView::Where::kDevice) return view.data;
    staged.device = std::make_unique<StreamBuffer>(stream);
    if (absl::Status s = staged.device->Allocate(static_cast<size_t>(view.bytes)); !s.ok()) {
      return s;
    }
    return staged.device->data();
  };

  Staged x, gamma, beta, mask, y, mean, inv_std, row_scale;
  kernels::RowOpArgs args;
  absl::StatusOr<void*> pointer = device_input(request.input, x);
  if (!pointer.ok()) return pointer.status();
  args.x = *pointer;
  if ((pointer = device_input(request.gamma, gamma)); !pointer.ok()) return pointer.status();
  args.gamma = *pointer;
  if ((pointer = device_input(request.beta, beta)); !pointer.ok()) return pointer.status();
  args.beta = *pointer;
  if ((pointer = device_input(request.mask, mask)); !pointer.ok()) return pointer.status();
  args.mask = *pointer;
  if ((pointer = device_output(request.output, y)); !pointer.ok()) return pointer.status();
  args.y = *pointer;
  if ((pointer = device_output(request.mean, mean)); !pointer.ok()) return pointer.status();
  args.mean = static_cast<float*>(*pointer);
  if ((pointer = device_output(request.inv_std, inv_std)); !pointer.ok()) return pointer.status();
  args.inv_std = static_cast<float*>(*pointer);
  if ((pointer = device_output(request.row_scale, row_scale)); !pointer.ok()) {
    return pointer.status();
  }
  args.row_scale = static_cast<float*>(*pointer);
  if (kernels::TakesEpsilon(request.op)) args.params.epsilon = request.epsilon;
  if (request.op == kernels::Op::kScaledMaskedSoftmax) {
    args.params.scale = request.scale;
    args.params.mask_rows = request.mask_rows;
    args.params.causal = request.causal;
  }
  args.workspace = lane.workspace;
  args.workspace_bytes = kernels::kMaxWorkspaceBytes;

  // Staged outputs come back to the response (inline) or to a private copy
  // that goes to client shared memory after the stream finishes.
  RunResult result;
  const std::pair<const TensorView*, Staged*> outputs[] = {{&request.output, &y},
                                                           {&request.mean, &mean},
                                                           {&request.inv_std, &inv_std},
                                                           {&request.row_scale, &row_scale}};
  bool staged_outputs = false;
  for (auto [view, staged] : outputs) staged_outputs |= staged->device != nullptr;
  // With done_event and nothing to copy back, the Run is answered once
  // queued: the client orders its work after done_event.
  const bool answer_early = done_event != nullptr && !staged_outputs;

  // Timed: the ring's next pair. If its earlier launch has still not been
  // read (more than kTimingRing launches ahead), that time is given up.
  TimedLaunch* timed = request.time_kernel ? &lane.timing[lane.next] : nullptr;
  // Every CUDA call from the timing events to done_event.
  auto enqueue = [&]() -> absl::Status {
    const Clock::time_point before_start_event = Clock::now();
    if (timed != nullptr) {
      if (timed->pending) {
        timed->pending = false;
        --lane.pending;
      }
      if (absl::Status s = CudaError(cudaEventRecord(timed->start, stream), "cudaEventRecord");
          !s.ok()) {
        return s;
      }
    }
    const Clock::time_point before_launch = Clock::now();
    absl::StatusOr<kernels::LaunchConfig> launched = kernels::Launch(
        request.op, request.dtype, request.shape, args, choice->config, device_, stream);
    if (!launched.ok()) return launched.status();
    const Clock::time_point after_launch = Clock::now();
    if (timed != nullptr) {
      if (absl::Status s = CudaError(cudaEventRecord(timed->stop, stream), "cudaEventRecord");
          !s.ok()) {
        return s;
      }
      timed->pending = true;
      ++lane.pending;
      lane.next = (lane.next + 1) % kTimingRing;
    }
    timing.kernel_launch_us = MicrosSince(before_launch, after_launch);
    timing.timing_events_us =
        MicrosSince(before_start_event, before_launch) + MicrosSince(after_launch, Clock::now());
    // Report the config actually launched (Launch may narrow the pack size).
    choice->config = *launched;

    for (auto [view, staged] : outputs) {
      if (staged->device == nullptr) continue;
      char* host = nullptr;
      if (view->where == TensorView::Where::kInline) {
        if (view == &request.output) {
          result.output.resize(static_cast<size_t>(view->bytes));
          host = result.output.data();
        } else {
          std::vector<float>& stats = view == &request.mean      ? result.mean
                                      : view == &request.inv_std ? result.inv_std
                                                                 : result.row_scale;
          stats.resize(static_cast<size_t>(request.shape.rows));
          host = reinterpret_cast<char*>(stats.data());
        }
      } else {
        staged->host.resize(static_cast<size_t>(view->bytes));
        host = staged->host.data();
      }
      if (absl::Status s = CudaError(cudaMemcpyAsync(host, staged->device->data(),
                                                     static_cast<size_t>(view->bytes),
                                                     cudaMemcpyDeviceToHost, stream),
                                     "copying an output to the host");
          !s.ok()) {
        return s;
      }
    }
    if (done_event != nullptr) {
      if (absl::Status s = CudaError(cudaEventRecord(done_event->get(), stream),
                                     "recording done_event");
          !s.ok()) {
        return s;
      }
    }
    if (answer_early) {
      // The lane keeps the client memory open until its stream has passed
      // the kernel (the timing stop event, else `passed`).
      if (timed != nullptr) {
        lane.last_stop = timed->stop;
      } else {
        if (absl::Status s = CudaError(cudaEventRecord(lane.passed, stream), "cudaEventRecord");
            !s.ok()) {
          return s;
        }
        lane.last_stop = lane.passed;
      }
    }
    return absl::OkStatus();
  };

  if (absl::Status s = enqueue(); !s.ok()) return s;
  const Clock::time_point queued = Clock::now();
  if (!answer_early) {
    if (absl::Status s = CudaError(cudaStreamSynchronize(stream), "running the kernel");
        !s.ok()) {
      return s;
    }
    timing.gpu_wait_us = MicrosSince(queued, Clock::now());
  }
  result.config = *choice;
  timing.launch_us = MicrosSince(start, queued);

  if (answer_early) {
    // The kernel's time (if timed) is read later.
    lane.in_flight.insert(lane.in_flight.end(), request.memory.begin(), request.memory.end());
    result.answered_early = true;
    return result;
  }
  // The stream is idle: earlier early answers' memory can go too.
  lane.in_flight.clear();
  if (timed != nullptr) {
    const double kernel_us = ReadFinishedTimes(lane, timed);
    if (kernel_us < 0) {
      return absl::InternalError("cudaEventElapsedTime failed on a finished launch");
    }
    result.kernel_time_us = kernel_us;
  }
  for (auto [view, staged] : outputs) {
    if (view->where != TensorView::Where::kClientHost) continue;
    if (absl::Status s = CopyToClientHost(view->data, staged->host.data(), view->bytes); !s.ok()) {
      return s;
    }
  }
  return result;
}

}  // namespace kt::server
