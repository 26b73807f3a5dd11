// Whose memory the daemon opens, with two real users (deploy/trust.md):
// kerntuned (root, as in the DaemonSet) on a socket of group kSocketGid, and
// kt_buffer_client run as uid kOtherUid. Another user's shared-memory object
// is refused even when its mode would let the daemon in; a caller outside
// the socket's group, reaching a socket widened to 0666 by mistake, may pass
// no memory reference but is still served inline tensors. Needs root (to
// switch users); skipped otherwise.
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/kerntuned_fixture.h"

namespace kt::server {
namespace {

namespace pb = ::kerntune::v1;
using ::testing::HasSubstr;

// Ids no account on a CI image uses (below nobody's 65534).
constexpr uid_t kOtherUid = 65533;
constexpr gid_t kOtherGid = 65533;
constexpr gid_t kSocketGid = 65530;

// Who kt_buffer_client runs as.
struct User {
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;  // supplementary
};

// What a verb answered: its gRPC code and message ("CODE MESSAGE").
struct Answer {
  int code = -1;
  std::string message;
  std::string output;  // all of it, for failures
};

// A POSIX shared-memory object made by the test (root) and given to
// `owner` with `mode`; unlinked at the end.
class OwnedObject {
 public:
  OwnedObject(const std::string& name, uid_t owner, mode_t mode) : name_(name) {
    shm_unlink(name_.c_str());
    const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, 4096), 0);
    EXPECT_EQ(fchown(fd, owner, owner), 0) << std::strerror(errno);
    EXPECT_EQ(fchmod(fd, mode), 0);  // after the umask
    close(fd);
  }
  ~OwnedObject() { shm_unlink(name_.c_str()); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

class KerntunedTrustTest : public ::kt::server::testing::KerntunedFixture {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: these tests run a client as another user (uid " << kOtherUid
                   << ") and give the socket a group of its own";
    }
    // The other user must reach the socket and the client: the temp dir is
    // 0700, the build tree may be too (a checkout under /root), and the
    // socket's directory is setgid so the socket gets kSocketGid.
    ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
    std::error_code copied;
    std::filesystem::copy_file(KT_BUFFER_CLIENT_BINARY, client_, copied);
    ASSERT_FALSE(copied) << copied.message();
    ASSERT_EQ(chmod(client_.c_str(), 0755), 0);
    const std::string run = dir_.File("run");
    ASSERT_EQ(mkdir(run.c_str(), 0755), 0);
    ASSERT_EQ(chown(run.c_str(), 0, kSocketGid), 0);
    ASSERT_EQ(chmod(run.c_str(), 02775), 0);
    Start();
    struct stat socket_info {};
    ASSERT_EQ(stat(socket_.c_str(), &socket_info), 0);
    ASSERT_EQ(socket_info.st_gid, kSocketGid);
    ASSERT_EQ(socket_info.st_mode & 0777, 0660u);
    const Answer usage = As(Member(), {});
    if (usage.code == kExecFailed) {
      GTEST_SKIP() << "uid " << kOtherUid << " cannot run " << client_
                   << " (a directory above the temp dir closed to others?): " << usage.output;
    }
  }

  static User Member() { return {kOtherUid, kOtherGid, {kSocketGid}}; }
  static User Outsider() { return {kOtherUid, kOtherGid, {}}; }

  static constexpr int kExecFailed = 127;

  // Runs `kt_buffer_client SOCKET args...` as `user`; its answer, or
  // code kExecFailed when it could not be started as that user.
  Answer As(const User& user, const std::vector<std::string>& args) {
    std::vector<std::string> words = {client_, socket_};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls until exec: gRPC threads exist.
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      if (setgroups(user.groups.size(), user.groups.data()) != 0 || setgid(user.gid) != 0 ||
          setuid(user.uid) != 0) {
        _exit(kExecFailed);
      }
      execv(argv[0], argv.data());
      _exit(kExecFailed);
    }
    close(out[1]);
    Answer answer;
    char chunk[512];
    ssize_t n;
    while ((n = read(out[0], chunk, sizeof(chunk))) > 0) answer.output.append(chunk, n);
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == kExecFailed) {
      answer.code = kExecFailed;
      return answer;
    }
    const std::string line = answer.output.substr(0, answer.output.find('\n'));
    const size_t space = line.find(' ');
    if (!absl::SimpleAtoi(line.substr(0, space), &answer.code)) answer.code = -1;
    if (space != std::string::npos) answer.message = line.substr(space + 1);
    return answer;
  }

  std::string ObjectName(const std::string& what) const {
    return absl::StrCat("/kt_trust_", getpid(), "_", what);
  }

  const std::string client_ = dir_.File("kt_buffer_client");
};

TEST_F(KerntunedTrustTest, AnotherUsersSharedMemoryIsRefusedWhateverItsMode) {
  // Root's object, open to everyone, and the other user's own, 0600.
  const OwnedObject roots(ObjectName("roots"), 0, 0666);
  const OwnedObject theirs(ObjectName("theirs"), kOtherUid, 0600);

  const Answer refused = As(Member(), {"try-register-shm", roots.name()});
  EXPECT_EQ(refused.code, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED))
      << refused.output;
  EXPECT_THAT(refused.message,
              HasSubstr(absl::StrCat("belongs to uid 0, not the caller's uid ", kOtherUid)));
  EXPECT_THAT(refused.message, HasSubstr("create it as uid 65533"));

  // A link to it, owned by the other user: never followed.
  const std::string link = "/dev/shm" + ObjectName("link");
  unlink(link.c_str());
  ASSERT_EQ(symlink(("/dev/shm" + roots.name()).c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), kOtherUid, kOtherGid), 0);
  const Answer linked = As(Member(), {"try-register-shm", ObjectName("link")});
  unlink(link.c_str());
  EXPECT_EQ(linked.code, static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)) << linked.output;
  EXPECT_THAT(linked.message, HasSubstr("is a symbolic link"));

  // Its own object, which the daemon (root) opens for it.
  const Answer own = As(Member(), {"try-register-shm", theirs.name()});
  EXPECT_EQ(own.code, 0) << own.output;

  // Nor may root's process (this one) make the daemon open the other user's.
  pb::RegisterBufferRequest request;
  request.mutable_host_shm()->set_name(theirs.name());
  pb::RegisterBufferResponse response;
  const grpc::Status status = Call(&pb::KernTune::Stub::RegisterBuffer, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("belongs to uid ", kOtherUid, ", not the caller's uid 0")));
}

TEST_F(KerntunedTrustTest, OutsideTheSocketsGroupNoMemoryReferenceIsTakenButInlineIsServed) {
  EXPECT_THAT(daemon_->Log(),
              HasSubstr(absl::StrCat("memory references from uid 0, root and group ",
                                     kSocketGid)));
  const OwnedObject theirs(ObjectName("theirs"), kOtherUid, 0600);
  // 0660 keeps an outsider out altogether.
  EXPECT_EQ(As(Outsider(), {"run-inline"}).code,
            static_cast<int>(grpc::StatusCode::UNAVAILABLE));

  // The mistake the policy guards: a socket open to everyone.
  ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
  const std::string rule = absl::StrCat("root and the socket's group ", kSocketGid);
  for (const std::vector<std::string>& call : std::vector<std::vector<std::string>>{
           {"try-register-shm", theirs.name()}, {"run-cuda-ipc"}, {"open-queue"}}) {
    const Answer refused = As(Outsider(), call);
    EXPECT_EQ(refused.code, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED))
        << call[0] << ": " << refused.output;
    EXPECT_THAT(refused.message,
                HasSubstr(absl::StrCat("(uid ", kOtherUid, "), in groups ", kOtherGid)));
    EXPECT_THAT(refused.message, HasSubstr(rule));
    EXPECT_THAT(refused.message, HasSubstr("Add the user to that group"));
  }
  const Answer served = As(Outsider(), {"run-inline"});
  EXPECT_EQ(served.code, 0) << served.output;

  // The same user in the socket's group, as a supplementary or primary
  // group, passes the same references.
  const Answer member = As(Member(), {"try-register-shm", theirs.name()});
  EXPECT_EQ(member.code, 0) << member.output;
  const Answer primary = As({kOtherUid, kSocketGid, {}}, {"open-queue"});
  EXPECT_EQ(primary.code, 0) << primary.output;
  // On the CPU backend a CUDA IPC handle then fails for want of a GPU, not
  // for want of rights.
  const Answer ipc = As(Member(), {"run-cuda-ipc"});
  EXPECT_NE(ipc.code, static_cast<int>(grpc::StatusCode::PERMISSION_DENIED)) << ipc.output;
}

}  // namespace
}  // namespace kt::server
