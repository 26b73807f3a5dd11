// The daemon's Unix socket, accepted by the daemon itself rather than by
// gRPC: each connection's peer credentials are read at accept time (gRPC
// does not expose them) and recorded in a PeerTable, then the connection is
// handed to the gRPC server, which names its peer "fd:<n>".
#ifndef KERNTUNE_SERVER_UNIX_LISTENER_H_
#define KERNTUNE_SERVER_UNIX_LISTENER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/peer_credentials.h"

namespace kt::server {

class UnixListener {
 public:
  // Binds and listens on `path` (which PrepareSocketPath made ready) with
  // mode 0660.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path);
  ~UnixListener();  // Stop()
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Starts accepting into `server` (started, outliving this listener).
  void Start(grpc::Server* server, PeerTable* peers);
  // Stops accepting and closes the listening socket; established
  // connections stay with the gRPC server.
  void Stop();

 private:
  UnixListener(int fd, int wake_read, int wake_write)
      : fd_(fd), wake_read_(wake_read), wake_write_(wake_write) {}
  void AcceptLoop(grpc::Server* server, PeerTable* peers);

  int fd_;
  int wake_read_;
  int wake_write_;
  std::thread thread_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_UNIX_LISTENER_H_
