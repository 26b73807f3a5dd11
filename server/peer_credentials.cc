// Peer credentials of Unix-socket callers (see peer_credentials.h).
#include "server/peer_credentials.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kt::server {

std::string PeerProcess::Describe() const { return absl::StrCat("pid ", pid, " (uid ", uid, ")"); }

absl::StatusOr<uint64_t> ProcessStartTicks(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream text;
  text << file.rdbuf();
  const std::string stat = text.str();
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'. starttime is field 22 overall,
  // the 20th after comm.
  const size_t comm_end = stat.rfind(')');
  if (!file || comm_end == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(comm_end + 1), ' ', absl::SkipEmpty());
  // An exited process that its parent has not reaped yet is a zombie: it
  // owns nothing any more.
  if (!fields.empty() && (fields[0] == "Z" || fields[0] == "X")) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " has exited"));
  }
  uint64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) {
    return absl::InternalError(absl::StrCat("cannot parse /proc/", pid, "/stat"));
  }
  return ticks;
}

absl::StatusOr<PeerProcess> ReadPeerCredentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return absl::InternalError(absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  if (credentials.pid <= 0) {
    // A peer in a pid namespace this daemon cannot see.
    return absl::FailedPreconditionError("the peer's pid is not visible from the daemon");
  }
  PeerProcess process;
  process.pid = credentials.pid;
  process.uid = credentials.uid;
  process.gid = credentials.gid;
  absl::StatusOr<uint64_t> start = ProcessStartTicks(credentials.pid);
  if (!start.ok()) return start.status();
  process.start_ticks = *start;
  return process;
}

absl::StatusOr<std::vector<gid_t>> ReadPeerGroups(int fd) {
  std::vector<gid_t> groups(32);
  while (true) {
    socklen_t length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
      groups.resize(length / sizeof(gid_t));
      return groups;
    }
    // ERANGE: `length` now says how much the kernel has.
    if (errno != ERANGE) {
      return absl::InternalError(absl::StrCat("SO_PEERGROUPS: ", std::strerror(errno)));
    }
    groups.resize(std::max(groups.size() * 2, length / sizeof(gid_t)));
  }
}

bool IsAlive(const PeerProcess& process) {
  absl::StatusOr<uint64_t> start = ProcessStartTicks(process.pid);
  return start.ok() && *start == process.start_ticks;
}

void PeerTable::Set(int fd, const PeerProcess& process) {
  absl::MutexLock lock(&mu_);
  by_fd_[fd] = process;
}

void PeerTable::Clear(int fd) {
  absl::MutexLock lock(&mu_);
  by_fd_.erase(fd);
}

std::optional<PeerProcess> PeerTable::Lookup(absl::string_view grpc_peer) const {
  int fd = -1;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") || !absl::SimpleAtoi(grpc_peer, &fd)) {
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kt::server
