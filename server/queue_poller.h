// The pollers of the submission queues: a few threads, each serving its
// share of the open queues (assigned in turn as they open). A poller takes
// descriptors from its queues, a bounded number per queue per pass so that
// a busy or hostile queue cannot starve the others, and hands each to the
// service (QueuedRunSink), which routes it to its device and submits it on
// the queue's stream there (run_stream.h); then it marks each stream's
// batch and answers the Runs the GPUs have finished. No thread waits on a
// GPU, so Runs of many queues and devices are in flight at once.
//
// While Runs come, finish or are in flight a poller spins; after
// `idle_spin` with none of that it sleeps on its queues' doorbell words at once (futex_waitv),
// so an idle daemon uses no CPU.
#ifndef KERNTUNE_SERVER_QUEUE_POLLER_H_
#define KERNTUNE_SERVER_QUEUE_POLLER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "server/run_queue.h"
#include "server/run_stream.h"

namespace kt::server {

// Where taken descriptors go.
class QueuedRunSink {
 public:
  virtual ~QueuedRunSink() = default;
  // The streams a new queue's Runs will go on.
  virtual std::unique_ptr<QueueStreams> OpenStreams() = 0;
  // Must see to it that the queue's Complete is called once for the
  // descriptor's tag: now, from a later streams.Poll(), or from another
  // thread.
  virtual void RunQueued(const std::shared_ptr<RunQueue>& queue, RunQueue::Taken taken,
                         QueueStreams& streams) = 0;
};

struct PollerOptions {
  // Poller threads; each queue is served by one of them. Several keep the
  // launches of several clients' queues in parallel (a CUDA launch costs
  // microseconds of CPU, and launch calls on different streams scale
  // across threads: bench/results/2026-11-26-h100-queue-streams).
  int threads = 4;
  // How long a poller spins without new work or Runs in flight before it
  // sleeps. A client that submits within it pays no wake-up.
  absl::Duration idle_spin = absl::Microseconds(200);
  // Descriptors taken from one queue per pass.
  int max_per_queue_per_pass = 8;
};

class QueuePoller {
 public:
  // Starts the threads. `queues` and `sink` must outlive the poller.
  QueuePoller(RunQueues& queues, QueuedRunSink& sink, PollerOptions options);
  // Stop().
  ~QueuePoller();
  QueuePoller(const QueuePoller&) = delete;
  QueuePoller& operator=(const QueuePoller&) = delete;

  // Makes sleeping pollers look at the queues again (a queue opened).
  void Wake();
  // Ends the threads; the Runs in flight on their streams are answered
  // first.
  void Stop();

  // Passes that found work, and times a poller went to sleep (tests and
  // status).
  int64_t busy_passes() const { return busy_passes_.load(std::memory_order_relaxed); }
  int64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

 private:
  // A queue a poller serves, with its streams; kept after the queue closed
  // until its streams have answered everything.
  struct Served {
    std::shared_ptr<RunQueue> queue;
    std::unique_ptr<QueueStreams> streams;
  };
  void Loop(int index);
  // Brings `served` up to the open queues that are poller `index`'s.
  void Refresh(int index, std::vector<Served>& served);
  // One pass: takes descriptors, marks the streams' batches, answers what
  // finished. `active` says whether anything was taken or answered;
  // returns the Runs still in flight.
  int Pass(std::vector<Served>& served, bool& active);
  // Arms the doorbells of `served` and sleeps unless work or a wake came.
  void Sleep(const std::vector<Served>& served, uint64_t generation);

  RunQueues& queues_;
  QueuedRunSink& sink_;
  const PollerOptions options_;
  // Fixed before the threads start (they read it; threads_ still grows).
  const int thread_count_;
  // The pollers' futex word: Wake() bumps it.
  alignas(64) uint32_t wake_word_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> busy_passes_{0};
  std::atomic<int64_t> sleeps_{0};
  std::vector<std::thread> threads_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_QUEUE_POLLER_H_
