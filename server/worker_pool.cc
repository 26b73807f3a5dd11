// WorkerPool (worker_pool.h).
#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

namespace kt::server {

WorkerPool::WorkerPool(int threads) {
  threads_.reserve(std::max(threads, 1));
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::Submit(absl::AnyInvocable<void() &&> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

bool WorkerPool::HasWorkOrStops() const { return stopping_ || !queue_.empty(); }

void WorkerPool::Work() {
  while (true) {
    absl::AnyInvocable<void() &&> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkerPool::HasWorkOrStops));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
  }
}

}  // namespace kt::server
