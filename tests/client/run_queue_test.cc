// Runs through the submission queue, end to end: the C++ client against a
// real kerntuned (CPU backend) on registered shared memory. Every op and
// dtype gives the same bytes through the queue as over gRPC, a Run sent
// again too (the daemon reuses its validation); errors come back with
// gRPC's codes and messages, sent once or again; many threads share one
// queue; Runs the queue cannot carry (inline tensors) still go over gRPC.
#include "client/run_queue.h"

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/daemon_client.h"
#include "client/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client {
namespace queue_test {

using testing::CpuDaemonTest;
using testing::RandomTensor;
using testing::ToKernels;

constexpr size_t kShmBytes = 1 << 20;
// Inputs at the front; the queue's outputs, then gRPC's, at these offsets.
constexpr int64_t kX = 0, kGamma = 65536, kBeta = 69632, kMask = 73728;
constexpr int64_t kQueueOut = 262144, kGrpcOut = 655360;
// Within each output area.
constexpr int64_t kY = 0, kStat1 = 131072, kStat2 = 196608;

class RunQueueTest : public CpuDaemonTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start());
    absl::StatusOr<SharedMemory> shm = SharedMemory::Create(kShmBytes);
    ASSERT_TRUE(shm.ok()) << shm.status();
    shm_ = *std::move(shm);
    queued_ = Connect(true);
    grpc_ = Connect(false);
    absl::StatusOr<RegisteredBuffer> buffer = queued_->RegisterHostShm(shm_.name(), 0, 0, "");
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    buffer_ = *std::move(buffer);
  }

  std::optional<DaemonClient> Connect(bool use_queue) {
    DaemonClientOptions options;
    options.target = target();
    options.deadline = absl::Seconds(10);
    options.use_queue = use_queue;
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }
  pb::GetStatusResponse Status() { return *grpc_->GetStatus(); }
  std::string Get(int64_t offset, size_t bytes) const {
    return std::string(reinterpret_cast<const char*>(shm_.data() + offset), bytes);
  }

  // `op` on rows x cols of `dtype` with every operand it takes in the
  // buffer, outputs in the area at `out`.
  RunArgs Args(pb::Op op, pb::DType dtype, int64_t rows, int64_t cols, int64_t out) const {
    RunArgs args;
    args.op = op;
    args.dtype = dtype;
    args.rows = rows;
    args.cols = cols;
    args.input = buffer_.Tensor(kX);
    args.output = buffer_.Output(out + kY);
    switch (op) {
      case pb::OP_LAYER_NORM:
        args.gamma = buffer_.Tensor(kGamma);
        args.beta = buffer_.Tensor(kBeta);
        args.epsilon = 1e-5;
        args.mean = buffer_.Output(out + kStat1);
        args.inv_std = buffer_.Output(out + kStat2);
        break;
      case pb::OP_RMS_NORM:
        args.gamma = buffer_.Tensor(kGamma);
        args.epsilon = 1e-6;
        args.inv_std = buffer_.Output(out + kStat2);
        break;
      case pb::OP_REDUCE_SCALE:
        args.row_scale = buffer_.Output(out + kStat1);
        break;
      case pb::OP_SCALED_MASKED_SOFTMAX:
        args.scale = 0.125;
        args.mask = buffer_.Tensor(kMask);
        args.mask_rows = rows / 2;
        args.causal = true;
        break;
      default:
        break;
    }
    return args;
  }

  // Fresh random values in every input operand's place, and both output
  // areas poisoned (differently, so an output never written cannot match).
  void FreshInputsPoisonedOutputs(kernels::DType dtype, int64_t elements, std::mt19937_64& rng) {
    for (int64_t offset : {kX, kGamma, kBeta, kMask}) {
      const std::string values = RandomTensor(dtype, elements, rng, 0.5);
      std::memcpy(shm_.data() + offset, values.data(), values.size());
    }
    std::memset(shm_.data() + kQueueOut, 0x7f, kGrpcOut - kQueueOut);
    std::memset(shm_.data() + kGrpcOut, 0x3f, kGrpcOut - kQueueOut);
  }

  // The queued Run wrote y (y_bytes) and the per-row outputs of `op` as the
  // gRPC Run did.
  void ExpectQueuedOutputsAsGrpcs(pb::Op op, size_t y_bytes, int64_t rows) const {
    EXPECT_EQ(Get(kQueueOut + kY, y_bytes), Get(kGrpcOut + kY, y_bytes));
    EXPECT_NE(Get(kQueueOut + kY, y_bytes), std::string(y_bytes, '\x7f'));
    if (op == pb::OP_LAYER_NORM || op == pb::OP_REDUCE_SCALE) {
      EXPECT_EQ(Get(kQueueOut + kStat1, rows * 4), Get(kGrpcOut + kStat1, rows * 4));
    }
    if (op == pb::OP_LAYER_NORM || op == pb::OP_RMS_NORM) {
      EXPECT_EQ(Get(kQueueOut + kStat2, rows * 4), Get(kGrpcOut + kStat2, rows * 4));
    }
  }

  SharedMemory shm_;
  std::optional<DaemonClient> queued_, grpc_;
  RegisteredBuffer buffer_;
};

TEST_F(RunQueueTest, EveryOpAndDtypeGivesTheSameBytesAsGrpc) {
  std::mt19937_64 rng(23);
  constexpr int64_t kRows = 6, kCols = 40;
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM, pb::OP_RMS_NORM,
                    pb::OP_REDUCE_SCALE, pb::OP_SCALED_MASKED_SOFTMAX}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      SCOPED_TRACE(pb::Op_Name(op) + " " + pb::DType_Name(dtype));
      const kernels::DType kdtype = ToKernels(dtype);
      FreshInputsPoisonedOutputs(kdtype, kRows * kCols, rng);
      absl::StatusOr<pb::RunResponse> queued = queued_->Run(Args(op, dtype, kRows, kCols, kQueueOut));
      ASSERT_TRUE(queued.ok()) << queued.status();
      absl::StatusOr<pb::RunResponse> direct = grpc_->Run(Args(op, dtype, kRows, kCols, kGrpcOut));
      ASSERT_TRUE(direct.ok()) << direct.status();
      ExpectQueuedOutputsAsGrpcs(op, kRows * kCols * kernels::DTypeSize(kdtype), kRows);
      EXPECT_EQ(queued->config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
      EXPECT_EQ(queued->backend(), "cpu");
      EXPECT_GT(queued->kernel_time_us(), 0);
    }
  }
  // Softmax along a middle axis too.
  RunArgs axis = Args(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 3, 5, kQueueOut);
  axis.inner = 7;
  ASSERT_TRUE(queued_->Run(axis).ok());
  axis.output = buffer_.Output(kGrpcOut);
  ASSERT_TRUE(grpc_->Run(axis).ok());
  EXPECT_EQ(Get(kQueueOut, 3 * 5 * 7 * 4), Get(kGrpcOut, 3 * 5 * 7 * 4));

  const pb::GetStatusResponse status = Status();
  EXPECT_EQ(status.open_queues(), 1);  // the queued client's only
  EXPECT_EQ(status.stats().runs(), 2 * (6 * 3 + 1));
}

// One Run sent again and again, as an inference loop does: each time it
// runs on the data of that moment and gives gRPC's bytes, and from the
// second time the daemon reuses its validation.
TEST_F(RunQueueTest, ARunSentAgainRunsAgainWithGrpcsBytes) {
  std::mt19937_64 rng(29);
  constexpr int64_t kRows = 4, kCols = 24;
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM, pb::OP_RMS_NORM,
                    pb::OP_REDUCE_SCALE, pb::OP_SCALED_MASKED_SOFTMAX}) {
    const RunArgs queued_args = Args(op, pb::DTYPE_FLOAT16, kRows, kCols, kQueueOut);
    const RunArgs grpc_args = Args(op, pb::DTYPE_FLOAT16, kRows, kCols, kGrpcOut);
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE(pb::Op_Name(op) + " round " + std::to_string(round));
      FreshInputsPoisonedOutputs(kernels::DType::kFloat16, kRows * kCols, rng);
      absl::StatusOr<pb::RunResponse> queued = queued_->Run(queued_args);
      ASSERT_TRUE(queued.ok()) << queued.status();
      absl::StatusOr<pb::RunResponse> direct = grpc_->Run(grpc_args);
      ASSERT_TRUE(direct.ok()) << direct.status();
      EXPECT_EQ(queued->server_timing().repeated_descriptor(), round > 0);
      ExpectQueuedOutputsAsGrpcs(op, kRows * kCols * 2, kRows);
    }
  }
}

TEST_F(RunQueueTest, ErrorsComeBackWithGrpcsCodesAndMessages) {
  struct Case {
    const char* name;
    std::function<void(RunArgs&)> edit;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {"unknown buffer",
       [](RunArgs& a) { a.input = BufferTensor(std::string(32, 'b'), 0); },
       absl::StatusCode::kNotFound},
      {"past the end", [](RunArgs& a) { a.rows = 100000; }, absl::StatusCode::kOutOfRange},
      {"misaligned offset", [&](RunArgs& a) { a.input = buffer_.Tensor(2); },
       absl::StatusCode::kInvalidArgument},
      {"no epsilon",
       [](RunArgs& a) {
         a.op = pb::OP_LAYER_NORM;
         a.epsilon = 0;
       },
       absl::StatusCode::kInvalidArgument},
      {"overlap", [&](RunArgs& a) { a.output = buffer_.Output(kX + 4); },
       absl::StatusCode::kInvalidArgument},
      {"events on the CPU",
       [](RunArgs& a) { a.done_event = std::string(64, '\1'); },
       absl::StatusCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RunArgs args = Args(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 8, kQueueOut);
    c.edit(args);
    ASSERT_TRUE(QueueCarries(MakeRunRequest(args)));
    const absl::Status direct = grpc_->Run(args).status();
    // Sent again, the same: what the daemon keeps of a descriptor answers
    // for none of these.
    for (int again = 0; again < 2; ++again) {
      const absl::Status queued = queued_->Run(args).status();
      EXPECT_EQ(queued.code(), c.code) << queued;
      EXPECT_EQ(queued, direct);
    }
  }
  EXPECT_EQ(Status().open_queues(), 1);
}

// More threads than one client opens queues for (4): they take the idle
// ones, open more, then share them; every answer is right.
TEST_F(RunQueueTest, ManyThreadsShareAFewQueues) {
  constexpr int kThreads = 8, kRunsEach = 150, kCols = 16;
  std::mt19937_64 rng(5);
  const std::string x = RandomTensor(kernels::DType::kFloat32, kThreads * kCols, rng, 0.5);
  std::memcpy(shm_.data() + kX, x.data(), x.size());
  // The expected row of each thread, over gRPC.
  std::vector<std::string> want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    RunArgs args = Args(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 1, kCols, kGrpcOut);
    args.input = buffer_.Tensor(kX + t * kCols * 4);
    args.output = buffer_.Output(kGrpcOut + t * kCols * 4);
    ASSERT_TRUE(grpc_->Run(args).ok());
    want[t] = Get(kGrpcOut + t * kCols * 4, kCols * 4);
  }
  std::vector<int> wrong(kThreads, 0), failed(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RunArgs args = Args(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 1, kCols, kQueueOut);
      args.input = buffer_.Tensor(kX + t * kCols * 4);
      args.output = buffer_.Output(kQueueOut + t * kCols * 4);
      for (int i = 0; i < kRunsEach; ++i) {
        std::memset(shm_.data() + kQueueOut + t * kCols * 4, 0, kCols * 4);
        if (!queued_->Run(args).ok()) ++failed[t];
        if (Get(kQueueOut + t * kCols * 4, kCols * 4) != want[t]) ++wrong[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failed[t], 0) << "thread " << t;
    EXPECT_EQ(wrong[t], 0) << "thread " << t;
  }
  const pb::GetStatusResponse status = Status();
  EXPECT_GE(status.open_queues(), 1);
  EXPECT_LE(status.open_queues(), 4);
  EXPECT_EQ(status.stats().runs(), kThreads + kThreads * kRunsEach);
}

TEST_F(RunQueueTest, RunsTheQueueCannotCarryGoOverGrpc) {
  RunArgs args = Args(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 8, kQueueOut);
  args.input = InlineTensor(std::string(2 * 8 * 4, '\0'));
  args.output = InlineOutput();
  EXPECT_FALSE(QueueCarries(MakeRunRequest(args)));
  absl::StatusOr<pb::RunResponse> response = queued_->Run(args);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->output_data().size(), 64u);
  EXPECT_EQ(Status().open_queues(), 0);  // none was needed
  // Nor an op whose statistics come back inline.
  RunArgs stats = Args(pb::OP_LAYER_NORM, pb::DTYPE_FLOAT32, 2, 8, kQueueOut);
  stats.mean.reset();
  stats.inv_std.reset();
  stats.want_mean_inv_std = true;
  EXPECT_FALSE(QueueCarries(MakeRunRequest(stats)));
  response = queued_->Run(stats);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->mean_size(), 2);
}

TEST_F(RunQueueTest, TheQueueItselfAnswersAndClosesWithItsClient) {
  std::string id;
  {
    auto channel = grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
    std::unique_ptr<pb::KernTune::Stub> stub = pb::KernTune::NewStub(channel);
    absl::StatusOr<std::unique_ptr<RunQueueClient>> queue =
        RunQueueClient::Open(*stub, socket_, absl::Seconds(10));
    ASSERT_TRUE(queue.ok()) << queue.status();
    id = (*queue)->id();
    RunQueueClient::Outcome outcome = (*queue)->Run(
        MakeRunRequest(Args(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 8, kQueueOut)),
        absl::Seconds(10));
    EXPECT_TRUE(outcome.submitted);
    ASSERT_TRUE(outcome.response.ok()) << outcome.response.status();
    EXPECT_EQ(outcome.response->backend(), "cpu");
    EXPECT_EQ(Status().open_queues(), 1);
  }
  EXPECT_EQ(Status().open_queues(), 0);  // closed when it went
}

}  // namespace queue_test
}  // namespace kt::client
