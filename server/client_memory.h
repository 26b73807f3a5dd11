// Client memory the daemon has opened: a CUDA IPC mapping of another
// process's allocation, or a POSIX shared-memory object mapped into the
// daemon. Closed when the last reference goes (registrations, cached
// one-off handles and Runs in flight hold references).
#ifndef KERNTUNE_SERVER_CLIENT_MEMORY_H_
#define KERNTUNE_SERVER_CLIENT_MEMORY_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kt::server {

enum class MemorySpace { kHost, kDevice };

class ClientMemory {
 public:
  virtual ~ClientMemory() = default;
  // The allocation as the daemon sees it: its base and its real size (from
  // the driver or the file, never from the client).
  char* base() const { return base_; }
  int64_t size() const { return size_; }
  MemorySpace space() const { return space_; }
  int device() const { return device_; }  // CUDA ordinal; -1 for host memory

 protected:
  ClientMemory(char* base, int64_t size, MemorySpace space, int device)
      : base_(base), size_(size), space_(space), device_(device) {}

 private:
  char* const base_;
  const int64_t size_;
  const MemorySpace space_;
  const int device_;
};

// Opens the POSIX shared-memory object `name` ("/x" or "x"; no other "/")
// read-write and maps all of it. The object must be a regular file owned by
// `owner_uid`, so a client cannot make the daemon touch another user's
// memory. InvalidArgument for a bad name, NotFound when missing,
// PermissionDenied when owned by someone else.
absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenHostSharedMemory(std::string name,
                                                                         uid_t owner_uid);

// Copies to or from host memory a client shares (a mapped shm object).
// The client could shrink the object under the daemon, and touching a page
// past its end raises SIGBUS: these copies catch that on the calling thread
// and return DataLoss instead of crashing the daemon. Every access to
// client host memory goes through them (the backends stage such tensors).
absl::Status CopyFromClientHost(void* to, const char* from, int64_t bytes);
absl::Status CopyToClientHost(char* to, const void* from, int64_t bytes);
// Runs `access`, which touches client host memory (loads, stores, small
// copies), with the same guard: DataLoss when the memory went away under
// it, `access` then cut short. `access` must not itself take the guard (no
// nesting) and must not hold locks or allocate across the accesses.
absl::Status GuardClientHostAccess(absl::FunctionRef<void()> access);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CLIENT_MEMORY_H_
