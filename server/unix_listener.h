// The daemon's Unix socket, accepted by the daemon itself rather than by
// gRPC: each connection's peer credentials are read at accept time (gRPC
// does not expose them) and recorded in a PeerTable, then the connection is
// handed to the gRPC server, which names its peer "fd:<n>". Each caller's
// right to pass memory references is decided there too (memory_access.h).
#ifndef KERNTUNE_SERVER_UNIX_LISTENER_H_
#define KERNTUNE_SERVER_UNIX_LISTENER_H_

#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/memory_access.h"
#include "server/peer_credentials.h"

namespace kt::server {

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
  // Who is calling on `connection`, and whether it may pass memory.
  absl::StatusOr<PeerProcess> IdentifyPeer(int connection) const;

  int fd_;
  int wake_read_;
  int wake_write_;
  const MemoryAccessPolicy memory_access_;
  std::thread thread_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_UNIX_LISTENER_H_
