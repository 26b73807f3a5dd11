// Who may pass memory references: the policy as a function, the peer's
// groups as the kernel reports them, and the service refusing a caller the
// policy turned down at every door that opens client memory (RegisterBuffer,
// registered buffers and CUDA IPC handles in a Run, OpenQueue) while still
// serving it inline tensors. Two real users: kerntuned_trust_test.cc.
#include "server/memory_access.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cpu_backend.h"
#include "server/run_request.h"
#include "server/service.h"
#include "tests/server/malformed_requests.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

constexpr uid_t kDaemonUid = 998;
constexpr gid_t kSocketGid = 2424;

PeerProcess Peer(uid_t uid, gid_t gid) {
  PeerProcess peer;
  peer.pid = 4242;
  peer.uid = uid;
  peer.gid = gid;
  return peer;
}

TEST(MemoryAccessPolicyTest, TakesTheDaemonsUserRootAndTheSocketsGroup) {
  const MemoryAccessPolicy policy(kDaemonUid, kSocketGid);
  EXPECT_TRUE(policy.Check(Peer(kDaemonUid, 100), {}).ok());
  EXPECT_TRUE(policy.Check(Peer(0, 100), {}).ok());
  EXPECT_TRUE(policy.Check(Peer(1000, kSocketGid), {}).ok());  // primary group
  const std::vector<gid_t> groups = {27, kSocketGid, 44};
  EXPECT_TRUE(policy.Check(Peer(1000, 1000), groups).ok());  // supplementary
}

TEST(MemoryAccessPolicyTest, RefusesEveryoneElseNamingTheRuleAndTheFix) {
  const MemoryAccessPolicy policy(kDaemonUid, kSocketGid);
  const std::vector<gid_t> groups = {27, 44};
  const absl::Status refused = policy.Check(Peer(1000, 1000), groups);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("pid 4242 (uid 1000), in groups 1000,27,44"));
  EXPECT_THAT(refused.message(), HasSubstr("its own user (uid 998), root and the socket's group "
                                           "2424"));
  EXPECT_THAT(refused.message(), HasSubstr("Add the user to that group"));
  EXPECT_THAT(refused.message(), HasSubstr("send tensors inline"));
  EXPECT_EQ(policy.Describe().rfind("uid 998, root and group 2424", 0), 0u);
}

TEST(MemoryAccessPolicyTest, AnUndecidedCallerIsRefused) {
  EXPECT_EQ(PeerProcess().memory_access.code(), absl::StatusCode::kPermissionDenied);
}

TEST(PeerGroupsTest, AreThoseOfTheConnectedProcess) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::vector<gid_t> want(static_cast<size_t>(getgroups(0, nullptr)));
  ASSERT_EQ(getgroups(static_cast<int>(want.size()), want.data()),
            static_cast<int>(want.size()));
  absl::StatusOr<std::vector<gid_t>> groups = ReadPeerGroups(fds[0]);
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_THAT(*groups, UnorderedElementsAreArray(want));
}

// The CPU backend behind a service whose every caller is `caller_`, this
// process, refused memory references.
class RefusedCallerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    caller_.pid = getpid();
    caller_.uid = getuid();
    caller_.gid = getgid();
    caller_.start_ticks = *ProcessStartTicks(caller_.pid);
    // The service only honours what the listener decided: a refusal of
    // another (pretend) peer stands in for this process's.
    caller_.memory_access = MemoryAccessPolicy(kDaemonUid, kSocketGid).Check(Peer(1000, 1000), {});
    ServiceOptions options;
    options.max_request_bytes = int64_t{1} << 20;
    options.backend_reason = "test";
    options.identify_caller = [this](absl::string_view) { return caller_; };
    service_ = std::make_unique<KernTuneService>(backend_, std::move(options));

    // An object the caller owns, so only the policy can refuse it.
    shm_name_ = absl::StrCat("/kt-memory-access-test-", getpid());
    const int fd = shm_open(shm_name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 4096), 0);
    close(fd);
  }
  void TearDown() override { shm_unlink(shm_name_.c_str()); }

  static void ExpectRefused(const grpc::Status& status, const std::string& what) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(what + " refused: pid 4242 (uid 1000)"));
    EXPECT_THAT(status.error_message(), HasSubstr("may not pass memory references"));
  }

  CpuBackend backend_{1};
  PeerProcess caller_;
  std::unique_ptr<KernTuneService> service_;
  std::string shm_name_;
};

TEST_F(RefusedCallerTest, EveryMemoryReferenceIsRefusedAndInlineTensorsStillServed) {
  ASSERT_FALSE(caller_.memory_access.ok());

  pb::RegisterBufferRequest shm;
  shm.mutable_host_shm()->set_name(shm_name_);
  pb::RegisterBufferResponse registered;
  ExpectRefused(service_->HandleRegisterBuffer("peer", &shm, &registered), "RegisterBuffer");

  pb::RegisterBufferRequest ipc;
  ipc.mutable_cuda_ipc()->set_handle(std::string(kCudaIpcHandleBytes, '\x01'));
  ExpectRefused(service_->HandleRegisterBuffer("peer", &ipc, &registered), "RegisterBuffer");

  pb::RunRequest one_off = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);
  one_off.mutable_input()->mutable_cuda_ipc()->set_handle(
      std::string(kCudaIpcHandleBytes, '\x01'));
  pb::RunResponse response;
  ExpectRefused(service_->HandleRun("peer", &one_off, &response), "a CUDA IPC handle");

  pb::RunRequest buffer = testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);
  buffer.mutable_input()->mutable_buffer()->set_buffer_id("anything");
  ExpectRefused(service_->HandleRun("peer", &buffer, &response), "a registered buffer");

  pb::OpenQueueRequest queue;
  pb::OpenQueueResponse opened;
  ExpectRefused(service_->HandleOpenQueue("peer", &queue, &opened), "OpenQueue");

  pb::GetStatusRequest status_request;
  pb::GetStatusResponse status;
  ASSERT_TRUE(service_->HandleGetStatus("peer", &status_request, &status).ok());
  EXPECT_EQ(status.registered_buffers(), 0);
  EXPECT_EQ(status.open_queues(), 0);

  const pb::RunRequest inline_run =
      testing::ValidRunRequest(pb::OP_SOFTMAX, pb::DTYPE_FLOAT32, 2, 4);
  const grpc::Status served = service_->HandleRun("peer", &inline_run, &response);
  EXPECT_TRUE(served.ok()) << served.error_message();
}

TEST_F(RefusedCallerTest, TheSameCallsPassOnceThePolicyLetsTheCallerIn) {
  caller_.memory_access = absl::OkStatus();
  pb::RegisterBufferRequest shm;
  shm.mutable_host_shm()->set_name(shm_name_);
  pb::RegisterBufferResponse registered;
  const grpc::Status status = service_->HandleRegisterBuffer("peer", &shm, &registered);
  EXPECT_TRUE(status.ok()) << status.error_message();
  pb::OpenQueueRequest queue;
  pb::OpenQueueResponse opened;
  const grpc::Status queue_status = service_->HandleOpenQueue("peer", &queue, &opened);
  EXPECT_TRUE(queue_status.ok()) << queue_status.error_message();
  pb::CloseQueueRequest close_queue;
  close_queue.set_queue_id(opened.queue_id());
  pb::CloseQueueResponse closed;
  service_->HandleCloseQueue("peer", &close_queue, &closed);
}

}  // namespace
}  // namespace kt::server
