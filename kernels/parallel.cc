// RunOnThreads (parallel.h).
#include "kernels/parallel.h"

#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace kt::kernels {

int RunOnThreads(int tasks, absl::FunctionRef<void(int)> task) {
  std::vector<std::thread> threads;
  int next = 0;
  // reserve may throw too (bad_alloc); the tasks then all run here.
  try {
    threads.reserve(tasks > 0 ? static_cast<size_t>(tasks) : 0);
    for (; next < tasks; ++next) threads.emplace_back([task, next] { task(next); });
  } catch (const std::system_error&) {
    // The thread of task `next` did not start: it and the rest run below.
  } catch (const std::bad_alloc&) {
  }
  const int started = static_cast<int>(threads.size());
  for (; next < tasks; ++next) task(next);
  for (std::thread& thread : threads) thread.join();
  return started;
}

}  // namespace kt::kernels
