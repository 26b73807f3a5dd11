// The submission queues' poller (see queue_poller.h).
#include "server/queue_poller.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>

namespace kt::server {
namespace {

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#ifndef FUTEX_32
#define FUTEX_32 2
struct futex_waitv {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t __reserved;
};
#endif

// Without futex_waitv (Linux < 5.16) the poller wakes this often to look.
constexpr timespec kFallbackSleep = {0, 1000 * 1000};
// With Runs in flight and nothing else to do, a poller yields between looks
// for this long, then pauses kLongRunPause between them.
constexpr std::chrono::milliseconds kYieldFor{2};
constexpr timespec kLongRunPause = {0, 50 * 1000};

}  // namespace

QueuePoller::QueuePoller(RunQueues& queues, QueuedRunSink& sink, PollerOptions options)
    : queues_(queues),
      sink_(sink),
      options_(options),
      thread_count_(std::max(1, options_.threads)) {
  for (int i = 0; i < thread_count_; ++i) {
    threads_.emplace_back([this, i] { Loop(i); });
  }
}

QueuePoller::~QueuePoller() { Stop(); }

void QueuePoller::Wake() {
  __atomic_fetch_add(&wake_word_, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &wake_word_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void QueuePoller::Stop() {
  stop_.store(true, std::memory_order_release);
  Wake();
  for (std::thread& thread : threads_) {
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
}

void QueuePoller::Refresh(int index, std::vector<Served>& served) {
  const int threads = thread_count_;
  std::vector<std::shared_ptr<RunQueue>> open = queues_.Snapshot();
  std::vector<Served> next;
  next.reserve(served.size() + open.size());
  // Both lists are in opening order: merge them.
  size_t old = 0;
  for (std::shared_ptr<RunQueue>& queue : open) {
    if (static_cast<int>(queue->serial() % threads) != index) continue;
    while (old < served.size() && served[old].queue->serial() < queue->serial()) {
      // Gone from the open queues: kept while its streams have Runs in flight.
      if (!served[old].streams->idle()) next.push_back(std::move(served[old]));
      ++old;
    }
    if (old < served.size() && served[old].queue == queue) {
      next.push_back(std::move(served[old++]));
    } else {
      next.push_back({std::move(queue), sink_.OpenStreams()});
    }
  }
  for (; old < served.size(); ++old) {
    if (!served[old].streams->idle()) next.push_back(std::move(served[old]));
  }
  served.swap(next);
}

int QueuePoller::Pass(std::vector<Served>& served, bool& active) {
  bool took = false;
  int submitted = 0;
  for (Served& one : served) {
    const int room = std::min(options_.max_per_queue_per_pass, one.streams->room());
    if (room <= 0) continue;
    std::vector<RunQueue::Taken> taken = one.queue->Take(room);
    took = took || !taken.empty();
    for (RunQueue::Taken& run : taken) sink_.RunQueued(one.queue, std::move(run), *one.streams);
  }
  int in_flight = 0;
  for (Served& one : served) {
    submitted += one.streams->in_flight();
    one.streams->Flush();
    in_flight += one.streams->Poll();
  }
  // Taking or answering is activity: a client whose Run was just answered
  // sends its next one within microseconds, to a poller still awake.
  active = took || in_flight < submitted;
  return in_flight;
}

void QueuePoller::Loop(int index) {
  using Clock = std::chrono::steady_clock;
  const auto idle_spin = absl::ToChronoNanoseconds(options_.idle_spin);
  std::vector<Served> served;
  uint64_t generation = ~uint64_t{0};
  Clock::time_point last_work = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    if (queues_.generation() != generation) {
      generation = queues_.generation();
      Refresh(index, served);
    }
    bool active = false;
    const int in_flight = Pass(served, active);
    if (active) {
      busy_passes_.fetch_add(1, std::memory_order_relaxed);
      last_work = Clock::now();
      continue;
    }
    const Clock::duration idle = Clock::now() - last_work;
    if (idle < idle_spin) {
      proto::queue::CpuRelax();
    } else if (in_flight > 0 && idle < kYieldFor) {
      // A long kernel: keep looking, but give the core away between looks.
      sched_yield();
    } else if (in_flight > 0) {
      // Longer still (a Run waiting on its client's event, say): look now
      // and then, at a cost to the answer's latency that such a Run's
      // length dwarfs.
      nanosleep(&kLongRunPause, nullptr);
    } else {
      Sleep(served, generation);
      last_work = Clock::now();
    }
  }
  // Nothing more is taken; the streams answer what is in flight as they go
  // (waiting for their GPU work).
  for (Served& one : served) one.queue->Close(proto::queue::CloseReason::kShutdown);
  served.clear();
}

void QueuePoller::Sleep(const std::vector<Served>& served, uint64_t generation) {
  // Read before arming: a Wake() after this makes the wait return at once.
  const uint32_t wake_value = __atomic_load_n(&wake_word_, __ATOMIC_SEQ_CST);
  std::vector<futex_waitv> waiters;
  waiters.reserve(served.size() + 1);
  waiters.push_back({wake_value, reinterpret_cast<uintptr_t>(&wake_word_),
                     FUTEX_32 | FUTEX_PRIVATE_FLAG, 0});
  for (const Served& one : served) {
    uint32_t value = 0;
    if (uint32_t* doorbell = one.queue->Arm(value); doorbell != nullptr) {
      waiters.push_back({value, reinterpret_cast<uintptr_t>(doorbell), FUTEX_32, 0});
    }
  }
  // need_wakeup is set: a client that publishes from here on rings its
  // doorbell. What it published before, this look finds.
  bool work = false;
  for (const Served& one : served) work = work || one.queue->HasWork();
  if (!work && !stop_.load(std::memory_order_acquire) && queues_.generation() == generation) {
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    const long waited = waiters.size() > FUTEX_WAITV_MAX
                            ? -1
                            : syscall(SYS_futex_waitv, waiters.data(),
                                      static_cast<unsigned>(waiters.size()), 0, nullptr,
                                      CLOCK_MONOTONIC);
    if (waited < 0 && (errno == ENOSYS || waiters.size() > FUTEX_WAITV_MAX)) {
      // No vectored wait: sleep on the pollers' own word, look again soon.
      syscall(SYS_futex, &wake_word_, FUTEX_WAIT_PRIVATE, wake_value, &kFallbackSleep, nullptr,
              0);
    }
    // EFAULT (a region truncated under the wait), EAGAIN (a word moved) and
    // wake-ups all end in the same place: the next pass looks at every
    // queue, and the guard closes a broken one.
  }
  for (const Served& one : served) one.queue->Disarm();
}

}  // namespace kt::server
