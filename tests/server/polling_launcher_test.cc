// PollingLauncher: work runs on its own thread, polled to completion, for
// every wait mode, many callers at once, across sleeps and shutdown.
#include "server/polling_launcher.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kt::server {
namespace {

using ::testing::HasSubstr;

PollingLauncher::Options Quick(GpuWait wait = GpuWait::kYield) {
  PollingLauncher::Options options;
  options.wait = wait;
  options.wait_spin = absl::Microseconds(50);
  options.idle = absl::Milliseconds(1);
  return options;
}

// Finishes after `polls` polls, counting the calls.
struct Countdown {
  explicit Countdown(int polls) : left(polls) {}
  absl::StatusOr<bool> Start() {
    ++starts;
    return left == 0;
  }
  absl::StatusOr<bool> Poll() {
    ++polls_seen;
    return --left <= 0;
  }
  absl::Status Run(PollingLauncher& launcher) {
    return launcher.Run({[this] { return Start(); }, [this] { return Poll(); }});
  }
  int left;
  int starts = 0;
  int polls_seen = 0;
};

TEST(PollingLauncherTest, WorkFinishedAtStartIsNeverPolled) {
  PollingLauncher launcher(Quick(), nullptr);
  Countdown work(0);
  EXPECT_TRUE(work.Run(launcher).ok());
  EXPECT_EQ(work.starts, 1);
  EXPECT_EQ(work.polls_seen, 0);
}

TEST(PollingLauncherTest, PollsUntilTheWorkIsFinished) {
  PollingLauncher launcher(Quick(), nullptr);
  Countdown work(5);
  EXPECT_TRUE(work.Run(launcher).ok());
  EXPECT_EQ(work.starts, 1);
  EXPECT_EQ(work.polls_seen, 5);
  EXPECT_EQ(launcher.stats().runs, 1);
}

TEST(PollingLauncherTest, ErrorsOfStartAndPollReachTheCaller) {
  PollingLauncher launcher(Quick(), nullptr);
  int polls = 0;
  absl::Status s = launcher.Run(
      {[] () -> absl::StatusOr<bool> { return absl::InternalError("launch refused"); },
       [&]() -> absl::StatusOr<bool> {
         ++polls;
         return true;
       }});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("launch refused"));
  EXPECT_EQ(polls, 0);

  s = launcher.Run({[]() -> absl::StatusOr<bool> { return false; },
                    [&]() -> absl::StatusOr<bool> {
                      if (++polls < 3) return false;
                      return absl::DataLossError("kernel faulted");
                    }});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(polls, 3);
}

TEST(PollingLauncherTest, WorkRunsOnTheLauncherThreadAfterItsInit) {
  std::atomic<std::thread::id> init_thread{};
  PollingLauncher launcher(Quick(), [&] { init_thread = std::this_thread::get_id(); });
  std::thread::id start_thread, poll_thread;
  ASSERT_TRUE(launcher
                  .Run({[&]() -> absl::StatusOr<bool> {
                          start_thread = std::this_thread::get_id();
                          return false;
                        },
                        [&]() -> absl::StatusOr<bool> {
                          poll_thread = std::this_thread::get_id();
                          return true;
                        }})
                  .ok());
  EXPECT_EQ(start_thread, init_thread.load());
  EXPECT_EQ(poll_thread, init_thread.load());
  EXPECT_NE(start_thread, std::this_thread::get_id());
}

class PollingLauncherWaitTest : public ::testing::TestWithParam<GpuWait> {};

// Many callers at once, each with work that takes a different number of
// polls: every one is answered with its own result, none is lost.
TEST_P(PollingLauncherWaitTest, ManyCallersEachGetTheirOwnResult) {
  PollingLauncher launcher(Quick(GetParam()), nullptr);
  constexpr int kThreads = 8;
  constexpr int kRunsEach = 100;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < kRunsEach; ++i) {
        const int polls = (t + i) % 4;
        // Odd runs fail, carrying their identity in the message.
        const bool fail = (i % 2) == 1;
        int seen = 0;
        absl::Status s = launcher.Run({[&]() -> absl::StatusOr<bool> { return polls == 0 && !fail; },
                                       [&]() -> absl::StatusOr<bool> {
                                         if (++seen < polls) return false;
                                         if (fail) {
                                           return absl::AbortedError(absl::StrCat(t, "/", i));
                                         }
                                         return true;
                                       }});
        const bool right = fail ? s.message() == absl::StrCat(t, "/", i) : s.ok();
        if (!right || (polls > 0 && seen != polls)) ++wrong;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(launcher.stats().runs, kThreads * kRunsEach);
}

INSTANTIATE_TEST_SUITE_P(EveryWaitMode, PollingLauncherWaitTest,
                         ::testing::Values(GpuWait::kSpin, GpuWait::kYield, GpuWait::kHybrid,
                                           GpuWait::kBlock),
                         [](const ::testing::TestParamInfo<GpuWait>& info) {
                           return std::string(GpuWaitName(info.param));
                         });

TEST(PollingLauncherTest, SleepsWhenIdleAndWakesForTheNextRun) {
  PollingLauncher launcher(Quick(), nullptr);
  Countdown first(1);
  ASSERT_TRUE(first.Run(launcher).ok());
  // idle is 1 ms: the thread goes to sleep well within this.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (launcher.stats().sleeps == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GE(launcher.stats().sleeps, 1);
  Countdown second(2);
  EXPECT_TRUE(second.Run(launcher).ok());
  EXPECT_EQ(second.polls_seen, 2);
}

TEST(PollingLauncherTest, ShutdownDoesNotWaitOutTheIdlePeriod) {
  PollingLauncher::Options options = Quick();
  options.idle = absl::Hours(1);
  const auto began = std::chrono::steady_clock::now();
  {
    PollingLauncher launcher(options, nullptr);
    Countdown work(3);
    ASSERT_TRUE(work.Run(launcher).ok());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(10));
}

}  // namespace
}  // namespace kt::server
