// kerntuned --tune_idle on a real GPU (CTest label gpu): a daemon with an
// empty store serves two problems with the heuristic; once its GPU is idle
// it tunes both itself, into its store, and after the reload both are served
// their exact tuned entry, with nothing left in ListServedShapes.
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
#include "tests/server/daemon_process.h"
#include "tests/testing/scoped_temp_dir.h"

namespace kt::client {
namespace {

using ::testing::HasSubstr;
using testing::ProcessResult;
using testing::RunProcess;

ProcessResult RunKerntune(std::vector<std::string> args) {
  args.insert(args.begin(), KT_KERNTUNE_BINARY);
  return RunProcess(args);
}

class TuneIdleGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(kernels::CudaDeviceCount(), 0) << "this test needs a GPU";
    daemon_ = std::make_unique<server::testing::Daemon>(
        server::testing::KerntunedBinary(),
        std::vector<std::string>{"--socket=" + socket_, "--db=" + db_, "--devices=0",
                                 "--configs=" + dir_.File("no_shipped_configs"), "--tune_idle"},
        dir_.File("kerntuned.log"));
    const absl::Status serving =
        server::testing::WaitUntilServing(*daemon_, socket_, std::chrono::seconds(30));
    ASSERT_TRUE(serving.ok()) << serving;
    DaemonClientOptions options;
    options.target = "unix:" + socket_;
    options.deadline = absl::Seconds(30);
    absl::StatusOr<DaemonClient> client = DaemonClient::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::make_unique<DaemonClient>(*std::move(client));
  }
  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "kerntuned log:\n" << daemon_->Log();
  }

  // `kerntune run` of one problem; its output names the config's source.
  ProcessResult Run(const std::string& op, const std::string& dtype, const std::string& rows,
                    const std::string& cols) {
    return RunKerntune({"run", op, "--dtype=" + dtype, "--rows=" + rows, "--cols=" + cols,
                        "--via=inline", "--iterations=3", "--server=unix:" + socket_});
  }

  kt::testing::ScopedTempDir dir_;
  const std::string socket_ = dir_.File("kerntune.sock");
  const std::string db_ = dir_.File("tuning.db");
  std::unique_ptr<server::testing::Daemon> daemon_;
  std::unique_ptr<DaemonClient> client_;
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
  EXPECT_THAT(Run("softmax", "fp16", "64", "1000").out, HasSubstr("(source: tuned)"));
  EXPECT_THAT(Run("layer_norm", "fp32", "32", "768").out, HasSubstr("(source: tuned)"));
  EXPECT_EQ(client_->ListServedShapes()->shapes_size(), 0);
  EXPECT_THAT(daemon_->Log(), HasSubstr("idle tuner: tuned softmax float16 64x1000 on GPU 0"));
}

}  // namespace
}  // namespace kt::client
