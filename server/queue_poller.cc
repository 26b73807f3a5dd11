// The submission queues' poller (see queue_poller.h).
#include "server/queue_poller.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

QueuePoller::QueuePoller(RunQueues& queues, QueuedRunSink& sink, PollerOptions options)
    : queues_(queues), sink_(sink), options_(options), thread_([this] { Loop(); }) {}

QueuePoller::~QueuePoller() { Stop(); }

void QueuePoller::Wake() {
  __atomic_fetch_add(&wake_word_, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &wake_word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void QueuePoller::Stop() {
  if (stop_.exchange(true)) {
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
    return;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
}

bool QueuePoller::Pass(const std::vector<std::shared_ptr<RunQueue>>& queues) {
  bool worked = false;
  for (const std::shared_ptr<RunQueue>& queue : queues) {
    std::vector<RunQueue::Taken> taken = queue->Take(options_.max_per_queue_per_pass);
    worked = worked || !taken.empty();
    for (RunQueue::Taken& one : taken) sink_.RunQueued(queue, std::move(one));
  }
  return worked;
}

void QueuePoller::Loop() {
  using Clock = std::chrono::steady_clock;
  const auto idle_spin = absl::ToChronoNanoseconds(options_.idle_spin);
  std::vector<std::shared_ptr<RunQueue>> queues;
  uint64_t generation = ~uint64_t{0};
  Clock::time_point last_work = Clock::now();
  while (!stop_.load(std::memory_order_acquire)) {
    if (queues_.generation() != generation) {
      generation = queues_.generation();
      queues = queues_.Snapshot();
    }
    if (Pass(queues)) {
      busy_passes_.fetch_add(1, std::memory_order_relaxed);
      last_work = Clock::now();
      continue;
    }
    if (Clock::now() - last_work < idle_spin) {
      CpuRelax();
      continue;
    }
    Sleep(queues, generation);
    last_work = Clock::now();
  }
}

void QueuePoller::Sleep(const std::vector<std::shared_ptr<RunQueue>>& queues,
                        uint64_t generation) {
  // Read before arming: a Wake() after this makes the wait return at once.
  const uint32_t wake_value = __atomic_load_n(&wake_word_, __ATOMIC_SEQ_CST);
  std::vector<futex_waitv> waiters;
  waiters.reserve(queues.size() + 1);
  waiters.push_back({wake_value, reinterpret_cast<uintptr_t>(&wake_word_),
                     FUTEX_32 | FUTEX_PRIVATE_FLAG, 0});
  for (const std::shared_ptr<RunQueue>& queue : queues) {
    uint32_t value = 0;
    if (uint32_t* doorbell = queue->Arm(value); doorbell != nullptr) {
      waiters.push_back({value, reinterpret_cast<uintptr_t>(doorbell), FUTEX_32, 0});
    }
  }
  // need_wakeup is set: a client that publishes from here on rings its
  // doorbell. What it published before, this look finds.
  bool work = false;
  for (const std::shared_ptr<RunQueue>& queue : queues) work = work || queue->HasWork();
  if (!work && !stop_.load(std::memory_order_acquire) && queues_.generation() == generation) {
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    const long waited = waiters.size() > FUTEX_WAITV_MAX
                            ? -1
                            : syscall(SYS_futex_waitv, waiters.data(),
                                      static_cast<unsigned>(waiters.size()), 0, nullptr,
                                      CLOCK_MONOTONIC);
    if (waited < 0 && (errno == ENOSYS || waiters.size() > FUTEX_WAITV_MAX)) {
      // No vectored wait: sleep on the poller's own word, look again soon.
      syscall(SYS_futex, &wake_word_, FUTEX_WAIT_PRIVATE, wake_value, &kFallbackSleep, nullptr,
              0);
    }
    // EFAULT (a region truncated under the wait), EAGAIN (a word moved) and
    // wake-ups all end in the same place: the next pass looks at every
    // queue, and the guard closes a broken one.
  }
  for (const std::shared_ptr<RunQueue>& queue : queues) queue->Disarm();
}

}  // namespace kt::server
