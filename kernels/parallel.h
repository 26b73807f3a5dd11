// Host work spread over threads on the daemon's request paths (the CPU
// reference, the verifier), where a thread that cannot start must not
// abort the daemon: std::thread throws when pthread_create fails (out of
// threads, memory maps or memory), and nothing up the stack catches it.
#ifndef KERNTUNE_KERNELS_PARALLEL_H_
#define KERNTUNE_KERNELS_PARALLEL_H_

#include "absl/functional/function_ref.h"

namespace kt::kernels {

// Runs task(i) for every i in [0, tasks) and returns when all have run:
// each on a thread of its own while threads start, the rest on the calling
// thread once one fails to (the next would most likely fail too). Never
// throws. Returns how many tasks ran on threads of their own.
int RunOnThreads(int tasks, absl::FunctionRef<void(int)> task);

}  // namespace kt::kernels

#endif  // KERNTUNE_KERNELS_PARALLEL_H_
