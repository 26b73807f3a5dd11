// The client library's pieces that need no daemon: targets, the default
// socket (the same as the daemon's), TCP credentials that do not fit, the
// status mapping, picking the daemon's device by UUID, shared memory.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/daemon_client.h"
#include "client/run_queue.h"
#include "client/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DaemonClientTargetTest, DefaultSocketIsTheDaemons) {
  {
    ScopedEnv env("XDG_RUNTIME_DIR", "/run/user/1234");
    EXPECT_EQ(DefaultDaemonSocketPath(), "/run/user/1234/kerntune.sock");
    EXPECT_EQ(DefaultDaemonSocketPath(), server::DefaultSocketPath());
    EXPECT_EQ(*ResolveTarget(""), "unix:/run/user/1234/kerntune.sock");
  }
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv env("XDG_RUNTIME_DIR", unset);
    EXPECT_EQ(DefaultDaemonSocketPath(), "/run/kerntune/kerntune.sock");
    EXPECT_EQ(DefaultDaemonSocketPath(), server::DefaultSocketPath());
  }
}

TEST(DaemonClientTargetTest, ResolvesWhatUsersWrite) {
  EXPECT_EQ(*ResolveTarget("unix:/tmp/k.sock"), "unix:/tmp/k.sock");
  EXPECT_EQ(*ResolveTarget("unix:///tmp/k.sock"), "unix:///tmp/k.sock");
  EXPECT_EQ(*ResolveTarget("/tmp/k.sock"), "unix:/tmp/k.sock");
  EXPECT_EQ(*ResolveTarget("./k.sock"), "unix:./k.sock");
  EXPECT_EQ(*ResolveTarget("localhost:50051"), "localhost:50051");
  EXPECT_EQ(*ResolveTarget("dns:///node7:50051"), "dns:///node7:50051");
  EXPECT_TRUE(IsUnixTarget("unix:/tmp/k.sock"));
  EXPECT_FALSE(IsUnixTarget("localhost:50051"));
  for (const char* bad : {"unix:", "kerntune.sock", "node7"}) {
    const absl::StatusOr<std::string> target = ResolveTarget(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(target.status())) << bad;
    EXPECT_THAT(target.status().message(), HasSubstr(absl::StrCat("--server=", bad))) << bad;
  }
  EXPECT_TRUE(absl::IsInvalidArgument(DaemonClient::Connect({"node7"}).status()));
}

TEST(DaemonClientConnectTest, TcpCredentialsThatCannotBeUsedAreRefusedUpFront) {
  DaemonClientOptions options;
  options.target = "unix:/tmp/kt.sock";
  options.tcp.token = "t";
  EXPECT_THAT(DaemonClient::Connect(options).status().message(),
              HasSubstr("TLS and tokens are for TCP targets"));
  options.target = "127.0.0.1:5000";
  EXPECT_THAT(DaemonClient::Connect(options).status().message(),
              HasSubstr("a client certificate or token needs TLS"));
  options.tcp.root_certs = "-----BEGIN CERTIFICATE-----";
  options.tcp.cert_chain = "-----BEGIN CERTIFICATE-----";
  EXPECT_THAT(DaemonClient::Connect(options).status().message(),
              HasSubstr("a client certificate and its private key go together"));
}

// A Unix socket at `path` in each state a daemon's can be in, to see what a
// failed call says about it: nothing there, a file nobody accepts on (a
// daemon that died), and one that accepts (a daemon that came back after
// the call failed; here a listener that says hello and hangs up, so the
// call fails too).
class SocketStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(mkdtemp(dir_), nullptr);
    path_ = std::string(dir_) + "/kerntune.sock";
  }
  void TearDown() override {
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);  // wakes the accept below
    if (hang_up_.joinable()) hang_up_.join();
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
    rmdir(dir_);
  }
  void Bind(bool listen_too) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    if (!listen_too) return;
    ASSERT_EQ(listen(fd_, 16), 0);
    hang_up_ = std::thread([fd = fd_] {
      for (int connection; (connection = accept(fd, nullptr, nullptr)) >= 0;) {
        // Speaks first, as a gRPC server does, but not HTTP/2.
        [[maybe_unused]] const ssize_t sent = send(connection, "hello\n", 6, MSG_NOSIGNAL);
        close(connection);
      }
    });
  }
  std::string GetStatusError() {
    DaemonClientOptions options;
    options.target = path_;
    options.deadline = absl::Seconds(10);
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    const absl::Status status = client->GetStatus().status();
    EXPECT_TRUE(absl::IsUnavailable(status)) << status;
    return std::string(status.message());
  }

  char dir_[32] = "/tmp/kt_socket_state_XXXXXX";
  std::string path_;
  int fd_ = -1;
  std::thread hang_up_;
};

// issue 43: "exists but nothing answers: is kerntuned still running?" was
// said while the daemon was up again; the C++ client said nothing.
TEST_F(SocketStateTest, NoSocket) {
  EXPECT_THAT(GetStatusError(),
              HasSubstr(absl::StrCat("GetStatus on unix:", path_, ": no socket at ", path_,
                                     ": start kerntuned (--socket=", path_)));
}

TEST_F(SocketStateTest, ASocketNobodyAcceptsOn) {
  ASSERT_NO_FATAL_FAILURE(Bind(/*listen_too=*/false));
  EXPECT_THAT(GetStatusError(),
              HasSubstr(absl::StrCat("the socket ", path_, " exists but refuses connections: "
                                     "kerntuned exited without removing it")));
}

TEST_F(SocketStateTest, ASocketThatAcceptsAgain) {
  ASSERT_NO_FATAL_FAILURE(Bind(/*listen_too=*/true));
  EXPECT_THAT(GetStatusError(),
              HasSubstr(absl::StrCat("kerntuned accepts connections at ", path_, " again")));
}

TEST(DaemonClientStatusTest, EveryGrpcCodeKeepsItsMeaning) {
  const struct {
    grpc::StatusCode grpc;
    absl::StatusCode absl;
  } codes[] = {
      {grpc::StatusCode::CANCELLED, absl::StatusCode::kCancelled},
      {grpc::StatusCode::UNKNOWN, absl::StatusCode::kUnknown},
      {grpc::StatusCode::INVALID_ARGUMENT, absl::StatusCode::kInvalidArgument},
      {grpc::StatusCode::DEADLINE_EXCEEDED, absl::StatusCode::kDeadlineExceeded},
      {grpc::StatusCode::NOT_FOUND, absl::StatusCode::kNotFound},
      {grpc::StatusCode::ALREADY_EXISTS, absl::StatusCode::kAlreadyExists},
      {grpc::StatusCode::PERMISSION_DENIED, absl::StatusCode::kPermissionDenied},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, absl::StatusCode::kResourceExhausted},
      {grpc::StatusCode::FAILED_PRECONDITION, absl::StatusCode::kFailedPrecondition},
      {grpc::StatusCode::ABORTED, absl::StatusCode::kAborted},
      {grpc::StatusCode::OUT_OF_RANGE, absl::StatusCode::kOutOfRange},
      {grpc::StatusCode::UNIMPLEMENTED, absl::StatusCode::kUnimplemented},
      {grpc::StatusCode::INTERNAL, absl::StatusCode::kInternal},
      {grpc::StatusCode::UNAVAILABLE, absl::StatusCode::kUnavailable},
      {grpc::StatusCode::DATA_LOSS, absl::StatusCode::kDataLoss},
      {grpc::StatusCode::UNAUTHENTICATED, absl::StatusCode::kUnauthenticated},
  };
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (const auto& c : codes) {
    const absl::Status status = FromGrpcStatus(grpc::Status(c.grpc, "buffer_id=ab not found"));
    EXPECT_EQ(status.code(), c.absl) << static_cast<int>(c.grpc);
    EXPECT_EQ(status.message(), "buffer_id=ab not found");
  }
  // gRPC's own errors may carry no text; the code still shows.
  EXPECT_THAT(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")).message(),
              HasSubstr("UNIMPLEMENTED"));
}

TEST(DaemonClientRunArgsTest, MakeRunRequestFillsOnlyWhatWasGiven) {
  RunArgs args;
  args.op = pb::OP_LAYER_NORM;
  args.dtype = pb::DTYPE_BFLOAT16;
  args.rows = 3;
  args.cols = 5;
  args.input = BufferTensor("00ff", 64);
  args.output = IpcOutput(std::string(64, 'h'), 1, 128);
  args.beta = InlineTensor("bb");
  args.epsilon = 1e-3;
  args.mean = BufferOutput("00ff", 0);
  args.inv_std = BufferOutput("00ff", 16);
  args.wait_event = std::string(64, 'w');
  const pb::RunRequest request = MakeRunRequest(args);
  EXPECT_EQ(request.op(), pb::OP_LAYER_NORM);
  EXPECT_EQ(request.shape().rows(), 3);
  EXPECT_EQ(request.input().buffer().buffer_id(), "00ff");
  EXPECT_EQ(request.input().buffer().offset_bytes(), 64);
  EXPECT_EQ(request.output().cuda_ipc().device_ordinal(), 1);
  EXPECT_EQ(request.output().cuda_ipc().offset_bytes(), 128);
  EXPECT_FALSE(request.layer_norm().has_gamma());
  EXPECT_EQ(request.layer_norm().beta().inline_data(), "bb");
  EXPECT_EQ(request.layer_norm().epsilon(), 1e-3);
  EXPECT_EQ(request.layer_norm().inv_std().buffer().offset_bytes(), 16);
  EXPECT_EQ(request.wait_event().size(), 64u);
  EXPECT_TRUE(request.done_event().empty());
  EXPECT_EQ(request.device(), "");  // the daemon picks (or the tensors' device)

  args.op = pb::OP_SOFTMAX;  // LayerNorm's fields are not sent for other ops
  EXPECT_FALSE(MakeRunRequest(args).has_layer_norm());
  args.device = "GPU-aaaaaaaa";  // an inline Run naming the daemon's GPU
  EXPECT_EQ(MakeRunRequest(args).device(), "GPU-aaaaaaaa");
  EXPECT_TRUE(RunArgs().output.return_inline());
}

TEST(DaemonClientRunArgsTest, MakeRunRequestFillsEachNewOpsParameters) {
  RunArgs args;
  args.op = pb::OP_RMS_NORM;
  args.dtype = pb::DTYPE_FLOAT16;
  args.rows = 4;
  args.cols = 8;
  args.input = InlineTensor(std::string(64, '\0'));
  args.gamma = InlineTensor("ww");
  args.epsilon = 1e-6;
  args.want_inv_rms = true;
  pb::RunRequest request = MakeRunRequest(args);
  EXPECT_EQ(request.shape().inner(), 0);  // the last axis: not sent
  EXPECT_EQ(request.rms_norm().weight().inline_data(), "ww");
  EXPECT_EQ(request.rms_norm().epsilon(), 1e-6);
  EXPECT_TRUE(request.rms_norm().want_inv_rms());
  EXPECT_FALSE(request.has_layer_norm());
  args.want_inv_rms = false;
  args.inv_std = BufferOutput("00ff", 32);
  EXPECT_EQ(MakeRunRequest(args).rms_norm().inv_rms().buffer().offset_bytes(), 32);

  args = RunArgs();
  args.op = pb::OP_REDUCE_SCALE;
  EXPECT_FALSE(MakeRunRequest(args).has_reduce_scale());  // inline scales by default
  args.row_scale = BufferOutput("abcd", 8);
  EXPECT_EQ(MakeRunRequest(args).reduce_scale().row_scale().buffer().buffer_id(), "abcd");

  args = RunArgs();
  args.op = pb::OP_SCALED_MASKED_SOFTMAX;
  request = MakeRunRequest(args);
  EXPECT_FALSE(request.scaled_masked_softmax().has_scale());  // the daemon's default, 1
  EXPECT_FALSE(request.scaled_masked_softmax().has_mask());
  args.scale = 0.0;  // a real scale, sent
  args.mask = InlineTensor("mm");
  args.mask_rows = 16;
  args.causal = true;
  request = MakeRunRequest(args);
  EXPECT_TRUE(request.scaled_masked_softmax().has_scale());
  EXPECT_EQ(request.scaled_masked_softmax().scale(), 0.0);
  EXPECT_EQ(request.scaled_masked_softmax().mask().inline_data(), "mm");
  EXPECT_EQ(request.scaled_masked_softmax().mask_rows(), 16);
  EXPECT_TRUE(request.scaled_masked_softmax().causal());

  args = RunArgs();
  args.op = pb::OP_LOG_SOFTMAX;
  args.inner = 48;
  args.mask = InlineTensor("mm");  // not the op's: not sent
  request = MakeRunRequest(args);
  EXPECT_EQ(request.shape().inner(), 48);
  EXPECT_FALSE(request.has_scaled_masked_softmax());
}

TEST(DaemonClientRunArgsTest, MakeRunRequestFillsTheFusedNormsParameters) {
  RunArgs args;
  args.op = pb::OP_ADD_RMS_NORM_QUANT;
  args.input = BufferTensor("b", 0);
  args.output = BufferOutput("b", 4096);
  args.gamma = BufferTensor("b", 8192);
  args.residual = BufferTensor("b", 12288);
  args.weight_offset = 1;
  args.quant_dtype = pb::QUANT_DTYPE_FP8_E5M2;
  args.scale_mode = pb::SCALE_MODE_PER_GROUP;
  args.group_size = 64;
  args.scale_ub = 1200;
  args.row_scale = BufferOutput("b", 16384);  // where the dynamic scales go
  pb::RowStrides strides;
  strides.set_input(128);
  strides.set_group_rows(8);
  args.row_strides = strides;
  pb::RunRequest request = MakeRunRequest(args);
  const pb::RmsNormParams& rms = request.rms_norm();
  EXPECT_EQ(rms.residual().buffer().offset_bytes(), 12288);
  EXPECT_EQ(rms.weight_offset(), 1);
  EXPECT_EQ(rms.quant().dtype(), pb::QUANT_DTYPE_FP8_E5M2);
  EXPECT_EQ(rms.quant().scale_mode(), pb::SCALE_MODE_PER_GROUP);
  EXPECT_EQ(rms.quant().group_size(), 64);
  EXPECT_EQ(rms.quant().scale_ub(), 1200);
  EXPECT_EQ(rms.quant().scales().buffer().offset_bytes(), 16384);
  EXPECT_FALSE(rms.quant().has_scale());
  EXPECT_EQ(request.row_strides().input(), 128);
  EXPECT_EQ(request.row_strides().group_rows(), 8);
  EXPECT_FALSE(request.has_reduce_scale());
  EXPECT_TRUE(QueueCarries(request));
  args.row_scale.reset();  // dynamic scales returned inline: gRPC only
  EXPECT_FALSE(QueueCarries(MakeRunRequest(args)));

  // The plain add op sends no quantization; the LayerNorm family its own.
  args.op = pb::OP_ADD_RMS_NORM;
  EXPECT_FALSE(MakeRunRequest(args).rms_norm().has_quant());
  args = RunArgs();
  args.op = pb::OP_ADD_LAYER_NORM_QUANT;
  args.input = BufferTensor("b", 0);
  args.output = BufferOutput("b", 4096);
  args.residual = BufferTensor("b", 8192);
  args.quant_dtype = pb::QUANT_DTYPE_INT8;
  args.scale_mode = pb::SCALE_MODE_STATIC;
  args.quant_scale = InlineTensor(std::string(4, '\0'));
  request = MakeRunRequest(args);
  EXPECT_FALSE(request.has_rms_norm());
  EXPECT_FALSE(request.has_row_strides());  // contiguous rows: not sent
  EXPECT_EQ(request.layer_norm().residual().buffer().offset_bytes(), 8192);
  EXPECT_EQ(request.layer_norm().quant().scale_mode(), pb::SCALE_MODE_STATIC);
  EXPECT_EQ(request.layer_norm().quant().scale().inline_data().size(), 4u);
  EXPECT_FALSE(QueueCarries(request));  // an inline static scale
  args.quant_scale = BufferTensor("b", 12288);
  EXPECT_TRUE(QueueCarries(MakeRunRequest(args)));
  args.residual = InlineTensor("rr");  // refused by the daemon; never queued
  EXPECT_FALSE(QueueCarries(MakeRunRequest(args)));
}

pb::GetStatusResponse StatusWithDevices(
    std::initializer_list<std::pair<int, std::string>> devices) {
  pb::GetStatusResponse status;
  for (const auto& [ordinal, uuid] : devices) {
    pb::Device* device = status.add_devices();
    device->set_ordinal(ordinal);
    device->set_uuid(uuid);
  }
  return status;
}

TEST(DaemonOrdinalForUuidTest, PicksTheDaemonsOrdinalOfTheSameGpu) {
  // The daemon sees two GPUs; this process (another CUDA_VISIBLE_DEVICES)
  // calls the second one its device 0.
  const pb::GetStatusResponse status =
      StatusWithDevices({{0, "GPU-11111111-2222-3333-4444-555555555555"},
                         {1, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}});
  absl::StatusOr<int32_t> ordinal =
      DaemonOrdinalForUuid(status, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0);
  ASSERT_TRUE(ordinal.ok()) << ordinal.status();
  EXPECT_EQ(*ordinal, 1);
  // Case does not matter.
  ordinal = DaemonOrdinalForUuid(status, "GPU-AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE", 0);
  ASSERT_TRUE(ordinal.ok());
  EXPECT_EQ(*ordinal, 1);
}

TEST(DaemonOrdinalForUuidTest, AGpuTheDaemonDoesNotSeeIsAFailedPrecondition) {
  const pb::GetStatusResponse status =
      StatusWithDevices({{0, "GPU-11111111-2222-3333-4444-555555555555"}});
  absl::StatusOr<int32_t> ordinal =
      DaemonOrdinalForUuid(status, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 0);
  EXPECT_EQ(ordinal.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ordinal.status().message()),
              HasSubstr("0=GPU-11111111-2222-3333-4444-555555555555"));
}

TEST(DaemonOrdinalForUuidTest, FallsBackWithoutUuids) {
  // An older daemon (devices without uuid), the CPU backend (no devices),
  // or a caller that does not know its own UUID: the caller's ordinal.
  EXPECT_EQ(*DaemonOrdinalForUuid(StatusWithDevices({{0, ""}, {1, ""}}),
                                  "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 1),
            1);
  EXPECT_EQ(*DaemonOrdinalForUuid(pb::GetStatusResponse(),
                                  "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", 3),
            3);
  EXPECT_EQ(*DaemonOrdinalForUuid(
                StatusWithDevices({{0, "GPU-11111111-2222-3333-4444-555555555555"}}), "", 2),
            2);
}

bool ShmExists(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

TEST(SharedMemoryTest, CreatesMapsAndUnlinks) {
  std::string name;
  {
    absl::StatusOr<SharedMemory> shm = SharedMemory::Create(10000);
    ASSERT_TRUE(shm.ok()) << shm.status();
    name = shm->name();
    EXPECT_EQ(name.rfind("/kerntune-", 0), 0u) << name;
    EXPECT_EQ(shm->size(), 10000u);
    EXPECT_EQ(shm->data()[9999], 0);
    shm->data()[9999] = 7;
    // Another mapping of the same object sees the write (what the daemon gets).
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0);
    struct stat info {};
    ASSERT_EQ(fstat(fd, &info), 0);
    EXPECT_EQ(info.st_size, 10000);
    EXPECT_EQ(info.st_mode & 0777, 0600u);
    EXPECT_EQ(info.st_uid, geteuid());
    void* other = mmap(nullptr, 10000, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(other, MAP_FAILED);
    EXPECT_EQ(static_cast<const uint8_t*>(other)[9999], 7);
    munmap(other, 10000);
    close(fd);

    SharedMemory moved = *std::move(shm);
    EXPECT_EQ(moved.name(), name);
    EXPECT_TRUE(ShmExists(name));
  }
  EXPECT_FALSE(ShmExists(name));
}

TEST(SharedMemoryTest, RefusesBadNamesAndNeverAdoptsAnExistingObject) {
  EXPECT_TRUE(absl::IsInvalidArgument(SharedMemory::Create(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SharedMemory::Create(8, "no-slash").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SharedMemory::Create(8, "/a/b").status()));
  absl::StatusOr<SharedMemory> first = SharedMemory::Create(8);
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::StatusOr<SharedMemory> second = SharedMemory::Create(8, first->name());
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  // The failed attempt did not unlink the first one's object.
  EXPECT_TRUE(ShmExists(first->name()));
}

TEST(SharedMemoryTest, UnlinkKeepsTheMappingAndLeavesNoName) {
  absl::StatusOr<SharedMemory> shm = SharedMemory::Create(4096);
  ASSERT_TRUE(shm.ok()) << shm.status();
  const std::string name = shm->name();
  const int fd = shm_open(name.c_str(), O_RDWR, 0);  // as the daemon maps it
  ASSERT_GE(fd, 0);
  void* daemons = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(daemons, MAP_FAILED);
  shm->Unlink();
  EXPECT_FALSE(ShmExists(name));
  EXPECT_EQ(shm->name(), "");
  static_cast<uint8_t*>(daemons)[100] = 9;
  EXPECT_EQ(shm->data()[100], 9) << "the two mappings are still one object";
  munmap(daemons, 4096);
}

// issue 43: `kerntune run --via=shm` interrupted left its object in
// /dev/shm. A child with an UnlinkOnSignal dies of SIGINT or SIGTERM as it
// would have, its object unlinked; once the guard is gone the handlers
// before it are back.
TEST(SharedMemoryTest, UnlinkOnSignalUnlinksThenDiesOfTheSignal) {
  for (const int signal_number : {SIGINT, SIGTERM}) {
    int names[2];
    ASSERT_EQ(pipe(names), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      absl::StatusOr<SharedMemory> shm = SharedMemory::Create(1 << 20);
      if (!shm.ok()) _exit(3);
      {
        UnlinkOnSignal scoped(*shm);
      }
      struct sigaction restored {};
      sigaction(signal_number, nullptr, &restored);
      if (restored.sa_handler != SIG_DFL) _exit(6);
      UnlinkOnSignal guard(*shm);
      if (write(names[1], shm->name().c_str(), shm->name().size()) < 0) _exit(4);
      close(names[1]);
      pause();
      _exit(5);  // not reached: the signal ends it
    }
    close(names[1]);
    char buffer[256] = {};
    const ssize_t got = read(names[0], buffer, sizeof(buffer) - 1);
    close(names[0]);
    ASSERT_GT(got, 0);
    const std::string name(buffer, static_cast<size_t>(got));
    EXPECT_TRUE(ShmExists(name));
    kill(child, signal_number);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), signal_number);
    EXPECT_FALSE(ShmExists(name)) << name << " left in /dev/shm";
    if (ShmExists(name)) shm_unlink(name.c_str());
  }
}

}  // namespace
}  // namespace kt::client
