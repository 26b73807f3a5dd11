// Registered host shared-memory buffers through the client library and
// `kerntune run --via=shm`, against a real kerntuned (CPU backend): register,
// list, run on slices, unregister; bounds; ownership across processes (a
// second client process cannot use or unregister ours, we cannot use its);
// registrations of a killed client and of an idle lease reaped.
#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/daemon_client.h"
#include "client/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::CpuDaemonTest;
using testing::Expected;
using testing::ProcessResult;
using testing::RandomTensor;
using testing::Reference;
using testing::RunProcess;
using testing::ToKernels;

constexpr size_t kShmBytes = 64 << 10;
// Where each tensor sits in the test's buffer.
constexpr int64_t kX = 0, kY = 4096, kGamma = 8192, kBeta = 8448, kMean = 12288,
                  kInvStd = 12544;

class RegisteredBufferTest : public CpuDaemonTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Start());
    absl::StatusOr<SharedMemory> shm = SharedMemory::Create(kShmBytes);
    ASSERT_TRUE(shm.ok()) << shm.status();
    shm_ = *std::move(shm);
  }

  // What the daemon's descriptors of queue regions point to.
  std::vector<std::string> DaemonQueueDescriptors() const {
    std::vector<std::string> found;
    const std::string dir = absl::StrCat("/proc/", daemon_->pid(), "/fd");
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::error_code error;
      const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
      if (target.find("/kerntune-queue-") != std::string::npos) found.push_back(target);
    }
    return found;
  }

  pb::GetStatusResponse Status() {
    absl::StatusOr<pb::GetStatusResponse> status = Client().GetStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    return status.value_or(pb::GetStatusResponse());
  }

  void Put(int64_t offset, const std::string& bytes) {
    std::memcpy(shm_.data() + offset, bytes.data(), bytes.size());
  }
  std::string Get(int64_t offset, size_t bytes) const {
    return std::string(reinterpret_cast<const char*>(shm_.data() + offset), bytes);
  }
  std::vector<float> GetFloats(int64_t offset, size_t count) const {
    std::vector<float> values(count);
    std::memcpy(values.data(), shm_.data() + offset, count * 4);
    return values;
  }

  // A softmax float32 rows x 4 on `buffer` id, input at `in`, output at `out`.
  static RunArgs SmallSoftmax(const std::string& id, int64_t in, int64_t out, int64_t rows = 2) {
    RunArgs args;
    args.op = pb::OP_SOFTMAX;
    args.dtype = pb::DTYPE_FLOAT32;
    args.rows = rows;
    args.cols = 4;
    args.input = BufferTensor(id, in);
    args.output = BufferOutput(id, out);
    return args;
  }

  SharedMemory shm_;
};

TEST_F(RegisteredBufferTest, RegisterListRunAndUnregister) {
  const DaemonClient client = Client();
  absl::StatusOr<RegisteredBuffer> buffer =
      client.RegisterHostShm(shm_.name(), 0, 60, "registered_buffer_test");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const pb::BufferInfo& info = buffer->info();
  EXPECT_THAT(info.buffer_id(), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(info.kind(), pb::BUFFER_KIND_HOST_SHM);
  EXPECT_EQ(info.size_bytes(), static_cast<int64_t>(kShmBytes));
  EXPECT_EQ(info.label(), "registered_buffer_test");
  EXPECT_EQ(info.ttl_seconds(), 60);
  EXPECT_GT(info.registered_unix_ms(), 0);
  EXPECT_GE(info.expires_unix_ms(), info.registered_unix_ms() + 59000);

  absl::StatusOr<std::vector<pb::BufferInfo>> listed = client.ListBuffers();
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().buffer_id(), buffer->id());
  pb::GetStatusResponse status = Status();
  EXPECT_EQ(status.registered_buffers(), 1);
  EXPECT_EQ(status.registered_bytes(), static_cast<int64_t>(kShmBytes));
  EXPECT_EQ(status.buffer_owners(), 1);

  // Every op and dtype with every tensor a slice of the one registration.
  std::mt19937_64 rng(11);
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      SCOPED_TRACE(pb::Op_Name(op) + " " + pb::DType_Name(dtype));
      const kernels::DType kdtype = ToKernels(dtype);
      const bool layer_norm = op == pb::OP_LAYER_NORM;
      RunArgs args;
      args.op = op;
      args.dtype = dtype;
      args.rows = 7;
      args.cols = 33;
      const std::string x = RandomTensor(kdtype, 7 * 33, rng, layer_norm ? 3 : 0.5);
      const std::string gamma = RandomTensor(kdtype, 33, rng, 1);
      const std::string beta = RandomTensor(kdtype, 33, rng, 0);
      Put(kX, x);
      std::memset(shm_.data() + kY, 0xff, x.size());  // NaN until written
      args.input = buffer->Tensor(kX);
      args.output = buffer->Output(kY);
      if (layer_norm) {
        Put(kGamma, gamma);
        Put(kBeta, beta);
        std::memset(shm_.data() + kMean, 0xff, 1024);
        args.gamma = buffer->Tensor(kGamma);
        args.beta = buffer->Tensor(kBeta);
        args.epsilon = 1e-4;
        args.mean = buffer->Output(kMean);
        args.inv_std = buffer->Output(kInvStd);
      }
      absl::StatusOr<pb::RunResponse> response = client.Run(args);
      ASSERT_TRUE(response.ok()) << response.status();
      EXPECT_TRUE(response->output_data().empty());
      EXPECT_EQ(response->mean_size(), 0);
      const Expected want =
          Reference(args, x, layer_norm ? &gamma : nullptr, layer_norm ? &beta : nullptr);
      EXPECT_EQ(Get(kY, x.size()), want.y);
      if (layer_norm) {
        EXPECT_THAT(GetFloats(kMean, 7), ElementsAreArray(want.mean));
        EXPECT_THAT(GetFloats(kInvStd, 7), ElementsAreArray(want.inv_std));
      }
    }
  }

  const std::string id = buffer->id();
  EXPECT_TRUE(buffer->Unregister().ok());
  EXPECT_FALSE(buffer->valid());
  listed = client.ListBuffers();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  EXPECT_EQ(Status().registered_buffers(), 0);
  const absl::Status gone = client.Run(SmallSoftmax(id, 0, 256)).status();
  EXPECT_TRUE(absl::IsNotFound(gone)) << gone;
  EXPECT_TRUE(absl::IsNotFound(client.Unregister(id))) << client.Unregister(id);
}

TEST_F(RegisteredBufferTest, BufferInfoRunsCountsRuns) {
  // BufferInfo.runs is "Runs that used it" (kerntune.proto): a LayerNorm
  // with all six tensors in one buffer is one Run, not six uses.
  const DaemonClient client = Client();
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 0, 0, "");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  RunArgs args;
  args.op = pb::OP_LAYER_NORM;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = 2;
  args.cols = 8;
  args.input = buffer->Tensor(kX);
  args.output = buffer->Output(kY);
  args.gamma = buffer->Tensor(kGamma);
  args.beta = buffer->Tensor(kBeta);
  args.mean = buffer->Output(kMean);
  args.inv_std = buffer->Output(kInvStd);
  args.epsilon = 1e-5;
  ASSERT_TRUE(client.Run(args).ok());
  ASSERT_TRUE(client.Run(SmallSoftmax(buffer->id(), kX, kY)).ok());
  absl::StatusOr<std::vector<pb::BufferInfo>> listed = client.ListBuffers();
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_EQ(listed->front().runs(), 2);
}

TEST_F(RegisteredBufferTest, InPlaceRunsWork) {
  const DaemonClient client = Client();
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 0, 0, "");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const float x[8] = {0, 0, 0, 0, 1, 2, 3, 4};
  std::memcpy(shm_.data() + 512, x, sizeof(x));
  ASSERT_TRUE(client.Run(SmallSoftmax(buffer->id(), 512, 512)).ok());
  const std::vector<float> y = GetFloats(512, 8);
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(y[c], 0.25f);
  EXPECT_NEAR(y[4] + y[5] + y[6] + y[7], 1.0, 1e-6);
}

TEST_F(RegisteredBufferTest, TheDestructorUnregisters) {
  const DaemonClient client = Client();
  {
    absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 4096, 0, "");
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(buffer->size_bytes(), 4096);
    RegisteredBuffer moved = *std::move(buffer);  // the moved-from one unregisters nothing
    EXPECT_EQ(Status().registered_buffers(), 1);
  }
  EXPECT_EQ(Status().registered_buffers(), 0);
  // Release keeps it registered; the id still works for its owner.
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 0, 0, "");
  ASSERT_TRUE(buffer.ok());
  const std::string id = buffer->Release();
  *buffer = RegisteredBuffer();
  EXPECT_EQ(Status().registered_buffers(), 1);
  EXPECT_TRUE(client.Unregister(id).ok());
}

TEST_F(RegisteredBufferTest, SlicesOutsideTheRegistrationOrOverlappingAreRefused) {
  const DaemonClient client = Client();
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 4096, 0, "");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const std::string& id = buffer->id();
  const struct {
    RunArgs args;
    absl::StatusCode code;
  } cases[] = {
      // 2x4 float32 = 32 bytes: the last that fits starts at 4064.
      {SmallSoftmax(id, 4064 + 4, 0), absl::StatusCode::kOutOfRange},
      {SmallSoftmax(id, 0, 4096), absl::StatusCode::kOutOfRange},
      {SmallSoftmax(id, 2, 256), absl::StatusCode::kInvalidArgument},   // not a multiple of 4
      {SmallSoftmax(id, -4, 256), absl::StatusCode::kInvalidArgument},  // negative
      {SmallSoftmax(id, 0, 16), absl::StatusCode::kInvalidArgument},    // overlaps, not in place
  };
  for (const auto& c : cases) {
    const absl::Status status = client.Run(c.args).status();
    EXPECT_EQ(status.code(), c.code) << status;
  }
  EXPECT_TRUE(client.Run(SmallSoftmax(id, 4064, 0)).ok());
}

TEST_F(RegisteredBufferTest, BadRegistrationsAreRefused) {
  const DaemonClient client = Client();
  const absl::Status too_big =
      client.RegisterHostShm(shm_.name(), kShmBytes + 1, 0, "").status();
  EXPECT_FALSE(too_big.ok());
  EXPECT_THAT(too_big.message(), HasSubstr("size"));
  const absl::Status missing = client.RegisterHostShm("/kerntune-no-such-object", 0, 0, "").status();
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("kerntune-no-such-object"));
  // The CPU backend opens no CUDA memory.
  const absl::Status ipc = client.RegisterCudaIpc(std::string(64, '\0'), 0, 0, 0, "").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(ipc)) << ipc;
  EXPECT_EQ(Status().registered_buffers(), 0);
}

TEST_F(RegisteredBufferTest, AnotherProcessCannotUseOrUnregisterOurBuffer) {
  const DaemonClient client = Client();
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 0, 0, "ours");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const ProcessResult peer = RunProcess({KT_BUFFER_PEER_BINARY, "intrude", target(), buffer->id()});
  ASSERT_EQ(peer.code, 0) << peer.err;
  EXPECT_EQ(peer.out, "run NOT_FOUND\nunregister NOT_FOUND\nlisted 0\n") << peer.err;
  // Still ours, still usable.
  absl::StatusOr<std::vector<pb::BufferInfo>> listed = client.ListBuffers();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().runs(), 0);
  EXPECT_TRUE(client.Run(SmallSoftmax(buffer->id(), 0, 256)).ok());
}

// kt_buffer_peer hold: a child that registers its own shm buffer and waits
// (or, `mode` "flood", keeps running large Runs through its queue).
class Holder {
 public:
  Holder(const std::string& target, const std::string& log, const std::string& mode = "hold")
      : process_(KT_BUFFER_PEER_BINARY, {mode, target}, log) {}
  ~Holder() {
    process_.Signal(SIGKILL, std::chrono::seconds(5));
    if (!name_.empty()) shm_unlink(name_.c_str());  // killed: it could not
  }

  // Waits for its "<shm name> <buffer id>" line.
  ::testing::AssertionResult WaitRegistered() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end && process_.running()) {
      const std::string log = process_.Log();
      const std::vector<std::string> words = absl::StrSplit(log, absl::ByAnyChar(" \n"));
      if (log.find('\n') != std::string::npos && words.size() >= 2) {
        name_ = words[0];
        id_ = words[1];
        return ::testing::AssertionSuccess();
      }
      process_.WaitExit(std::chrono::milliseconds(20));
    }
    return ::testing::AssertionFailure() << "kt_buffer_peer did not register: " << process_.Log();
  }

  void Kill() { process_.Signal(SIGKILL, std::chrono::seconds(5)); }
  const std::string& id() const { return id_; }

 private:
  server::testing::Daemon process_;
  std::string name_, id_;
};

TEST_F(RegisteredBufferTest, WeCannotUseAnotherProcesssBuffer) {
  Holder holder(target(), dir_.File("peer.log"));
  ASSERT_TRUE(holder.WaitRegistered());
  ASSERT_THAT(holder.id(), MatchesRegex("[0-9a-f]{32}"));
  const DaemonClient client = Client();
  const absl::Status run = client.Run(SmallSoftmax(holder.id(), 0, 256)).status();
  const absl::Status unregister = client.Unregister(holder.id());
  EXPECT_TRUE(absl::IsNotFound(run)) << run;
  EXPECT_TRUE(absl::IsNotFound(unregister)) << unregister;
  // Exactly what an id that was never registered gets: no existence leak.
  const std::string unknown(32, 'a');
  const absl::Status run_unknown = client.Run(SmallSoftmax(unknown, 0, 256)).status();
  const absl::Status unregister_unknown = client.Unregister(unknown);
  EXPECT_EQ(absl::StrReplaceAll(run.message(), {{holder.id(), "ID"}}),
            absl::StrReplaceAll(run_unknown.message(), {{unknown, "ID"}}));
  EXPECT_EQ(absl::StrReplaceAll(unregister.message(), {{holder.id(), "ID"}}),
            absl::StrReplaceAll(unregister_unknown.message(), {{unknown, "ID"}}));

  absl::StatusOr<std::vector<pb::BufferInfo>> ours = client.ListBuffers();
  ASSERT_TRUE(ours.ok());
  EXPECT_TRUE(ours->empty());
  const pb::GetStatusResponse status = Status();
  EXPECT_EQ(status.registered_buffers(), 1);  // the peer's, still there
  EXPECT_EQ(status.buffer_owners(), 1);
}

TEST_F(RegisteredBufferTest, AKilledClientsRegistrationsAreReaped) {
  Holder holder(target(), dir_.File("peer.log"));
  ASSERT_TRUE(holder.WaitRegistered());
  ASSERT_EQ(Status().registered_buffers(), 1);
  holder.Kill();
  const auto killed = std::chrono::steady_clock::now();
  int64_t left = 1;
  while (left > 0 && std::chrono::steady_clock::now() - killed < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = Status().registered_buffers();
  }
  EXPECT_EQ(left, 0) << "still registered 5 s after its owner was killed";
  EXPECT_EQ(Status().buffer_owners(), 0);
}

TEST_F(RegisteredBufferTest, AClientKilledWithRunsInFlightThroughItsQueueIsReaped) {
  Holder holder(target(), dir_.File("peer.log"), "flood");
  ASSERT_TRUE(holder.WaitRegistered());
  const pb::GetStatusResponse before = Status();
  EXPECT_EQ(before.open_queues(), 1);
  EXPECT_EQ(before.registered_buffers(), 1);
  holder.Kill();
  const auto killed = std::chrono::steady_clock::now();
  pb::GetStatusResponse now = before;
  while ((now.open_queues() > 0 || now.registered_buffers() > 0) &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = Status();
  }
  EXPECT_EQ(now.open_queues(), 0) << "its queue still open 5 s after it was killed";
  EXPECT_EQ(now.registered_buffers(), 0);
  // Its region is unmapped and its descriptor closed too, though the
  // queue poller, idle since the kill, last saw the queue.
  std::vector<std::string> queue_fds = DaemonQueueDescriptors();
  while (!queue_fds.empty() &&
         std::chrono::steady_clock::now() - killed < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    queue_fds = DaemonQueueDescriptors();
  }
  EXPECT_THAT(queue_fds, ::testing::IsEmpty());
  // The daemon serves on, through a queue of ours.
  absl::StatusOr<RegisteredBuffer> buffer = Client().RegisterHostShm(shm_.name(), 0, 0, "");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const DaemonClient client = Client();
  EXPECT_TRUE(client.Run(SmallSoftmax(buffer->id(), 0, 256)).ok());
  EXPECT_EQ(Status().open_queues(), 1);
}

TEST_F(RegisteredBufferTest, AnIdleLeaseEnds) {
  const DaemonClient client = Client();
  absl::StatusOr<RegisteredBuffer> buffer = client.RegisterHostShm(shm_.name(), 0, 1, "");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->info().ttl_seconds(), 1);
  const auto start = std::chrono::steady_clock::now();
  size_t left = 1;
  while (left > 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    absl::StatusOr<std::vector<pb::BufferInfo>> listed = client.ListBuffers();
    ASSERT_TRUE(listed.ok());
    left = listed->size();
  }
  EXPECT_EQ(left, 0u) << "a 1 s lease still held after 5 s";
  EXPECT_TRUE(absl::IsNotFound(client.Run(SmallSoftmax(buffer->id(), 0, 256)).status()));
  // Its destructor's UnregisterBuffer now fails; that is logged, not fatal.
}

TEST_F(RegisteredBufferTest, StatusCountsRegistrations) {
  absl::StatusOr<RegisteredBuffer> buffer = Client().RegisterHostShm(shm_.name(), 0, 0, "");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const ProcessResult text = RunProcess({KT_KERNTUNE_BINARY, "status", "--server=" + target()});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("buffers    1 registered, 64.0 KiB, owned by 1 process; "
                                  "default lease 3600 s"));
}

TEST_F(RegisteredBufferTest, KerntuneRunViaShmChecksEveryOpAndDtype) {
  for (const char* op : {"softmax", "log_softmax", "layer_norm"}) {
    for (const char* dtype : {"float32", "float16", "bfloat16"}) {
      const ProcessResult run = RunProcess(
          {KT_KERNTUNE_BINARY, "run", op, std::string("--dtype=") + dtype, "--rows=65",
           "--cols=300", "--server=" + target(), "--via=shm", "--iterations=2"});
      SCOPED_TRACE(std::string(op) + " " + dtype + "\n" + run.out + run.err);
      EXPECT_EQ(run.code, 0);
      EXPECT_THAT(run.out, HasSubstr("matches the fp64 reference"));
      EXPECT_THAT(run.out, HasSubstr("shm (asked)"));
      EXPECT_EQ(run.err, "");  // its registration ended cleanly
    }
  }
  EXPECT_EQ(Status().registered_buffers(), 0);
}

}  // namespace
}  // namespace kt::client
