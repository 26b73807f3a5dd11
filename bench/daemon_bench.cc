// kt_daemon_bench: kerntuned as its clients see it, on a GPU host. Talks to
// a running daemon over its Unix socket with CUDA IPC buffers it allocates:
//  - latency: p50/p99 of a small Run (1 x 1024 fp16, registered buffers)
//    against the floor of the same channel, a grpc.health.v1 Check (echo)
//    made the same way as the Run (a blocking unary call), and against
//    GetConfig (the daemon's own service, a trivial handler); and the three
//    again from a client that polls for its replies instead of sleeping;
//  - throughput: Runs per second with 1, 4 and 16 concurrent clients, each
//    on its own connection with its own buffers, timed once all registered;
//  - bandwidth: a 49152 x 4096 fp16 softmax through the daemon against the
//    kernel time the daemon measured (its CUDA events, the same Runs, so the
//    same config): synchronous (a blocking call, and a client polling for
//    the reply); chained through the client's stream with IPC
//    events; chained on the daemon's own stream; pipelined (replies before
//    the kernel ends) with 1 and with --pipeline_depth calls in flight;
//  - the submission queue (OpenQueue, client/run_queue.h), in the same run
//    beside gRPC: the small Run's round trip (interleaved with the gRPC
//    series above), Runs per second with 1, 4 and 16 threads sharing one
//    queue (as the threads of one DaemonClient do) and with 16 threads over
//    --queue_throughput_queues queues, and the synchronous 49152 x 4096
//    softmax (interleaved with the gRPC one) against the kernel time of its
//    own Runs. JSON key "queue"; {"available": false, "error": ...} when
//    the daemon offers no queue (or --noqueue).
// Every Run reply carries the daemon's RunTiming; the bench prints and
// records the p50 of each stage beside the client's round trip. For the
// asynchronous series the daemon's GetStatus counters, read before and after,
// give the GPU time its kernels took and how busy they kept the GPU.
// Between series the bench's own process does no GPU work, so the two CUDA
// contexts (bench, daemon) do not time-slice the GPU, except in the series
// chained through the client's stream, where that is what is measured.
//
//   kt_daemon_bench --socket=PATH [--out=FILE.json] [--iterations=N] [--noqueue]
//                   [--queue_throughput_queues=N]
//   kt_daemon_bench --socket=PATH --idle_tuning [--out=FILE.json]
//     (only the idle tuner's effect on small Runs: IdleTuningInterference)
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/daemon_client.h"
#include "client/run_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "kernels/device_identity.h"
#include "kerntune/v1/kerntune.grpc.pb.h"

ABSL_FLAG(std::string, socket, "", "the daemon's Unix socket");
ABSL_FLAG(std::string, out, "", "write the results as JSON here");
ABSL_FLAG(int, iterations, 3000, "timed calls per latency series");
ABSL_FLAG(double, throughput_seconds, 3.0, "seconds per concurrency level");
ABSL_FLAG(int, pipeline_depth, 4, "Runs in flight in the deep pipelined series");
ABSL_FLAG(int, device, 0, "this process's CUDA device (the daemon's is found by UUID)");
ABSL_FLAG(bool, queue, true,
          "also measure the submission queue (OpenQueue) beside gRPC; --noqueue: gRPC only");
ABSL_FLAG(bool, idle_tuning, false,
          "measure only how background tuning (a daemon started with --tune_idle and an empty "
          "store) affects a client's small Runs: bursts with nothing to tune, then with "
          "untuned problems waiting");
ABSL_FLAG(int, queue_throughput_queues, 4,
          "the 16-thread queue series also runs with the threads spread over this many queues "
          "(1-7: the daemon allows 8 per process, one is the bench's own); 0 skips it");

namespace {

namespace pb = ::kerntune::v1;
using Clock = std::chrono::steady_clock;

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";

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

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "kt_daemon_bench: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// A Run through a submission queue; exits on any failure (the bench's Runs
// are all valid, so an error is the daemon's or the queue's).
pb::RunResponse QueueRun(kt::client::RunQueueClient& queue, const pb::RunRequest& request,
                         const char* what) {
  kt::client::RunQueueClient::Outcome outcome = queue.Run(request, absl::Seconds(30));
  if (!outcome.submitted) {
    std::fprintf(stderr, "kt_daemon_bench: %s: not submitted (the queue is closed): %s\n", what,
                 outcome.response.status().ToString().c_str());
    std::exit(1);
  }
  Check(outcome.response.status(), what);
  return *std::move(outcome.response);
}

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
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
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
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

// Waits for a started unary call's reply by polling `queue` instead of
// sleeping, so that this thread never leaves its core: what remains of the
// round trip is the daemon's side and the socket, without the client's own
// wake-up.
template <class Reader, class Reply>
grpc::Status AwaitByPolling(grpc::CompletionQueue& queue, Reader& reader, Reply* reply) {
  grpc::Status status;
  reader.Finish(reply, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  while (queue.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) !=
         grpc::CompletionQueue::GOT_EVENT) {
  }
  return status;
}

// The daemon's RunTiming of many Runs, and what the client saw outside it.
class Stages {
 public:
  void Add(const pb::RunResponse& response, double round_trip_us) {
    const pb::RunTiming& t = response.server_timing();
    validate_.push_back(t.validate_us());
    resolve_.push_back(t.resolve_us());
    execute_.push_back(t.execute_us());
    lane_wait_.push_back(t.lane_wait_us());
    launch_.push_back(t.launch_us());
    lookup_.push_back(t.lookup_us());
    timing_events_.push_back(t.timing_events_us());
    kernel_launch_.push_back(t.kernel_launch_us());
    gpu_wait_.push_back(t.gpu_wait_us());
    handler_.push_back(t.handler_us());
    // gRPC on both sides, the socket, thread hand-offs: everything the
    // daemon's handler does not see.
    outside_.push_back(round_trip_us - t.handler_us());
    // Queued Runs whose descriptor repeated the queue's last one: their
    // validation was reused (validate_us is then only finding it).
    repeated_ += t.repeated_descriptor() ? 1 : 0;
  }
  double handler_p50() const { return Percentile(handler_, 0.5); }
  double outside_p50() const { return Percentile(outside_, 0.5); }

  std::string Text() const {
    return absl::StrFormat(
        "    daemon (p50): handler %.1f us = validate %.1f + resolve %.1f + execute %.1f "
        "[lane wait %.1f, launch %.1f (config lookup %.1f, timing events %.1f, kernel "
        "launch call %.1f), GPU wait %.1f] + reply %.1f; outside the handler (gRPC, socket, "
        "threads) %.1f us; repeated descriptors %d of %d\n",
        handler_p50(), P(validate_), P(resolve_), P(execute_), P(lane_wait_), P(launch_),
        P(lookup_), P(timing_events_), P(kernel_launch_), P(gpu_wait_),
        std::max(0.0, handler_p50() - P(validate_) - P(resolve_) - P(execute_)),
        outside_p50(), repeated_, static_cast<int>(handler_.size()));
  }
  std::string Json() const {
    return absl::StrFormat(
        "{\"handler_p50_us\": %.2f, \"handler_p99_us\": %.2f, \"validate_p50_us\": %.2f, "
        "\"resolve_p50_us\": %.2f, \"execute_p50_us\": %.2f, \"lane_wait_p50_us\": %.2f, "
        "\"launch_p50_us\": %.2f, \"lookup_p50_us\": %.2f, \"timing_events_p50_us\": %.2f, "
        "\"kernel_launch_p50_us\": %.2f, \"gpu_wait_p50_us\": %.2f, "
        "\"outside_handler_p50_us\": %.2f, \"outside_handler_p99_us\": %.2f, "
        "\"runs\": %d, \"repeated_descriptors\": %d}",
        handler_p50(), Percentile(handler_, 0.99), P(validate_), P(resolve_), P(execute_),
        P(lane_wait_), P(launch_), P(lookup_), P(timing_events_), P(kernel_launch_),
        P(gpu_wait_), outside_p50(), Percentile(outside_, 0.99),
        static_cast<int>(handler_.size()), repeated_);
  }

 private:
  static double P(const std::vector<double>& v) { return Percentile(v, 0.5); }
  std::vector<double> validate_, resolve_, execute_, lane_wait_, launch_, lookup_,
      timing_events_, kernel_launch_, gpu_wait_, handler_, outside_;
  int repeated_ = 0;
};

// GetStatus counters (cumulative in the daemon; a series takes differences).
struct Counters {
  int64_t runs = 0, early = 0, kernels = 0;
  double kernel_us = 0;
};

Counters ReadCounters(pb::KernTune::Stub& stub) {
  grpc::ClientContext context;
  pb::GetStatusResponse status;
  Check(stub.GetStatus(&context, pb::GetStatusRequest(), &status), "GetStatus");
  return {status.stats().runs(), status.stats().runs_answered_early(),
          status.stats().kernels_timed(), status.stats().kernel_us()};
}

// What the GPU did during an asynchronous series of `runs` Runs lasting
// `wall_us`, from the daemon's counters before and after.
struct GpuUse {
  int64_t kernels = 0;
  double kernel_mean_us = 0;
  double busy_pct = 0;  // summed kernel time over wall time
};

GpuUse Use(const Counters& before, const Counters& after, double wall_us) {
  GpuUse use;
  use.kernels = after.kernels - before.kernels;
  const double kernel_us = after.kernel_us - before.kernel_us;
  use.kernel_mean_us = use.kernels > 0 ? kernel_us / use.kernels : 0;
  use.busy_pct = wall_us > 0 ? 100 * kernel_us / wall_us : 0;
  return use;
}

// A cudaMalloc'd block registered with the daemon by CUDA IPC.
struct IpcBuffer {
  void* device = nullptr;
  std::string id;
};

IpcBuffer RegisterNew(pb::KernTune::Stub& stub, size_t bytes, const char* label,
                      int daemon_device) {
  IpcBuffer buffer;
  Check(cudaMalloc(&buffer.device, bytes), "cudaMalloc");
  cudaIpcMemHandle_t handle;
  Check(cudaIpcGetMemHandle(&handle, buffer.device), "cudaIpcGetMemHandle");
  pb::RegisterBufferRequest request;
  request.mutable_cuda_ipc()->set_handle(std::string(reinterpret_cast<const char*>(&handle),
                                                     sizeof(handle)));
  request.mutable_cuda_ipc()->set_device_ordinal(daemon_device);
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

// Random normal fp16 values: a block of up to 1 Mi drawn on the host, then
// repeated on the device (drawing 200 M values would take seconds per run).
void FillRandom(void* device, int64_t elements) {
  const int64_t block = std::min<int64_t>(elements, int64_t{1} << 20);
  std::vector<__half> host(static_cast<size_t>(block));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 2);
  for (auto& h : host) h = __float2half(normal(rng));
  char* out = static_cast<char*>(device);
  Check(cudaMemcpy(out, host.data(), block * 2, cudaMemcpyHostToDevice), "fill");
  for (int64_t done = block; done < elements; done += block) {
    const int64_t count = std::min(block, elements - done);
    Check(cudaMemcpy(out + done * 2, out, count * 2, cudaMemcpyDeviceToDevice), "fill");
  }
  Check(cudaDeviceSynchronize(), "fill");
}

// An event the daemon can open (RunRequest.wait_event / done_event).
struct SharedEvent {
  cudaEvent_t event = nullptr;
  std::string handle;
};

SharedEvent NewSharedEvent() {
  SharedEvent e;
  Check(cudaEventCreateWithFlags(&e.event, cudaEventInterprocess | cudaEventDisableTiming),
        "cudaEventCreate");
  cudaIpcEventHandle_t handle;
  Check(cudaIpcGetEventHandle(&handle, e.event), "cudaIpcGetEventHandle");
  e.handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  return e;
}

std::string ConfigJson(const pb::ConfigChoice& c) {
  return absl::StrFormat("{\"source\": \"%s\", \"key\": \"%s\", \"tuned_median_us\": %.2f}",
                         pb::ConfigSource_Name(c.source()), c.config().key(),
                         c.tuned_median_us());
}

std::string ConfigText(const pb::ConfigChoice& c) {
  std::string text = absl::StrCat(c.config().key(), " (", pb::ConfigSource_Name(c.source()));
  if (c.tuned_median_us() > 0) {
    absl::StrAppendFormat(&text, ", the tuner timed it at %.1f us", c.tuned_median_us());
  }
  return text + ")";
}

// Runs `count` Runs with up to `depth` in flight (the asynchronous API on
// one completion queue); `make(i)` builds the i-th request. Returns the
// replies in order of issue, with their round trips.
std::vector<std::pair<pb::RunResponse, double>> RunInFlight(
    pb::KernTune::Stub& stub, int count, int depth,
    const std::function<pb::RunRequest(int)>& make) {
  struct Call {
    grpc::ClientContext context;
    pb::RunResponse response;
    grpc::Status status;
    Clock::time_point start;
    std::unique_ptr<grpc::ClientAsyncResponseReader<pb::RunResponse>> reader;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls(count);
  std::vector<std::pair<pb::RunResponse, double>> replies(count);
  int issued = 0, finished = 0;
  while (finished < count) {
    while (issued < count && issued - finished < depth) {
      auto call = std::make_unique<Call>();
      const pb::RunRequest request = make(issued);
      call->start = Clock::now();
      call->reader = stub.AsyncRun(&call->context, request, &cq);
      call->reader->Finish(&call->response, &call->status,
                           reinterpret_cast<void*>(static_cast<intptr_t>(issued)));
      calls[issued++] = std::move(call);
    }
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok) || !ok) {
      std::fprintf(stderr, "kt_daemon_bench: the completion queue failed\n");
      std::exit(1);
    }
    const int i = static_cast<int>(reinterpret_cast<intptr_t>(tag));
    Check(calls[i]->status, "Run in flight");
    replies[i] = {std::move(calls[i]->response), Us(Clock::now() - calls[i]->start)};
    calls[i].reset();
    ++finished;
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
  return replies;
}

// Small Runs per second from `threads` threads through `queues` submission
// queues (thread t on queue t % queues), each queue opened on its own
// connection, each thread with its own buffers, timed once all registered.
struct QueueThroughput {
  int threads = 0, queues = 0;
  double runs_per_s = 0;
  Series latency, handler;
};

// Small Runs per second from `threads` threads, each set up by
// `prepare(t)` (its buffer registered; returns how it sends its Run), timed
// for `seconds` after a warm-up.
using RunSender = std::function<pb::RunResponse()>;
QueueThroughput TimeThreads(int threads, double seconds,
                            const std::function<RunSender(int)>& prepare) {
  std::vector<std::thread> workers;
  std::atomic<int64_t> calls{0};
  std::atomic<int> ready{0};
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(threads), handlers(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const RunSender send = prepare(t);
      ready.fetch_add(1);
      while (!stop.load()) {
        const auto start = Clock::now();
        const pb::RunResponse response = send();
        latencies[t].push_back(Us(Clock::now() - start));
        handlers[t].push_back(response.server_timing().handler_us());
        calls.fetch_add(1);
      }
    });
  }
  while (ready.load() < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // warm up
  const int64_t before = calls.load();
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const int64_t during = calls.load() - before;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  for (auto& w : workers) w.join();
  std::vector<double> all, all_handlers;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  for (auto& h : handlers) all_handlers.insert(all_handlers.end(), h.begin(), h.end());
  QueueThroughput result;
  result.threads = threads;
  result.runs_per_s = during / elapsed;
  result.latency = Summarize(all);
  result.handler = Summarize(all_handlers);
  return result;
}

QueueThroughput MeasureQueueThroughput(const std::string& socket, int local_device,
                                       int daemon_device, int threads, int queues,
                                       double seconds) {
  std::vector<std::unique_ptr<pb::KernTune::Stub>> stubs;
  std::vector<std::unique_ptr<kt::client::RunQueueClient>> rings;
  for (int q = 0; q < queues; ++q) {
    stubs.push_back(pb::KernTune::NewStub(NewConnection(socket)));
    absl::StatusOr<std::unique_ptr<kt::client::RunQueueClient>> opened =
        kt::client::RunQueueClient::Open(*stubs.back(), socket, absl::Seconds(10));
    Check(opened.status(), "OpenQueue (throughput)");
    rings.push_back(*std::move(opened));
  }
  QueueThroughput result = TimeThreads(threads, seconds, [&](int t) -> RunSender {
    Check(cudaSetDevice(local_device), "cudaSetDevice");
    const int q = t % queues;
    const IpcBuffer buffer =
        RegisterNew(*stubs[q], 2 * 1024 * 2, "queue throughput", daemon_device);
    FillRandom(buffer.device, 1024);  // this process's GPU work ends before the timing
    return [&, q, run = SoftmaxRequest(buffer, 1, 1024)] {
      return QueueRun(*rings[q], run, "Run (queue throughput)");
    };
  });
  result.queues = queues;
  return result;  // the queues close here (CloseQueue), before their stubs go
}

// The same from `threads` threads sharing one DaemonClient, as a user's
// threads do: its Runs take the queues it opens as they need them.
QueueThroughput MeasureDaemonClientThroughput(const std::string& socket, int local_device,
                                              int daemon_device, int threads, double seconds) {
  kt::client::DaemonClientOptions options;
  options.target = "unix:" + socket;
  absl::StatusOr<kt::client::DaemonClient> client = kt::client::DaemonClient::Connect(options);
  Check(client.status(), "DaemonClient::Connect");
  auto stub = pb::KernTune::NewStub(NewConnection(socket));
  QueueThroughput result = TimeThreads(threads, seconds, [&](int) -> RunSender {
    Check(cudaSetDevice(local_device), "cudaSetDevice");
    const IpcBuffer buffer =
        RegisterNew(*stub, 2 * 1024 * 2, "DaemonClient throughput", daemon_device);
    FillRandom(buffer.device, 1024);
    return [&, run = SoftmaxRequest(buffer, 1, 1024)] {
      absl::StatusOr<pb::RunResponse> response = client->Run(run);
      Check(response.status(), "Run (DaemonClient throughput)");
      return *std::move(response);
    };
  });
  result.queues = 0;  // as many as the client opened
  return result;
}

// Fair sharing (issue 25): a client's small Runs alone, then while another
// client floods the GPU with large ones, each on its own queue (connection).
struct Fairness {
  Series alone, flooded;
  int64_t flood_runs = 0;
};

Fairness MeasureFairness(const std::string& socket, int local_device, int daemon_device,
                         int calls) {
  constexpr int kFloodThreads = 2;
  constexpr int64_t kRows = 49152, kCols = 4096;
  auto small_stub = pb::KernTune::NewStub(NewConnection(socket));
  absl::StatusOr<std::unique_ptr<kt::client::RunQueueClient>> small_queue =
      kt::client::RunQueueClient::Open(*small_stub, socket, absl::Seconds(10));
  Check(small_queue.status(), "OpenQueue (fairness)");
  IpcBuffer small = RegisterNew(*small_stub, 2 * 1024 * 2, "fairness small", daemon_device);
  FillRandom(small.device, 1024);
  const pb::RunRequest small_run = SoftmaxRequest(small, 1, 1024);
  auto series = [&] {
    std::vector<double> us;
    for (int i = 0; i < calls + 100; ++i) {
      const auto start = Clock::now();
      QueueRun(**small_queue, small_run, "Run 1x1024 (fairness)");
      if (i >= 100) us.push_back(Us(Clock::now() - start));
      // A client that sends now and then, not back to back.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return Summarize(us);
  };
  Fairness result;
  result.alone = series();
  auto flood_stub = pb::KernTune::NewStub(NewConnection(socket));
  absl::StatusOr<std::unique_ptr<kt::client::RunQueueClient>> flood_queue =
      kt::client::RunQueueClient::Open(*flood_stub, socket, absl::Seconds(10));
  Check(flood_queue.status(), "OpenQueue (flood)");
  std::atomic<bool> stop{false};
  std::atomic<int64_t> flood_runs{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> flooders;
  for (int t = 0; t < kFloodThreads; ++t) {
    flooders.emplace_back([&] {
      Check(cudaSetDevice(local_device), "cudaSetDevice");
      IpcBuffer big = RegisterNew(*flood_stub, 2 * kRows * kCols * 2, "flood", daemon_device);
      FillRandom(big.device, kRows * kCols);
      const pb::RunRequest run = SoftmaxRequest(big, kRows, kCols);
      ready.fetch_add(1);
      while (!stop.load()) {
        QueueRun(**flood_queue, run, "Run 49152x4096 (flood)");
        flood_runs.fetch_add(1);
      }
    });
  }
  while (ready.load() < kFloodThreads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int64_t before = flood_runs.load();
  result.flooded = series();
  result.flood_runs = flood_runs.load() - before;
  stop = true;
  for (std::thread& t : flooders) t.join();
  return result;
}

// --idle_tuning: a small Run's latency, through the queue, in bursts spaced
// wider than the idle tuner's idle period (1.5 s), so that it tunes between
// bursts and each burst's first Run finds it measuring. First with nothing
// to tune (the small Run's own problem tuned first), then with untuned
// problems waiting. Issue 26: p99 during background tuning <= 1.2x idle.
int IdleTuningInterference(pb::KernTune::Stub& stub, const std::string& socket,
                           int daemon_device) {
  constexpr int kBursts = 20, kRunsPerBurst = 200;
  constexpr auto kGap = std::chrono::milliseconds(2500);
  constexpr int kUntunedProblems = 24;  // softmax float16 64 x (1000 + 8 i): tuning outlasts it
  const auto status = [&] {
    grpc::ClientContext context;
    pb::GetStatusResponse response;
    Check(stub.GetStatus(&context, pb::GetStatusRequest(), &response), "GetStatus");
    return response;
  };
  const auto served = [&] {
    grpc::ClientContext context;
    pb::ListServedShapesResponse response;
    Check(stub.ListServedShapes(&context, pb::ListServedShapesRequest(), &response),
          "ListServedShapes");
    return response.shapes_size();
  };
  if (!status().idle_tuning().enabled()) {
    std::fprintf(stderr, "kt_daemon_bench: --idle_tuning needs a daemon started with --tune_idle\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<kt::client::RunQueueClient>> queue =
      kt::client::RunQueueClient::Open(stub, socket, absl::Seconds(10));
  Check(queue.status(), "OpenQueue");
  const int64_t largest = 64 * (1000 + 8 * (kUntunedProblems - 1));
  IpcBuffer buffer = RegisterNew(stub, 2 * largest * 2, "idle tuning", daemon_device);
  FillRandom(buffer.device, 2 * largest);
  const pb::RunRequest small = SoftmaxRequest(buffer, 1, 1024);

  // The small Run's own problem, tuned by the idle tuner before anything is timed.
  QueueRun(**queue, small, "Run 1x1024");
  const Clock::time_point tuned_by = Clock::now() + std::chrono::minutes(3);
  while (served() > 0 && Clock::now() < tuned_by) std::this_thread::sleep_for(kGap);
  if (served() > 0) {
    std::fprintf(stderr, "kt_daemon_bench: the idle tuner did not tune 1x1024 in 3 minutes\n");
    return 1;
  }
  struct Phase {
    std::vector<double> us;
    int64_t tuned_before = 0, tuned_after = 0;
    bool seen_paused = false;
  };
  const auto bursts = [&](Phase& phase) {
    phase.tuned_before = status().idle_tuning().problems_tuned();
    for (int b = 0; b < kBursts; ++b) {
      std::this_thread::sleep_for(kGap);  // idle: the tuner may measure now
      for (int i = 0; i < kRunsPerBurst; ++i) {
        const auto start = Clock::now();
        QueueRun(**queue, small, "Run 1x1024");
        phase.us.push_back(Us(Clock::now() - start));
      }
      phase.seen_paused = phase.seen_paused || status().idle_tuning().paused();
    }
    phase.tuned_after = status().idle_tuning().problems_tuned();
  };
  Phase idle, tuning;
  bursts(idle);
  for (int i = 0; i < kUntunedProblems; ++i) {
    QueueRun(**queue, SoftmaxRequest(buffer, 64, 1000 + 8 * i), "Run of an untuned problem");
  }
  const int waiting = served();
  bursts(tuning);
  const Series a = Summarize(idle.us), b = Summarize(tuning.us);
  const double a_max = Percentile(idle.us, 1.0), b_max = Percentile(tuning.us, 1.0);
  const double gap_s = std::chrono::duration<double>(kGap).count();
  const auto tuned = static_cast<long long>(tuning.tuned_after - tuning.tuned_before);
  std::printf("idle tuning: small Run (1x1024 fp16, queue) in %d bursts of %d, %.1f s apart\n"
              "  nothing to tune:          p50 %.1f us, p99 %.1f us, max %.1f us\n"
              "  %d problems to tune:      p50 %.1f us, p99 %.1f us, max %.1f us; tuned %lld "
              "meanwhile, paused seen: %s\n"
              "  p99 ratio %.2fx (issue 26: <= 1.2x)\n",
              kBursts, kRunsPerBurst, gap_s, a.p50, a.p99, a_max, waiting, b.p50, b.p99, b_max,
              tuned, tuning.seen_paused ? "yes" : "no", b.p99 / a.p99);
  if (!absl::GetFlag(FLAGS_out).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_out)) << absl::StrFormat(
        "{\"idle_tuning\": {\"bursts\": %d, \"runs_per_burst\": %d, \"gap_s\": %.1f,\n"
        "  \"nothing_to_tune\": {\"p50_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f},\n"
        "  \"tuning\": {\"problems_waiting\": %d, \"p50_us\": %.2f, \"p99_us\": %.2f, "
        "\"max_us\": %.2f, \"problems_tuned\": %lld, \"paused_seen\": %s},\n"
        "  \"p99_ratio\": %.3f}}\n",
        kBursts, kRunsPerBurst, gap_s, a.p50, a.p99, a_max, waiting, b.p50, b.p99, b_max, tuned,
        tuning.seen_paused ? "true" : "false", b.p99 / a.p99);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string socket = absl::GetFlag(FLAGS_socket);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const int depth = std::max(1, absl::GetFlag(FLAGS_pipeline_depth));
  const int local_device = absl::GetFlag(FLAGS_device);
  const bool use_queue = absl::GetFlag(FLAGS_queue);
  const int spread_queues = absl::GetFlag(FLAGS_queue_throughput_queues);
  if (socket.empty()) {
    std::fprintf(stderr, "kt_daemon_bench: --socket is required\n");
    return 2;
  }
  if (iterations < 1) {
    std::fprintf(stderr, "kt_daemon_bench: --iterations must be at least 1\n");
    return 2;
  }
  if (spread_queues < 0 || spread_queues > 7) {
    std::fprintf(stderr, "kt_daemon_bench: --queue_throughput_queues must be in 0-7 (the daemon "
                 "allows 8 queues per process, one is the bench's own)\n");
    return 2;
  }
  Check(cudaSetDevice(local_device), "cudaSetDevice");
  auto channel = NewConnection(socket);
  auto stub = pb::KernTune::NewStub(channel);
  std::string json = "{\n";


  // --- the daemon: its device for ours (by UUID).
  int daemon_device = local_device;
  {
    grpc::ClientContext context;
    pb::GetStatusResponse status;
    Check(stub->GetStatus(&context, pb::GetStatusRequest(), &status), "GetStatus");
    absl::StatusOr<kt::kernels::DeviceIdentity> mine =
        kt::kernels::GetDeviceIdentity(local_device);
    absl::StatusOr<int32_t> ordinal = kt::client::DaemonOrdinalForUuid(
        status, mine.ok() ? mine->uuid : "", local_device);
    if (!ordinal.ok()) {
      std::fprintf(stderr, "kt_daemon_bench: %s\n", ordinal.status().ToString().c_str());
      return 1;
    }
    daemon_device = *ordinal;
    std::string uuid, pci, name;
    for (const pb::Device& d : status.devices()) {
      if (d.ordinal() != daemon_device) continue;
      uuid = d.uuid();
      pci = d.pci_bus_id();
      name = d.sku().name();
    }
    std::printf("daemon %s, backend %s; its device %d: %s %s %s (ours: %d, %s)\n",
                status.version().c_str(), status.backend().c_str(), daemon_device, name.c_str(),
                uuid.c_str(), pci.c_str(), local_device,
                mine.ok() ? mine->uuid.c_str() : "uuid unknown");
    absl::StrAppendFormat(
        &json,
        "  \"daemon\": {\"version\": \"%s\", \"backend\": \"%s\", "
        "\"device\": {\"ordinal\": %d, \"name\": \"%s\", \"uuid\": \"%s\", \"pci_bus_id\": "
        "\"%s\"}, \"client_device\": {\"ordinal\": %d, \"uuid\": \"%s\"}},\n",
        status.version(), status.backend(), daemon_device, name, uuid, pci, local_device,
        mine.ok() ? mine->uuid : "");
  }

  if (absl::GetFlag(FLAGS_idle_tuning)) return IdleTuningInterference(*stub, socket, daemon_device);

  // --- the submission queue, on the same connection as the gRPC series: the
  // JSON's "queue" collects what each section below measures through it.
  std::unique_ptr<kt::client::RunQueueClient> queue;
  std::string queue_error = "--noqueue";
  if (use_queue) {
    absl::StatusOr<std::unique_ptr<kt::client::RunQueueClient>> opened =
        kt::client::RunQueueClient::Open(*stub, socket, absl::Seconds(10));
    if (opened.ok()) {
      queue = *std::move(opened);
      std::printf("submission queue %s opened: measured beside gRPC\n", queue->id().c_str());
    } else {
      queue_error = opened.status().ToString();
      std::printf("no submission queue (%s): gRPC only\n", queue_error.c_str());
    }
  }
  std::string queue_latency_json, queue_b2b_json, queue_throughput_json, queue_bandwidth_json;

  // --- latency: small Run vs the echo floor on the same channel.
  {
    IpcBuffer buffer = RegisterNew(*stub, 2 * 1024 * 2, "latency", daemon_device);
    FillRandom(buffer.device, 1024);
    const pb::RunRequest run = SoftmaxRequest(buffer, 1, 1024);
    // The same Run with the kernel timed by the daemon's CUDA events: what
    // timing costs, and the kernel's own time.
    pb::RunRequest timed_run = run;
    timed_run.set_time_kernel(true);
    pb::GetConfigRequest get_config;
    get_config.set_op(run.op());
    get_config.set_dtype(run.dtype());
    *get_config.mutable_shape() = run.shape();
    // The echo goes through the same blocking unary call as stub->Run (what
    // the generated stub does), with an empty HealthCheckRequest: one empty
    // slice (a ByteBuffer with no slices at all is refused as invalid).
    const grpc::internal::RpcMethod check(kHealthCheck, grpc::internal::RpcMethod::NORMAL_RPC,
                                          channel);
    grpc::Slice empty_slice("", 0);
    const grpc::ByteBuffer empty_request(&empty_slice, 1);
    // The earlier benchmark's echo: the callback API, then a condition
    // variable wakes this thread (one more hand-off than a Run has); kept
    // so the two methods can be compared.
    grpc::GenericStub generic(channel);
    std::vector<double> run_us, timed_run_us, echo_us, echo_callback_us, config_us, kernel_us;
    Stages stages, timed_stages;
    // The same echo, GetConfig and Run from a client that polls for replies.
    std::vector<double> polled_echo_us, polled_config_us, polled_run_us;
    Stages polled_stages;
    grpc::CompletionQueue polled_queue;
    pb::ConfigChoice config;
    // The same small Run through the submission queue.
    std::vector<double> queue_run_us;
    Stages queue_stages;
    pb::ConfigChoice queue_config;
    for (int i = 0; i < iterations + 200; ++i) {
      const bool timed = i >= 200;
      // Interleaved, so every series sees the same machine state.
      {
        grpc::ClientContext context;
        grpc::ByteBuffer reply;
        const auto start = Clock::now();
        const grpc::Status status =
            grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
                channel.get(), check, &context, empty_request, &reply);
        const double us = Us(Clock::now() - start);
        Check(status, "health Check");
        if (timed) echo_us.push_back(us);
      }
      {
        grpc::ClientContext context;
        grpc::ByteBuffer reply;
        grpc::Status status;
        std::mutex mu;
        std::condition_variable done;
        bool finished = false;
        grpc::ByteBuffer request = empty_request;
        const auto start = Clock::now();
        generic.UnaryCall(&context, kHealthCheck, grpc::StubOptions(), &request, &reply,
                          [&](grpc::Status s) {
                            std::lock_guard<std::mutex> lock(mu);
                            status = s;
                            finished = true;
                            done.notify_one();
                          });
        std::unique_lock<std::mutex> lock(mu);
        done.wait(lock, [&] { return finished; });
        const double us = Us(Clock::now() - start);
        Check(status, "health Check (callback)");
        if (timed) echo_callback_us.push_back(us);
      }
      {
        grpc::ClientContext context;
        pb::GetConfigResponse response;
        const auto start = Clock::now();
        Check(stub->GetConfig(&context, get_config, &response), "GetConfig");
        if (timed) config_us.push_back(Us(Clock::now() - start));
      }
      {
        grpc::ClientContext context;
        grpc::ByteBuffer reply;
        const auto start = Clock::now();
        auto call = generic.PrepareUnaryCall(&context, kHealthCheck, empty_request, &polled_queue);
        call->StartCall();
        Check(AwaitByPolling(polled_queue, *call, &reply), "health Check (client polls)");
        if (timed) polled_echo_us.push_back(Us(Clock::now() - start));
      }
      {
        grpc::ClientContext context;
        pb::GetConfigResponse response;
        const auto start = Clock::now();
        auto call = stub->AsyncGetConfig(&context, get_config, &polled_queue);
        Check(AwaitByPolling(polled_queue, *call, &response), "GetConfig (client polls)");
        if (timed) polled_config_us.push_back(Us(Clock::now() - start));
      }
      {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        auto call = stub->AsyncRun(&context, run, &polled_queue);
        Check(AwaitByPolling(polled_queue, *call, &response), "Run 1x1024 (client polls)");
        const double us = Us(Clock::now() - start);
        if (timed) {
          polled_run_us.push_back(us);
          polled_stages.Add(response, us);
        }
      }
      // The small Run, untimed (the default) and with time_kernel.
      for (const bool kernel_timed : {false, true}) {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        Check(stub->Run(&context, kernel_timed ? timed_run : run, &response), "Run 1x1024");
        const double us = Us(Clock::now() - start);
        if (!timed) continue;
        (kernel_timed ? timed_run_us : run_us).push_back(us);
        (kernel_timed ? timed_stages : stages).Add(response, us);
        if (kernel_timed) kernel_us.push_back(response.kernel_time_us());
        config = response.config();
      }
      if (queue != nullptr) {
        const auto start = Clock::now();
        const pb::RunResponse response = QueueRun(*queue, run, "Run 1x1024 (queue)");
        const double us = Us(Clock::now() - start);
        if (timed) {
          queue_run_us.push_back(us);
          queue_stages.Add(response, us);
          queue_config = response.config();
        }
      }
    }
    const Series run_s = Summarize(run_us), timed_run_s = Summarize(timed_run_us),
                 echo_s = Summarize(echo_us),
                 callback_s = Summarize(echo_callback_us), config_s = Summarize(config_us),
                 kernel_s = Summarize(kernel_us);
    const Series polled_echo_s = Summarize(polled_echo_us),
                 polled_config_s = Summarize(polled_config_us),
                 polled_run_s = Summarize(polled_run_us);
    std::printf(
        "latency (1x1024 fp16 softmax, registered IPC buffers, %d calls each, config %s):\n"
        "  Run        p50 %.1f us  p99 %.1f us\n%s"
        "  Run, kernel timed (time_kernel) p50 %.1f us  p99 %.1f us\n%s"
        "  echo       p50 %.1f us  p99 %.1f us  (health Check, blocking call like Run)\n"
        "  echo (cb)  p50 %.1f us  p99 %.1f us  (callback + condition variable: the old "
        "method)\n"
        "  GetConfig  p50 %.1f us  p99 %.1f us  (the daemon's service, trivial handler)\n"
        "  overhead over echo at p50: %.1f us (the kernel itself: %.1f us by the daemon's "
        "events on the timed Runs)\n"
        "  client polls for the reply: echo p50 %.1f us, GetConfig %.1f, Run %.1f; overhead "
        "%.1f us\n%s",
        iterations, ConfigText(config).c_str(), run_s.p50, run_s.p99, stages.Text().c_str(),
        timed_run_s.p50, timed_run_s.p99, timed_stages.Text().c_str(), echo_s.p50, echo_s.p99,
        callback_s.p50, callback_s.p99, config_s.p50, config_s.p99, run_s.p50 - echo_s.p50,
        kernel_s.p50, polled_echo_s.p50, polled_config_s.p50, polled_run_s.p50,
        polled_run_s.p50 - polled_echo_s.p50, polled_stages.Text().c_str());
    absl::StrAppendFormat(
        &json,
        "  \"latency\": {\"shape\": [1, 1024], \"dtype\": \"float16\", \"calls\": %d, "
        "\"config\": %s, \"run_p50_us\": %.2f, \"run_p99_us\": %.2f, \"echo_p50_us\": %.2f, "
        "\"echo_p99_us\": %.2f, \"echo_method\": \"blocking unary call, as Run\", "
        "\"echo_callback_p50_us\": %.2f, \"echo_callback_p99_us\": %.2f, "
        "\"getconfig_p50_us\": %.2f, \"getconfig_p99_us\": %.2f, \"kernel_p50_us\": %.2f, "
        "\"overhead_p50_us\": %.2f, \"server\": %s, \"timed_run_p50_us\": %.2f, "
        "\"timed_run_p99_us\": %.2f, \"timed_server\": %s, \"client_polls\": "
        "{\"echo_p50_us\": %.2f, \"echo_p99_us\": %.2f, \"getconfig_p50_us\": %.2f, "
        "\"run_p50_us\": %.2f, \"run_p99_us\": %.2f, \"overhead_p50_us\": %.2f, "
        "\"server\": %s}},\n",
        iterations, ConfigJson(config), run_s.p50, run_s.p99, echo_s.p50, echo_s.p99,
        callback_s.p50, callback_s.p99, config_s.p50, config_s.p99, kernel_s.p50,
        run_s.p50 - echo_s.p50, stages.Json(), timed_run_s.p50, timed_run_s.p99,
        timed_stages.Json(), polled_echo_s.p50, polled_echo_s.p99, polled_config_s.p50,
        polled_run_s.p50, polled_run_s.p99, polled_run_s.p50 - polled_echo_s.p50,
        polled_stages.Json());
    if (queue != nullptr) {
      // Back to back: a client that sends Run after Run (an inference loop)
      // keeps the daemon's poller awake; the interleaved series above pays
      // its wake-up after every gRPC call.
      std::vector<double> b2b_us;
      Stages b2b_stages;
      for (int i = 0; i < iterations + 200; ++i) {
        const auto start = Clock::now();
        const pb::RunResponse response = QueueRun(*queue, run, "Run 1x1024 (queue, b2b)");
        const double us = Us(Clock::now() - start);
        if (i < 200) continue;
        b2b_us.push_back(us);
        b2b_stages.Add(response, us);
      }
      const Series b2b = Summarize(b2b_us);
      std::printf("  Run through the queue, back to back  p50 %.1f us  p99 %.1f us\n%s", b2b.p50,
                  b2b.p99, b2b_stages.Text().c_str());
      queue_b2b_json = absl::StrFormat(
          "{\"calls\": %d, \"run_p50_us\": %.2f, \"run_p99_us\": %.2f, \"run_mean_us\": "
          "%.2f, \"server\": %s}",
          iterations, b2b.p50, b2b.p99, b2b.mean, b2b_stages.Json());
      const Series q = Summarize(queue_run_us);
      std::printf(
          "  Run through the submission queue  p50 %.1f us  p99 %.1f us  mean %.1f us  "
          "(gRPC Run p50 %.1f, p99 %.1f; echo p50 %.1f, p99 %.1f; config %s)\n%s",
          q.p50, q.p99, q.mean, run_s.p50, run_s.p99, echo_s.p50, echo_s.p99,
          ConfigText(queue_config).c_str(), queue_stages.Text().c_str());
      queue_latency_json = absl::StrFormat(
          "{\"shape\": [1, 1024], \"dtype\": \"float16\", \"calls\": %d, \"config\": %s, "
          "\"run_p50_us\": %.2f, \"run_p99_us\": %.2f, \"run_mean_us\": %.2f, "
          "\"grpc_run_p50_us\": %.2f, \"grpc_run_p99_us\": %.2f, \"grpc_echo_p50_us\": %.2f, "
          "\"grpc_echo_p99_us\": %.2f, \"server\": %s}",
          iterations, ConfigJson(queue_config), q.p50, q.p99, q.mean, run_s.p50, run_s.p99,
          echo_s.p50, echo_s.p99, queue_stages.Json());
    }
  }

  // --- throughput: N clients, each its own connection and buffers.
  json += "  \"throughput\": [";
  for (int clients : {1, 4, 16}) {
    std::vector<std::thread> threads;
    std::atomic<int64_t> calls{0};
    std::atomic<int> ready{0};
    std::atomic<bool> stop{false};
    std::vector<std::vector<double>> latencies(clients), handlers(clients);
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        Check(cudaSetDevice(local_device), "cudaSetDevice");
        auto own_stub = pb::KernTune::NewStub(NewConnection(socket));
        IpcBuffer buffer = RegisterNew(*own_stub, 2 * 1024 * 2, "throughput", daemon_device);
        FillRandom(buffer.device, 1024);  // this process's GPU work ends before the timing
        const pb::RunRequest run = SoftmaxRequest(buffer, 1, 1024);
        ready.fetch_add(1);
        while (!stop.load()) {
          grpc::ClientContext context;
          pb::RunResponse response;
          const auto start = Clock::now();
          Check(own_stub->Run(&context, run, &response), "Run (throughput)");
          latencies[c].push_back(Us(Clock::now() - start));
          handlers[c].push_back(response.server_timing().handler_us());
          calls.fetch_add(1);
        }
      });
    }
    while (ready.load() < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // warm up
    const int64_t before = calls.load();
    const auto start = Clock::now();
    std::this_thread::sleep_for(
        std::chrono::duration<double>(absl::GetFlag(FLAGS_throughput_seconds)));
    const int64_t during = calls.load() - before;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stop = true;
    for (auto& t : threads) t.join();
    std::vector<double> all, all_handlers;
    for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
    for (auto& h : handlers) all_handlers.insert(all_handlers.end(), h.begin(), h.end());
    const Series s = Summarize(all), h = Summarize(all_handlers);
    std::printf("throughput, %2d clients: %.0f Runs/s (latency p50 %.1f us, p99 %.1f us; "
                "daemon handler p50 %.1f us, p99 %.1f us)\n",
                clients, during / seconds, s.p50, s.p99, h.p50, h.p99);
    absl::StrAppendFormat(&json,
                          "%s\n    {\"clients\": %d, \"runs_per_s\": %.1f, \"p50_us\": %.2f, "
                          "\"p99_us\": %.2f, \"handler_p50_us\": %.2f, \"handler_p99_us\": %.2f}",
                          clients == 1 ? "" : ",", clients, during / seconds, s.p50, s.p99, h.p50,
                          h.p99);
  }
  json += "\n  ],\n";
  if (queue != nullptr) {
    // Threads sharing one queue (one DaemonClient's threads), then 16
    // threads over several queues.
    std::vector<std::pair<int, int>> levels = {{1, 1}, {4, 1}, {16, 1}};
    if (spread_queues > 1) levels.push_back({16, spread_queues});
    for (const auto& [threads, queues] : levels) {
      const QueueThroughput r =
          MeasureQueueThroughput(socket, local_device, daemon_device, threads, queues,
                                 absl::GetFlag(FLAGS_throughput_seconds));
      std::printf("throughput through the queue, %2d threads on %d queue%s: %.0f Runs/s "
                  "(latency p50 %.1f us, p99 %.1f us; daemon handler p50 %.1f us, p99 %.1f us)\n",
                  threads, queues, queues == 1 ? "" : "s", r.runs_per_s, r.latency.p50,
                  r.latency.p99, r.handler.p50, r.handler.p99);
      absl::StrAppendFormat(
          &queue_throughput_json,
          "%s\n      {\"threads\": %d, \"queues\": %d, \"runs_per_s\": %.1f, \"p50_us\": %.2f, "
          "\"p99_us\": %.2f, \"handler_p50_us\": %.2f, \"handler_p99_us\": %.2f}",
          queue_throughput_json.empty() ? "" : ",", threads, queues, r.runs_per_s,
          r.latency.p50, r.latency.p99, r.handler.p50, r.handler.p99);
    }
    for (int threads : {1, 16}) {
      const QueueThroughput r = MeasureDaemonClientThroughput(
          socket, local_device, daemon_device, threads, absl::GetFlag(FLAGS_throughput_seconds));
      std::printf("throughput through one DaemonClient (its queues), %2d threads: %.0f Runs/s "
                  "(latency p50 %.1f us, p99 %.1f us; daemon handler p50 %.1f us, p99 %.1f us)\n",
                  threads, r.runs_per_s, r.latency.p50, r.latency.p99, r.handler.p50,
                  r.handler.p99);
      absl::StrAppendFormat(
          &queue_throughput_json,
          ",\n      {\"threads\": %d, \"client\": \"DaemonClient\", \"runs_per_s\": %.1f, "
          "\"p50_us\": %.2f, \"p99_us\": %.2f, \"handler_p50_us\": %.2f, "
          "\"handler_p99_us\": %.2f}",
          threads, r.runs_per_s, r.latency.p50, r.latency.p99, r.handler.p50, r.handler.p99);
    }
  }

  // --- fair sharing: a small-Run client alone and beside a large-Run flood.
  std::string fairness_json;
  if (queue != nullptr) {
    const Fairness f = MeasureFairness(socket, local_device, daemon_device, 1000);
    std::printf("fairness: a client's small Runs (queue) alone p50 %.1f us p99 %.1f us; while "
                "another floods 49152x4096 Runs (%lld done meanwhile) p50 %.1f us p99 %.1f us: "
                "p99 x%.2f\n",
                f.alone.p50, f.alone.p99, static_cast<long long>(f.flood_runs), f.flooded.p50,
                f.flooded.p99, f.flooded.p99 / f.alone.p99);
    fairness_json = absl::StrFormat(
        "{\"alone_p50_us\": %.2f, \"alone_p99_us\": %.2f, \"flooded_p50_us\": %.2f, "
        "\"flooded_p99_us\": %.2f, \"p99_ratio\": %.3f, \"flood_runs\": %d}",
        f.alone.p50, f.alone.p99, f.flooded.p50, f.flooded.p99, f.flooded.p99 / f.alone.p99,
        f.flood_runs);
  }

  // --- bandwidth: a large softmax through the daemon vs the kernel alone.
  {
    constexpr int64_t kRows = 49152, kCols = 4096;
    constexpr int kAsyncRuns = 50;
    const double bytes = 2.0 * kRows * kCols * 2;  // read + write
    auto gbps = [&](double us) { return us > 0 ? bytes / (us * 1e3) : 0; };
    IpcBuffer buffer = RegisterNew(*stub, static_cast<size_t>(bytes), "bandwidth", daemon_device);
    FillRandom(buffer.device, kRows * kCols);
    // Timed: the kernel's own time comes from the daemon's events on these
    // Runs, and the asynchronous series read the GPU counters they feed.
    pb::RunRequest base = SoftmaxRequest(buffer, kRows, kCols);
    base.set_time_kernel(true);

    // Synchronous: the reply comes once the kernel is done.
    std::vector<double> round_trip_us, kernel_us;
    Stages sync_stages;
    pb::ConfigChoice config;
    std::vector<double> polled_round_trip_us;
    grpc::CompletionQueue polled_queue;
    // The same synchronous Run through the submission queue.
    std::vector<double> queue_round_trip_us, queue_kernel_us;
    Stages queue_sync_stages;
    pb::ConfigChoice queue_config;
    for (int i = 0; i < 60; ++i) {
      if (queue != nullptr) {
        const auto start = Clock::now();
        const pb::RunResponse response = QueueRun(*queue, base, "Run 49152x4096 (queue)");
        const double us = Us(Clock::now() - start);
        if (i >= 10) {
          queue_round_trip_us.push_back(us);
          queue_kernel_us.push_back(response.kernel_time_us());
          queue_sync_stages.Add(response, us);
          queue_config = response.config();
        }
      }
      {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        Check(stub->Run(&context, base, &response), "Run 49152x4096");
        const double us = Us(Clock::now() - start);
        if (i >= 10) {
          round_trip_us.push_back(us);
          kernel_us.push_back(response.kernel_time_us());
          sync_stages.Add(response, us);
          config = response.config();
        }
      }
      grpc::ClientContext context;
      pb::RunResponse response;
      const auto start = Clock::now();
      auto call = stub->AsyncRun(&context, base, &polled_queue);
      Check(AwaitByPolling(polled_queue, *call, &response), "Run 49152x4096 (client polls)");
      if (i >= 10) polled_round_trip_us.push_back(Us(Clock::now() - start));
    }
    const Series rt = Summarize(round_trip_us), k = Summarize(kernel_us),
                 polled_rt = Summarize(polled_round_trip_us);
    const double kernel_gbps = gbps(k.p50);
    if (queue != nullptr) {
      // Against the kernel time of its own Runs (the same config as the
      // gRPC ones, interleaved with them), and against theirs.
      // Back to back, as a loop of synchronous Runs sends them: untimed, as
      // a user sends them (the timing events cost the round trip ~3 us),
      // against the kernel time of the timed Runs just before them.
      std::vector<double> b2b_round_trip_us, b2b_kernel_us;
      Stages b2b_stages;
      pb::RunRequest untimed = base;
      untimed.set_time_kernel(false);
      for (int i = 0; i < 120; ++i) {
        const bool timed_run = i < 60;
        const auto start = Clock::now();
        const pb::RunResponse response =
            QueueRun(*queue, timed_run ? base : untimed, "Run 49152x4096 (queue, b2b)");
        const double us = Us(Clock::now() - start);
        if (i % 60 < 10) continue;
        if (timed_run) {
          b2b_kernel_us.push_back(response.kernel_time_us());
        } else {
          b2b_round_trip_us.push_back(us);
          b2b_stages.Add(response, us);
        }
      }
      const Series brt = Summarize(b2b_round_trip_us), bk = Summarize(b2b_kernel_us);
      const double b2b_pct = bk.p50 > 0 ? 100 * bk.p50 / brt.p50 : 0;
      std::printf("bandwidth through the queue, back to back: synchronous p50 %.1f us, kernel "
                  "p50 %.1f us: %.1f%% of the kernel's bandwidth\n%s",
                  brt.p50, bk.p50, b2b_pct, b2b_stages.Text().c_str());
      const Series qrt = Summarize(queue_round_trip_us), qk = Summarize(queue_kernel_us);
      const double queue_kernel_gbps = gbps(qk.p50);
      const double pct = queue_kernel_gbps > 0 ? 100 * gbps(qrt.p50) / queue_kernel_gbps : 0;
      const double pct_grpc_kernel = kernel_gbps > 0 ? 100 * gbps(qrt.p50) / kernel_gbps : 0;
      std::printf("bandwidth through the submission queue (49152x4096 fp16 softmax, config %s):\n"
                  "  kernel alone (daemon's CUDA events, the queue's Runs) p50 %.1f us = "
                  "%.0f GB/s\n"
                  "  synchronous p50 %.1f us = %.0f GB/s (%.1f%% of kernel; %.1f%% of the gRPC "
                  "Runs' kernel; gRPC synchronous p50 %.1f us)\n%s",
                  ConfigText(queue_config).c_str(), qk.p50, queue_kernel_gbps, qrt.p50,
                  gbps(qrt.p50), pct, pct_grpc_kernel, rt.p50, queue_sync_stages.Text().c_str());
      queue_bandwidth_json = absl::StrFormat(
          "{\"shape\": [%d, %d], \"dtype\": \"float16\", \"config\": %s, "
          "\"kernel_p50_us\": %.2f, \"kernel_gbps\": %.1f, \"sync_round_trip_p50_us\": %.2f, "
          "\"sync_round_trip_p99_us\": %.2f, \"sync_gbps\": %.1f, \"sync_pct_of_kernel\": %.2f, "
          "\"sync_pct_of_grpc_runs_kernel\": %.2f, \"grpc_sync_round_trip_p50_us\": %.2f, "
          "\"sync_server\": %s, \"back_to_back\": {\"round_trip_p50_us\": %.2f, "
          "\"round_trip_p99_us\": %.2f, \"kernel_p50_us\": %.2f, \"pct_of_kernel\": %.2f, "
          "\"server\": %s}}",
          kRows, kCols, ConfigJson(queue_config), qk.p50, queue_kernel_gbps, qrt.p50, qrt.p99,
          gbps(qrt.p50), pct, pct_grpc_kernel, rt.p50, queue_sync_stages.Json(), brt.p50, brt.p99,
          bk.p50, b2b_pct, b2b_stages.Json());
    }

    // An asynchronous series: `body` sends kAsyncRuns Runs and returns once
    // the GPU has finished them; the daemon's counters say what the GPU did.
    struct AsyncResult {
      double us_per_run = 0;
      GpuUse gpu;
      Stages stages;
    };
    auto timed = [&](const std::function<void(Stages&)>& body) {
      AsyncResult r;
      Check(cudaDeviceSynchronize(), "sync");
      const Counters before = ReadCounters(*stub);
      const auto start = Clock::now();
      body(r.stages);
      const double wall_us = Us(Clock::now() - start);
      const Counters after = ReadCounters(*stub);
      r.us_per_run = wall_us / kAsyncRuns;
      r.gpu = Use(before, after, wall_us);
      return r;
    };

    // Chained through the client's stream: each Run waits on wait_event,
    // which the client records after waiting on the previous done_event.
    // The two processes' CUDA contexts alternate on the GPU every Run.
    SharedEvent wait_event = NewSharedEvent(), done_event = NewSharedEvent();
    cudaStream_t stream;
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    pb::RunRequest chained = base;
    chained.set_wait_event(wait_event.handle);
    chained.set_done_event(done_event.handle);
    Check(cudaEventRecord(wait_event.event, stream), "cudaEventRecord");
    const AsyncResult events = timed([&](Stages& stages) {
      for (int i = 0; i < kAsyncRuns; ++i) {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        Check(stub->Run(&context, chained, &response), "Run with events");
        stages.Add(response, Us(Clock::now() - start));
        Check(cudaStreamWaitEvent(stream, done_event.event, 0), "cudaStreamWaitEvent");
        Check(cudaEventRecord(wait_event.event, stream), "cudaEventRecord");
      }
      Check(cudaStreamSynchronize(stream), "sync");
    });

    // Chained on the daemon's stream alone: each Run waits on the previous
    // Run's done_event (recorded by the daemon), so the client's context does
    // no GPU work. Against the series above: the cost of the context switches.
    pb::RunRequest self_chained = base;
    self_chained.set_wait_event(done_event.handle);
    self_chained.set_done_event(done_event.handle);
    const AsyncResult daemon_chained = timed([&](Stages& stages) {
      for (int i = 0; i < kAsyncRuns; ++i) {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        Check(stub->Run(&context, self_chained, &response), "Run chained in the daemon");
        stages.Add(response, Us(Clock::now() - start));
      }
      Check(cudaEventSynchronize(done_event.event), "cudaEventSynchronize");
    });

    // Pipelined: Runs sent back to back, each answered once queued
    // (done_event, no wait_event); the client waits once, on the last record.
    pb::RunRequest pipelined = base;
    pipelined.set_done_event(done_event.handle);
    const AsyncResult pipelined_1 = timed([&](Stages& stages) {
      for (int i = 0; i < kAsyncRuns; ++i) {
        grpc::ClientContext context;
        pb::RunResponse response;
        const auto start = Clock::now();
        Check(stub->Run(&context, pipelined, &response), "Run pipelined");
        stages.Add(response, Us(Clock::now() - start));
      }
      Check(cudaEventSynchronize(done_event.event), "cudaEventSynchronize");
    });

    // Pipelined with `depth` Runs in flight, as an asynchronous client would
    // send them. Run i records done event i and waits on event i-1, so the
    // kernels stay in order even when the daemon takes them on different
    // streams; waiting on every event at the end covers every kernel. A
    // first pass lets the daemon open the events.
    std::vector<SharedEvent> ring;
    for (int i = 0; i < kAsyncRuns; ++i) ring.push_back(NewSharedEvent());
    auto deep_request = [&](int i) {
      pb::RunRequest request = base;
      request.set_wait_event(ring[(i + kAsyncRuns - 1) % kAsyncRuns].handle);
      request.set_done_event(ring[i].handle);
      return request;
    };
    auto deep_pass = [&](Stages& stages) {
      for (const auto& [response, us] : RunInFlight(*stub, kAsyncRuns, depth, deep_request)) {
        stages.Add(response, us);
      }
      for (const SharedEvent& e : ring) Check(cudaEventSynchronize(e.event), "sync ring");
    };
    {
      Stages unused;
      deep_pass(unused);
    }
    const AsyncResult pipelined_deep = timed(deep_pass);

    std::printf("bandwidth (49152x4096 fp16 softmax, registered IPC buffers, config %s):\n"
                "  kernel alone (daemon's CUDA events, same Runs) p50 %.1f us = %.0f GB/s\n"
                "  through the daemon, synchronous p50 %.1f us = %.0f GB/s (%.1f%% of kernel)\n"
                "%s"
                "  through the daemon, synchronous, client polls for the reply: p50 %.1f us = "
                "%.0f GB/s (%.1f%%)\n",
                ConfigText(config).c_str(), k.p50, kernel_gbps, rt.p50, gbps(rt.p50),
                100 * gbps(rt.p50) / kernel_gbps, sync_stages.Text().c_str(), polled_rt.p50,
                gbps(polled_rt.p50), 100 * gbps(polled_rt.p50) / kernel_gbps);
    const std::pair<std::string, const AsyncResult*> async_series[] = {
        {"IPC events chained through the client's stream", &events},
        {"chained on the daemon's stream (no client GPU work)", &daemon_chained},
        {"pipelined, 1 in flight (done_event only)", &pipelined_1},
        {absl::StrCat("pipelined, ", depth, " in flight (each after the previous one's event)"),
         &pipelined_deep}};
    for (const auto& [what, r] : async_series) {
      std::printf("  through the daemon, %s, %d Runs: %.1f us each = %.0f GB/s (%.1f%%)\n"
                  "    GPU (daemon's counters): %lld kernels timed, mean %.1f us, busy %.1f%% "
                  "of the wall time\n%s",
                  what.c_str(), kAsyncRuns, r->us_per_run, gbps(r->us_per_run),
                  100 * gbps(r->us_per_run) / kernel_gbps,
                  static_cast<long long>(r->gpu.kernels), r->gpu.kernel_mean_us,
                  r->gpu.busy_pct, r->stages.Text().c_str());
    }
    auto async_json = [&](const AsyncResult& r) {
      return absl::StrFormat(
          "{\"us_per_run\": %.2f, \"gbps\": %.1f, \"pct_of_kernel\": %.2f, "
          "\"gpu_kernels_timed\": %d, \"gpu_kernel_mean_us\": %.2f, \"gpu_busy_pct\": %.2f, "
          "\"server\": %s}",
          r.us_per_run, gbps(r.us_per_run), 100 * gbps(r.us_per_run) / kernel_gbps,
          r.gpu.kernels, r.gpu.kernel_mean_us, r.gpu.busy_pct, r.stages.Json());
    };
    // The flat keys of the earlier files stay, for comparison.
    absl::StrAppendFormat(
        &json,
        "  \"bandwidth\": {\"shape\": [%d, %d], \"dtype\": \"float16\", \"config\": %s, "
        "\"kernel_p50_us\": %.2f, \"kernel_gbps\": %.1f, "
        "\"sync_round_trip_p50_us\": %.2f, \"sync_gbps\": %.1f, "
        "\"sync_pct_of_kernel\": %.2f, \"sync_server\": %s, "
        "\"sync_client_polls_round_trip_p50_us\": %.2f, \"sync_client_polls_pct_of_kernel\": %.2f, "
        "\"events_us_per_run\": %.2f, "
        "\"events_gbps\": %.1f, \"events_pct_of_kernel\": %.2f, "
        "\"pipelined_us_per_run\": %.2f, \"pipelined_gbps\": %.1f, "
        "\"pipelined_pct_of_kernel\": %.2f, \"async_runs\": %d, \"pipeline_depth\": %d, "
        "\"events\": %s, \"daemon_chained\": %s, \"pipelined\": %s, \"pipelined_deep\": %s}\n",
        kRows, kCols, ConfigJson(config), k.p50, kernel_gbps, rt.p50, gbps(rt.p50),
        100 * gbps(rt.p50) / kernel_gbps, sync_stages.Json(), polled_rt.p50,
        100 * gbps(polled_rt.p50) / kernel_gbps, events.us_per_run,
        gbps(events.us_per_run), 100 * gbps(events.us_per_run) / kernel_gbps,
        pipelined_1.us_per_run, gbps(pipelined_1.us_per_run),
        100 * gbps(pipelined_1.us_per_run) / kernel_gbps, kAsyncRuns, depth,
        async_json(events), async_json(daemon_chained), async_json(pipelined_1),
        async_json(pipelined_deep));
  }
  json.pop_back();  // the newline after the bandwidth object: the queue's follows
  if (queue != nullptr) {
    absl::StrAppendFormat(&json,
                          ",\n  \"queue\": {\"available\": true, \"id\": \"%s\", "
                          "\"latency\": %s,\n    \"latency_back_to_back\": %s,\n"
                          "    \"throughput\": [%s\n    ],\n    \"bandwidth\": %s,\n"
                          "    \"fairness\": %s}\n",
                          JsonEscape(queue->id()), queue_latency_json, queue_b2b_json,
                          queue_throughput_json, queue_bandwidth_json, fairness_json);
  } else {
    absl::StrAppendFormat(&json, ",\n  \"queue\": {\"available\": false, \"error\": \"%s\"}\n",
                          JsonEscape(queue_error));
  }
  json += "}\n";
  if (!absl::GetFlag(FLAGS_out).empty()) std::ofstream(absl::GetFlag(FLAGS_out)) << json;
  return 0;
}
