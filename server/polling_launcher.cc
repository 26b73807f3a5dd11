// Polling launcher (polling_launcher.h).
#include "server/polling_launcher.h"

#include <chrono>
#include <utility>

#include "absl/synchronization/notification.h"

namespace kt::server {
namespace {

using Clock = std::chrono::steady_clock;

// One spin-loop pause: tells the core this is a poll, without giving it up.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

}  // namespace

struct PollingLauncher::Job {
  explicit Job(LauncherWork work) : work(work) {}
  LauncherWork work;
  absl::Status status;  // written before `done`
  absl::Notification done;
};

PollingLauncher::PollingLauncher(const Options& options, absl::AnyInvocable<void()> thread_init)
    : options_(options), thread_init_(std::move(thread_init)) {
  thread_ = std::thread([this] { Loop(); });
}

PollingLauncher::~PollingLauncher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_.store(true, std::memory_order_relaxed);
  }
  thread_.join();
}

absl::Status PollingLauncher::Run(LauncherWork work) {
  Job job(work);
  {
    absl::MutexLock lock(&mu_);
    submitted_.push_back(&job);
    submitted_count_.fetch_add(1, std::memory_order_release);
  }
  // The request thread polls as --gpu_wait says, so that with spin or yield
  // it is awake (and its caches warm) when its work finishes.
  switch (options_.wait) {
    case GpuWait::kSpin:
      while (!job.done.HasBeenNotified()) CpuRelax();
      break;
    case GpuWait::kYield:
      while (!job.done.HasBeenNotified()) std::this_thread::yield();
      break;
    case GpuWait::kHybrid: {
      const Clock::time_point give_up = Clock::now() + absl::ToChronoNanoseconds(options_.wait_spin);
      while (!job.done.HasBeenNotified() && Clock::now() < give_up) std::this_thread::yield();
      job.done.WaitForNotification();
      break;
    }
    case GpuWait::kBlock:
      job.done.WaitForNotification();
      break;
  }
  return job.status;
}

PollingLauncher::Stats PollingLauncher::stats() const {
  return Stats{runs_.load(std::memory_order_relaxed), sleeps_.load(std::memory_order_relaxed)};
}

bool PollingLauncher::TakeSubmitted(std::vector<Job*>& fresh, bool may_sleep) {
  absl::MutexLock lock(&mu_);
  if (may_sleep && submitted_.empty() && !stopping_) {
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    mu_.Await(absl::Condition(
        +[](PollingLauncher* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return !self->submitted_.empty() || self->stopping_;
        },
        this));
  }
  if (submitted_.empty()) return !(stopping_ && may_sleep);
  fresh.swap(submitted_);
  submitted_count_.store(0, std::memory_order_relaxed);
  return true;
}

void PollingLauncher::Loop() {
  if (thread_init_) thread_init_();
  std::vector<Job*> fresh;
  std::vector<Job*> running;
  Clock::time_point last_work = Clock::now();
  const std::chrono::nanoseconds idle = absl::ToChronoNanoseconds(options_.idle);
  auto finish = [this](Job* job, absl::Status status) {
    job->status = std::move(status);
    runs_.fetch_add(1, std::memory_order_relaxed);
    job->done.Notify();  // `job` may be gone after this
  };
  while (true) {
    // Nothing running and nothing for `idle`: sleep until submitted work or
    // the destructor wakes the thread. Stopping ends the loop only there, so
    // the work in flight finishes first.
    const bool may_sleep =
        running.empty() && (stopping_.load(std::memory_order_relaxed) ||
                            Clock::now() - last_work >= idle);
    if (submitted_count_.load(std::memory_order_acquire) > 0 || may_sleep) {
      if (!TakeSubmitted(fresh, may_sleep)) return;
    }
    bool worked = !fresh.empty();
    for (Job* job : fresh) {
      absl::StatusOr<bool> started = job->work.start();
      if (!started.ok() || *started) {
        finish(job, started.status());
      } else {
        running.push_back(job);
      }
    }
    fresh.clear();
    // Oldest first; finished jobs leave, the rest keep their order.
    size_t kept = 0;
    for (Job* job : running) {
      absl::StatusOr<bool> polled = job->work.poll();
      if (!polled.ok() || *polled) {
        finish(job, polled.status());
        worked = true;
      } else {
        running[kept++] = job;
      }
    }
    running.resize(kept);
    if (worked) {
      last_work = Clock::now();
    } else {
      CpuRelax();
    }
  }
}

}  // namespace kt::server
