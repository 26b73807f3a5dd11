// SharedMemory (shared_memory.h).
#include "client/shared_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kt::client {
namespace {

absl::Status ErrnoStatus(absl::string_view what, const std::string& name, int error) {
  const std::string message = absl::StrCat(what, " ", name, ": ", std::strerror(error));
  switch (error) {
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

// UnlinkOnSignal's object as a path: shm_unlink is not async-signal-safe,
// unlink(2) is, and glibc keeps POSIX shared memory in /dev/shm.
char g_signal_unlink_path[300];
struct sigaction g_previous_int, g_previous_term;

void UnlinkAndDie(int signal_number) {
  if (g_signal_unlink_path[0] != '\0') unlink(g_signal_unlink_path);
  // Dies of the signal itself once this handler returns (it is blocked
  // until then), so the parent sees what it sent.
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

std::string UniqueName() {
  std::random_device entropy;
  const uint64_t random = (uint64_t{entropy()} << 32) | entropy();
  return absl::StrFormat("/kerntune-%d-%016x", getpid(), random);
}

}  // namespace

absl::StatusOr<SharedMemory> SharedMemory::Create(size_t size_bytes, absl::string_view name) {
  if (size_bytes == 0) return absl::InvalidArgumentError("shared memory size must be > 0");
  SharedMemory shm;
  shm.name_ = name.empty() ? UniqueName() : std::string(name);
  if (shm.name_.size() < 2 || shm.name_[0] != '/' || shm.name_.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory name \"", shm.name_, "\" must be /NAME without other slashes"));
  }
  // O_EXCL: never adopt (and later unlink) someone else's object.
  shm.fd_ = shm_open(shm.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (shm.fd_ < 0) {
    const int error = errno;
    shm.name_.clear();  // not ours: the destructor must not unlink it
    return ErrnoStatus("shm_open", std::string(name.empty() ? "(generated)" : name), error);
  }
  if (ftruncate(shm.fd_, static_cast<off_t>(size_bytes)) != 0) {
    return ErrnoStatus("ftruncate", shm.name_, errno);
  }
  void* data = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, shm.fd_, 0);
  if (data == MAP_FAILED) return ErrnoStatus("mmap", shm.name_, errno);
  shm.data_ = static_cast<uint8_t*>(data);
  shm.size_ = size_bytes;
  return shm;
}

SharedMemory::SharedMemory(SharedMemory&& other) noexcept
    : name_(std::exchange(other.name_, std::string())),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::exchange(other.name_, std::string());
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

SharedMemory::~SharedMemory() { Reset(); }

void SharedMemory::Unlink() {
  if (!name_.empty()) shm_unlink(name_.c_str());
  name_.clear();
}

UnlinkOnSignal::UnlinkOnSignal(const SharedMemory& shm) {
  const std::string path = absl::StrCat("/dev/shm", shm.name());
  if (shm.name().empty() || path.size() >= sizeof(g_signal_unlink_path)) return;
  std::memcpy(g_signal_unlink_path, path.c_str(), path.size() + 1);
  struct sigaction action {};
  action.sa_handler = UnlinkAndDie;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

UnlinkOnSignal::~UnlinkOnSignal() {
  if (g_signal_unlink_path[0] == '\0') return;
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  g_signal_unlink_path[0] = '\0';
}

void SharedMemory::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  if (!name_.empty()) shm_unlink(name_.c_str());
  name_.clear();
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace kt::client
