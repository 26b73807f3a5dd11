// The poller of the submission queues: one thread that takes descriptors
// from every open queue, a bounded number per queue per pass so that a busy
// or hostile queue cannot starve the others, and hands each to the service
// (QueuedRunSink), which routes it to its device. While work comes it spins;
// after `idle_spin` without any it sleeps on every queue's doorbell word at
// once (futex_waitv), so an idle daemon uses no CPU.
#ifndef KERNTUNE_SERVER_QUEUE_POLLER_H_
#define KERNTUNE_SERVER_QUEUE_POLLER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "server/run_queue.h"

namespace kt::server {

// Where taken descriptors go. RunQueued must see to it that the queue's
// Complete is called once for the descriptor's tag, now or later.
class QueuedRunSink {
 public:
  virtual ~QueuedRunSink() = default;
  virtual void RunQueued(const std::shared_ptr<RunQueue>& queue, RunQueue::Taken taken) = 0;
};

struct PollerOptions {
  // How long the poller spins without finding work before it sleeps. A
  // client that submits within it pays no wake-up. To be measured on a GPU
  // host (issue 23); 200 us keeps a client that submits Run after Run hot.
  absl::Duration idle_spin = absl::Microseconds(200);
  // Descriptors taken from one queue per pass.
  int max_per_queue_per_pass = 8;
};

class QueuePoller {
 public:
  // Starts the thread. `queues` and `sink` must outlive the poller.
  QueuePoller(RunQueues& queues, QueuedRunSink& sink, PollerOptions options);
  // Stop().
  ~QueuePoller();
  QueuePoller(const QueuePoller&) = delete;
  QueuePoller& operator=(const QueuePoller&) = delete;

  // Makes a sleeping poller look at the queues again (a queue opened).
  void Wake();
  // Ends the thread; descriptors already handed to the sink stay its own.
  void Stop();

  // Passes that found work, and times it went to sleep (tests and status).
  int64_t busy_passes() const { return busy_passes_.load(std::memory_order_relaxed); }
  int64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // One pass over `queues`; true when it took anything.
  bool Pass(const std::vector<std::shared_ptr<RunQueue>>& queues);
  // Arms every queue's doorbell and sleeps unless work or a wake came.
  void Sleep(const std::vector<std::shared_ptr<RunQueue>>& queues, uint64_t generation);

  RunQueues& queues_;
  QueuedRunSink& sink_;
  const PollerOptions options_;
  // The poller's own futex word: Wake() bumps it.
  alignas(64) uint32_t wake_word_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> busy_passes_{0};
  std::atomic<int64_t> sleeps_{0};
  std::thread thread_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_QUEUE_POLLER_H_
