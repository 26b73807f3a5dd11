// kt_launch_overhead_bench: the host-side cost of each step on the daemon's
// launch path, one GPU, no gRPC: what a small Run's handler pays before and
// after its kernel. Google Benchmark; CPU time per call is the figure.
//
//   kt_launch_overhead_bench [--benchmark_format=json --benchmark_out=FILE]
//
// Launches go to one stream and are synchronized every kSyncEvery calls, so
// the queue never fills (a full queue would make the launch call block).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "kernels/device_info.h"
#include "kernels/driver_api.h"
#include "kernels/launch.h"
#include "kernels/launch_config.h"

// empty_kernel.cu: launches a kernel that does nothing, as kernels::Launch
// launches, or with the runtime's launch call.
cudaError_t LaunchEmptyKernel(int device, cudaStream_t stream);
cudaError_t LaunchEmptyKernelWithRuntime(cudaStream_t stream);

namespace {

using kt::kernels::DType;
using kt::kernels::Op;
using kt::kernels::Shape;

constexpr int kSyncEvery = 256;
// The daemon benchmark's small Run: one row of 1024 float16.
constexpr Shape kShape{1, 1024, 1};

struct Fixture {
  kt::kernels::DeviceInfo device;
  cudaStream_t stream = nullptr;
  void* x = nullptr;
  void* y = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  kt::kernels::LaunchConfig config;
};

Fixture& Get() {
  static Fixture* fixture = [] {
    auto* f = new Fixture();
    absl::StatusOr<kt::kernels::DeviceInfo> device = kt::kernels::GetDeviceInfo(0);
    if (!device.ok() || cudaSetDevice(0) != cudaSuccess) {
      std::fprintf(stderr, "no usable CUDA device 0: %s\n", device.status().ToString().c_str());
      std::exit(1);
    }
    f->device = *device;
    cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking);
    cudaMalloc(&f->x, 2 * kShape.cols);
    cudaMalloc(&f->y, 2 * kShape.cols);
    cudaMemset(f->x, 0, 2 * kShape.cols);
    cudaEventCreate(&f->start);
    cudaEventCreate(&f->stop);
    absl::StatusOr<kt::kernels::LaunchConfig> config =
        kt::kernels::HeuristicConfig(Op::kSoftmax, DType::kFloat16, kShape, f->device);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      std::exit(1);
    }
    f->config = *config;
    return f;
  }();
  return *fixture;
}

kt::kernels::RowOpArgs Args(const Fixture& f) {
  kt::kernels::RowOpArgs args;
  args.x = f.x;
  args.y = f.y;
  return args;
}

// Times `queue` (one call that queues work on f.stream) back to back,
// synchronizing every kSyncEvery calls.
template <typename Queue>
void TimeQueuing(benchmark::State& state, Fixture& f, Queue queue) {
  int n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(queue());
    if (++n % kSyncEvery == 0) cudaStreamSynchronize(f.stream);
  }
  cudaStreamSynchronize(f.stream);
}

void BM_CudaGetDevice(benchmark::State& state) {
  Get();
  int device = -1;
  for (auto _ : state) {
    cudaGetDevice(&device);
    benchmark::DoNotOptimize(device);
  }
}
BENCHMARK(BM_CudaGetDevice);

void BM_CudaEventRecord(benchmark::State& state) {
  Fixture& f = Get();
  TimeQueuing(state, f, [&] { return cudaEventRecord(f.start, f.stream); });
}
BENCHMARK(BM_CudaEventRecord);


// The clock every daemon stage timing reads (a syscall where the host's
// clocksource has no vDSO path, as on some VMs).
void BM_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_SteadyClockNow);

// What the queue poller paid per look before its streams wrote a word
// (BM_EmptyKernelLaunchAndWord), and still pays when a stream stalls.
void BM_StreamQueryIdle(benchmark::State& state) {
  Fixture& f = Get();
  cudaStreamSynchronize(f.stream);
  for (auto _ : state) benchmark::DoNotOptimize(cudaStreamQuery(f.stream));
}
BENCHMARK(BM_StreamQueryIdle);

void BM_HeuristicConfig(benchmark::State& state) {
  Fixture& f = Get();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        kt::kernels::HeuristicConfig(Op::kSoftmax, DType::kFloat16, kShape, f.device));
  }
}
BENCHMARK(BM_HeuristicConfig);

void BM_ValidateConfig(benchmark::State& state) {
  Fixture& f = Get();
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        kt::kernels::ValidateConfig(Op::kSoftmax, DType::kFloat16, kShape, f.config, f.device));
  }
}
BENCHMARK(BM_ValidateConfig);

// kernels::Launch: argument and config checks, then the CUDA launch.
void BM_Launch(benchmark::State& state) {
  Fixture& f = Get();
  const kt::kernels::RowOpArgs args = Args(f);
  TimeQueuing(state, f, [&] {
    return kt::kernels::Launch(Op::kSoftmax, DType::kFloat16, kShape, args, f.config, f.device,
                               f.stream);
  });
}
BENCHMARK(BM_Launch);

// The CUDA launch call alone: an empty kernel, none of kernels::Launch's
// checks. BM_Launch less this is what kernels::Launch adds.
void BM_EmptyKernelLaunch(benchmark::State& state) {
  Fixture& f = Get();
  TimeQueuing(state, f, [&] { return LaunchEmptyKernel(f.device.ordinal, f.stream); });
}
BENCHMARK(BM_EmptyKernelLaunch);

// The runtime's launch call (<<<>>>), which kernels::Launch does not use:
// what the driver's call saves (kernels/dispatch_launch.h).
void BM_EmptyKernelRuntimeLaunch(benchmark::State& state) {
  Fixture& f = Get();
  TimeQueuing(state, f, [&] { return LaunchEmptyKernelWithRuntime(f.stream); });
}
BENCHMARK(BM_EmptyKernelRuntimeLaunch);


// The host's floor for any synchronous Run: launch an empty kernel and wait
// for the stream.
void BM_EmptyKernelLaunchAndWait(benchmark::State& state) {
  Fixture& f = Get();
  for (auto _ : state) {
    benchmark::DoNotOptimize(LaunchEmptyKernel(f.device.ordinal, f.stream));
    cudaStreamSynchronize(f.stream);
  }
}
BENCHMARK(BM_EmptyKernelLaunchAndWait)->UseRealTime();

// The queue poller's floor: launch an empty kernel, have the stream write a
// pinned host word after it (cuStreamWriteValue32) and spin on the word, as
// the daemon's RunStreams tell when the GPU passed a batch.
void BM_EmptyKernelLaunchAndWord(benchmark::State& state) {
  Fixture& f = Get();
  using WriteValue32 = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
  const auto write = kt::kernels::DriverFunction<WriteValue32>("cuStreamWriteValue32");
  uint32_t* word = nullptr;
  void* address = nullptr;
  if (write == nullptr ||
      cudaHostAlloc(reinterpret_cast<void**>(&word), sizeof(uint32_t), cudaHostAllocMapped) !=
          cudaSuccess ||
      cudaHostGetDevicePointer(&address, word, 0) != cudaSuccess) {
    state.SkipWithError("no cuStreamWriteValue32 or mapped host memory");
    return;
  }
  *word = 0;
  uint32_t batch = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(LaunchEmptyKernel(f.device.ordinal, f.stream));
    write(reinterpret_cast<CUstream>(f.stream), reinterpret_cast<CUdeviceptr>(address), ++batch,
          0);
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != batch) {
    }
  }
  cudaStreamSynchronize(f.stream);
  cudaFreeHost(word);
}
BENCHMARK(BM_EmptyKernelLaunchAndWord)->UseRealTime();

// One synchronous small Run's GPU part, as the daemon's lane does it:
// launch, then wait for the stream (the runtime's default wait), with and
// without the timing events around the kernel.
void BM_LaunchAndWait(benchmark::State& state) {
  Fixture& f = Get();
  const bool timed = state.range(0) != 0;
  const kt::kernels::RowOpArgs args = Args(f);
  for (auto _ : state) {
    if (timed) cudaEventRecord(f.start, f.stream);
    benchmark::DoNotOptimize(kt::kernels::Launch(Op::kSoftmax, DType::kFloat16, kShape, args,
                                                 f.config, f.device, f.stream));
    if (timed) cudaEventRecord(f.stop, f.stream);
    cudaStreamSynchronize(f.stream);
  }
}
BENCHMARK(BM_LaunchAndWait)->ArgName("timed")->Arg(0)->Arg(1)->UseRealTime();

// The queue poller's way to wait: launch, then ask the stream until it has
// passed the kernel (no cudaStreamSynchronize).
void BM_LaunchAndQueryLoop(benchmark::State& state) {
  Fixture& f = Get();
  const kt::kernels::RowOpArgs args = Args(f);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kt::kernels::Launch(Op::kSoftmax, DType::kFloat16, kShape, args,
                                                 f.config, f.device, f.stream));
    while (cudaStreamQuery(f.stream) == cudaErrorNotReady) {
    }
  }
}
BENCHMARK(BM_LaunchAndQueryLoop)->UseRealTime();

// The same after the thread slept `idle_us` (a daemon thread waits for the
// next request between Runs): how much colder caches cost the launch call
// and the wait. Manual time: the sleep is not counted.
void BM_LaunchAndWaitAfterIdle(benchmark::State& state) {
  Fixture& f = Get();
  const auto idle = std::chrono::microseconds(state.range(0));
  const kt::kernels::RowOpArgs args = Args(f);
  for (auto _ : state) {
    std::this_thread::sleep_for(idle);
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(kt::kernels::Launch(Op::kSoftmax, DType::kFloat16, kShape, args,
                                                 f.config, f.device, f.stream));
    const auto launched = std::chrono::steady_clock::now();
    cudaStreamSynchronize(f.stream);
    const auto done = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(done - start).count());
    state.counters["launch_us"] +=
        std::chrono::duration<double, std::micro>(launched - start).count();
  }
  state.counters["launch_us"] /= static_cast<double>(state.iterations());
}
BENCHMARK(BM_LaunchAndWaitAfterIdle)->ArgName("idle_us")->Arg(0)->Arg(200)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
