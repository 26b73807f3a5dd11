// Several client processes sharing one GPU kerntuned through CUDA IPC (CTest
// label gpu): each kt_ipc_peer registers its own cudaMalloc allocation,
// runs every op x dtype with and without wait/done events, registered and
// one-off, checks each output against the fp64 reference, and finds another
// peer's buffer NOT_FOUND. Then `kerntune run` through IPC. Every check
// fails the test; nothing is skipped on a GPU host.
//
// With two GPUs or more (MultiGpuTest; skipped with one): peers on GPU 0
// and GPU 1 at once against one daemon (one of them numbering GPU 1 as its
// device 0, one using both GPUs), a Run with tensors on two GPUs refused, a
// registration claiming the wrong GPU refused, inline and shm Runs run on
// the GPU they name.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "client/cuda_ipc.h"
#include "client/daemon_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_identity.h"
#include "kernels/device_info.h"
#include "kernels/host_dtype.h"
#include "kernels/verify.h"
#include "tests/server/daemon_process.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;
using server::testing::Daemon;

constexpr int kPeers = 3;
constexpr auto kPeerDeadline = std::chrono::seconds(240);

// $ENV, else the file of that name beside this test (a bundle), else the
// one built beside the tests.
std::string Program(const char* env, const char* name, const char* built) {
  if (const char* from_env = std::getenv(env); from_env != nullptr && *from_env != '\0') {
    return from_env;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string sibling(self, n);
    sibling = sibling.substr(0, sibling.rfind('/') + 1) + name;
    if (access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return built;
}

// A child with a pipe to its stdin and one from its stdout; stderr is ours.
// `env` ("NAME=value") is added to this process's environment for it.
class Child {
 public:
  explicit Child(std::vector<std::string> argv, std::vector<std::string> env = {}) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    std::vector<char*> raw;
    for (std::string& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    // Built before fork: the child only execs.
    std::vector<char*> environment;
    for (std::string& entry : env) environment.push_back(entry.data());
    for (char** entry = environ; *entry != nullptr; ++entry) {
      bool replaced = false;
      for (const std::string& added : env) {
        const size_t name = added.find('=') + 1;
        replaced = replaced || std::strncmp(*entry, added.c_str(), name) == 0;
      }
      if (!replaced) environment.push_back(*entry);
    }
    environment.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      close(in[0]);
      close(in[1]);
      close(out[0]);
      close(out[1]);
      execve(raw[0], raw.data(), environment.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Child() {
    CloseInput();
    if (from_ >= 0) close(from_);
    if (pid_ > 0 && !status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // One line without its newline; "" at end of output or after `deadline`.
  std::string ReadLine(std::chrono::steady_clock::time_point deadline) {
    std::string line;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{from_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char c = 0;
      if (read(from_, &c, 1) != 1) return "";
      if (c == '\n') return line;
      line += c;
    }
  }
  void WriteLine(const std::string& line) {
    const std::string text = line + "\n";
    [[maybe_unused]] ssize_t written = write(to_, text.data(), text.size());
  }
  void CloseInput() {
    if (to_ >= 0) close(to_);
    to_ = -1;
  }
  // The exit code, or -1 when it was killed or did not exit in time.
  int Wait(std::chrono::steady_clock::time_point deadline) {
    while (!status_ && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return status_ && WIFEXITED(*status_) ? WEXITSTATUS(*status_) : -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::optional<int> status_;
};

// A shell command's exit code (-1 unless it exited) and its stdout+stderr.
struct CommandResult {
  int code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t got = 0;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = pclose(pipe);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class IpcGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(kernels::CudaDeviceCount(), 0) << "this test needs a GPU";
    daemon_ = std::make_unique<Daemon>(
        server::testing::KerntunedBinary(),
        // No store, no shipped configs: every config is the heuristic's.
        std::vector<std::string>{"--socket=" + socket_, "--db=" + dir_.File("none.db"),
                                 "--configs=" + dir_.File("no_shipped_configs")},
        dir_.File("kerntuned.log"));
    const absl::Status serving =
        server::testing::WaitUntilServing(*daemon_, socket_, std::chrono::seconds(60));
    ASSERT_TRUE(serving.ok()) << serving;
    DaemonClientOptions options;
    options.target = "unix:" + socket_;
    options.deadline = absl::Seconds(30);
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::make_unique<DaemonClient>(*client);
    absl::StatusOr<pb::GetStatusResponse> status = client_->GetStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_EQ(status->backend(), "gpu") << status->backend_reason();
    ASSERT_TRUE(status->cuda_ipc_supported());
  }

  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "kerntuned log:\n" << daemon_->Log();
  }

  pb::GetStatusResponse Status() {
    absl::StatusOr<pb::GetStatusResponse> status = client_->GetStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    return status.value_or(pb::GetStatusResponse());
  }

  kt::testing::ScopedTempDir dir_;
  const std::string socket_ = dir_.File("kerntune.sock");
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<DaemonClient> client_;
};

TEST_F(IpcGpuTest, PeersRunEveryOpAndDtypeThroughIpcAndCannotTouchEachOthersBuffers) {
  const std::string peer_binary =
      Program("KT_IPC_PEER_BINARY", "kt_ipc_peer", KT_IPC_PEER_BINARY);
  const auto deadline = std::chrono::steady_clock::now() + kPeerDeadline;
  std::vector<std::unique_ptr<Child>> peers;
  std::vector<std::string> ids;
  for (int i = 0; i < kPeers; ++i) {
    peers.push_back(std::make_unique<Child>(
        std::vector<std::string>{peer_binary, "unix:" + socket_, std::to_string(i + 1)}));
  }
  for (auto& peer : peers) {
    const std::string line = peer->ReadLine(deadline);
    ASSERT_TRUE(absl::StartsWith(line, "id ") && line != "id none") << "a peer said: " << line;
    ids.push_back(line.substr(3));
  }
  const pb::GetStatusResponse registered = Status();
  EXPECT_EQ(registered.registered_buffers(), kPeers);
  EXPECT_EQ(registered.buffer_owners(), kPeers);

  // Each peer gets the next one's id; this process is a stranger to all.
  for (int i = 0; i < kPeers; ++i) peers[i]->WriteLine("foreign " + ids[(i + 1) % kPeers]);
  for (const std::string& id : ids) {
    RunArgs args;
    args.op = pb::OP_SOFTMAX;
    args.dtype = pb::DTYPE_FLOAT32;
    args.rows = 1;
    args.cols = 4;
    args.input = BufferTensor(id, 0);
    args.output = BufferOutput(id, 1024);
    EXPECT_TRUE(absl::IsNotFound(client_->Run(args).status()));
    EXPECT_TRUE(absl::IsNotFound(client_->Unregister(id)));
  }
  // Every peer finishes while all the others' buffers are still registered.
  for (int i = 0; i < kPeers; ++i) {
    const std::string line = peers[i]->ReadLine(deadline);
    EXPECT_EQ(line, "done 0") << "peer " << i + 1 << " (its failures are on stderr above)";
  }
  EXPECT_EQ(Status().registered_buffers(), kPeers);
  for (auto& peer : peers) peer->CloseInput();
  for (int i = 0; i < kPeers; ++i) EXPECT_EQ(peers[i]->Wait(deadline), 0) << "peer " << i + 1;
  EXPECT_EQ(Status().registered_buffers(), 0);  // each unregistered its own on the way out
}

TEST_F(IpcGpuTest, KerntuneRunThroughIpc) {
  const std::string kerntune = Program("KERNTUNE_BINARY", "kerntune", KT_KERNTUNE_BINARY);
  for (const char* op : {"softmax", "log_softmax", "layer_norm"}) {
    for (const char* via : {"ipc", "auto"}) {
      const std::string command = "'" + kerntune + "' run " + op +
                                  " --dtype=bf16 --rows=4096 --cols=1024 --iterations=5 "
                                  "--server=unix:" + socket_ + " --via=" + via;
      const auto [code, output] = RunCommand(command);
      SCOPED_TRACE(command + "\n" + output);
      EXPECT_EQ(code, 0);
      EXPECT_THAT(output, HasSubstr("matches the fp64 reference"));
      EXPECT_THAT(output, HasSubstr("backend     gpu"));
      EXPECT_THAT(output, HasSubstr("via         ipc"));
      EXPECT_THAT(output, HasSubstr("(source: heuristic)"));  // an empty store
    }
  }
  EXPECT_EQ(Status().registered_buffers(), 0);
}

// Two GPUs or more: the same daemon serves them all.
class MultiGpuTest : public IpcGpuTest {
 protected:
  void SetUp() override {
    if (kernels::CudaDeviceCount() < 2) {
      GTEST_SKIP() << "needs 2 GPUs; " << kernels::CudaDeviceCount() << " visible";
    }
    for (int device : {0, 1}) {
      absl::StatusOr<kernels::DeviceIdentity> identity = kernels::GetDeviceIdentity(device);
      ASSERT_TRUE(identity.ok()) << identity.status();
      ASSERT_FALSE(identity->uuid.empty());
      uuid_[device] = identity->uuid;
    }
    IpcGpuTest::SetUp();
    if (HasFatalFailure()) return;
    // This process and the daemon see the same GPUs (the same environment);
    // still, every ordinal below is the daemon's, found by UUID.
    for (int device : {0, 1}) {
      absl::StatusOr<int32_t> ordinal = client_->DeviceOrdinalFor(uuid_[device], -1);
      ASSERT_TRUE(ordinal.ok()) << ordinal.status();
      daemon_device_[device] = *ordinal;
    }
    ASSERT_NE(daemon_device_[0], daemon_device_[1]);
  }

  // GetStatus's entry of this process's `device`.
  pb::Device DeviceStatus(int device) {
    const pb::GetStatusResponse status = Status();
    for (const pb::Device& d : status.devices()) {
      if (d.uuid() == uuid_[device]) return d;
    }
    ADD_FAILURE() << "GetStatus does not list " << uuid_[device];
    return pb::Device();
  }

  std::string uuid_[2];
  int daemon_device_[2] = {-1, -1};
};

TEST_F(MultiGpuTest, PeersOnGpu0AndGpu1AtOnce) {
  const std::string peer_binary =
      Program("KT_IPC_PEER_BINARY", "kt_ipc_peer", KT_IPC_PEER_BINARY);
  const auto deadline = std::chrono::steady_clock::now() + kPeerDeadline;
  const std::string target = "unix:" + socket_;
  // GPU 0; GPU 1, which that peer calls its device 0 (only UUIDs agree);
  // both GPUs from one process.
  std::vector<std::unique_ptr<Child>> peers;
  peers.push_back(
      std::make_unique<Child>(std::vector<std::string>{peer_binary, target, "1", "0"}));
  peers.push_back(std::make_unique<Child>(
      std::vector<std::string>{peer_binary, target, "2", "0"},
      std::vector<std::string>{"CUDA_VISIBLE_DEVICES=" + uuid_[1]}));
  peers.push_back(
      std::make_unique<Child>(std::vector<std::string>{peer_binary, target, "3", "0,1"}));
  std::vector<std::string> ids;
  for (auto& peer : peers) {
    const std::string line = peer->ReadLine(deadline);
    ASSERT_TRUE(absl::StartsWith(line, "id ") && line != "id none") << "a peer said: " << line;
    ids.push_back(line.substr(3));
  }
  // One registration per peer and GPU, counted on the GPU that holds it.
  EXPECT_EQ(Status().registered_buffers(), 4);
  EXPECT_EQ(DeviceStatus(0).registered_buffers(), 2);
  EXPECT_EQ(DeviceStatus(1).registered_buffers(), 2);
  const int64_t runs_before[2] = {DeviceStatus(0).runs(), DeviceStatus(1).runs()};

  for (size_t i = 0; i < peers.size(); ++i) {
    peers[i]->WriteLine("foreign " + ids[(i + 1) % peers.size()]);
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    EXPECT_EQ(peers[i]->ReadLine(deadline), "done 0")
        << "peer " << i + 1 << " (its failures are on stderr above)";
  }
  // Every Run of the matrix (op x dtype x 2 shapes x 4 modes) ran on the
  // GPU of its memory: two peers' worth on each.
  const int64_t matrix = static_cast<int64_t>(std::size(kernels::kBasicOps)) *
                         static_cast<int64_t>(std::size(kernels::kAllDTypes)) * 2 * 4;
  EXPECT_EQ(DeviceStatus(0).runs() - runs_before[0], 2 * matrix);
  EXPECT_EQ(DeviceStatus(1).runs() - runs_before[1], 2 * matrix);
  for (auto& peer : peers) peer->CloseInput();
  for (size_t i = 0; i < peers.size(); ++i) {
    EXPECT_EQ(peers[i]->Wait(deadline), 0) << "peer " << i + 1;
  }
  EXPECT_EQ(Status().registered_buffers(), 0);
}

// Allocations of this process on GPU 0 and GPU 1, poisoned.
class TwoAllocations {
 public:
  static constexpr size_t kBytes = 1 << 20;
  absl::Status Allocate() {
    for (int device : {0, 1}) {
      absl::StatusOr<IpcAllocation> memory = IpcAllocation::Allocate(device, kBytes);
      if (!memory.ok()) return memory.status();
      if (absl::Status s = memory->Fill(0, 0xff, kBytes); !s.ok()) return s;
      on_[device] = *std::move(memory);
    }
    return absl::OkStatus();
  }
  const IpcAllocation& on(int device) const { return on_[device]; }
  // True when the first `bytes` of the allocation on `device` are still
  // all poison.
  bool Untouched(int device, size_t bytes) const {
    std::vector<uint8_t> host(bytes);
    if (!on_[device].CopyOut(0, host.data(), bytes).ok()) return false;
    for (uint8_t b : host) {
      if (b != 0xff) return false;
    }
    return true;
  }

 private:
  IpcAllocation on_[2];
};

RunArgs SoftmaxArgs(pb::TensorRef input, pb::OutputRef output) {
  RunArgs args;
  args.op = pb::OP_SOFTMAX;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = 4;
  args.cols = 256;
  args.input = std::move(input);
  args.output = std::move(output);
  return args;
}

TEST_F(MultiGpuTest, ARunWithTensorsOnTwoGpusIsRefused) {
  TwoAllocations memory;
  ASSERT_TRUE(memory.Allocate().ok());
  const IpcAllocation& on0 = memory.on(0);
  const IpcAllocation& on1 = memory.on(1);
  absl::StatusOr<RegisteredBuffer> registered0 =
      client_->RegisterCudaIpc(on0.handle(), daemon_device_[0], 0, 0, "gpu0");
  absl::StatusOr<RegisteredBuffer> registered1 =
      client_->RegisterCudaIpc(on1.handle(), daemon_device_[1], 0, 0, "gpu1");
  ASSERT_TRUE(registered0.ok()) << registered0.status();
  ASSERT_TRUE(registered1.ok()) << registered1.status();
  EXPECT_EQ(registered0->info().device_ordinal(), daemon_device_[0]);
  EXPECT_EQ(registered1->info().device_ordinal(), daemon_device_[1]);

  const struct {
    const char* what;
    RunArgs args;
  } cases[] = {
      {"one-off handles", SoftmaxArgs(IpcTensor(on0.handle(), daemon_device_[0], 0),
                                      IpcOutput(on1.handle(), daemon_device_[1], 0))},
      {"registered buffers", SoftmaxArgs(registered1->Tensor(0), registered0->Output(0))},
      {"a buffer and a handle", SoftmaxArgs(registered0->Tensor(0),
                                             IpcOutput(on1.handle(), daemon_device_[1], 0))},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const absl::Status run = client_->Run(c.args).status();
    EXPECT_EQ(run.code(), absl::StatusCode::kInvalidArgument) << run;
    EXPECT_THAT(std::string(run.message()), HasSubstr("two devices"));
    EXPECT_THAT(std::string(run.message()), HasSubstr(uuid_[0]));
    EXPECT_THAT(std::string(run.message()), HasSubstr(uuid_[1]));
  }
  // Tensors on GPU 0 with device naming GPU 1.
  RunArgs named = SoftmaxArgs(registered0->Tensor(0), registered0->Output(4096));
  named.device = uuid_[1];
  const absl::Status run = client_->Run(named).status();
  EXPECT_EQ(run.code(), absl::StatusCode::kInvalidArgument) << run;
  // Nothing was written anywhere.
  EXPECT_TRUE(memory.Untouched(0, 8192));
  EXPECT_TRUE(memory.Untouched(1, 8192));
  EXPECT_TRUE(registered0->Unregister().ok());
  EXPECT_TRUE(registered1->Unregister().ok());
}

// The daemon cannot tell which GPU an IPC allocation lives on: the driver
// maps it into the device it is opened on (over peer access where the GPUs
// reach each other) and reports that device (bench/results,
// 2026-11-26-h200x2-multi-gpu). It trusts the ordinal, which clients find
// by UUID. A wrong one is refused where the GPUs cannot reach each other;
// elsewhere the Run runs on the claimed GPU over peer access, results right.
TEST_F(MultiGpuTest, AnAllocationClaimedOnTheOtherGpuIsRefusedOrRunsRightThere) {
  TwoAllocations memory;
  ASSERT_TRUE(memory.Allocate().ok());
  ASSERT_TRUE(memory.on(0).Fill(0, 0, 4096).ok());  // zeros in: 1/256 out
  absl::StatusOr<RegisteredBuffer> claimed =
      client_->RegisterCudaIpc(memory.on(0).handle(), daemon_device_[1], 0, 0, "claimed");
  if (!claimed.ok()) {
    EXPECT_EQ(claimed.status().code(), absl::StatusCode::kInvalidArgument) << claimed.status();
    EXPECT_THAT(std::string(claimed.status().message()),
                HasSubstr("cudaIpcOpenMemHandle refused the handle"));
    return;
  }
  absl::StatusOr<pb::RunResponse> ran =
      client_->Run(SoftmaxArgs(claimed->Tensor(0), claimed->Output(4096)));
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->device_ordinal(), daemon_device_[1]);
  std::vector<float> out(1024);
  ASSERT_TRUE(memory.on(0).CopyOut(4096, out.data(), out.size() * sizeof(float)).ok());
  for (float value : out) ASSERT_NEAR(value, 1.0f / 256, 1e-7f);
  EXPECT_TRUE(claimed->Unregister().ok());
}

TEST_F(MultiGpuTest, InlineAndShmRunsRunOnTheGpuTheyName) {
  absl::StatusOr<kernels::HostProblem> p =
      kernels::MakeProblem(kernels::Op::kSoftmax, kernels::DType::kFloat32, {8, 1000}, 7,
                           kernels::InputPattern::kNormal, /*with_affine=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  const kernels::Tolerance tolerance =
      kernels::OutputTolerance(kernels::Op::kSoftmax, kernels::DType::kFloat32);
  for (int device : {0, 1}) {
    const int64_t runs_before = DeviceStatus(device).runs();
    // Its ordinal, its UUID, a UUID prefix ("GPU-" and 8 hex digits).
    for (const std::string& selector :
         {std::to_string(daemon_device_[device]), uuid_[device], uuid_[device].substr(0, 12)}) {
      SCOPED_TRACE(selector);
      RunArgs args = SoftmaxArgs(InlineTensor(std::string(p->x.begin(), p->x.end())),
                                 InlineOutput());
      args.rows = 8;
      args.cols = 1000;
      args.device = selector;
      absl::StatusOr<pb::RunResponse> response = client_->Run(args);
      ASSERT_TRUE(response.ok()) << response.status();
      EXPECT_EQ(response->device_ordinal(), daemon_device_[device]);
      EXPECT_EQ(response->device_uuid(), uuid_[device]);
      ASSERT_EQ(response->output_data().size(), p->x.size());
      int64_t bad = 0;
      for (int64_t i = 0; i < p->shape.elements(); ++i) {
        const double got = kernels::LoadAsDouble(kernels::DType::kFloat32,
                                                 response->output_data().data(), i);
        const double want = p->y_ref[i];
        if (!(std::fabs(got - want) <= tolerance.atol + tolerance.rtol * std::fabs(want))) ++bad;
      }
      EXPECT_EQ(bad, 0);
    }
    EXPECT_EQ(DeviceStatus(device).runs() - runs_before, 3);
  }
  // A device the daemon does not serve.
  RunArgs args = SoftmaxArgs(InlineTensor(std::string(4 * 256 * 4, '\0')), InlineOutput());
  args.device = "7";
  EXPECT_EQ(client_->Run(args).status().code(), absl::StatusCode::kInvalidArgument);

  // `kerntune run`: inline and shm naming GPU 1, ipc from this process's GPU 1.
  const std::string kerntune = Program("KERNTUNE_BINARY", "kerntune", KT_KERNTUNE_BINARY);
  for (const std::string& flags :
       {"--via=inline --daemon_device=" + std::to_string(daemon_device_[1]),
        "--via=shm --daemon_device=" + uuid_[1], std::string("--via=ipc --device=1"),
        std::string("--via=auto --device=1")}) {
    const std::string command = "'" + kerntune + "' run rms_norm --dtype=fp16 --rows=256 "
                                "--cols=4096 --iterations=2 --server=unix:" + socket_ + " " + flags;
    const auto [code, output] = RunCommand(command);
    SCOPED_TRACE(command + "\n" + output);
    EXPECT_EQ(code, 0);
    EXPECT_THAT(output, HasSubstr("matches the fp64 reference"));
    EXPECT_THAT(output, HasSubstr("device      " + std::to_string(daemon_device_[1]) + " (" +
                                  uuid_[1] + ")\n"));
  }
  EXPECT_EQ(Status().registered_buffers(), 0);
}

}  // namespace
}  // namespace kt::client
