// A POSIX shared-memory object a test creates, maps and unlinks at the end:
// client host memory for the end-to-end tests' registered buffers.
#ifndef KERNTUNE_TESTS_SERVER_SHARED_MEMORY_H_
#define KERNTUNE_TESTS_SERVER_SHARED_MEMORY_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kt::server::testing {

class SharedMemory {
 public:
  explicit SharedMemory(int64_t bytes)
      : name_(absl::StrCat("/kt_test_", getpid(), "_", counter_++)), bytes_(bytes) {
    const int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, bytes), 0);
    data_ = static_cast<char*>(
        mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  ~SharedMemory() {
    munmap(data_, static_cast<size_t>(bytes_));
    shm_unlink(name_.c_str());
  }
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  const std::string& name() const { return name_; }
  char* data() const { return data_; }
  // Shrinks the object under whoever maps it.
  void Truncate(int64_t bytes) {
    const int fd = shm_open(name_.c_str(), O_RDWR, 0);
    EXPECT_EQ(ftruncate(fd, bytes), 0);
    close(fd);
  }

 private:
  static inline int counter_ = 0;
  std::string name_;
  int64_t bytes_;
  char* data_ = nullptr;
};

}  // namespace kt::server::testing

#endif  // KERNTUNE_TESTS_SERVER_SHARED_MEMORY_H_
