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
// An object the process never unlinks outlives it in /dev/shm: a short-
// lived user unlinks it once the daemon has mapped it (Unlink) and holds
// an UnlinkOnSignal until then.
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

  // Empty once unlinked.
  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Removes the name now. This mapping and every other (the daemon's, once
  // it registered the object) stay valid, and the pages go with the last
  // of them: nothing is left in /dev/shm whatever ends this process later
  // (Ctrl-C, SIGKILL, a crash). The daemon cannot register it again.
  void Unlink();

 private:
  void Reset();

  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

// While one is alive, SIGINT and SIGTERM unlink `shm`'s name before they
// end the process as they would have (killed by the signal: a shell's exit
// status 130 or 143): the window between creating an object and the daemon
// mapping it, which Unlink cannot close. One at a time per process; the
// handlers before it come back on destruction. `shm` must outlive it.
class UnlinkOnSignal {
 public:
  explicit UnlinkOnSignal(const SharedMemory& shm);
  ~UnlinkOnSignal();
  UnlinkOnSignal(const UnlinkOnSignal&) = delete;
  UnlinkOnSignal& operator=(const UnlinkOnSignal&) = delete;
};

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_SHARED_MEMORY_H_
