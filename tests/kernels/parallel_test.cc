// RunOnThreads: every task runs, on threads while they start and on the
// caller once they do not (no exception escapes).
#include "kernels/parallel.h"

#include <sys/wait.h>

#include <atomic>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/without_threads.h"

namespace kt::kernels {
namespace {

TEST(RunOnThreadsTest, RunsEveryTaskOnceOnItsOwnThread) {
  std::vector<std::atomic<int>> runs(7);
  EXPECT_EQ(RunOnThreads(7, [&](int i) { runs[i].fetch_add(1); }), 7);
  for (const std::atomic<int>& count : runs) EXPECT_EQ(count.load(), 1);
  EXPECT_EQ(RunOnThreads(0, [](int) { ADD_FAILURE() << "no task to run"; }), 0);
}

TEST(RunOnThreadsTest, RunsEveryTaskOnTheCallerWhenNoThreadStarts) {
  if (testing::kSanitizerBuild) GTEST_SKIP() << "sanitizer build";
  const int status = testing::WaitStatusWithoutThreads([] {
    std::vector<int> runs(5, 0);  // the caller's alone: no lock needed
    const int started = RunOnThreads(5, [&](int i) { ++runs[i]; });
    if (started != 0) return 1;  // the cap did not stop threads: the test proves nothing
    for (int count : runs) {
      if (count != 1) return 2;
    }
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: threads still started; 2: a task did not run once";
}

}  // namespace
}  // namespace kt::kernels
