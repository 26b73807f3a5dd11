// Submission queues, the daemon's side: a shared-memory region per queue
// (proto/run_queue_layout.h) that the daemon creates, sizes and owns, and
// the registry of open queues, each belonging to the process that opened
// it (peer credentials) and ended with it, like a registered buffer.
//
// The region is client memory: the client may rewrite any byte of it at any
// time, or truncate the object. So the daemon keeps the geometry and its
// own indices privately, reads what the client writes once per use,
// checks it against them, copies a descriptor out before looking at it,
// writes only completion slots it computed itself, and does every access
// under the SIGBUS guard (client_memory.h): a shrunken region closes the
// queue instead of crashing the daemon.
#ifndef KERNTUNE_SERVER_RUN_QUEUE_H_
#define KERNTUNE_SERVER_RUN_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kerntune/v1/kerntune.pb.h"
#include "proto/run_queue_layout.h"
#include "server/peer_credentials.h"
#include "server/run_request.h"

namespace kt::server {

class RunQueue {
 public:
  // A new region for `owner` with `entries` slots per ring (a valid
  // proto::queue entry count): a fresh shm object, mode 0600, owned by the
  // owner's uid (fchown when the daemon runs as another user).
  // `serial` orders queues by opening (RunQueues numbers them).
  static absl::StatusOr<std::shared_ptr<RunQueue>> Create(const PeerProcess& owner,
                                                          uint32_t entries, uint64_t serial = 0);
  // Unmaps the region and removes its name if the client has not.
  ~RunQueue();
  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;

  const std::string& id() const { return id_; }
  const std::string& shm_name() const { return shm_name_; }
  const PeerProcess& owner() const { return owner_; }
  uint32_t entries() const { return entries_; }
  uint64_t serial() const { return serial_; }
  uint64_t region_bytes() const { return region_bytes_; }
  // "queue 1f2e... of pid 123 (uid 1000)", for logs (made once: every
  // queued Run carries it).
  const std::string& Describe() const { return description_; }

  // One descriptor taken from the ring, copied out: the request, or why
  // the slot itself is unusable (the completion then says so). A
  // descriptor with the same bytes as the queue's last one shares its
  // parsed request: a client that sends one Run again and again (an
  // inference loop) is parsed once.
  struct Taken {
    uint64_t tag = 0;
    absl::StatusOr<std::shared_ptr<const kerntune::v1::RunRequest>> request;
  };
  // Poller only. Takes up to `max` published descriptors, each with a
  // completion slot reserved, so fewer (none) when the completion ring is
  // full: a client that stops reading completions stops its own
  // submissions and nobody else's. Garbage indices or a shrunken region
  // close the queue (and nothing is taken).
  std::vector<Taken> Take(int max);
  // Whether Take would take something now (poller only).
  bool HasWork();

  // The Run the service validated from a request Take gave, kept for the
  // descriptors that repeat it (poller only). The queue's repeated
  // descriptors share one parsed request (Take), so they share its
  // validation: a request is the same bytes for as long as it lives, and
  // what validation makes of them depends on nothing else. What depends on
  // the daemon's state (the owner's registrations, the device, the config)
  // is still looked up per Run. Null when `request` is not the one kept.
  const RunRequest* ValidatedRun(const kerntune::v1::RunRequest& request) const {
    return &request == validated_request_.get() ? &validated_run_ : nullptr;
  }
  // Keeps `run`, validated from `request` (and nothing more: no caller, no
  // memory), in place of the one kept before.
  void KeepValidatedRun(std::shared_ptr<const kerntune::v1::RunRequest> request, RunRequest run);

  // Writes the completion of a taken descriptor into its reserved slot and
  // wakes the client if it sleeps. Thread-safe. On OK `prefix` (serialized
  // RunResponse fields) and then `response` (may be null) go into the slot,
  // which the client parses as one RunResponse; otherwise the status's
  // message, cut to fit.
  void Complete(uint64_t tag, const absl::Status& status,
                const kerntune::v1::RunResponse* response, absl::string_view prefix = {});

  // Going to sleep (poller only): sets need_wakeup, returns the doorbell
  // word to FUTEX_WAIT on with its value, or nullptr when the queue is
  // closed. Disarm() clears need_wakeup once the poller runs again.
  uint32_t* Arm(uint32_t& doorbell_value);
  void Disarm();

  // Closes the queue: nothing more is taken, completions still owed are
  // dropped, and the header's `closed` says why. The first reason stays.
  void Close(proto::queue::CloseReason reason);
  bool closed() const { return close_reason_.load(std::memory_order_acquire) != 0; }
  proto::queue::CloseReason close_reason() const {
    return static_cast<proto::queue::CloseReason>(close_reason_.load(std::memory_order_acquire));
  }

 private:
  RunQueue(std::string id, std::string shm_name, const PeerProcess& owner, uint32_t entries,
           uint64_t serial, char* base, int fd);
  proto::queue::RegionHeader* header() const {
    return reinterpret_cast<proto::queue::RegionHeader*>(base_);
  }
  // Runs `access` under the SIGBUS guard; closes the queue when the region
  // shrank. False then.
  bool Guarded(absl::FunctionRef<void()> access);
  // Slots free in the completion ring for new descriptors, from the
  // client's cq_head; -1 (and the queue closed) when cq_head is garbage.
  int64_t FreeCompletionSlots(uint32_t cq_head) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string id_;
  const std::string shm_name_;
  const PeerProcess owner_;
  const std::string description_;
  const uint32_t entries_;
  const uint64_t serial_;
  const uint64_t region_bytes_;
  char* const base_;
  const int fd_;  // kept to recognise the name as ours when unlinking it
  std::atomic<uint32_t> close_reason_{0};
  // The poller's: the next descriptor to take, and the last one parsed
  // (its bytes as copied out, and the request they hold).
  uint32_t sq_head_ = 0;
  std::string last_descriptor_;
  std::shared_ptr<const kerntune::v1::RunRequest> last_request_;
  // The poller's too: the request a Run was last validated from, and that
  // Run (KeepValidatedRun). Holding the request keeps its address unique.
  std::shared_ptr<const kerntune::v1::RunRequest> validated_request_;
  RunRequest validated_run_;
  absl::Mutex mu_;
  // The next completion slot, and completions owed (taken, not written).
  uint32_t cq_tail_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t owed_ ABSL_GUARDED_BY(mu_) = 0;
};

struct QueueLimits {
  int max_queues_per_owner = 8;
  // The poller sleeps on every queue's doorbell at once (futex_waitv takes
  // 128 words, one of them its own).
  int max_queues = 120;
};

// The open queues of every client.
class RunQueues {
 public:
  explicit RunQueues(QueueLimits limits) : limits_(limits) {}

  // `entries` 0 = the default. InvalidArgument for a bad count,
  // ResourceExhausted beyond the limits.
  absl::StatusOr<std::shared_ptr<RunQueue>> Open(const PeerProcess& owner, uint32_t entries);
  // NotFound for an id that is not the caller's.
  absl::Status Close(const PeerProcess& caller, const std::string& id);
  // Removes queues of exited owners and those the poller closed; returns
  // how many owners' queues ended because they exited.
  int Reap(absl::FunctionRef<bool(const PeerProcess&)> is_alive);
  // Closes and removes every queue (shutdown).
  void Clear();

  // The open queues in the order they opened, and a number that changes
  // whenever they do.
  std::vector<std::shared_ptr<RunQueue>> Snapshot() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  int64_t size() const;

 private:
  const QueueLimits limits_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<RunQueue>> by_id_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> next_serial_{0};
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_RUN_QUEUE_H_
