// Tuning what the daemon served untuned, on a real GPU (CTest label gpu): a
// kerntuned with an empty store serves two problems with the heuristic and
// records them; `kerntune tune --served`, or the daemon itself while idle
// (--tune_idle), tunes exactly those into the store the daemon reads; once
// it has reloaded, both are served their exact tuned entry and nothing is
// left to tune.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/daemon_client.h"
#include "db/tuning_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_info.h"
#include "tests/client/cpu_daemon.h"
#include "tests/server/daemon_process.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;
using testing::ProcessResult;
using testing::RunKerntune;

class TuneServedGpuTest : public ::testing::Test {
 protected:
  // kerntuned's flags beyond its socket, store and (no) shipped configs.
  virtual std::vector<std::string> ExtraFlags() const { return {}; }

  void SetUp() override {
    ASSERT_GT(kernels::CudaDeviceCount(), 0) << "this test needs a GPU";
    std::vector<std::string> flags = {"--socket=" + socket_, "--db=" + db_,
                                      "--configs=" + dir_.File("no_shipped_configs")};
    for (const std::string& flag : ExtraFlags()) flags.push_back(flag);
    daemon_ = std::make_unique<server::testing::Daemon>(server::testing::KerntunedBinary(),
                                                        flags, dir_.File("kerntuned.log"));
    const absl::Status serving =
        server::testing::WaitUntilServing(*daemon_, socket_, std::chrono::seconds(30));
    ASSERT_TRUE(serving.ok()) << serving;
    DaemonClientOptions options;
    options.target = target();
    options.deadline = absl::Seconds(30);
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::make_unique<DaemonClient>(*std::move(client));
  }
  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "kerntuned log:\n" << daemon_->Log();
  }

  std::string target() const { return "unix:" + socket_; }
  // `kerntune run` of one problem; its output names the config's source.
  ProcessResult Run(const std::string& op, const std::string& dtype, const std::string& rows,
                    const std::string& cols) {
    return RunKerntune({"run", op, "--dtype=" + dtype, "--rows=" + rows, "--cols=" + cols,
                     "--via=inline", "--iterations=3", "--server=" + target()});
  }

  kt::testing::ScopedTempDir dir_;
  const std::string socket_ = dir_.File("kerntune.sock");
  const std::string db_ = dir_.File("tuning.db");
  std::unique_ptr<server::testing::Daemon> daemon_;
  std::unique_ptr<DaemonClient> client_;
};

TEST_F(TuneServedGpuTest, TunesExactlyTheServedProblemsWhichAreThenServedTuned) {
  for (int i = 0; i < 2; ++i) {
    const ProcessResult softmax = Run("softmax", "fp16", "64", "1000");
    ASSERT_EQ(softmax.code, 0) << softmax.out << softmax.err;
    EXPECT_THAT(softmax.out, HasSubstr("(source: heuristic)"));
  }
  const ProcessResult norm = Run("layer_norm", "fp32", "32", "768");
  ASSERT_EQ(norm.code, 0) << norm.out << norm.err;

  absl::StatusOr<pb::ListServedShapesResponse> served = client_->ListServedShapes();
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_EQ(served->shapes_size(), 2) << served->DebugString();
  EXPECT_EQ(served->shapes(0).op(), pb::OP_SOFTMAX);
  EXPECT_EQ(served->shapes(0).shape().cols(), 1000);
  EXPECT_GE(served->shapes(0).runs(), 2 * served->shapes(1).runs());
  EXPECT_EQ(served->shapes(0).source(), pb::CONFIG_SOURCE_HEURISTIC);
  EXPECT_EQ(served->shapes(1).op(), pb::OP_LAYER_NORM);

  const ProcessResult listed = RunKerntune({"tune", "--served", "--dry_run", "--server=" + target()});
  ASSERT_EQ(listed.code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("2 problems served untuned"));
  EXPECT_THAT(listed.out, HasSubstr("softmax float16 64x1000"));
  EXPECT_THAT(listed.out, HasSubstr("layer_norm float32 32x768"));

  // Into the daemon's store (its --db), found through GetStatus.
  const ProcessResult tune = RunKerntune({"tune", "--served", "--reps=5", "--server=" + target()});
  ASSERT_EQ(tune.code, 0) << tune.out << tune.err;
  EXPECT_THAT(tune.err, HasSubstr("database " + db_));
  {
    auto store = db::TuningStore::Open(db_, {});
    ASSERT_TRUE(store.ok()) << store.status();
    auto gpus = (*store)->ListGpus();
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    ASSERT_EQ(gpus->size(), 1u);
    auto best = (*store)->BestConfigsForSku(gpus->front().gpu.sku);
    ASSERT_TRUE(best.ok()) << best.status();
    EXPECT_EQ(best->size(), 2u);  // exactly the served problems
  }

  // The daemon reloads within seconds; then nothing is left.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (client_->ListServedShapes()->shapes_size() > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(client_->ListServedShapes()->shapes_size(), 0);
  EXPECT_THAT(Run("softmax", "fp16", "64", "1000").out, HasSubstr("(source: tuned;"));
  EXPECT_THAT(Run("layer_norm", "fp32", "32", "768").out, HasSubstr("(source: tuned;"));
  EXPECT_EQ(client_->ListServedShapes()->shapes_size(), 0);

  const ProcessResult again = RunKerntune({"tune", "--served", "--server=" + target()});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("nothing to tune"));
}

class TuneIdleGpuTest : public TuneServedGpuTest {
 protected:
  std::vector<std::string> ExtraFlags() const override { return {"--devices=0", "--tune_idle"}; }
};

TEST_F(TuneIdleGpuTest, TheDaemonTunesTheProblemsItServedUntunedWhileIdle) {
  absl::StatusOr<pb::GetStatusResponse> status = client_->GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->idle_tuning().enabled());

  const ProcessResult softmax = Run("softmax", "fp16", "64", "1000");
  ASSERT_EQ(softmax.code, 0) << softmax.out << softmax.err;
  EXPECT_THAT(softmax.out, HasSubstr("(source: heuristic)"));
  const ProcessResult norm = Run("layer_norm", "fp32", "32", "768");
  ASSERT_EQ(norm.code, 0) << norm.out << norm.err;
  EXPECT_THAT(norm.out, HasSubstr("(source: heuristic)"));

  // Tuned once the GPU is idle, then reloaded (every 2 s) and dropped from
  // the record.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  bool seen_tuning = false;
  while (std::chrono::steady_clock::now() < deadline) {
    status = client_->GetStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    seen_tuning = seen_tuning || !status->idle_tuning().tuning().empty();
    absl::StatusOr<pb::ListServedShapesResponse> served = client_->ListServedShapes();
    ASSERT_TRUE(served.ok()) << served.status();
    if (status->idle_tuning().problems_tuned() == 2 && served->shapes_size() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(seen_tuning);
  EXPECT_EQ(status->idle_tuning().problems_tuned(), 2) << status->idle_tuning().DebugString();
  EXPECT_EQ(status->idle_tuning().problems_failed(), 0);
  EXPECT_EQ(client_->ListServedShapes()->shapes_size(), 0);
  {
    auto store = db::TuningStore::Open(db_, {});
    ASSERT_TRUE(store.ok()) << store.status();
    auto best = (*store)->ListBestConfigs({});
    ASSERT_TRUE(best.ok()) << best.status();
    EXPECT_EQ(best->size(), 2u);  // exactly the served problems
  }
  EXPECT_THAT(Run("softmax", "fp16", "64", "1000").out, HasSubstr("(source: tuned;"));
  EXPECT_THAT(Run("layer_norm", "fp32", "32", "768").out, HasSubstr("(source: tuned;"));
  EXPECT_EQ(client_->ListServedShapes()->shapes_size(), 0);
  EXPECT_THAT(daemon_->Log(), HasSubstr("idle tuner: tuned softmax float16 64x1000 on GPU 0"));
}

}  // namespace
}  // namespace kt::client
