// The client's side of a submission queue (kerntune.v1 OpenQueue,
// proto/run_queue_layout.h): Runs on client memory (registered buffers,
// CUDA IPC) travel as descriptors in shared memory instead of gRPC calls.
// DaemonClient uses one per connection when the daemon offers it; nothing
// here is part of the API a user sees.
//
// Thread-safe: any number of threads submit; whichever waits reads the
// completions and hands each to the thread that waits for it.
//
// A daemon that dies cannot say so in the region, so a Run waiting longer
// than kDaemonCheckInterval checks that the daemon's process is still
// there (a pidfd of the process listening on the socket), and fails with
// UNAVAILABLE once it is not; a Run answered sooner makes no such call.
#ifndef KERNTUNE_CLIENT_RUN_QUEUE_H_
#define KERNTUNE_CLIENT_RUN_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kerntune/v1/kerntune.grpc.pb.h"
#include "proto/run_queue_layout.h"

namespace kt::client {

// Whether a queue can carry `request`: every tensor in client memory (no
// inline bytes, no output returned inline) and small enough for a
// descriptor. The daemon refuses the others; they go over gRPC.
bool QueueCarries(const kerntune::v1::RunRequest& request);

class RunQueueClient {
 public:
  // Opens a queue on `stub`'s daemon, listening on the Unix socket
  // `socket_path`, and maps it. UNIMPLEMENTED from a daemon without queues,
  // FAILED_PRECONDITION over TCP, as the daemon says.
  static absl::StatusOr<std::unique_ptr<RunQueueClient>> Open(
      kerntune::v1::KernTune::Stub& stub, const std::string& socket_path,
      absl::Duration deadline);
  // Closes the queue (CloseQueue; the daemon also ends it when this process
  // exits) and unmaps it.
  ~RunQueueClient();
  RunQueueClient(const RunQueueClient&) = delete;
  RunQueueClient& operator=(const RunQueueClient&) = delete;

  struct Outcome {
    // False when the request never reached the queue (it is closed): the
    // caller may send it another way. True once it may have run.
    bool submitted = false;
    absl::StatusOr<kerntune::v1::RunResponse> response;
  };
  // Submits `request` (QueueCarries) and waits up to `deadline` for its
  // completion: the daemon's answer with the same code and message as a
  // gRPC Run.
  Outcome Run(const kerntune::v1::RunRequest& request, absl::Duration deadline);

  // Whether the daemon closed the queue, or was found dead (then Run
  // submits nothing).
  bool closed() const;
  // Whether the daemon's process has exited, looked at (its pidfd) only
  // after kDaemonCheckInterval without news from it: a daemon killed while
  // no Run waited leaves its queue looking open, and a Run sent into it
  // would wait for a check and fail. One clock read otherwise.
  bool GoneQuiet();
  const std::string& id() const { return id_; }

 private:
  struct Waiter;
  RunQueueClient(kerntune::v1::KernTune::Stub& stub, std::string id, char* base, uint32_t entries,
                 int daemon_pidfd);
  proto::queue::RegionHeader* header() const {
    return reinterpret_cast<proto::queue::RegionHeader*>(base_);
  }
  // Moves every ready completion to its waiter. mu_ held.
  void DrainCompletions();
  // Waits up to `timeout` for a completion past `seen` (cq_head_ when the
  // caller last drained): spins briefly, then sleeps on the futex.
  void WaitForCompletions(uint32_t seen, absl::Duration timeout);
  // Whether the daemon's process has exited (false when unknown); once it
  // has, closed() is true for good.
  bool DaemonExited();

  kerntune::v1::KernTune::Stub& stub_;
  const std::string id_;
  char* const base_;
  const uint32_t entries_;
  // A pidfd of the daemon's process, or -1 when it cannot be had (another
  // pid namespace, a kernel before 5.3): a dead daemon then costs the
  // Runs in flight their deadline.
  const int daemon_pidfd_;
  std::atomic<bool> daemon_exited_{false};
  // When the daemon last showed it is alive (a completion) or GoneQuiet
  // last looked, absl::GetCurrentTimeNanos.
  std::atomic<int64_t> heard_at_ns_;
  // Guards what follows. A std::mutex: Debian's Abseil checks every
  // absl::Mutex acquisition for lock-order cycles, which cost a small Run
  // about 0.5 us of its round trip in this class's few acquisitions
  // (bench/results/2026-11-27-h100-queue-completion-word).
  mutable std::mutex mu_;
  uint32_t sq_tail_ = 0;
  uint32_t cq_head_ = 0;
  uint64_t next_tag_ = 1;
  // Runs submitted and not yet answered, by tag.
  absl::flat_hash_map<uint64_t, Waiter*> waiting_;
  int sleepers_ = 0;
};

}  // namespace kt::client

#endif  // KERNTUNE_CLIENT_RUN_QUEUE_H_
