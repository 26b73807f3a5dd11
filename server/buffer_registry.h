// Registered buffers: client memory opened once and used by many Runs, each
// owned by the process that registered it. Ids are 128 random bits; a
// caller sees only its own registrations (another's id is NOT_FOUND, as if
// it did not exist). A registration ends on Unregister, after its idle TTL,
// or when its owner has exited (Reap, called every second by the server).
#ifndef KERNTUNE_SERVER_BUFFER_REGISTRY_H_
#define KERNTUNE_SERVER_BUFFER_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/client_memory.h"
#include "server/peer_credentials.h"

namespace kt::server {

enum class BufferKind { kCudaIpc, kHostShm };

struct Registration {
  std::string id;
  PeerProcess owner;
  BufferKind kind = BufferKind::kHostShm;
  std::shared_ptr<const ClientMemory> memory;
  // The usable bytes from memory->base(); <= memory->size().
  int64_t size_bytes = 0;
  std::string label;
  absl::Duration ttl;
  absl::Time registered;
  absl::Time last_used;
  int64_t runs = 0;
};

struct RegistryLimits {
  absl::Duration default_ttl = absl::Hours(1);
  absl::Duration max_ttl = absl::Hours(24 * 7);
  // Per owning process; beyond it RegisterBuffer is ResourceExhausted.
  int max_buffers_per_owner = 4096;
  // Every owner's together (kerntuned --max_buffers), aliases counted: each
  // registration of host memory is a memory map of its own, even of an
  // object registered before. The kernel refuses a process's maps past
  // vm.max_map_count (65530 by default), and the daemon's threads, gRPC,
  // the CUDA driver and the cached CUDA IPC mappings need maps too: issue
  // 43's 16 clients x 4096 registrations reached it, mmap then failed, and
  // so did the next thread the daemon started. Half the default leaves the
  // daemon the other half.
  int max_buffers = 32768;
};

class BufferRegistry {
 public:
  explicit BufferRegistry(RegistryLimits limits) : limits_(limits) {}

  // `size_bytes` 0 = all of `memory`; `ttl` zero = the default.
  absl::StatusOr<Registration> Register(const PeerProcess& owner, BufferKind kind,
                                        std::shared_ptr<const ClientMemory> memory,
                                        int64_t size_bytes, absl::Duration ttl,
                                        std::string label, absl::Time now);
  // What a Run needs of a registration: its memory and the bytes usable
  // from memory->base() (a registration's strings are not copied per Run).
  struct InUse {
    std::shared_ptr<const ClientMemory> memory;
    int64_t size_bytes = 0;
  };
  // OK when `owner` may register one more buffer; ResourceExhausted naming
  // the limit otherwise. Register checks again (others register meanwhile);
  // asked first, it spares opening memory that would be refused.
  absl::Status Admits(const PeerProcess& owner) const;
  // The caller's registration `id` for a Run: renews its lease and counts
  // the Run (a Run uses each of its buffers once, whatever its tensors).
  absl::StatusOr<InUse> Use(const PeerProcess& caller, absl::string_view id, absl::Time now);
  absl::Status Unregister(const PeerProcess& caller, const std::string& id);
  // The caller's registrations, oldest first.
  std::vector<Registration> List(const PeerProcess& caller) const;

  struct Reaped {
    int expired = 0;
    int owner_exited = 0;
  };
  // Ends registrations idle past their TTL and those of exited owners. The
  // mappings close once Runs still using them finish.
  Reaped Reap(absl::Time now, absl::FunctionRef<bool(const PeerProcess&)> is_alive);
  // Ends every registration whose memory is on CUDA device `device` (it
  // failed); returns how many.
  int ReleaseDevice(int device);
  // Ends every registration (shutdown).
  void Clear();

  struct Totals {
    int64_t buffers = 0;
    int64_t bytes = 0;
    int64_t owners = 0;
  };
  Totals totals() const;
  // Those whose memory is on CUDA device `device`.
  Totals totals_on(int device) const;
  const RegistryLimits& limits() const { return limits_; }

 private:
  // TotalsWhere's device for every registration, host memory included.
  static constexpr int kAnyDevice = -2;
  Totals TotalsWhere(int device) const;
  absl::Status AdmitsLocked(const PeerProcess& owner) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RegistryLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Registration> by_id_ ABSL_GUARDED_BY(mu_);
};

// 32 lowercase hex characters from the kernel's random source.
std::string NewBufferId();

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_BUFFER_REGISTRY_H_
