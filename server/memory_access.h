// Which Unix-socket callers may hand kerntuned references to memory (shared-
// memory objects, CUDA IPC handles, registered buffers, submission queues).
// The daemon opens them with its own rights, so it takes them only from the
// users the socket was meant for, even when its mode was widened by mistake.
// The whole trust model: deploy/trust.md.
#ifndef KERNTUNE_SERVER_MEMORY_ACCESS_H_
#define KERNTUNE_SERVER_MEMORY_ACCESS_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/peer_credentials.h"

namespace kt::server {

class MemoryAccessPolicy {
 public:
  // The policy of a daemon running as `daemon_uid` whose socket file
  // belongs to group `socket_gid`.
  MemoryAccessPolicy(uid_t daemon_uid, gid_t socket_gid);

  // OK for the daemon's own user, root, and members of the socket's group
  // (by `peer.gid` or one of `groups`, the peer's supplementary groups);
  // otherwise PermissionDenied naming the rule and the fix.
  absl::Status Check(const PeerProcess& peer, absl::Span<const gid_t> groups) const;

  // "uid 998, root and group 998 (kerntune)", for the start-up log.
  std::string Describe() const;

 private:
  uid_t daemon_uid_;
  gid_t socket_gid_;
  std::string group_;  // "998 (kerntune)", or "998" without a name
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_MEMORY_ACCESS_H_
