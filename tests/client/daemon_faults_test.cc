// Faults around a real kerntuned (CPU backend), as its clients see them:
// the daemon killed with Runs in flight over gRPC and through the
// submission queue (every caller gets UNAVAILABLE at once, not at its
// deadline, and a new daemon takes the socket over), and clients that stop
// reading their answers (the daemon serves everyone else).
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/daemon_client.h"
#include "client/shared_memory.h"
#include "gtest/gtest.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client {
namespace {

using Clock = std::chrono::steady_clock;
using testing::CpuDaemonTest;

// Long enough to be the time a client is allowed to notice a dead daemon,
// far below the calls' deadline.
constexpr auto kPrompt = std::chrono::seconds(2);
constexpr absl::Duration kDeadline = absl::Seconds(60);

// LayerNorm of rows x cols float32 in a registered buffer: x at 0, y after
// it. Tens of milliseconds in the CPU reference, so Runs are in flight.
constexpr int64_t kRows = 1024, kCols = 2048;
constexpr int64_t kTensorBytes = kRows * kCols * 4;

RunArgs LargeLayerNorm(const RegisteredBuffer& buffer) {
  RunArgs args;
  args.op = pb::OP_LAYER_NORM;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = kRows;
  args.cols = kCols;
  args.epsilon = 1e-5;
  args.input = buffer.Tensor(0);
  args.output = buffer.Output(kTensorBytes);
  return args;
}

class DaemonFaultsTest : public CpuDaemonTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start());
    absl::StatusOr<SharedMemory> shm = SharedMemory::Create(2 * kTensorBytes);
    ASSERT_TRUE(shm.ok()) << shm.status();
    shm_ = *std::move(shm);
    std::mt19937_64 rng(25);
    const std::string x = testing::RandomTensor(kernels::DType::kFloat32, kRows * kCols, rng, 1);
    std::memcpy(shm_.data(), x.data(), x.size());
  }

  DaemonClient Connect(bool use_queue) const {
    DaemonClientOptions options;
    options.target = target();
    options.deadline = kDeadline;
    options.use_queue = use_queue;
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  SharedMemory shm_;
};

// One caller running the same Run again and again until one fails.
struct Caller {
  std::string name;
  std::thread thread;
  std::atomic<int> ok_runs{0};
  // The Run that failed: when it began and ended, and how.
  Clock::time_point started, ended;
  absl::Status status;
  std::atomic<bool> done{false};
};

void RunUntilFailure(const DaemonClient& client, const pb::RunRequest& request, Caller& caller) {
  while (true) {
    const Clock::time_point started = Clock::now();
    absl::StatusOr<pb::RunResponse> response = client.Run(request);
    if (!response.ok()) {
      caller.started = started;
      caller.ended = Clock::now();
      caller.status = response.status();
      break;
    }
    ++caller.ok_runs;
  }
  caller.done = true;
}

TEST_F(DaemonFaultsTest, AKilledDaemonFailsRunsInFlightAtOnceAndANewOneTakesTheSocketOver) {
  const DaemonClient queued = Connect(/*use_queue=*/true);
  const DaemonClient grpc = Connect(/*use_queue=*/false);
  absl::StatusOr<RegisteredBuffer> buffer = queued.RegisterHostShm(shm_.name(), 0, 0, "faults");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const pb::RunRequest on_buffer = MakeRunRequest(LargeLayerNorm(*buffer));
  // Inline: the same problem with its bytes in the request.
  RunArgs inline_args = LargeLayerNorm(*buffer);
  inline_args.input =
      InlineTensor(std::string(reinterpret_cast<const char*>(shm_.data()), kTensorBytes));
  inline_args.output = InlineOutput();
  const pb::RunRequest inline_request = MakeRunRequest(inline_args);

  // Three callers on each path, all busy when the daemon dies.
  std::vector<std::unique_ptr<Caller>> callers;
  for (int i = 0; i < 9; ++i) {
    auto caller = std::make_unique<Caller>();
    const int path = i % 3;
    caller->name = path == 0 ? "queue" : path == 1 ? "grpc on the buffer" : "grpc inline";
    const DaemonClient& client = path == 0 ? queued : grpc;
    const pb::RunRequest& request = path == 2 ? inline_request : on_buffer;
    Caller& c = *caller;
    c.thread = std::thread([&client, &request, &c] { RunUntilFailure(client, request, c); });
    callers.push_back(std::move(caller));
  }
  const Clock::time_point warm_until = Clock::now() + std::chrono::seconds(20);
  for (const auto& caller : callers) {
    while (caller->ok_runs == 0 && !caller->done && Clock::now() < warm_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GT(caller->ok_runs, 0) << caller->name << ": " << caller->status;
  }
  ASSERT_EQ(Client().GetStatus()->open_queues(), 1) << "the queue path is not in use";

  const Clock::time_point killed = Clock::now();
  ASSERT_TRUE(daemon_->Signal(SIGKILL, std::chrono::seconds(5)).has_value());
  // Nobody waits for its deadline: every caller is back within kPrompt.
  for (const auto& caller : callers) {
    while (!caller->done && Clock::now() - killed < kPrompt + std::chrono::seconds(1)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  int in_flight_per_path[3] = {0, 0, 0};
  for (size_t i = 0; i < callers.size(); ++i) {
    Caller& caller = *callers[i];
    if (!caller.done) {
      ADD_FAILURE() << caller.name << ": still waiting "
                    << std::chrono::duration<double>(Clock::now() - killed).count()
                    << " s after the daemon was killed";
      continue;
    }
    EXPECT_LT(caller.ended - killed, kPrompt) << caller.name;
    EXPECT_TRUE(absl::IsUnavailable(caller.status)) << caller.name << ": " << caller.status;
    if (caller.started < killed) ++in_flight_per_path[i % 3];
  }
  for (int path = 0; path < 3; ++path) {
    EXPECT_GT(in_flight_per_path[path], 0)
        << callers[path]->name << ": no Run was in flight when the daemon died";
  }
  for (const auto& caller : callers) caller->thread.join();

  // The dead daemon left its socket file; a new one replaces it, and the
  // same clients are served by it: the gRPC channel reconnects, the queue
  // client opens a new queue. Registrations died with the old daemon.
  ASSERT_NO_FATAL_FAILURE(Start());
  absl::StatusOr<pb::RunResponse> again = grpc.Run(inline_request);
  for (const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
       absl::IsUnavailable(again.status()) && Clock::now() < until;
       again = grpc.Run(inline_request)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(absl::IsNotFound(queued.Run(on_buffer).status()));
  absl::StatusOr<RegisteredBuffer> renewed = queued.RegisterHostShm(shm_.name(), 0, 0, "again");
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  const absl::StatusOr<pb::RunResponse> through_queue =
      queued.Run(MakeRunRequest(LargeLayerNorm(*renewed)));
  EXPECT_TRUE(through_queue.ok()) << through_queue.status();
  EXPECT_EQ(Client().GetStatus()->open_queues(), 1) << "the new daemon serves no queue";
  buffer->Release();  // its daemon is gone
}

}  // namespace
}  // namespace kt::client
