// One-off CUDA IPC handles, opened once and cached by their bytes. CUDA lets
// a process open a given memory handle only once, so registrations and
// one-off references share these entries. An entry is dropped when nothing
// else holds it (no registration, no Run in flight) and it has been idle for
// `idle`, or every process that sent it has exited; its resource closes when
// the last reference goes.
#ifndef KERNTUNE_SERVER_IPC_CACHE_H_
#define KERNTUNE_SERVER_IPC_CACHE_H_

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/peer_credentials.h"

namespace kt::server {

template <typename Resource>
class IpcCache {
 public:
  using Opener = absl::FunctionRef<absl::StatusOr<std::shared_ptr<Resource>>()>;

  // At most `max_entries` handles open at once: each is a mapping in the
  // daemon's address space, and a process has a limited number of those.
  explicit IpcCache(size_t max_entries = std::numeric_limits<size_t>::max())
      : max_entries_(max_entries) {}

  // The resource for `handle`, opening it with `open` on first use;
  // ResourceExhausted, opening nothing, when that would pass the limit.
  absl::StatusOr<std::shared_ptr<Resource>> GetOrOpen(const std::string& handle,
                                                      const PeerProcess& user, absl::Time now,
                                                      Opener open) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end()) {
      if (entries_.size() >= max_entries_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "kerntuned holds ", entries_.size(), " opened CUDA IPC handles, its limit (each a "
            "mapping of its own): register allocations and reuse them, or wait for idle ones "
            "to close"));
      }
      // Opening under the lock: a second caller with the same handle must
      // not open it again.
      absl::StatusOr<std::shared_ptr<Resource>> opened = open();
      if (!opened.ok()) return opened.status();
      it = entries_.emplace(handle, Entry{*std::move(opened), {}, now}).first;
    }
    it->second.users.insert(user);
    it->second.last_used = now;
    return it->second.resource;
  }

  // Drops idle entries (see above); returns how many.
  int Evict(absl::Time now, absl::Duration idle,
            absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
    // Liveness (a /proc read each) is asked without the lock: every Run
    // that names a handle or an event takes it.
    absl::flat_hash_set<PeerProcess> users;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [handle, entry] : entries_) {
        users.insert(entry.users.begin(), entry.users.end());
      }
    }
    absl::flat_hash_set<PeerProcess> exited;
    for (const PeerProcess& user : users) {
      if (!is_alive(user)) exited.insert(user);
    }
    std::vector<std::shared_ptr<Resource>> closing;  // released after the lock
    absl::MutexLock lock(&mu_);
    int evicted = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& entry = it->second;
      for (const PeerProcess& user : exited) entry.users.erase(user);
      const bool held_elsewhere = entry.resource.use_count() > 1;
      if (!held_elsewhere && (entry.users.empty() || now - entry.last_used > idle)) {
        closing.push_back(std::move(entry.resource));
        entries_.erase(it++);
        ++evicted;
      } else {
        ++it;
      }
    }
    return evicted;
  }

  // Drops the entries whose resource `dead` says is unusable, held or not
  // (a failed device's mappings); returns how many. Holders keep theirs
  // until they let go.
  int EvictDead(absl::FunctionRef<bool(const Resource&)> dead) {
    std::vector<std::shared_ptr<Resource>> closing;  // released after the lock
    absl::MutexLock lock(&mu_);
    int evicted = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (dead(*it->second.resource)) {
        closing.push_back(std::move(it->second.resource));
        entries_.erase(it++);
        ++evicted;
      } else {
        ++it;
      }
    }
    return evicted;
  }

  // Drops every entry nothing else holds (shutdown).
  void Clear() {
    absl::flat_hash_map<std::string, Entry> closing;
    absl::MutexLock lock(&mu_);
    closing.swap(entries_);
  }

  // Entries whose resource `matches` says so.
  int64_t CountIf(absl::FunctionRef<bool(const Resource&)> matches) const {
    absl::MutexLock lock(&mu_);
    int64_t count = 0;
    for (const auto& [handle, entry] : entries_) count += matches(*entry.resource) ? 1 : 0;
    return count;
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    std::shared_ptr<Resource> resource;
    absl::flat_hash_set<PeerProcess> users;
    absl::Time last_used;
  };
  const size_t max_entries_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_IPC_CACHE_H_
