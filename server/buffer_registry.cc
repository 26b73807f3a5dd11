// Registered buffers and their leases (see buffer_registry.h).
#include "server/buffer_registry.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace kt::server {
namespace {

absl::Status UnknownBuffer(absl::string_view id) {
  // The same answer whether the id does not exist or is someone else's.
  return absl::NotFoundError(
      absl::StrCat("buffer_id \"", id, "\" is not registered by this process"));
}

}  // namespace

std::string NewBufferId() {
  unsigned char bytes[16];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got > 0) filled += static_cast<size_t>(got);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<Registration> BufferRegistry::Register(
    const PeerProcess& owner, BufferKind kind, std::shared_ptr<const ClientMemory> memory,
    int64_t size_bytes, absl::Duration ttl, std::string label, absl::Time now) {
  if (size_bytes < 0 || size_bytes > memory->size()) {
    return absl::OutOfRangeError(absl::StrCat("size_bytes=", size_bytes,
                                              " is outside the allocation, which has ",
                                              memory->size(), " bytes"));
  }
  if (ttl < absl::ZeroDuration() || ttl > limits_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_seconds=", absl::ToInt64Seconds(ttl),
                                                   " must be in [0, ",
                                                   absl::ToInt64Seconds(limits_.max_ttl), "]"));
  }
  Registration registration;
  registration.id = NewBufferId();
  registration.owner = owner;
  registration.kind = kind;
  registration.size_bytes = size_bytes == 0 ? memory->size() : size_bytes;
  registration.memory = std::move(memory);
  registration.label = std::move(label);
  registration.ttl = ttl == absl::ZeroDuration() ? limits_.default_ttl : ttl;
  registration.registered = now;
  registration.last_used = now;

  absl::MutexLock lock(&mu_);
  if (absl::Status s = AdmitsLocked(owner); !s.ok()) return s;
  by_id_.emplace(registration.id, registration);
  return registration;
}

absl::Status BufferRegistry::Admits(const PeerProcess& owner) const {
  absl::MutexLock lock(&mu_);
  return AdmitsLocked(owner);
}

absl::Status BufferRegistry::AdmitsLocked(const PeerProcess& owner) const {
  if (static_cast<int64_t>(by_id_.size()) >= limits_.max_buffers) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "kerntuned holds ", by_id_.size(), " registered buffers, its limit (--max_buffers=",
        limits_.max_buffers, ", every process's together, each registration a memory map of "
        "its own): unregister buffers first, or register an object once and use offsets "
        "into it"));
  }
  int owned = 0;
  for (const auto& [id, existing] : by_id_) owned += existing.owner == owner ? 1 : 0;
  if (owned >= limits_.max_buffers_per_owner) {
    return absl::ResourceExhaustedError(absl::StrCat(
        owner.Describe(), " already has ", owned, " registered buffers, the limit; "
        "unregister some first"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BufferRegistry::InUse> BufferRegistry::Use(const PeerProcess& caller,
                                                           absl::string_view id,
                                                           absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || !(it->second.owner == caller)) return UnknownBuffer(id);
  it->second.last_used = std::max(it->second.last_used, now);
  ++it->second.runs;
  return InUse{it->second.memory, it->second.size_bytes};
}

absl::Status BufferRegistry::Unregister(const PeerProcess& caller, const std::string& id) {
  std::shared_ptr<const ClientMemory> closing;  // released after the lock
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || !(it->second.owner == caller)) return UnknownBuffer(id);
  closing = std::move(it->second.memory);
  by_id_.erase(it);
  return absl::OkStatus();
}

std::vector<Registration> BufferRegistry::List(const PeerProcess& caller) const {
  std::vector<Registration> owned;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, registration] : by_id_) {
      if (registration.owner == caller) owned.push_back(registration);
    }
  }
  std::sort(owned.begin(), owned.end(), [](const Registration& a, const Registration& b) {
    return a.registered != b.registered ? a.registered < b.registered : a.id < b.id;
  });
  return owned;
}

BufferRegistry::Reaped BufferRegistry::Reap(
    absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive) {
  Reaped reaped;
  // One /proc read per owner, made without the lock: Runs take it to use
  // their buffers, and a read costs tens of microseconds.
  absl::flat_hash_map<PeerProcess, bool> alive;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, registration] : by_id_) alive.try_emplace(registration.owner, true);
  }
  for (auto& [owner, owner_alive] : alive) owner_alive = is_alive(owner);
  std::vector<std::shared_ptr<const ClientMemory>> closing;  // released after the lock
  absl::MutexLock lock(&mu_);
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    const Registration& registration = it->second;
    // An owner that registered since the reads is alive.
    auto known = alive.find(registration.owner);
    const bool owner_alive = known == alive.end() || known->second;
    const bool expired = now - registration.last_used > registration.ttl;
    if (!owner_alive || expired) {
      (owner_alive ? reaped.expired : reaped.owner_exited) += 1;
      closing.push_back(std::move(it->second.memory));
      by_id_.erase(it++);
    } else {
      ++it;
    }
  }
  return reaped;
}

int BufferRegistry::ReleaseDevice(int device) {
  std::vector<std::shared_ptr<const ClientMemory>> closing;  // released after the lock
  absl::MutexLock lock(&mu_);
  int released = 0;
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    if (it->second.memory->space() == MemorySpace::kDevice &&
        it->second.memory->device() == device) {
      closing.push_back(std::move(it->second.memory));
      by_id_.erase(it++);
      ++released;
    } else {
      ++it;
    }
  }
  return released;
}

void BufferRegistry::Clear() {
  absl::flat_hash_map<std::string, Registration> closing;
  absl::MutexLock lock(&mu_);
  closing.swap(by_id_);
}

BufferRegistry::Totals BufferRegistry::totals() const { return TotalsWhere(kAnyDevice); }

BufferRegistry::Totals BufferRegistry::totals_on(int device) const {
  return TotalsWhere(device);
}

BufferRegistry::Totals BufferRegistry::TotalsWhere(int device) const {
  Totals totals;
  absl::flat_hash_set<PeerProcess> owners;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, registration] : by_id_) {
    if (device != kAnyDevice && (registration.memory->space() != MemorySpace::kDevice ||
                                 registration.memory->device() != device)) {
      continue;
    }
    ++totals.buffers;
    totals.bytes += registration.size_bytes;
    owners.insert(registration.owner);
  }
  totals.owners = static_cast<int64_t>(owners.size());
  return totals;
}

}  // namespace kt::server
