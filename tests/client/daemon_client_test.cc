// kt::client::DaemonClient against a real kerntuned (CPU backend) on a temp
// socket: every RPC, inline Runs equal to the reference, errors that keep
// the daemon's code and name the call and target, per-call deadlines.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/daemon_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::CpuDaemonTest;
using testing::Expected;
using testing::RandomTensor;
using testing::Reference;
using testing::ToKernels;

class DaemonClientTest : public CpuDaemonTest {};

TEST_F(DaemonClientTest, RunsEveryOpAndDtypeInlineLikeTheReference) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const DaemonClient client = Client();
  std::mt19937_64 rng(4);
  for (pb::Op op : {pb::OP_SOFTMAX, pb::OP_LOG_SOFTMAX, pb::OP_LAYER_NORM}) {
    for (pb::DType dtype : {pb::DTYPE_FLOAT32, pb::DTYPE_FLOAT16, pb::DTYPE_BFLOAT16}) {
      SCOPED_TRACE(pb::Op_Name(op) + " " + pb::DType_Name(dtype));
      const kernels::DType kdtype = ToKernels(dtype);
      RunArgs args;
      args.op = op;
      args.dtype = dtype;
      args.rows = 7;
      args.cols = 33;
      const std::string x = RandomTensor(kdtype, 7 * 33, rng, op == pb::OP_LAYER_NORM ? 3 : 0.5);
      const std::string gamma = RandomTensor(kdtype, 33, rng, 1);
      const std::string beta = RandomTensor(kdtype, 33, rng, 0);
      args.input = InlineTensor(x);
      const bool layer_norm = op == pb::OP_LAYER_NORM;
      if (layer_norm) {
        args.gamma = InlineTensor(gamma);
        args.beta = InlineTensor(beta);
        args.epsilon = 1e-3;
        args.want_mean_inv_std = true;
      }
      absl::StatusOr<pb::RunResponse> response = client.Run(args);
      ASSERT_TRUE(response.ok()) << response.status();
      const Expected want =
          Reference(args, x, layer_norm ? &gamma : nullptr, layer_norm ? &beta : nullptr);
      EXPECT_EQ(response->output_data(), want.y);
      if (layer_norm) {
        EXPECT_THAT(response->mean(), ElementsAreArray(want.mean));
        EXPECT_THAT(response->inv_std(), ElementsAreArray(want.inv_std));
      }
      EXPECT_EQ(response->backend(), "cpu");
      EXPECT_EQ(response->config().source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
    }
  }
}

TEST_F(DaemonClientTest, LargeInlineOutputsComeBack) {
  // Above gRPC's default 4 MiB receive limit: the client lifts it.
  ASSERT_NO_FATAL_FAILURE(Start());
  RunArgs args;
  args.op = pb::OP_SOFTMAX;
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = 2048;
  args.cols = 1024;
  args.input = InlineTensor(std::string(2048 * 1024 * 4, '\0'));  // zeros: 1/1024 each
  absl::StatusOr<pb::RunResponse> response = Client().Run(args);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->output_data().size(), 2048u * 1024 * 4);
  float last = 0;
  std::memcpy(&last, response->output_data().data() + response->output_data().size() - 4, 4);
  EXPECT_FLOAT_EQ(last, 1.0f / 1024);
}

TEST_F(DaemonClientTest, GetConfigListConfigsAndGetStatus) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const DaemonClient client = Client();
  absl::StatusOr<pb::ConfigChoice> choice =
      client.GetConfig(pb::OP_LAYER_NORM, pb::DTYPE_BFLOAT16, 49152, 4096);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source(), pb::CONFIG_SOURCE_CPU_REFERENCE);
  EXPECT_FALSE(choice->has_config());

  absl::StatusOr<pb::ListConfigsResponse> configs = client.ListConfigs();
  ASSERT_TRUE(configs.ok()) << configs.status();
  EXPECT_EQ(configs->entries_size(), 0);

  absl::StatusOr<pb::GetStatusResponse> status = client.GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->backend(), "cpu");
  EXPECT_EQ(status->backend_reason(), "--cpu given");
  EXPECT_FALSE(status->version().empty());
  EXPECT_EQ(status->database_path(), dir_.File("none.db"));
  EXPECT_FALSE(status->cuda_ipc_supported());
}

TEST_F(DaemonClientTest, ErrorsKeepTheDaemonsCodeAndNameTheCallAndTarget) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const DaemonClient client = Client();
  const absl::Status bad_shape =
      client.GetConfig(pb::OP_SOFTMAX, pb::DTYPE_FLOAT16, 8, 0).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad_shape)) << bad_shape;
  EXPECT_THAT(bad_shape.message(), HasSubstr("GetConfig on " + target() + ": "));
  EXPECT_THAT(bad_shape.message(), HasSubstr("shape.cols=0"));

  RunArgs args;
  args.op = pb::OP_LAYER_NORM;  // without epsilon: refused, not defaulted
  args.dtype = pb::DTYPE_FLOAT32;
  args.rows = 1;
  args.cols = 2;
  args.input = InlineTensor(std::string(8, '\0'));
  const absl::Status no_epsilon = client.Run(args).status();
  EXPECT_TRUE(absl::IsInvalidArgument(no_epsilon)) << no_epsilon;
  EXPECT_THAT(no_epsilon.message(), HasSubstr("epsilon"));
}

TEST_F(DaemonClientTest, NoDaemonIsUnavailableAtOnce) {
  DaemonClientOptions options;
  options.target = "unix:" + dir_.File("nobody.sock");
  options.deadline = absl::Seconds(30);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = client->GetStatus().status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("GetStatus on " + options.target));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(DaemonClientTest, EveryCallHasADeadline) {
  // A socket that accepts connections at the kernel level but never speaks
  // HTTP/2: the call can only end by its deadline.
  const std::string path = dir_.File("mute.sock");
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  DaemonClientOptions options;
  options.target = "unix:" + path;
  options.deadline = absl::Seconds(60);
  absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
  ASSERT_TRUE(client.ok());
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = client->WithDeadline(absl::Milliseconds(300)).GetStatus().status();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(10));
  close(fd);
}

}  // namespace
}  // namespace kt::client
