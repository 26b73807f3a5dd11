// Runs test code in a child process in which no thread can start, the way
// a daemon out of memory maps (vm.max_map_count) or memory finds itself:
// pthread_create cannot map a stack, and std::thread throws.
#ifndef KERNTUNE_TESTS_TESTING_WITHOUT_THREADS_H_
#define KERNTUNE_TESTS_TESTING_WITHOUT_THREADS_H_

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "tests/testing/sanitizers.h"

namespace kt::testing {

// Forks; in the child, new threads get 1 GiB stacks (so none of the stacks
// glibc keeps from the parent's finished threads fits) and the address
// space is capped 64 MiB above what the child uses, so no such stack can
// be mapped; then exits with body()'s value. The parent gets the child's
// wait status (an exception escaping body() shows as SIGABRT). Not for
// sanitizer builds (kSanitizerBuild): their own mappings hit the cap first.
template <typename Body>
int WaitStatusWithoutThreads(Body body) {
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, size_t{1} << 30);
    if (pthread_setattr_default_np(&attr) != 0) _exit(100);
    long pages = 0;
    if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
      std::fclose(statm);
    }
    if (pages <= 0) _exit(101);
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) +
                       (rlim_t{64} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(102);
    // noexcept: an exception ends the child as it ends the daemon, with
    // std::terminate, instead of reaching the test framework's handlers.
    const auto run = [&body]() noexcept { return body(); };
    _exit(run());
  }
  int status = -1;
  if (child > 0) waitpid(child, &status, 0);
  return status;
}

}  // namespace kt::testing

#endif  // KERNTUNE_TESTS_TESTING_WITHOUT_THREADS_H_
