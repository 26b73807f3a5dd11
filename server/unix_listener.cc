// Accepting the daemon's Unix socket (see unix_listener.h).
#include "server/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_posix.h"
#include "server/log.h"

namespace kt::server {
namespace {

absl::Status SocketError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " unix:", path, ": ", std::strerror(errno)));
}

// Refused connections and accept failures come once per client attempt:
// a few lines per window, the rest counted.
LogLimiter& RefusalLines() {
  static LogLimiter* limiter = new LogLimiter(5, absl::Seconds(10));
  return *limiter;
}

// How long the loop waits after an accept failure it cannot drain.
constexpr int kAcceptBackoffMs = 100;

}  // namespace

int ConnectionCounts::Prune(pid_t pid) {
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return 0;
  std::vector<Connection>& open = it->second;
  open.erase(std::remove_if(open.begin(), open.end(),
                            [](const Connection& c) {
                              struct stat info {};
                              return fstat(c.fd, &info) != 0 || info.st_dev != c.device ||
                                     info.st_ino != c.inode;
                            }),
             open.end());
  const int count = static_cast<int>(open.size());
  if (count == 0) by_pid_.erase(it);
  return count;
}

int ConnectionCounts::Open(pid_t pid) { return Prune(pid); }

bool ConnectionCounts::Admit(pid_t pid, int fd) {
  // Now and then, forget the processes whose connections all ended.
  if (++admitted_ % 256 == 0) {
    std::vector<pid_t> pids;
    for (const auto& [known, unused] : by_pid_) pids.push_back(known);
    for (pid_t known : pids) Prune(known);
  }
  if (Prune(pid) >= max_per_process_) return false;
  struct stat info {};
  if (fstat(fd, &info) != 0) return true;  // not countable; gRPC will see it fail
  by_pid_[pid].push_back({fd, info.st_dev, info.st_ino});
  return true;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return SocketError("socket for", path);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  // Created 0660 from the start (no window where others could connect).
  const mode_t previous_umask = umask(0117);
  const int bound = bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  umask(previous_umask);
  if (bound != 0 || listen(fd, SOMAXCONN) != 0) {
    absl::Status error = SocketError(bound != 0 ? "cannot bind" : "cannot listen on", path);
    close(fd);
    return error;
  }
  if (chmod(path.c_str(), 0660) != 0) {
    absl::Status error = SocketError("chmod 0660", path);
    close(fd);
    return error;
  }
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    absl::Status error = SocketError("stat", path);
    close(fd);
    return error;
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    absl::Status error = SocketError("pipe2 for", path);
    close(fd);
    return error;
  }
  auto listener = std::unique_ptr<UnixListener>(
      new UnixListener(fd, wake[0], wake[1], MemoryAccessPolicy(geteuid(), info.st_gid)));
  listener->spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return listener;
}

UnixListener::~UnixListener() {
  Stop();
  close(wake_read_);
  close(wake_write_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

void UnixListener::Start(grpc::Server* server, PeerTable* peers) {
  thread_ = std::thread([this, server, peers] { AcceptLoop(server, peers); });
}

void UnixListener::Stop() {
  if (thread_.joinable()) {
    const char byte = 0;
    [[maybe_unused]] ssize_t written = write(wake_write_, &byte, 1);
    thread_.join();
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

absl::StatusOr<PeerProcess> UnixListener::IdentifyPeer(int connection) const {
  absl::StatusOr<PeerProcess> peer = ReadPeerCredentials(connection);
  if (!peer.ok()) return peer;
  absl::StatusOr<std::vector<gid_t>> groups = ReadPeerGroups(connection);
  if (!groups.ok()) {
    // Judged by its uid and primary group alone.
    LogWarning(absl::StrCat("the groups of ", peer->Describe(), ": ", groups.status().message()));
    groups.emplace();
  }
  peer->memory_access = memory_access_.Check(*peer, *groups);
  return peer;
}

void UnixListener::AcceptLoop(grpc::Server* server, PeerTable* peers) {
  while (true) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LogError(absl::StrCat("poll on the Unix socket: ", std::strerror(errno)));
      return;
    }
    if (fds[1].revents != 0) return;  // Stop()
    const int connection = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (connection < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) AcceptFailed(errno);
      continue;
    }
    absl::StatusOr<PeerProcess> peer = IdentifyPeer(connection);
    if (peer.ok()) {
      if (!connections_.Admit(peer->pid, connection)) {
        RefusalLines().Log(
            LogLevel::kWarning,
            absl::StrCat("refused a connection from ", peer->Describe(), ": it holds ",
                         kMaxConnectionsPerProcess,
                         " already, the most one process may (close idle channels)"));
        close(connection);
        continue;
      }
      peers->Set(connection, *peer);
    } else {
      // Still served (inline tensors need no identity); forget whoever
      // had this descriptor number before.
      peers->Clear(connection);
      LogWarning(absl::StrCat("a Unix-socket client without credentials: ",
                              peer.status().ToString()));
    }
    grpc::AddInsecureChannelFromFd(server, connection);  // gRPC owns it now
  }
}

void UnixListener::AcceptFailed(int error) {
  const bool out_of_descriptors = error == EMFILE || error == ENFILE;
  bool drained = false;
  if (out_of_descriptors && spare_fd_ >= 0) {
    // Give up the spare, take the waiting connection and close it: its
    // client is refused now rather than left to time out, and poll stops
    // reporting it. Then take the spare back.
    close(spare_fd_);
    const int connection = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection >= 0) {
      close(connection);
      drained = true;
    }
    spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  RefusalLines().Log(
      LogLevel::kError,
      absl::StrCat("accept on the Unix socket: ", std::strerror(error),
                   out_of_descriptors
                       ? drained ? "; refused a connection (the daemon is out of descriptors: "
                                   "see its open connections, LimitNOFILE)"
                                 : "; the daemon is out of descriptors (LimitNOFILE)"
                       : ""));
  if (!drained) usleep(kAcceptBackoffMs * 1000);  // do not spin on it
}

}  // namespace kt::server
