// A POSIX shared-memory object this process creates and maps (shm_open,
// ftruncate, mmap), to register with kerntuned as a host_shm buffer: the
// daemon maps the same pages, so Runs on it copy nothing over the socket.
#ifndef KERNTUNE_CLIENT_SHARED_MEMORY_H_
#define KERNTUNE_CLIENT_SHARED_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kt::client {

// Move-only. Unmapped, closed and unlinked on destruction; the daemon's own
// mapping of a registered object stays valid until it unregisters it.
class SharedMemory {
 public:
  // Creates a new object of `size_bytes` (> 0), mode 0600, zero-filled.
  // `name` is "/something" without other slashes; empty = a fresh unique
  // name ("/kerntune-<pid>-<random>"). AlreadyExists when the name is taken.
  static absl::StatusOr<SharedMemory> Create(size_t size_bytes, absl::string_view name = "");

  SharedMemory() = default;
  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset();

  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_SHARED_MEMORY_H_
