// A thread that keeps the GPU launch path hot. A request thread of the
// daemon wakes from epoll with cold caches for every Run, and the CUDA
// driver's launch path then costs 3-5x what it costs in a loop (8-25 us
// against 4-5 us, bench/results/2026-11-21-h200-daemon-latency). The
// launcher instead polls for work: request threads hand it the CUDA calls
// of a Run (Start) and a completion check (Poll), and it runs them on a
// thread that never sleeps while Runs keep coming. Many Runs may be in
// flight at once; it polls them all between launches.
//
// It holds a core while it polls, so it is opt-in (kerntuned
// --hot_launcher); after `idle` without work it sleeps until the next Run.
// Nothing here is CUDA-specific; the GPU backend supplies the work.
#ifndef KERNTUNE_SERVER_POLLING_LAUNCHER_H_
#define KERNTUNE_SERVER_POLLING_LAUNCHER_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/gpu_wait.h"

namespace kt::server {

// One Run's work on the launcher thread. Both return true once the work is
// finished (nothing left to wait for), false while it is still running, or
// an error, which finishes it too.
struct LauncherWork {
  absl::FunctionRef<absl::StatusOr<bool>()> start;  // called once
  absl::FunctionRef<absl::StatusOr<bool>()> poll;   // called until it returns true or fails
};

class PollingLauncher {
 public:
  struct Options {
    // How long the thread keeps polling after its last work before it sleeps.
    absl::Duration idle = absl::Milliseconds(100);
    // How a request thread waits for its work: spin and yield poll a flag,
    // hybrid polls for `wait_spin` and then sleeps, block sleeps.
    GpuWait wait = GpuWait::kYield;
    absl::Duration wait_spin = absl::Milliseconds(2);
  };
  struct Stats {
    int64_t runs = 0;    // works finished
    int64_t sleeps = 0;  // times the thread went to sleep for lack of work
  };

  // Starts the thread, which first runs `thread_init` (e.g. cudaSetDevice).
  PollingLauncher(const Options& options, absl::AnyInvocable<void()> thread_init);
  // Finishes the work in flight, then joins the thread.
  ~PollingLauncher();
  PollingLauncher(const PollingLauncher&) = delete;
  PollingLauncher& operator=(const PollingLauncher&) = delete;

  // Runs `work` on the launcher thread and returns once it has finished,
  // with its status. Thread-safe; `work`'s callables are only called
  // before this returns.
  absl::Status Run(LauncherWork work);

  Stats stats() const;

 private:
  struct Job;
  void Loop();
  // Moves submitted jobs to `fresh`; sleeps first when `may_sleep` and
  // there are none. False once stopping with nothing left.
  bool TakeSubmitted(std::vector<Job*>& fresh, bool may_sleep);

  const Options options_;
  absl::AnyInvocable<void()> thread_init_;
  // Jobs submitted and not yet taken; `submitted_count_` lets the polling
  // thread look without locking.
  mutable absl::Mutex mu_;
  std::vector<Job*> submitted_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> submitted_count_{0};
  // Set once, under mu_ (so a sleeping thread's Await sees it); read
  // without the lock by the polling loop.
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> runs_{0};
  std::atomic<int64_t> sleeps_{0};
  std::thread thread_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_POLLING_LAUNCHER_H_
