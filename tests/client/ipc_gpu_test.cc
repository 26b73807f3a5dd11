// Several client processes sharing one GPU kerntuned through CUDA IPC (CTest
// label gpu): each kt_ipc_peer registers its own cudaMalloc allocation,
// runs every op x dtype with and without wait/done events, registered and
// one-off, checks each output against the fp64 reference, and finds another
// peer's buffer NOT_FOUND. Then `kerntune run` through IPC. Every check
// fails the test; nothing is skipped on a GPU host.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "client/daemon_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
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
class Child {
 public:
  explicit Child(std::vector<std::string> argv) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    std::vector<char*> raw;
    for (std::string& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      close(in[0]);
      close(in[1]);
      close(out[0]);
      close(out[1]);
      execv(raw[0], raw.data());
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
                                  "--server=unix:" + socket_ + " --via=" + via + " 2>&1";
      FILE* pipe = popen(command.c_str(), "r");
      ASSERT_NE(pipe, nullptr);
      std::string output;
      char buffer[4096];
      size_t got = 0;
      while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
      const int status = pclose(pipe);
      SCOPED_TRACE(command + "\n" + output);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      EXPECT_THAT(output, HasSubstr("matches the fp64 reference"));
      EXPECT_THAT(output, HasSubstr("backend     gpu"));
      EXPECT_THAT(output, HasSubstr("via         ipc"));
      EXPECT_THAT(output, HasSubstr("(source: heuristic)"));  // an empty store
    }
  }
  EXPECT_EQ(Status().registered_buffers(), 0);
}

}  // namespace
}  // namespace kt::client
