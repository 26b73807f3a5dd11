// The daemon's Unix socket, accepted by the daemon itself rather than by
// gRPC: each connection's peer credentials are read at accept time (gRPC
// does not expose them) and recorded in a PeerTable, then the connection is
// handed to the gRPC server, which names its peer "fd:<n>". Each caller's
// right to pass memory references is decided there too (memory_access.h).
// A process may hold kMaxConnectionsPerProcess connections at once: 400
// idle ones from one process once took every descriptor the daemon had and
// locked every other client out (issue 43).
#ifndef KERNTUNE_SERVER_UNIX_LISTENER_H_
#define KERNTUNE_SERVER_UNIX_LISTENER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/memory_access.h"
#include "server/peer_credentials.h"

namespace kt::server {

// A client keeps one or a few channels; 64 leaves room for a pool of them.
inline constexpr int kMaxConnectionsPerProcess = 64;

// The connections each process holds open, for the per-process limit. The
// listener hands each connection to gRPC, which closes it unseen, so a
// connection counts while its descriptor is open and still the socket it
// was (same inode): a descriptor number reused by another file is not it.
class ConnectionCounts {
 public:
  explicit ConnectionCounts(int max_per_process) : max_per_process_(max_per_process) {}
  // Counts `fd` for `pid` unless the process already holds the maximum
  // (then false: refuse it).
  bool Admit(pid_t pid, int fd);
  // The connections `pid` holds open now.
  int Open(pid_t pid);

 private:
  struct Connection {
    int fd;
    dev_t device;
    ino_t inode;
  };
  // Drops `pid`'s closed connections; erases the entry when none is left.
  int Prune(pid_t pid);

  const int max_per_process_;
  absl::flat_hash_map<pid_t, std::vector<Connection>> by_pid_;
  uint64_t admitted_ = 0;
};

class UnixListener {
 public:
  // Binds and listens on `path` (which PrepareSocketPath made ready) with
  // mode 0660. Memory references are then taken from the daemon's user,
  // root and the group the socket file has now (the process's, or that of
  // a setgid parent directory); changing it later takes a restart.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path);
  ~UnixListener();  // Stop()
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Starts accepting into `server` (started, outliving this listener).
  void Start(grpc::Server* server, PeerTable* peers);
  // Stops accepting and closes the listening socket; established
  // connections stay with the gRPC server.
  void Stop();

  const MemoryAccessPolicy& memory_access() const { return memory_access_; }

 private:
  UnixListener(int fd, int wake_read, int wake_write, MemoryAccessPolicy memory_access)
      : fd_(fd),
        wake_read_(wake_read),
        wake_write_(wake_write),
        memory_access_(std::move(memory_access)) {}
  void AcceptLoop(grpc::Server* server, PeerTable* peers);
  // accept4 failed with `error`: out of descriptors, say. Drains the
  // connection waiting (refused, with the spare descriptor) or backs off,
  // so that the loop does not spin on it.
  void AcceptFailed(int error);
  // Who is calling on `connection`, and whether it may pass memory.
  absl::StatusOr<PeerProcess> IdentifyPeer(int connection) const;

  int fd_;
  int wake_read_;
  int wake_write_;
  const MemoryAccessPolicy memory_access_;
  // Held open to be given up when the daemon is out of descriptors, so that
  // the connection waiting can be accepted and closed at once: its client
  // learns at once, and poll stops reporting it.
  int spare_fd_ = -1;
  ConnectionCounts connections_{kMaxConnectionsPerProcess};
  std::thread thread_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_UNIX_LISTENER_H_
