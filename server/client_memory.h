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

// Which memory a mapping shows, whatever mapping the daemon reaches it
// through: a client can have the same shared-memory object mapped twice (two
// registrations), at two addresses. File 0/0 is the daemon's own address
// space, where an address names the memory (heap blocks, and CUDA
// allocations, which the IPC cache maps once each in the unified address
// space).
struct MemoryObject {
  MemorySpace space = MemorySpace::kHost;
  uint64_t file_device = 0;  // st_dev of a shared-memory object
  uint64_t file_inode = 0;   // st_ino

  friend bool operator==(const MemoryObject& a, const MemoryObject& b) {
    return a.space == b.space && a.file_device == b.file_device && a.file_inode == b.file_inode;
  }
};

class ClientMemory {
 public:
  virtual ~ClientMemory() = default;
  // The allocation as the daemon sees it: its base and its real size (from
  // the driver or the file, never from the client).
  char* base() const { return base_; }
  int64_t size() const { return size_; }
  MemorySpace space() const { return space_; }
  int device() const { return device_; }  // CUDA ordinal; -1 for host memory
  // The memory this mapping shows, and where base() is in it: two views
  // overlap when their objects are equal and their ranges, counted from
  // object_offset(), meet.
  const MemoryObject& object() const { return object_; }
  uint64_t object_offset() const { return object_offset_; }

 protected:
  // Memory named by its address in the daemon's address space.
  ClientMemory(char* base, int64_t size, MemorySpace space, int device)
      : base_(base),
        size_(size),
        space_(space),
        device_(device),
        object_{space, 0, 0},
        object_offset_(reinterpret_cast<uintptr_t>(base)) {}
  // All of the file `object` mapped from its start.
  ClientMemory(char* base, int64_t size, MemorySpace space, int device, MemoryObject object)
      : base_(base), size_(size), space_(space), device_(device), object_(object) {}

 private:
  char* const base_;
  const int64_t size_;
  const MemorySpace space_;
  const int device_;
  const MemoryObject object_;
  const uint64_t object_offset_ = 0;
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
// Sizes `buffer` for a private copy of `bytes` of a client's tensor. The
// client picks the size (up to what it registered, and a sparse shared-
// memory object can be far larger than the daemon's memory): an allocation
// the system refuses is ResourceExhausted, never a std::bad_alloc thrown
// out of a request path, which would abort the daemon.
absl::Status ResizeForClientCopy(std::string& buffer, int64_t bytes);
// Runs `access`, which touches client host memory (loads, stores, small
// copies), with the same guard: DataLoss when the memory went away under
// it, `access` then cut short. `access` must not itself take the guard (no
// nesting) and must not hold locks or allocate across the accesses.
absl::Status GuardClientHostAccess(absl::FunctionRef<void()> access);

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_CLIENT_MEMORY_H_
