// Who may pass memory references (see memory_access.h).
#include "server/memory_access.h"

#include <grp.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kt::server {
namespace {

std::string GroupName(gid_t gid) {
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(4096);
  if (getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
    return absl::StrCat(gid);
  }
  return absl::StrCat(gid, " (", found->gr_name, ")");
}

}  // namespace

MemoryAccessPolicy::MemoryAccessPolicy(uid_t daemon_uid, gid_t socket_gid)
    : daemon_uid_(daemon_uid), socket_gid_(socket_gid), group_(GroupName(socket_gid)) {}

absl::Status MemoryAccessPolicy::Check(const PeerProcess& peer,
                                       absl::Span<const gid_t> groups) const {
  if (peer.uid == daemon_uid_ || peer.uid == 0 || peer.gid == socket_gid_ ||
      std::find(groups.begin(), groups.end(), socket_gid_) != groups.end()) {
    return absl::OkStatus();
  }
  std::vector<gid_t> all = {peer.gid};
  all.insert(all.end(), groups.begin(), groups.end());
  return absl::PermissionDeniedError(absl::StrCat(
      peer.Describe(), ", in groups ", absl::StrJoin(all, ","),
      ", may not pass memory references: kerntuned opens them with its own rights, so it takes "
      "them only from its own user (uid ", daemon_uid_, "), root and the socket's group ", group_,
      ". Add the user to that group and reconnect, or send tensors inline"));
}

std::string MemoryAccessPolicy::Describe() const {
  return absl::StrCat("uid ", daemon_uid_, ", root and group ", group_);
}

}  // namespace kt::server
