// The in-process runtime and a real kerntuned (CPU backend): a daemon that
// starts after the runtime is asked at the next fetch, and one on the CPU
// backend leaves the runtime on the store and the shipped files.
#include <memory>

#include "client/runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "tests/client/cpu_daemon.h"

namespace kt::client::testing {
namespace {

using ::testing::HasSubstr;

class RuntimeDaemonTest : public CpuDaemonTest {};

TEST_F(RuntimeDaemonTest, ADaemonStartedLaterIsAskedAtTheNextFetch) {
  RuntimeOptions options;
  options.daemon_target = target();
  options.db_path = dir_.File("absent.db");
  options.shipped_config_dir = dir_.File("no-configs");
  options.refresh_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = Runtime::Create(options);
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  const kernels::DeviceInfo device = kernels::DescribedH100();
  EXPECT_THAT((*runtime)->ConfigsFor(device)->problem,
              HasSubstr("did not answer (no socket at " + socket_));

  Start();
  (*runtime)->Refresh();
  const std::shared_ptr<const FetchedConfigs> configs = (*runtime)->ConfigsFor(device);
  EXPECT_THAT(configs->problem, HasSubstr("runs the CPU backend and serves no GPU configs"));
  EXPECT_THAT(configs->origin, HasSubstr("store"));
  // Its choices are then the lookup's over the store and the shipped files.
  absl::StatusOr<tuner::ConfigChoice> choice =
      (*runtime)->Choose(kernels::Op::kSoftmax, kernels::DType::kFloat16, {64, 1000}, device);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->source, tuner::ConfigSource::kHeuristic);
}

}  // namespace
}  // namespace kt::client::testing
