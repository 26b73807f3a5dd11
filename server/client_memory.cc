// POSIX shared memory opened for a client (see client_memory.h).
#include "server/client_memory.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kt::server {
namespace {

class HostSharedMemory final : public ClientMemory {
 public:
  HostSharedMemory(char* base, int64_t size, const struct stat& file)
      : ClientMemory(base, size, MemorySpace::kHost, -1,
                     MemoryObject{MemorySpace::kHost, static_cast<uint64_t>(file.st_dev),
                                  static_cast<uint64_t>(file.st_ino)}) {}
  ~HostSharedMemory() override { munmap(base(), static_cast<size_t>(size())); }
};

// SIGBUS inside a guarded copy jumps back to it; anywhere else it goes to
// the previous disposition (a real bug still crashes loudly).
// volatile: the stores around the memcpy must not be optimised away (the
// compiler knows memcpy does not read this variable; the signal handler does).
thread_local sigjmp_buf* volatile t_guarded_copy = nullptr;
struct sigaction g_previous_sigbus {};

void OnSigbus(int signal_number, siginfo_t* info, void* context) {
  if (t_guarded_copy != nullptr) siglongjmp(*t_guarded_copy, 1);
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    g_previous_sigbus.sa_sigaction(signal_number, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal_number);
    return;
  }
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

}  // namespace

absl::Status GuardClientHostAccess(absl::FunctionRef<void()> access) {
  InstallSigbusHandler();
  sigjmp_buf jump;
  // The signal mask is not saved: the handler runs with SA_NODEFER and an
  // empty sa_mask, so jumping out of it leaves the mask as it was, and not
  // saving spares a sigprocmask system call per guarded access (~0.2 us:
  // the queue poller guards every look at a region).
  if (sigsetjmp(jump, 0) != 0) {
    t_guarded_copy = nullptr;
    return absl::DataLossError(
        "the client's shared-memory object shrank while the daemon used it");
  }
  t_guarded_copy = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  access();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guarded_copy = nullptr;
  return absl::OkStatus();
}

namespace {

absl::Status GuardedCopy(void* to, const void* from, int64_t bytes) {
  return GuardClientHostAccess([&] { std::memcpy(to, from, static_cast<size_t>(bytes)); });
}

}  // namespace

absl::Status ResizeForClientCopy(std::string& buffer, int64_t bytes) {
  try {
    buffer.resize(static_cast<size_t>(bytes));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kerntuned could not allocate ", bytes, " bytes for a copy of the tensor; use smaller "
        "tensors"));
  } catch (const std::length_error&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(bytes, " bytes is more than kerntuned can copy at once"));
  }
  return absl::OkStatus();
}

absl::Status CopyFromClientHost(void* to, const char* from, int64_t bytes) {
  return GuardedCopy(to, from, bytes);
}

absl::Status CopyToClientHost(char* to, const void* from, int64_t bytes) {
  return GuardedCopy(to, from, bytes);
}

absl::StatusOr<std::shared_ptr<const ClientMemory>> OpenHostSharedMemory(std::string name,
                                                                         uid_t owner_uid) {
  if (!absl::StartsWith(name, "/")) name.insert(0, "/");
  if (name.size() < 2 || name.size() > 255 || name.find('/', 1) != std::string::npos ||
      name == "/." || name == "/..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "host_shm.name=\"", name, "\" must be a shm_open name: \"/name\" with no other '/'"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string what = absl::StrCat("host_shm.name=\"", name, "\": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(what);
    if (error == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(
          what, ": kerntuned (uid ", geteuid(), ") may not open it; give the daemon "
          "CAP_DAC_OVERRIDE, as the systemd unit and the DaemonSet do"));
    }
    // O_NOFOLLOW: a link could name another user's object.
    if (error == ELOOP) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host_shm.name=\"", name, "\" is a symbolic link; kerntuned opens no links"));
    }
    return absl::InvalidArgumentError(what);
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("fstat ", name, ": ", std::strerror(error)));
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("host_shm.name=\"", name, "\" is not a shared-memory object"));
  }
  if (info.st_uid != owner_uid) {
    close(fd);
    // Checked on the open object, whatever its mode says: the daemon opens
    // files with its own rights (CAP_DAC_OVERRIDE), not the caller's.
    return absl::PermissionDeniedError(absl::StrCat(
        "host_shm.name=\"", name, "\" belongs to uid ", info.st_uid, ", not the caller's uid ",
        owner_uid, ": kerntuned opens only its callers' own shared-memory objects; create it "
        "as uid ", owner_uid));
  }
  if (info.st_size <= 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("host_shm.name=\"", name, "\" is empty"));
  }
  void* base = mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);  // the mapping keeps the object alive
  if (base == MAP_FAILED) {
    // ENOMEM: out of address space or of maps (vm.max_map_count), which the
    // registry's limit is there to prevent; the client may try again later.
    const std::string what = absl::StrCat("mmap ", name, ": ", std::strerror(error));
    if (error == ENOMEM) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": kerntuned has no room for another mapping (vm.max_map_count)"));
    }
    return absl::InternalError(what);
  }
  return std::make_shared<const HostSharedMemory>(static_cast<char*>(base),
                                                  static_cast<int64_t>(info.st_size), info);
}

}  // namespace kt::server
