// kt_daemon_bench: kerntuned as its clients see it, on a GPU host. Talks to
// a running daemon over its Unix socket with CUDA IPC buffers it allocates:
//  - latency: p50/p99 of a small Run (1 x 1024 fp16, registered buffers)
//    against the floor of the same channel, a grpc.health.v1 Check (echo);
//  - throughput: Runs per second with 1, 4 and 16 concurrent clients, each
//    on its own connection with its own buffers;
//  - bandwidth: a 49152 x 4096 fp16 softmax through the daemon, client
//    round trip against the kernel time the daemon measured: synchronous,
//    chained through IPC events, and pipelined (replies before the kernel
//    ends, one wait at the end).
//
//   kt_daemon_bench --socket=PATH [--out=FILE.json] [--iterations=N]
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "kerntune/v1/kerntune.grpc.pb.h"

ABSL_FLAG(std::string, socket, "", "the daemon's Unix socket");
ABSL_FLAG(std::string, out, "", "write the results as JSON here");
ABSL_FLAG(int, iterations, 3000, "timed calls per latency series");
ABSL_FLAG(double, throughput_seconds, 3.0, "seconds per concurrency level");

namespace {

namespace pb = ::kerntune::v1;
using Clock = std::chrono::steady_clock;

void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "kt_daemon_bench: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

void Check(const grpc::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "kt_daemon_bench: %s: %s\n", what, status.error_message().c_str());
    std::exit(1);
  }
}

std::shared_ptr<grpc::Channel> NewConnection(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // A distinct argument per channel: gRPC would otherwise share one
  // connection between channels with equal arguments.
  static std::atomic<int> next{0};
  args.SetInt("kt.connection", next++);
  return grpc::CreateCustomChannel("unix:" + socket, grpc::InsecureChannelCredentials(), args);
}

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
}

// A cudaMalloc'd block registered with the daemon by CUDA IPC.
struct IpcBuffer {
  void* device = nullptr;
  std::string id;
};

IpcBuffer RegisterNew(pb::KernTune::Stub& stub, size_t bytes, const char* label) {
  IpcBuffer buffer;
  Check(cudaMalloc(&buffer.device, bytes), "cudaMalloc");
  cudaIpcMemHandle_t handle;
  Check(cudaIpcGetMemHandle(&handle, buffer.device), "cudaIpcGetMemHandle");
  pb::RegisterBufferRequest request;
  request.mutable_cuda_ipc()->set_handle(std::string(reinterpret_cast<const char*>(&handle),
                                                     sizeof(handle)));
  request.mutable_cuda_ipc()->set_device_ordinal(0);
  request.set_size_bytes(static_cast<int64_t>(bytes));
  request.set_label(label);
  pb::RegisterBufferResponse response;
  grpc::ClientContext context;
  Check(stub.RegisterBuffer(&context, request, &response), "RegisterBuffer");
  buffer.id = response.buffer().buffer_id();
  return buffer;
}

// softmax float16 rows x cols from the start of `buffer` to the byte after.
pb::RunRequest SoftmaxRequest(const IpcBuffer& buffer, int64_t rows, int64_t cols) {
  pb::RunRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT16);
  request.mutable_shape()->set_rows(rows);
  request.mutable_shape()->set_cols(cols);
  request.mutable_input()->mutable_buffer()->set_buffer_id(buffer.id);
  request.mutable_output()->mutable_buffer()->set_buffer_id(buffer.id);
  request.mutable_output()->mutable_buffer()->set_offset_bytes(rows * cols * 2);
  return request;
}

void FillRandom(void* device, int64_t elements) {
  std::vector<__half> host(static_cast<size_t>(elements));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 2);
  for (auto& h : host) h = __float2half(normal(rng));
  Check(cudaMemcpy(device, host.data(), host.size() * 2, cudaMemcpyHostToDevice), "fill");
}

struct Series {
  double p50 = 0, p99 = 0, mean = 0;
};

Series Summarize(const std::vector<double>& us) {
  Series s;
  s.p50 = Percentile(us, 0.50);
  s.p99 = Percentile(us, 0.99);
  for (double u : us) s.mean += u / us.size();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string socket = absl::GetFlag(FLAGS_socket);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  if (socket.empty()) {
    std::fprintf(stderr, "kt_daemon_bench: --socket is required\n");
    return 2;
  }
  Check(cudaSetDevice(0), "cudaSetDevice");
  auto channel = NewConnection(socket);
  auto stub = pb::KernTune::NewStub(channel);
  std::string json = "{\n";

  // --- latency: small Run vs the echo floor on the same channel.
  {
    IpcBuffer buffer = RegisterNew(*stub, 2 * 1024 * 2, "latency");
    FillRandom(buffer.device, 1024);
    const pb::RunRequest run = SoftmaxRequest(buffer, 1, 1024);
    grpc::GenericStub generic(channel);
    // HealthCheckRequest{} serializes to zero bytes: one empty slice (a
    // ByteBuffer with no slices at all is refused as an invalid message).
    grpc::Slice empty_slice("", 0);
    grpc::ByteBuffer empty_request(&empty_slice, 1);
    std::vector<double> run_us, echo_us, kernel_us;
    for (int i = 0; i < iterations + 200; ++i) {
      // Alternate so that both series see the same machine state.
      {
        grpc::ClientContext context;
        grpc::ByteBuffer reply;
        grpc::Status status;
        const auto start = Clock::now();
        std::mutex mu;
        std::condition_variable done;
        bool finished = false;
        generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                          &empty_request, &reply, [&](grpc::Status s) {
                            std::lock_guard<std::mutex> lock(mu);
                            status = s;
                            finished = true;
                            done.notify_one();
                          });
        std::unique_lock<std::mutex> lock(mu);
        done.wait(lock, [&] { return finished; });
        const double us = Us(Clock::now() - start);
        Check(status, "health Check");
        if (i >= 200) echo_us.push_back(us);
      }
      {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        Check(stub->Run(&context, run, &response), "Run 1x1024");
        const double us = Us(Clock::now() - start);
        if (i >= 200) {
          run_us.push_back(us);
          kernel_us.push_back(response.kernel_time_us());
        }
      }
    }
    const Series run_s = Summarize(run_us), echo_s = Summarize(echo_us),
                 kernel_s = Summarize(kernel_us);
    std::printf("latency (1x1024 fp16 softmax, registered IPC buffers, %d calls each):\n"
                "  Run   p50 %.1f us  p99 %.1f us\n  echo  p50 %.1f us  p99 %.1f us\n"
                "  overhead over echo at p50: %.1f us (kernel %.1f us of it)\n",
                iterations, run_s.p50, run_s.p99, echo_s.p50, echo_s.p99, run_s.p50 - echo_s.p50,
                kernel_s.p50);
    absl::StrAppendFormat(&json,
                          "  \"latency\": {\"shape\": [1, 1024], \"dtype\": \"float16\", "
                          "\"calls\": %d, \"run_p50_us\": %.2f, \"run_p99_us\": %.2f, "
                          "\"echo_p50_us\": %.2f, \"echo_p99_us\": %.2f, "
                          "\"kernel_p50_us\": %.2f, \"overhead_p50_us\": %.2f},\n",
                          iterations, run_s.p50, run_s.p99, echo_s.p50, echo_s.p99, kernel_s.p50,
                          run_s.p50 - echo_s.p50);
  }

  // --- throughput: N clients, each its own connection and buffers.
  json += "  \"throughput\": [";
  for (int clients : {1, 4, 16}) {
    std::vector<std::thread> threads;
    std::atomic<int64_t> calls{0};
    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> latencies(clients);
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        Check(cudaSetDevice(0), "cudaSetDevice");
        auto own_stub = pb::KernTune::NewStub(NewConnection(socket));
        IpcBuffer buffer = RegisterNew(*own_stub, 2 * 1024 * 2, "throughput");
        FillRandom(buffer.device, 1024);
        const pb::RunRequest run = SoftmaxRequest(buffer, 1, 1024);
        while (!stop.load()) {
          grpc::ClientContext context;
          pb::RunResponse response;
          const auto start = Clock::now();
          Check(own_stub->Run(&context, run, &response), "Run (throughput)");
          latencies[c].push_back(Us(Clock::now() - start));
          calls.fetch_add(1);
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // connect and register
    const int64_t before = calls.load();
    const auto start = Clock::now();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(absl::GetFlag(FLAGS_throughput_seconds)));
    const int64_t during = calls.load() - before;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stop = true;
    for (auto& t : threads) t.join();
    std::vector<double> all;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    const Series s = Summarize(all);
    std::printf("throughput, %2d clients: %.0f Runs/s (latency p50 %.1f us, p99 %.1f us)\n",
                clients, during / seconds, s.p50, s.p99);
    absl::StrAppendFormat(&json,
                          "%s\n    {\"clients\": %d, \"runs_per_s\": %.1f, \"p50_us\": %.2f, "
                          "\"p99_us\": %.2f}",
                          clients == 1 ? "" : ",", clients, during / seconds, s.p50, s.p99);
  }
  json += "\n  ],\n";

  // --- bandwidth: a large softmax through the daemon vs the kernel alone.
  {
    constexpr int64_t kRows = 49152, kCols = 4096;
    const double bytes = 2.0 * kRows * kCols * 2;  // read + write
    IpcBuffer buffer = RegisterNew(*stub, static_cast<size_t>(bytes), "bandwidth");
    FillRandom(buffer.device, kRows * kCols);
    pb::RunRequest run = SoftmaxRequest(buffer, kRows, kCols);
    std::vector<double> round_trip_us, kernel_us;
    for (int i = 0; i < 60; ++i) {
      grpc::ClientContext context;
      pb::RunResponse response;
      const auto start = Clock::now();
      Check(stub->Run(&context, run, &response), "Run 49152x4096");
      if (i >= 10) {
        round_trip_us.push_back(Us(Clock::now() - start));
        kernel_us.push_back(response.kernel_time_us());
      }
    }
    // With events: the client queues its own wait on done_event, so the
    // round trip no longer includes the kernel; measure back-to-back Runs
    // ordered by the events, finished by one synchronize.
    cudaEvent_t wait_event, done_event;
    Check(cudaEventCreateWithFlags(&wait_event, cudaEventInterprocess | cudaEventDisableTiming),
          "cudaEventCreate");
    Check(cudaEventCreateWithFlags(&done_event, cudaEventInterprocess | cudaEventDisableTiming),
          "cudaEventCreate");
    cudaIpcEventHandle_t wait_handle, done_handle;
    Check(cudaIpcGetEventHandle(&wait_handle, wait_event), "cudaIpcGetEventHandle");
    Check(cudaIpcGetEventHandle(&done_handle, done_event), "cudaIpcGetEventHandle");
    run.set_wait_event(std::string(reinterpret_cast<const char*>(&wait_handle), 64));
    run.set_done_event(std::string(reinterpret_cast<const char*>(&done_handle), 64));
    cudaStream_t stream;
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    constexpr int kAsyncRuns = 50;
    Check(cudaEventRecord(wait_event, stream), "cudaEventRecord");
    Check(cudaStreamSynchronize(stream), "sync");
    const auto async_start = Clock::now();
    for (int i = 0; i < kAsyncRuns; ++i) {
      grpc::ClientContext context;
      pb::RunResponse response;
      Check(stub->Run(&context, run, &response), "Run with events");
      // The next Run waits for this one's done: order our stream after it
      // and record the wait event there.
      Check(cudaStreamWaitEvent(stream, done_event, 0), "cudaStreamWaitEvent");
      Check(cudaEventRecord(wait_event, stream), "cudaEventRecord");
    }
    Check(cudaStreamSynchronize(stream), "sync");
    const double async_us = Us(Clock::now() - async_start) / kAsyncRuns;

    // Pipelined: Runs sent back to back, each answered once queued
    // (done_event, no wait_event); the client waits once, on the last
    // record. The RPCs overlap the kernels, as an asynchronous client's do.
    pb::RunRequest pipelined = SoftmaxRequest(buffer, kRows, kCols);
    pipelined.set_done_event(run.done_event());
    Check(cudaDeviceSynchronize(), "sync");
    const auto pipelined_start = Clock::now();
    for (int i = 0; i < kAsyncRuns; ++i) {
      grpc::ClientContext context;
      pb::RunResponse response;
      Check(stub->Run(&context, pipelined, &response), "Run pipelined");
    }
    Check(cudaEventSynchronize(done_event), "cudaEventSynchronize");
    const double pipelined_us = Us(Clock::now() - pipelined_start) / kAsyncRuns;

    const Series rt = Summarize(round_trip_us), k = Summarize(kernel_us);
    const double e2e_gbps = bytes / (rt.p50 * 1e3), kernel_gbps = bytes / (k.p50 * 1e3),
                 async_gbps = bytes / (async_us * 1e3),
                 pipelined_gbps = bytes / (pipelined_us * 1e3);
    std::printf("bandwidth (49152x4096 fp16 softmax, registered IPC buffers):\n"
                "  kernel alone (daemon's CUDA events) p50 %.1f us = %.0f GB/s\n"
                "  through the daemon, synchronous p50 %.1f us = %.0f GB/s (%.1f%% of kernel)\n"
                "  through the daemon, IPC events chained, %d back to back: %.1f us each = %.0f GB/s "
                "(%.1f%%)\n"
                "  through the daemon, pipelined (done_event only, one wait at the end), %d: "
                "%.1f us each = %.0f GB/s (%.1f%%)\n",
                k.p50, kernel_gbps, rt.p50, e2e_gbps, 100 * e2e_gbps / kernel_gbps, kAsyncRuns,
                async_us, async_gbps, 100 * async_gbps / kernel_gbps, kAsyncRuns, pipelined_us,
                pipelined_gbps, 100 * pipelined_gbps / kernel_gbps);
    absl::StrAppendFormat(&json,
                          "  \"bandwidth\": {\"shape\": [%d, %d], \"dtype\": \"float16\", "
                          "\"kernel_p50_us\": %.2f, \"kernel_gbps\": %.1f, "
                          "\"sync_round_trip_p50_us\": %.2f, \"sync_gbps\": %.1f, "
                          "\"sync_pct_of_kernel\": %.2f, \"events_us_per_run\": %.2f, "
                          "\"events_gbps\": %.1f, \"events_pct_of_kernel\": %.2f, "
                          "\"pipelined_us_per_run\": %.2f, \"pipelined_gbps\": %.1f, "
                          "\"pipelined_pct_of_kernel\": %.2f}\n",
                          kRows, kCols, k.p50, kernel_gbps, rt.p50, e2e_gbps,
                          100 * e2e_gbps / kernel_gbps, async_us, async_gbps,
                          100 * async_gbps / kernel_gbps, pipelined_us, pipelined_gbps,
                          100 * pipelined_gbps / kernel_gbps);
  }
  json += "}\n";
  if (!absl::GetFlag(FLAGS_out).empty()) std::ofstream(absl::GetFlag(FLAGS_out)) << json;
  return 0;
}
