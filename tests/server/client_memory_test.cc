// Client shared memory: opening rules and guarded copies.
#include "server/client_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/sanitizers.h"
#include "tests/testing/without_threads.h"

namespace kt::server {
namespace {

class ShmObject {
 public:
  explicit ShmObject(int64_t bytes) : name_(absl::StrCat("/kt_unit_", getpid(), "_", next_++)) {
    fd_ = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, bytes), 0);
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }
  void Resize(int64_t bytes) { EXPECT_EQ(ftruncate(fd_, bytes), 0); }

 private:
  static inline int next_ = 0;
  std::string name_;
  int fd_ = -1;
};

TEST(ClientMemoryTest, OpensTheCallersObjectWithItsRealSize) {
  ShmObject object(12345);
  for (const std::string& name : {object.name(), object.name().substr(1)}) {
    auto memory = OpenHostSharedMemory(name, getuid());
    ASSERT_TRUE(memory.ok()) << memory.status();
    EXPECT_EQ((*memory)->size(), 12345);
    EXPECT_EQ((*memory)->space(), MemorySpace::kHost);
  }
}

TEST(ClientMemoryTest, TwoOpensOfOneObjectAreTwoMappingsOfOneMemoryObject) {
  ShmObject object(8192);
  ShmObject other(8192);
  auto first = OpenHostSharedMemory(object.name(), getuid());
  auto second = OpenHostSharedMemory(object.name(), getuid());
  auto third = OpenHostSharedMemory(other.name(), getuid());
  ASSERT_TRUE(first.ok() && second.ok() && third.ok());
  EXPECT_NE((*first)->base(), (*second)->base());
  EXPECT_TRUE((*first)->object() == (*second)->object());
  EXPECT_EQ((*first)->object_offset(), 0u);
  EXPECT_EQ((*second)->object_offset(), 0u);
  EXPECT_FALSE((*first)->object() == (*third)->object());
}

TEST(ClientMemoryTest, ACopyTooLargeToAllocateIsResourceExhaustedNotAnException) {
  if (kt::testing::kSanitizerBuild) GTEST_SKIP() << "a sanitizer's allocator aborts instead";
  std::string copy;
  EXPECT_TRUE(ResizeForClientCopy(copy, 4096).ok());
  EXPECT_EQ(copy.size(), 4096u);
  const absl::Status refused = ResizeForClientCopy(copy, int64_t{1} << 50);  // 1 PiB
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("1125899906842624 bytes"));
}

// A daemon out of address space or maps (vm.max_map_count) cannot map
// another object: RESOURCE_EXHAUSTED, which a client may retry, not INTERNAL.
TEST(ClientMemoryTest, AMappingTheDaemonHasNoRoomForIsResourceExhausted) {
  if (kt::testing::kSanitizerBuild) GTEST_SKIP() << "sanitizer build";
  ShmObject object(int64_t{1} << 30);  // more than the child's 64 MiB of room
  const std::string name = object.name();
  const int status = kt::testing::WaitStatusWithoutThreads([&] {
    const absl::StatusOr<std::shared_ptr<const ClientMemory>> memory =
        OpenHostSharedMemory(name, getuid());
    if (memory.ok()) return 1;
    if (memory.status().code() != absl::StatusCode::kResourceExhausted) return 2;
    return memory.status().message().find("vm.max_map_count") != absl::string_view::npos ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: mapped anyway; 2: another code; 3: another message";
}

TEST(ClientMemoryTest, RefusesOtherUsersObjectsBadNamesAndEmptyObjects) {
  ShmObject object(64);
  EXPECT_EQ(OpenHostSharedMemory(object.name(), getuid() + 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(OpenHostSharedMemory("/a/b", getuid()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenHostSharedMemory("/..", getuid()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenHostSharedMemory("/kt_unit_missing_object", getuid()).status().code(),
            absl::StatusCode::kNotFound);
  object.Resize(0);
  EXPECT_EQ(OpenHostSharedMemory(object.name(), getuid()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientMemoryTest, CopiesFromAShrunkObjectAreDataLossNotACrash) {
  ShmObject object(1 << 20);
  auto memory = OpenHostSharedMemory(object.name(), getuid());
  ASSERT_TRUE(memory.ok());
  std::vector<char> buffer(1 << 20);
  EXPECT_TRUE(CopyFromClientHost(buffer.data(), (*memory)->base(), 1 << 20).ok());
  object.Resize(4096);
  EXPECT_TRUE(CopyFromClientHost(buffer.data(), (*memory)->base(), 4096).ok());
  EXPECT_EQ(CopyFromClientHost(buffer.data(), (*memory)->base(), 1 << 20).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(CopyToClientHost((*memory)->base() + 8192, buffer.data(), 100).code(),
            absl::StatusCode::kDataLoss);
  // And again: the guard is re-armed after a fault.
  EXPECT_EQ(CopyFromClientHost(buffer.data(), (*memory)->base(), 1 << 20).code(),
            absl::StatusCode::kDataLoss);
  // The jump out of the handler restores no signal mask: none may be left
  // blocking SIGBUS (the next fault would then kill the process).
  sigset_t blocked;
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, nullptr, &blocked), 0);
  EXPECT_FALSE(sigismember(&blocked, SIGBUS));
}

}  // namespace
}  // namespace kt::server
