// A fixed set of threads that run queued tasks in order of submission. The
// service hands them the calls that may wait long (large Runs, IPC opens),
// so gRPC's own callback threads never block on a long kernel.
#ifndef KERNTUNE_SERVER_WORKER_POOL_H_
#define KERNTUNE_SERVER_WORKER_POOL_H_

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace kt::server {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  // Runs every task already submitted, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(absl::AnyInvocable<void() &&> task);

 private:
  void Work();
  bool HasWorkOrStops() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_WORKER_POOL_H_
