// Who is calling: the process at the other end of a Unix-socket connection,
// from SO_PEERCRED, identified by pid plus its start time so that a reused
// pid is never mistaken for the process that registered a buffer. TCP
// callers have no such identity.
#ifndef KERNTUNE_SERVER_PEER_CREDENTIALS_H_
#define KERNTUNE_SERVER_PEER_CREDENTIALS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kt::server {

struct PeerProcess {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // /proc/<pid>/stat field 22 (clock ticks after boot).
  uint64_t start_ticks = 0;
  // OK when this connection may pass references to memory (shm objects,
  // CUDA IPC handles, buffers, queues), else the error it gets: decided at
  // accept time by the socket's MemoryAccessPolicy (memory_access.h).
  absl::Status memory_access =
      absl::PermissionDeniedError("no memory-access policy decided for this caller");

  std::string Describe() const;  // "pid 123 (uid 1000)"
  friend bool operator==(const PeerProcess& a, const PeerProcess& b) {
    return a.pid == b.pid && a.start_ticks == b.start_ticks;
  }
  template <typename H>
  friend H AbslHashValue(H h, const PeerProcess& p) {
    return H::combine(std::move(h), p.pid, p.start_ticks);
  }
};

// The start time of process `pid`; NotFound when it does not exist, has
// exited (a zombie) or is not visible from this pid namespace.
absl::StatusOr<uint64_t> ProcessStartTicks(pid_t pid);

// The process connected at the other end of the Unix socket `fd`.
absl::StatusOr<PeerProcess> ReadPeerCredentials(int fd);

// The supplementary groups of the process at the other end of the Unix
// socket `fd`, as they were when it connected (SO_PEERGROUPS).
absl::StatusOr<std::vector<gid_t>> ReadPeerGroups(int fd);

// False once the process has exited (or its pid now names another process).
bool IsAlive(const PeerProcess& process);

// Connections accepted by UnixSocketAcceptor, by the peer string gRPC gives
// them ("fd:<n>"). Written at accept time, before gRPC sees the connection,
// so a reused descriptor number always maps to its newest connection.
class PeerTable {
 public:
  void Set(int fd, const PeerProcess& process);
  // `fd` now holds a connection whose caller is unknown.
  void Clear(int fd);
  // The caller behind a ServerContext::peer() string; nullopt for TCP and
  // anything else not accepted on the Unix socket.
  std::optional<PeerProcess> Lookup(absl::string_view grpc_peer) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, PeerProcess> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_PEER_CREDENTIALS_H_
