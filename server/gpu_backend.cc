// GPU backend for inline tensors (see gpu_backend.h).
#include "server/gpu_backend.h"

#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/launch.h"

namespace kt::server {
namespace {

absl::Status CudaError(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

// Stream-ordered device allocation, freed on the same stream.
class StreamBuffer {
 public:
  StreamBuffer(cudaStream_t stream) : stream_(stream) {}
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

}  // namespace

// Borrows a lane from the pool for one request, waiting when all are busy.
class GpuBackend::LaneLease {
 public:
  explicit LaneLease(GpuBackend& backend) : backend_(backend) {
    absl::MutexLock lock(&backend_.mu_);
    backend_.mu_.Await(absl::Condition(
        +[](std::vector<int>* free) { return !free->empty(); }, &backend_.free_lanes_));
    index_ = backend_.free_lanes_.back();
    backend_.free_lanes_.pop_back();
  }
  ~LaneLease() {
    absl::MutexLock lock(&backend_.mu_);
    backend_.free_lanes_.push_back(index_);
  }
  const Lane& lane() const { return backend_.lanes_[index_]; }

 private:
  GpuBackend& backend_;
  int index_ = 0;
};

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(
    int ordinal, int streams, std::unique_ptr<ConfigCache> cache) {
  absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
  if (!device.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", ordinal, ": ", device.status().message()));
  }
  if (absl::Status s = CudaError(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
  // Create the primary context now rather than on the first request.
  if (absl::Status s = CudaError(cudaFree(nullptr), "creating the CUDA context"); !s.ok()) {
    return s;
  }
  std::unique_ptr<GpuBackend> backend(new GpuBackend(*device, std::move(cache)));
  for (int i = 0; i < streams; ++i) {
    Lane lane;
    absl::Status s = CudaError(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking),
                               "cudaStreamCreate");
    if (s.ok()) s = CudaError(cudaEventCreate(&lane.start), "cudaEventCreate");
    if (s.ok()) s = CudaError(cudaEventCreate(&lane.stop), "cudaEventCreate");
    backend->lanes_.push_back(lane);  // destroyed by ~GpuBackend even on error
    if (!s.ok()) return s;
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
    if (lane.start != nullptr) cudaEventDestroy(lane.start);
    if (lane.stop != nullptr) cudaEventDestroy(lane.stop);
  }
}

std::vector<kernels::DeviceInfo> GpuBackend::devices() const {
  std::vector<kernels::DeviceInfo> devices;
  for (int ordinal = 0; ordinal < kernels::CudaDeviceCount(); ++ordinal) {
    absl::StatusOr<kernels::DeviceInfo> device = kernels::GetDeviceInfo(ordinal);
    if (device.ok()) devices.push_back(*std::move(device));
  }
  return devices;
}

absl::StatusOr<RunResult> GpuBackend::Execute(const RunRequest& request) {
  // The executing thread (a gRPC handler thread) sets its own device; the
  // kernel library never switches devices behind its back.
  if (absl::Status s = CudaError(cudaSetDevice(device_.ordinal), "cudaSetDevice"); !s.ok()) {
    return s;
  }
  LaneLease lease(*this);
  absl::StatusOr<RunResult> result = ExecuteOn(lease.lane(), request);
  // Whatever happened, leave the lane idle for the next request.
  cudaStreamSynchronize(lease.lane().stream);
  return result;
}

absl::StatusOr<RunResult> GpuBackend::ExecuteOn(const Lane& lane, const RunRequest& request) {
  absl::StatusOr<ConfigChoice> choice = cache_->Lookup(request.op, request.dtype, request.shape);
  if (!choice.ok()) return choice.status();

  const cudaStream_t stream = lane.stream;
  const size_t bytes = static_cast<size_t>(request.tensor_bytes());
  const size_t rows = static_cast<size_t>(request.shape.rows);
  const bool stats = request.op == kernels::Op::kLayerNorm && request.want_mean_inv_std;
  StreamBuffer x(stream), y(stream), gamma(stream), beta(stream), mean(stream), inv_std(stream);
  if (absl::Status s = x.Allocate(bytes); !s.ok()) return s;
  if (absl::Status s = y.Allocate(bytes); !s.ok()) return s;
  if (absl::Status s = CudaError(cudaMemcpyAsync(x.data(), request.input.data(), bytes,
                                                 cudaMemcpyHostToDevice, stream),
                                 "copying the input to the device");
      !s.ok()) {
    return s;
  }
  kernels::RowOpArgs args;
  args.x = x.data();
  args.y = y.data();
  if (request.op == kernels::Op::kLayerNorm) {
    args.epsilon = request.epsilon;
    for (auto [source, buffer, target] :
         {std::tuple(request.gamma, &gamma, &args.gamma), std::tuple(request.beta, &beta, &args.beta)}) {
      if (source.empty()) continue;
      if (absl::Status s = buffer->Allocate(source.size()); !s.ok()) return s;
      if (absl::Status s = CudaError(cudaMemcpyAsync(buffer->data(), source.data(), source.size(),
                                                     cudaMemcpyHostToDevice, stream),
                                     "copying gamma/beta to the device");
          !s.ok()) {
        return s;
      }
      *target = buffer->data();
    }
    if (stats) {
      if (absl::Status s = mean.Allocate(rows * sizeof(float)); !s.ok()) return s;
      if (absl::Status s = inv_std.Allocate(rows * sizeof(float)); !s.ok()) return s;
      args.mean = static_cast<float*>(mean.data());
      args.inv_std = static_cast<float*>(inv_std.data());
    }
  }

  if (absl::Status s = CudaError(cudaEventRecord(lane.start, stream), "cudaEventRecord"); !s.ok()) {
    return s;
  }
  absl::StatusOr<kernels::LaunchConfig> launched = kernels::Launch(
      request.op, request.dtype, request.shape, args, choice->config, device_, stream);
  if (!launched.ok()) return launched.status();
  if (absl::Status s = CudaError(cudaEventRecord(lane.stop, stream), "cudaEventRecord"); !s.ok()) {
    return s;
  }

  RunResult result;
  result.output.resize(bytes);
  result.mean.resize(stats ? rows : 0);
  result.inv_std.resize(stats ? rows : 0);
  absl::Status s = CudaError(
      cudaMemcpyAsync(result.output.data(), y.data(), bytes, cudaMemcpyDeviceToHost, stream),
      "copying the output to the host");
  if (s.ok() && stats) {
    s = CudaError(cudaMemcpyAsync(result.mean.data(), mean.data(), rows * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream),
                  "copying mean to the host");
  }
  if (s.ok() && stats) {
    s = CudaError(cudaMemcpyAsync(result.inv_std.data(), inv_std.data(), rows * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream),
                  "copying inv_std to the host");
  }
  if (s.ok()) s = CudaError(cudaStreamSynchronize(stream), "running the kernel");
  if (!s.ok()) return s;
  float ms = 0;
  if (absl::Status t = CudaError(cudaEventElapsedTime(&ms, lane.start, lane.stop),
                                 "cudaEventElapsedTime");
      !t.ok()) {
    return t;
  }
  // Report the config actually launched (Launch may narrow the pack size).
  choice->config = *launched;
  result.config = *std::move(choice);
  result.kernel_time_us = ms * 1e3;
  return result;
}

}  // namespace kt::server
