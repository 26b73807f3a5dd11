// Registered buffers end to end against the real kerntuned (CPU backend):
// POSIX shared memory registered, used in place, listed and unregistered;
// ownership across processes; reaping of killed clients and of expired
// leases; a client shrinking its memory mid-use. (TCP callers being
// refused is in kerntuned_test.cc, ServesOverTcpWhenAsked.)
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/host_dtype.h"
#include "kernels/reference.h"
#include "tests/server/kerntuned_fixture.h"
#include "tests/server/shared_memory.h"
#include "tests/testing/sanitizers.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::kt::server::testing::Health;
using ::testing::HasSubstr;

using ::kt::server::testing::SharedMemory;

class KerntunedBuffersTest : public ::kt::server::testing::KerntunedFixture {
 protected:
  absl::StatusOr<pb::BufferInfo> Register(const std::string& name, int64_t size = 0,
                                          int64_t ttl = 0) {
    pb::RegisterBufferRequest request;
    request.mutable_host_shm()->set_name(name);
    request.set_size_bytes(size);
    request.set_ttl_seconds(ttl);
    request.set_label("test");
    pb::RegisterBufferResponse response;
    grpc::Status status = Call(&pb::KernTune::Stub::RegisterBuffer, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response.buffer();
  }
  pb::GetStatusResponse Status() {
    pb::GetStatusResponse response;
    EXPECT_TRUE(Call(&pb::KernTune::Stub::GetStatus, pb::GetStatusRequest(), &response).ok());
    return response;
  }
  // Runs kt_buffer_client and returns its first output line.
  std::string OtherClient(const std::string& verb, const std::string& arg) {
    const std::string command =
        absl::StrCat(KT_BUFFER_CLIENT_BINARY, " ", socket_, " ", verb, " ", arg);
    FILE* pipe = popen(command.c_str(), "r");
    char line[256] = {};
    if (pipe == nullptr || fgets(line, sizeof(line), pipe) == nullptr) line[0] = '\0';
    if (pipe != nullptr) pclose(pipe);
    return std::string(absl::StripAsciiWhitespace(line));
  }
};

pb::RunRequest SoftmaxOnBuffers(const std::string& in, int64_t in_offset, const std::string& out,
                                int64_t out_offset, int64_t rows, int64_t cols) {
  pb::RunRequest request;
  request.set_op(pb::OP_SOFTMAX);
  request.set_dtype(pb::DTYPE_FLOAT32);
  request.mutable_shape()->set_rows(rows);
  request.mutable_shape()->set_cols(cols);
  request.mutable_input()->mutable_buffer()->set_buffer_id(in);
  request.mutable_input()->mutable_buffer()->set_offset_bytes(in_offset);
  request.mutable_output()->mutable_buffer()->set_buffer_id(out);
  request.mutable_output()->mutable_buffer()->set_offset_bytes(out_offset);
  return request;
}

// Checks rows x cols softmax outputs `y` of inputs `x` (float32) against
// the reference.
void ExpectSoftmax(const float* x, const float* y, int64_t rows, int64_t cols) {
  std::vector<float> want(static_cast<size_t>(rows * cols));
  kernels::RowOpArgs args;
  args.x = x;
  args.y = want.data();
  ASSERT_TRUE(kernels::RunReference(kernels::Op::kSoftmax, kernels::DType::kFloat32,
                                    {rows, cols}, args, 0, rows, kernels::DType::kFloat32, 1)
                  .ok());
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_NEAR(y[i], want[i], 1e-6 + 1e-5 * std::fabs(want[i])) << "element " << i;
  }
}

TEST_F(KerntunedBuffersTest, SharedMemoryIsRegisteredUsedInPlaceListedAndUnregistered) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr int64_t kRows = 16, kCols = 100, kBytes = kRows * kCols * 4;
  SharedMemory shm(3 * kBytes);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 3);
  float* x = reinterpret_cast<float*>(shm.data());
  for (int64_t i = 0; i < kRows * kCols; ++i) x[i] = normal(rng);

  absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->buffer_id().size(), 32u);
  EXPECT_EQ(buffer->kind(), pb::BUFFER_KIND_HOST_SHM);
  EXPECT_EQ(buffer->size_bytes(), 3 * kBytes);
  EXPECT_EQ(buffer->ttl_seconds(), 3600);
  EXPECT_EQ(Status().registered_buffers(), 1);
  EXPECT_EQ(Status().buffer_owners(), 1);

  // Out of place into the second third, then in place on the copy there.
  pb::RunResponse response;
  pb::RunRequest request = SoftmaxOnBuffers(buffer->buffer_id(), 0, buffer->buffer_id(), kBytes,
                                            kRows, kCols);
  grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(response.output_data().empty());
  ExpectSoftmax(x, x + kRows * kCols, kRows, kCols);

  std::memcpy(shm.data() + 2 * kBytes, shm.data(), kBytes);
  request = SoftmaxOnBuffers(buffer->buffer_id(), 2 * kBytes, buffer->buffer_id(), 2 * kBytes,
                             kRows, kCols);
  ASSERT_TRUE(Call(&pb::KernTune::Stub::Run, request, &response).ok());
  ExpectSoftmax(x, x + 2 * kRows * kCols, kRows, kCols);

  pb::ListBuffersResponse listed;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::ListBuffers, pb::ListBuffersRequest(), &listed).ok());
  ASSERT_EQ(listed.buffers_size(), 1);
  EXPECT_EQ(listed.buffers(0).buffer_id(), buffer->buffer_id());
  EXPECT_EQ(listed.buffers(0).runs(), 2);
  EXPECT_EQ(listed.buffers(0).label(), "test");

  pb::UnregisterBufferRequest unregister;
  unregister.set_buffer_id(buffer->buffer_id());
  pb::UnregisterBufferResponse unregistered;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::UnregisterBuffer, unregister, &unregistered).ok());
  EXPECT_EQ(Call(&pb::KernTune::Stub::Run, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Call(&pb::KernTune::Stub::UnregisterBuffer, unregister, &unregistered).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Status().registered_buffers(), 0);
}

TEST_F(KerntunedBuffersTest, LayerNormReadsAffineAndWritesStatisticsInSharedMemory) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr int64_t kRows = 5, kCols = 64;
  SharedMemory shm(1 << 16);
  float* base = reinterpret_cast<float*>(shm.data());
  float* x = base;
  float* y = base + 1024;
  float* gamma = base + 2048;
  float* beta = gamma + kCols;
  float* mean = base + 4096;
  float* inv_std = mean + kRows;
  for (int64_t i = 0; i < kRows * kCols; ++i) x[i] = static_cast<float>((i * 37) % 101) / 7.0f;
  for (int64_t i = 0; i < kCols; ++i) gamma[i] = 1.0f + i / 64.0f, beta[i] = -0.5f;
  absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const std::string& id = buffer->buffer_id();
  auto slice = [&](pb::BufferSlice* out, const float* p) {
    out->set_buffer_id(id);
    out->set_offset_bytes(reinterpret_cast<const char*>(p) - shm.data());
  };
  pb::RunRequest request;
  request.set_op(pb::OP_LAYER_NORM);
  request.set_dtype(pb::DTYPE_FLOAT32);
  request.mutable_shape()->set_rows(kRows);
  request.mutable_shape()->set_cols(kCols);
  slice(request.mutable_input()->mutable_buffer(), x);
  slice(request.mutable_output()->mutable_buffer(), y);
  pb::LayerNormParams& params = *request.mutable_layer_norm();
  params.set_epsilon(1e-5);
  slice(params.mutable_gamma()->mutable_buffer(), gamma);
  slice(params.mutable_beta()->mutable_buffer(), beta);
  slice(params.mutable_mean()->mutable_buffer(), mean);
  slice(params.mutable_inv_std()->mutable_buffer(), inv_std);
  pb::RunResponse response;
  grpc::Status status = Call(&pb::KernTune::Stub::Run, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();

  std::vector<float> want_y(kRows * kCols), want_mean(kRows), want_inv_std(kRows);
  kernels::RowOpArgs args;
  args.x = x;
  args.y = want_y.data();
  args.gamma = gamma;
  args.beta = beta;
  args.mean = want_mean.data();
  args.inv_std = want_inv_std.data();
  args.params.epsilon = 1e-5;
  ASSERT_TRUE(kernels::RunReference(kernels::Op::kLayerNorm, kernels::DType::kFloat32,
                                    {kRows, kCols}, args, 0, kRows, kernels::DType::kFloat32, 1)
                  .ok());
  for (int64_t i = 0; i < kRows * kCols; ++i) ASSERT_NEAR(y[i], want_y[i], 1e-5) << i;
  for (int64_t r = 0; r < kRows; ++r) {
    EXPECT_NEAR(mean[r], want_mean[r], 1e-5);
    EXPECT_NEAR(inv_std[r], want_inv_std[r], 1e-4 * want_inv_std[r]);
  }
}

TEST_F(KerntunedBuffersTest, AnotherProcessCannotUseOrUnregisterOurBuffer) {
  ASSERT_NO_FATAL_FAILURE(Start());
  SharedMemory shm(4096);
  absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const std::string not_found = std::to_string(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(OtherClient("use", buffer->buffer_id()), not_found);
  EXPECT_EQ(OtherClient("unregister", buffer->buffer_id()), not_found);
  // Still ours and still working.
  pb::RunResponse response;
  EXPECT_TRUE(Call(&pb::KernTune::Stub::Run,
                   SoftmaxOnBuffers(buffer->buffer_id(), 0, buffer->buffer_id(), 64, 1, 4),
                   &response)
                  .ok());
  EXPECT_EQ(Status().registered_buffers(), 1);
}

TEST_F(KerntunedBuffersTest, AKilledClientsRegistrationsAreReapedWithinSeconds) {
  ASSERT_NO_FATAL_FAILURE(Start());
  SharedMemory shm(4096);
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t child = fork();
  if (child == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    execl(KT_BUFFER_CLIENT_BINARY, KT_BUFFER_CLIENT_BINARY, socket_.c_str(), "register-shm",
          shm.name().c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  char id[64] = {};
  FILE* from_child = fdopen(out[0], "r");
  ASSERT_NE(fgets(id, sizeof(id), from_child), nullptr) << "the client did not register";
  fclose(from_child);
  EXPECT_EQ(Status().registered_buffers(), 1);
  EXPECT_EQ(Status().buffer_owners(), 1);

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wait_status = 0;
  waitpid(child, &wait_status, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Status().registered_buffers() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Status().registered_buffers(), 0) << "not reaped within 5 s";
  EXPECT_THAT(daemon_->Log(), HasSubstr("1 of exited processes"));
}

TEST_F(KerntunedBuffersTest, IdleLeasesExpire) {
  ASSERT_NO_FATAL_FAILURE(Start());
  SharedMemory shm(4096);
  ASSERT_TRUE(Register(shm.name(), 0, 1).ok());
  ASSERT_TRUE(Register(shm.name(), 0, 60).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Status().registered_buffers() != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Status().registered_buffers(), 1);
}

TEST_F(KerntunedBuffersTest, BadRegistrationsGetTheirCodeAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  SharedMemory shm(4096);
  struct Case {
    std::string name;
    pb::RegisterBufferRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, auto edit, grpc::StatusCode code, std::string message) {
    pb::RegisterBufferRequest request;
    request.mutable_host_shm()->set_name(shm.name());
    edit(request);
    cases.push_back({std::move(name), request, code, std::move(message)});
  };
  using grpc::StatusCode;
  add("no memory", [](auto& r) { r.clear_memory(); }, StatusCode::INVALID_ARGUMENT,
      "memory is not set");
  add("slash in name", [](auto& r) { r.mutable_host_shm()->set_name("/a/b"); },
      StatusCode::INVALID_ARGUMENT, "no other '/'");
  add("empty name", [](auto& r) { r.mutable_host_shm()->set_name(""); },
      StatusCode::INVALID_ARGUMENT, "must be a shm_open name");
  add("missing object", [](auto& r) { r.mutable_host_shm()->set_name("/kt_no_such_object"); },
      StatusCode::NOT_FOUND, "No such file");
  add("size past the object", [](auto& r) { r.set_size_bytes(4097); }, StatusCode::OUT_OF_RANGE,
      "size_bytes=4097 is outside the allocation, which has 4096 bytes");
  add("negative size", [](auto& r) { r.set_size_bytes(-1); }, StatusCode::INVALID_ARGUMENT,
      "size_bytes=-1");
  add("negative ttl", [](auto& r) { r.set_ttl_seconds(-5); }, StatusCode::INVALID_ARGUMENT,
      "ttl_seconds=-5");
  add("ttl over a week", [](auto& r) { r.set_ttl_seconds(700000); },
      StatusCode::INVALID_ARGUMENT, "ttl_seconds=700000 must be in [0, 604800]");
  add("cuda ipc on the cpu backend",
      [](auto& r) {
        r.mutable_cuda_ipc()->set_handle(std::string(64, 'h'));
      },
      StatusCode::FAILED_PRECONDITION, "CPU backend, which cannot open CUDA IPC handles");
  add("short cuda ipc handle", [](auto& r) { r.mutable_cuda_ipc()->set_handle("h"); },
      StatusCode::INVALID_ARGUMENT, "cuda_ipc.handle has 1 bytes, want exactly 64");
  add("long label", [](auto& r) { r.set_label(std::string(300, 'l')); },
      StatusCode::INVALID_ARGUMENT, "label has 300 bytes");
  for (const Case& c : cases) {
    pb::RegisterBufferResponse response;
    grpc::Status status = Call(&pb::KernTune::Stub::RegisterBuffer, c.request, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  EXPECT_EQ(Status().registered_buffers(), 0);

  // Runs on a real registration with bad slices.
  absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
  ASSERT_TRUE(buffer.ok());
  const std::string& id = buffer->buffer_id();
  pb::RunResponse response;
  EXPECT_EQ(Call(&pb::KernTune::Stub::Run, SoftmaxOnBuffers(id, 4096 - 12, id, 0, 1, 4),
                 &response).error_code(),
            StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(Call(&pb::KernTune::Stub::Run, SoftmaxOnBuffers(id, 0, id, 8, 1, 4), &response)
                .error_code(),
            StatusCode::INVALID_ARGUMENT);  // partial overlap
  EXPECT_EQ(Call(&pb::KernTune::Stub::Run, SoftmaxOnBuffers(id, 0, "f00d", 64, 1, 4), &response)
                .error_code(),
            StatusCode::NOT_FOUND);
}

// Issue 43: registered twice, one object is two mappings at two addresses,
// and an output through the second overlapped the input through the first
// unseen (32,725 bytes of the caller's input changed).
TEST_F(KerntunedBuffersTest, AnOutputMayNotOverlapItsInputThroughASecondRegistration) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr int64_t kRows = 16, kCols = 100, kBytes = kRows * kCols * 4;
  SharedMemory shm(2 * kBytes);
  float* x = reinterpret_cast<float*>(shm.data());
  for (int64_t i = 0; i < kRows * kCols; ++i) x[i] = static_cast<float>(i % 37) - 18.0f;
  const std::vector<char> before(shm.data(), shm.data() + kBytes);
  absl::StatusOr<pb::BufferInfo> first = Register(shm.name());
  absl::StatusOr<pb::BufferInfo> second = Register(shm.name());
  ASSERT_TRUE(first.ok() && second.ok());

  pb::RunResponse response;
  grpc::Status status = Call(
      &pb::KernTune::Stub::Run,
      SoftmaxOnBuffers(first->buffer_id(), 0, second->buffer_id(), 128, kRows, kCols), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("output overlaps input"));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), shm.data())) << "the input changed";

  // Out of place through the alias, then in place through it.
  ASSERT_TRUE(Call(&pb::KernTune::Stub::Run,
                   SoftmaxOnBuffers(first->buffer_id(), 0, second->buffer_id(), kBytes, kRows,
                                    kCols),
                   &response)
                  .ok());
  ExpectSoftmax(x, x + kRows * kCols, kRows, kCols);
  EXPECT_TRUE(Call(&pb::KernTune::Stub::Run,
                   SoftmaxOnBuffers(first->buffer_id(), 0, second->buffer_id(), 0, kRows, kCols),
                   &response)
                  .ok());
}

// Issue 43: 16 clients x 4096 registrations of one 4 KiB object took the
// daemon to vm.max_map_count; registrations then failed INTERNAL and the
// next Run above 64Ki elements aborted it. The daemon-wide limit counts
// every registration, aliases included, whoever registers.
TEST_F(KerntunedBuffersTest, RegistrationsPastMaxBuffersAreRefusedAndTheDaemonServesOn) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max_buffers=4"}));
  SharedMemory shm(4096);
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
    ASSERT_TRUE(buffer.ok()) << i << ": " << buffer.status();
    ids.push_back(buffer->buffer_id());
  }
  absl::StatusOr<pb::BufferInfo> refused = Register(shm.name());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("holds 4 registered buffers, its limit (--max_buffers=4"));
  // Another process is refused as well: the limit is the daemon's.
  EXPECT_THAT(OtherClient("try-register-shm", shm.name()),
              ::testing::StartsWith(
                  std::to_string(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)) + " "));
  EXPECT_EQ(Status().registered_buffers(), 4);

  // A Run above 64Ki elements (on a worker, on the reference's threads).
  pb::RunRequest large;
  large.set_op(pb::OP_SOFTMAX);
  large.set_dtype(pb::DTYPE_FLOAT32);
  large.mutable_shape()->set_rows(256);
  large.mutable_shape()->set_cols(512);
  large.mutable_input()->set_inline_data(std::string(256 * 512 * 4, '\0'));
  pb::RunResponse response;
  grpc::Status status = Call(&pb::KernTune::Stub::Run, large, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();

  // Room again once one goes.
  pb::UnregisterBufferRequest unregister;
  unregister.set_buffer_id(ids.back());
  pb::UnregisterBufferResponse unregistered;
  ASSERT_TRUE(Call(&pb::KernTune::Stub::UnregisterBuffer, unregister, &unregistered).ok());
  EXPECT_TRUE(Register(shm.name()).ok());
  grpc::Status health;
  EXPECT_EQ(Health(channel_, "", &health), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(daemon_->running());
}

// A sparse object costs its client nothing, and a Run over it asked the
// CPU backend for a private copy of its size: std::bad_alloc, uncaught.
TEST_F(KerntunedBuffersTest, ATensorTooLargeToCopyIsResourceExhaustedNotAnAbort) {
  if (kt::testing::kSanitizerBuild) GTEST_SKIP() << "a sanitizer's allocator aborts instead";
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr int64_t kHalf = int64_t{1} << 42;  // 4 TiB, never touched
  SharedMemory shm(2 * kHalf);
  absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  pb::RunResponse response;
  grpc::Status status =
      Call(&pb::KernTune::Stub::Run,
           SoftmaxOnBuffers(buffer->buffer_id(), 0, buffer->buffer_id(), kHalf, kHalf / 4 >> 12,
                            int64_t{1} << 12),
           &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("could not allocate 4398046511104 bytes"));
  grpc::Status health;
  EXPECT_EQ(Health(channel_, "", &health), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(daemon_->running());
}

TEST_F(KerntunedBuffersTest, ShrinkingTheObjectUnderTheDaemonIsDataLossNotACrash) {
  ASSERT_NO_FATAL_FAILURE(Start());
  SharedMemory shm(1 << 20);
  absl::StatusOr<pb::BufferInfo> buffer = Register(shm.name());
  ASSERT_TRUE(buffer.ok());
  shm.Truncate(0);
  pb::RunResponse response;
  grpc::Status status = Call(
      &pb::KernTune::Stub::Run,
      SoftmaxOnBuffers(buffer->buffer_id(), 0, buffer->buffer_id(), 1 << 19, 256, 256), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS) << status.error_message();
  grpc::Status health;
  EXPECT_EQ(Health(channel_, "", &health), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(daemon_->running());
}

}  // namespace
}  // namespace kt::server
